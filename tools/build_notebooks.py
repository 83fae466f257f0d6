"""Execute notebooks in place: `make notebooks`, the only way outputs are made.

Each notebook runs top to bottom in a fresh gpu-labkit kernel, and is stamped
with a hash of its sources so `tools/nbcheck.py` can tell a built notebook
from a hand-run or edited one. It runs only under the reference profile
(labkit/machine/profile.py; `make notebooks` applies it with tools/with_profile.py),
whose name is stamped too: outputs made without it would carry this machine's
memory, thread count and GPU into the committed files.

The kernel runs with ``capture_fd_output=False``: under pytest, nbval's
kernel does not capture C-level stderr (TensorFlow's C++ logs), so outputs
captured here at file-descriptor level could never match. A notebook that
fails is left untouched on disk: nothing is half-written.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbcheck import BUILT_BY, KERNEL_NAME, PROFILE, check_notebook, source_hash
from nbclient import NotebookClient

CELL_TIMEOUT_S = 900


def build(path: Path) -> float:
    nb = nbformat.read(path, as_version=4)
    nb.metadata["kernelspec"] = {
        "name": KERNEL_NAME,
        "display_name": "Python (gpu-labkit)",
        "language": "python",
    }
    client = NotebookClient(
        nb,
        kernel_name=KERNEL_NAME,
        timeout=CELL_TIMEOUT_S,
        record_timing=False,
        resources={"metadata": {"path": str(path.parent)}},
        extra_arguments=["--IPKernelApp.capture_fd_output=False"],
    )
    start = time.perf_counter()
    client.execute()
    elapsed_s = time.perf_counter() - start
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
    nb.metadata["labkit"] = {
        "built_by": BUILT_BY,
        "source_sha256": source_hash(nb),
        "profile": PROFILE,
    }
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".ipynb.tmp")
    os.close(fd)
    try:
        nbformat.write(nb, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return elapsed_s


def main(argv: list[str]) -> int:
    if not argv:
        print("build_notebooks: no notebooks given", file=sys.stderr)
        return 2
    if os.environ.get("LABKIT_PROFILE") != PROFILE:
        print(
            f"build_notebooks: the committed outputs are made under the {PROFILE!r} profile; "
            f"run `make notebooks`, or tools/with_profile.py {PROFILE} -- {sys.argv[0]} ...",
            file=sys.stderr,
        )
        return 2
    failed = 0
    for name in argv:
        path = Path(name)
        print(f"executing {path} ...", flush=True)
        try:
            elapsed_s = build(path)
        except Exception as exc:  # report and go on; the file on disk is untouched
            failed += 1
            print(f"  FAILED: {type(exc).__name__}: {str(exc)[-2000:]}", file=sys.stderr)
            continue
        problems = check_notebook(path)
        print(f"  done in {elapsed_s:.1f} s" + ("" if not problems else f"; {problems}"))
        failed += bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

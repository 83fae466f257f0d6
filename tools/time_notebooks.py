"""Time each notebook's top-to-bottom execution, so syllabi quote measurements, not guesses.

    python tools/time_notebooks.py [--json OUT.json] [NOTEBOOK ...]

Without NOTEBOOK arguments it times every ``notebooks/[0-9][0-9]_*.ipynb``.
Each notebook runs exactly as ``make notebooks`` runs it (``build_notebooks.build``:
a fresh ``gpu-labkit`` kernel, C-level output not captured, the same cell
timeout), but on a *copy* in a temporary folder, so ``notebooks/`` is never
modified. A notebook that fails is recorded with its error and the run goes on.

The result names the machine (CPU model and cores, RAM, GPUs, torch's version
and whether torch can use a GPU, from ``labkit.machine.report``) and the date, because
an execution time means nothing without them. It is printed as a markdown
table; ``--json`` also writes it as JSON, rewritten after every notebook so
that a run stopped by a time limit still leaves what it measured.

Where no ``gpu-labkit`` kernel is registered (a fresh GPU machine), the
notebooks run in this Python through a temporary kernelspec; nothing is
installed. Progress bars are off (``LABKIT_PROGRESS=0``), as in ``make notebooks``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_GLOB = "notebooks/[0-9][0-9]_*.ipynb"
NEEDED = ("nbformat", "nbclient", "ipykernel")
#: Seconds allowed for the machine probe (it imports torch and may initialise CUDA).
PROBE_TIMEOUT_S = 120
_PROBE = (
    "import json; from labkit.machine.report import device_report; "
    "print(json.dumps(device_report(frameworks=('torch',)).to_dict()))"
)


@dataclass(frozen=True)
class NotebookTime:
    """One notebook's run: wall seconds (to the failure, if it failed) and the error, if any."""

    notebook: str
    seconds: float
    ok: bool
    error: str | None = None


def _missing_packages() -> list[str]:
    import importlib.util

    return [name for name in NEEDED if importlib.util.find_spec(name) is None]


def machine_info(python: str = sys.executable) -> dict[str, Any]:
    """The machine as ``labkit.machine.report.device_report`` sees it, probed in a child process.

    A child, so that the CUDA context torch creates while probing does not sit
    in this process's GPU memory while the notebooks run.
    """
    info: dict[str, Any] = {
        "os": f"{platform.system()} {platform.release()}".strip(),
        "python_version": platform.python_version(),
    }
    try:
        done = subprocess.run(
            [python, "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            cwd=ROOT,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        info["probe_error"] = f"labkit.device_report could not run: {type(exc).__name__}: {exc}"
        return info
    try:
        report = json.loads(done.stdout)
    except ValueError:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        info["probe_error"] = f"labkit.device_report failed (exit {done.returncode}): {last}"
        return info
    cpu, nvidia = report["cpu"], report["nvidia"]
    torch = next((fw for fw in report["frameworks"] if fw["name"] == "torch"), {})
    gpus = [d["name"] for d in torch.get("devices", []) if d.get("kind") == "cuda"]
    if not gpus:  # torch cannot use them, but say which GPUs the machine has
        gpus = [d["name"] for d in nvidia["devices"]] or [g["name"] for g in nvidia["smi_gpus"]]
    total = cpu.get("memory_total_bytes")
    info.update(
        cpu_model=cpu["model"],
        physical_cores=cpu["physical_cores"],
        logical_cores=cpu["logical_cores"],
        memory_total_bytes=total,
        memory_total_gib=round(total / 2**30, 1) if total else None,
        gpus=gpus,
        torch_version=torch.get("version"),
        torch_cuda_version=torch.get("cuda_version"),
        torch_gpu_available=bool(torch.get("gpu_available")),
        labkit_version=report["system"]["labkit_version"],
    )
    return info


def kernel_choice(name: str, workdir: Path) -> dict[str, Any]:
    """Use the registered kernel ``name``; without one, write a temporary spec for this Python.

    Returns ``{"name", "registered", "python", "jupyter_path"}``: when not
    registered, ``jupyter_path`` is the folder to prepend to ``JUPYTER_PATH``
    so that Jupyter finds the temporary spec (nothing is installed).
    """
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        spec = KernelSpecManager().get_kernel_spec(name)
    except NoSuchKernel:
        spec_dir = workdir / "jupyter" / "kernels" / name
        spec_dir.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        spec_json = {"argv": argv, "display_name": f"{name} (temporary)", "language": "python"}
        (spec_dir / "kernel.json").write_text(json.dumps(spec_json), encoding="utf-8")
        return {
            "name": name,
            "registered": False,
            "python": sys.executable,
            "jupyter_path": str(workdir / "jupyter"),
        }
    return {"name": name, "registered": True, "python": spec.argv[0], "jupyter_path": None}


def _error_text(exc: BaseException) -> str:
    """One line: the notebook's own exception where nbclient has it, else nbclient's."""
    ename, evalue = getattr(exc, "ename", None), getattr(exc, "evalue", None)
    if ename:
        return f"{ename}: {evalue}"[:500]
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[-1] if lines else ''}"[:500]


def time_notebook(path: Path, workdir: Path) -> NotebookTime:
    """Run a copy of ``path`` in ``workdir`` with ``build_notebooks.build``; never raises for the notebook."""
    from build_notebooks import build

    copy = workdir / path.stem / path.name
    copy.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, copy)
    start = time.perf_counter()
    try:
        seconds = build(copy)
    except Exception as exc:  # a failing notebook is a result, not the end of the run
        return NotebookTime(
            path.name, round(time.perf_counter() - start, 1), False, _error_text(exc)
        )
    return NotebookTime(path.name, round(seconds, 1), True)


def result_dict(
    times: list[NotebookTime],
    machine: dict[str, Any],
    kernel: dict[str, Any],
    *,
    date: str,
    complete: bool,
) -> dict[str, Any]:
    """The JSON document: machine, date, kernel, one entry per notebook, totals."""
    return {
        "tool": "tools/time_notebooks.py",
        "date": date,
        "complete": complete,
        "machine": machine,
        "kernel": {k: v for k, v in kernel.items() if k != "jupyter_path"},
        "notebooks": [asdict(t) for t in times],
        "total_seconds": round(sum(t.seconds for t in times), 1),
        "failed": sum(not t.ok for t in times),
    }


def machine_line(machine: dict[str, Any]) -> str:
    if "cpu_model" not in machine:
        return f"machine: unknown ({machine.get('probe_error', 'no probe')})"
    gpus = ", ".join(machine["gpus"]) or "none"
    if machine["gpus"] and not machine["torch_gpu_available"]:
        gpus += " (torch cannot use it: these are CPU times)"
    return (
        f"{machine['cpu_model']}, {machine['logical_cores']} logical cores, "
        f"{machine['memory_total_gib']} GiB RAM; GPU: {gpus}; torch {machine['torch_version']}"
    )


def markdown_table(result: dict[str, Any]) -> str:
    """The result as a markdown table, headed by the machine and the date."""
    rows = [
        f"Measured {result['date']} on {machine_line(result['machine'])}.",
        "",
        "| notebook | seconds | result |",
        "|---|---:|---|",
    ]
    for t in result["notebooks"]:
        verdict = "ok" if t["ok"] else f"FAILED: {t['error']}".replace("|", "\\|")
        rows.append(f"| {t['notebook']} | {t['seconds']:.1f} | {verdict} |")
    n_ok = len(result["notebooks"]) - result["failed"]
    rows.append(f"| total | {result['total_seconds']:.1f} | {n_ok} ok, {result['failed']} failed |")
    return "\n".join(rows)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _notebook_paths(names: list[str]) -> list[Path]:
    if not names:
        paths = sorted(ROOT.glob(DEFAULT_GLOB))
        if not paths:
            raise SystemExit(f"time_notebooks: no notebooks match {ROOT / DEFAULT_GLOB}")
        return paths
    paths = [Path(n) for n in names]
    for p in paths:
        if p.suffix != ".ipynb" or not p.is_file():
            raise SystemExit(
                f"time_notebooks: NOTEBOOK {p} is not an .ipynb file; "
                "pass paths such as notebooks/00_setup_and_devices.ipynb"
            )
    return paths


def _run(
    paths: list[Path], workdir: Path, json_out: Path | None, kernel_name: str
) -> dict[str, Any]:
    """Probe the machine, pick the kernel, time each notebook; the result, JSON rewritten after each."""
    date = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    machine = machine_info()
    kernel = kernel_choice(kernel_name, workdir)
    if kernel["jupyter_path"]:
        print(
            f"time_notebooks: no {kernel_name!r} kernel is registered; running the notebooks "
            f"with {sys.executable} (to register one: {Path(sys.executable).name} -m "
            f"ipykernel install --user --name {kernel_name})",
            file=sys.stderr,
        )
        old = os.environ.get("JUPYTER_PATH")
        os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [kernel["jupyter_path"], old]))
    times: list[NotebookTime] = []
    for path in paths:
        print(f"executing {path} ...", file=sys.stderr, flush=True)
        times.append(time_notebook(path, workdir))
        if json_out:
            partial = result_dict(times, machine, kernel, date=date, complete=False)
            _write_json(json_out, partial)
    return result_dict(times, machine, kernel, date=date, complete=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "notebooks",
        nargs="*",
        metavar="NOTEBOOK",
        help=f"notebooks to time (default: {DEFAULT_GLOB})",
    )
    parser.add_argument("--json", type=Path, metavar="OUT.json", help="also write the result here")
    args = parser.parse_args(argv)
    paths = _notebook_paths(args.notebooks)
    missing = _missing_packages()
    if missing:
        print(
            f"time_notebooks: {', '.join(missing)} not installed; run: "
            f"{Path(sys.executable).name} -m pip install {' '.join(missing)}",
            file=sys.stderr,
        )
        return 2
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # build_notebooks, nbcheck
    from nbcheck import KERNEL_NAME

    saved = {key: os.environ.get(key) for key in ("LABKIT_PROGRESS", "JUPYTER_PATH")}
    os.environ["LABKIT_PROGRESS"] = "0"  # the kernels inherit it
    try:
        with tempfile.TemporaryDirectory(prefix="time_notebooks_") as tmp:
            result = _run(paths, Path(tmp), args.json, KERNEL_NAME)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    if args.json:
        _write_json(args.json, result)
    print(markdown_table(result))
    return 1 if result["failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())

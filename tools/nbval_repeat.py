"""Run strict nbval over every notebook N times in a row: `make test-flaky`.

A mask that hides a hardware-dependent value is fine; a notebook whose
output changes from one run to the next on the *same* machine is a bug
(unseeded randomness, dict order, a race) that a student would see as a
failing test. One passing run proves little, so this runs the exact nbval
command of `make test` RUNS times (default 5), one after another, and stops
at the first failure, printing which cells differed.

    python tools/nbval_repeat.py [--runs 5] [--log FILE] [NOTEBOOK ...]

Exit status 0 only if every run passed. The runs measure the machine, so
nothing else should be running meanwhile (see the Makefile's `test` target).
Like `make test`, it runs under the reference profile (labkit/machine/profile.py):
`make test-flaky` applies it, and this script refuses to run without it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from nbcheck import PROFILE

ROOT = Path(__file__).resolve().parent.parent
SANITIZE = ROOT / "notebooks" / "nbval_sanitize.cfg"
_FAILED_CELL = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.M)


def nbval_command(notebooks: list[Path]) -> list[str]:
    """The strict nbval command of `make test`, for these notebooks."""
    return [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "--nbval",
        "--nbval-current-env",
        "--nbval-sanitize-with",
        str(SANITIZE),
        *map(str, notebooks),
    ]


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"--runs must be at least 1, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=_positive, default=5, help="how many runs (default 5)")
    parser.add_argument("--log", type=Path, help="also write the summary as JSON here")
    parser.add_argument("notebooks", nargs="*", type=Path)
    args = parser.parse_args(argv)
    notebooks = args.notebooks or sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    missing = [str(p) for p in notebooks if not p.is_file()]
    if missing:
        parser.error(f"no such notebook: {', '.join(missing)}")

    if os.environ.get("LABKIT_PROFILE") != PROFILE:
        parser.error(
            f"the committed outputs are compared under the {PROFILE} profile: run make "
            f"test-flaky, or tools/with_profile.py {PROFILE} -- python tools/nbval_repeat.py ..."
        )
    env = dict(os.environ, LABKIT_PROGRESS="0")
    runs: list[dict[str, object]] = []
    for i in range(1, args.runs + 1):
        t0 = time.perf_counter()
        done = subprocess.run(
            nbval_command(notebooks), cwd=ROOT, env=env, capture_output=True, text=True
        )
        seconds = round(time.perf_counter() - t0, 1)
        summary = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
        failed = _FAILED_CELL.findall(done.stdout)
        runs.append(
            {
                "run": i,
                "passed": done.returncode == 0,
                "seconds": seconds,
                "summary": summary,
                "failed": failed,
            }
        )
        print(
            f"run {i}/{args.runs}: {'passed' if done.returncode == 0 else 'FAILED'} "
            f"in {seconds:.0f} s ({summary})",
            flush=True,
        )
        if done.returncode != 0:
            print(done.stdout[-8000:], done.stderr[-2000:], sep="\n", file=sys.stderr)
            break

    passed = sum(bool(r["passed"]) for r in runs)
    print(f"{passed} of {args.runs} strict nbval runs passed in a row.")
    if args.log:
        args.log.parent.mkdir(parents=True, exist_ok=True)
        args.log.write_text(
            json.dumps(
                {
                    "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    "machine": f"{platform.machine()}, {os.cpu_count()} logical CPUs",
                    "profile": os.environ.get("LABKIT_PROFILE"),
                    "notebooks": [p.name for p in notebooks],
                    "runs_requested": args.runs,
                    "runs": runs,
                },
                indent=2,
            )
            + "\n"
        )
    return 0 if passed == args.runs else 1


if __name__ == "__main__":
    raise SystemExit(main())

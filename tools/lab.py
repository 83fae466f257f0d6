"""Open JupyterLab on notebooks/ — what `make lab` runs.

It listens on 127.0.0.1 only and keeps Jupyter's token authentication (the
URL with the token is printed), because a lab laptop on a shared network must
not serve a Python shell to its neighbours. ``--allow-root`` is passed only
when running as root (containers, JupyterHub images), where Jupyter refuses
to start without it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def lab_command(extra: list[str], *, uid: int | None = None) -> list[str]:
    """The JupyterLab command line; ``uid`` is injectable for tests."""
    if uid is None:
        uid = os.getuid() if hasattr(os, "getuid") else -1
    forbidden = [a for a in extra if a.split("=")[0] in {"--ip", "--ServerApp.ip"}]
    if forbidden:
        raise SystemExit(
            f"lab.py: refusing {forbidden[0]!r}: the lab listens on 127.0.0.1 only. "
            "Use an SSH tunnel to reach it from another machine."
        )
    if any("token=" in a and a.split("token=", 1)[1] in {"", "''", '""'} for a in extra):
        raise SystemExit("lab.py: refusing an empty token: it would disable authentication.")
    cmd = [
        sys.executable,
        "-m",
        "jupyter",
        "lab",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.root_dir={ROOT / 'notebooks'}",
    ]
    if uid == 0:
        cmd.append("--allow-root")
    return cmd + extra


def main(argv: list[str] | None = None) -> int:
    cmd = lab_command(list(sys.argv[1:] if argv is None else argv))
    print("Starting JupyterLab on 127.0.0.1; open the URL with the token printed below.", flush=True)
    os.execv(cmd[0], cmd)
    return 0  # pragma: no cover - execv does not return


if __name__ == "__main__":
    raise SystemExit(main())

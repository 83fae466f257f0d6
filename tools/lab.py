"""Open JupyterLab on notebooks/ — what `make lab` runs (`make lab-student`: --root build/student).

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

#: Settings that would expose the server beyond this machine's loopback, or
#: weaken its defences against other web pages in the same browser.
_EXPOSING = {
    "--ip": "the lab listens on 127.0.0.1 only",  # keys with "ip" get the tunnel hint
    "--ServerApp.ip": "the lab listens on 127.0.0.1 only",
    "--NotebookApp.ip": "the lab listens on 127.0.0.1 only",
    "--ServerApp.allow_remote_access": "it would accept requests meant for other hosts",
    "--ServerApp.allow_origin": "it would let other web sites call the server",
    "--ServerApp.allow_origin_pat": "it would let other web sites call the server",
    "--ServerApp.disable_check_xsrf": "it would turn off cross-site request forgery checks",
}
_TOKENS = {"--IdentityProvider.token", "--ServerApp.token", "--NotebookApp.token"}

#: No downloads at run time: JupyterLab's news feed, its update check and the
#: PyPI extension listing all reach the internet.
OFFLINE = (
    "--LabApp.news_url=None",
    "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    "--LabApp.extension_manager=readonly",
)


def _options(extra: list[str]) -> list[tuple[str, str]]:
    """(``--key``, value) pairs, for both ``--key=value`` and ``--key value``."""
    pairs = []
    for i, arg in enumerate(extra):
        if not arg.startswith("--"):
            continue
        key, eq, value = arg.partition("=")
        if not eq:
            nxt = extra[i + 1] if i + 1 < len(extra) else ""
            value = "" if nxt.startswith("--") else nxt
        pairs.append((key, value))
    return pairs


def _refuse_unsafe(extra: list[str]) -> None:
    for key, value in _options(extra):
        if key in _EXPOSING:
            tunnel = (
                " Use an SSH tunnel to reach the lab from another machine." if "ip" in key else ""
            )
            raise SystemExit(f"lab.py: refusing {key!r}: {_EXPOSING[key]}.{tunnel}")
        if key in _TOKENS and value.strip("'\"") == "":
            raise SystemExit("lab.py: refusing an empty token: it would disable authentication.")


def split_args(argv: list[str]) -> tuple[Path | None, list[str]]:
    """``--root DIR`` (or ``--root=DIR``), and the arguments left for JupyterLab."""
    root, extra, args = None, [], iter(argv)
    for arg in args:
        if arg == "--root" or arg.startswith("--root="):
            value = arg.split("=", 1)[1] if "=" in arg else next(args, "")
            if not value or value.startswith("-"):
                raise SystemExit("lab.py: --root needs a folder, e.g. --root build/student")
            root = Path(value)
        else:
            extra.append(arg)
    return root, extra


def lab_command(extra: list[str], *, uid: int | None = None, root: Path | None = None) -> list[str]:
    """The JupyterLab command line, serving ``root`` (default notebooks/); ``uid`` is for tests."""
    if root is None:
        root = ROOT / "notebooks"
    elif not Path(root).is_dir():
        what = "is not a folder" if Path(root).exists() else "does not exist"
        raise SystemExit(
            f"lab.py: --root {root} {what}. Pass the folder of notebooks to serve "
            "(for the student edition, run `make student` first: it writes build/student)."
        )
    if uid is None:
        uid = os.getuid() if hasattr(os, "getuid") else -1
    _refuse_unsafe(extra)
    cmd = [
        sys.executable,
        "-m",
        "jupyter",
        "lab",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.root_dir={Path(root).resolve()}",
        *OFFLINE,
    ]
    if uid == 0:
        cmd.append("--allow-root")
    return cmd + extra


def main(argv: list[str] | None = None) -> int:
    root, extra = split_args(list(sys.argv[1:] if argv is None else argv))
    cmd = lab_command(extra, root=root)
    print(
        "Starting JupyterLab on 127.0.0.1; open the URL with the token printed below.", flush=True
    )
    os.execv(cmd[0], cmd)
    return 0  # pragma: no cover - execv does not return


if __name__ == "__main__":
    raise SystemExit(main())

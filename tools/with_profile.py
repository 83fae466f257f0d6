"""Run a command under a labkit profile: `make notebooks` and `make test` run the notebooks so.

    python tools/with_profile.py reference -- COMMAND [ARG ...]

The committed notebook outputs assume the machine of the reference profile
(:mod:`labkit.machine.profile`): 2 threads, buffers sized for 6 GiB of free host
memory, no GPU. This script checks that this machine can provide the profile
*before* anything runs, and stops at once with the reason where it cannot (so
an instructor checking a lab image reads one sentence, not twenty failed
cells). Then it replaces itself with COMMAND, with the profile's variables set
(``LABKIT_PROFILE``, the thread counts, ``CUDA_VISIBLE_DEVICES=""``): every
process COMMAND starts, the notebooks' kernels included, inherits them.

Exit status: COMMAND's own; 2 if the profile is unknown or the machine cannot
provide it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout, labkit need not be installed
    sys.path.insert(0, str(ROOT))

from labkit.machine import profile as _profile  # noqa: E402


def free_host_bytes() -> int:
    """What labkit would call free without any profile (psutil, capped by a container limit)."""
    from labkit.machine import memory

    return memory._host_available_bytes()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="with_profile.py",
        description=__doc__.splitlines()[0],
        usage="%(prog)s PROFILE -- COMMAND [ARG ...]",
    )
    parser.add_argument("profile", help=f"one of: {', '.join(_profile.PROFILES)}")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --, e.g. -- make test")
    try:
        profile = _profile.get(args.profile)
    except _profile.ProfileError as exc:
        print(f"with_profile: {exc}", file=sys.stderr)
        return 2
    problems = _profile.missing(profile, free_host_bytes=free_host_bytes())
    if problems:
        print(
            f"with_profile: this machine cannot provide the {profile.name!r} profile that the "
            f"committed notebook outputs assume ({profile.description}): "
            + "; ".join(problems)
            + ". Nothing was run. The notebooks themselves still run here (make lab); only "
            "the comparison with the committed outputs needs the profile.",
            file=sys.stderr,
        )
        return 2
    print(f"with_profile: {profile.summary()}", flush=True)
    env = {**os.environ, **profile.environment()}
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        print(f"with_profile: cannot run {command[0]!r}: {exc}", file=sys.stderr)
        return 2
    return 0  # not reached


if __name__ == "__main__":
    raise SystemExit(main())

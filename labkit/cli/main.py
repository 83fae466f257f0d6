"""The ``labkit`` command line: ``labkit doctor`` and ``labkit bench``.

Bad input ends in one line on stderr and exit code 2, never a traceback: the
people running this are learners in a lab, and a traceback from a typo in a
flag teaches them nothing. The benchmarks and their flags come from
:mod:`labkit.cli.bench.registry`. A bug, on the other hand, shows its traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from labkit.cli.bench.registry import BENCHMARKS, BY_NAME
from labkit.cli.bench.run import UsageError, check_record_flags


def _one_line(text: str) -> str:
    """``text`` on one line: an error message, or a bad value echoed in one, may hold newlines."""
    return " ".join(str(text).split())


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse's own errors: one line, exit 2
        self.exit(2, f"labkit: error: {_one_line(message)} (see `labkit --help`)\n")


def _build_parser() -> argparse.ArgumentParser:
    from labkit import __version__

    parser = _Parser(
        prog="labkit",
        description="gpu-labkit: diagnose this machine's devices and run the course's benchmarks.",
    )
    parser.add_argument("--version", action="version", version=f"gpu-labkit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    doctor = sub.add_parser(
        "doctor",
        help="report the CPU, torch, TensorFlow and CuPy, their devices, and what to fix",
        description="Report the CPU, each framework and its devices, and findings with fixes.",
    )
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.add_argument(
        "--no-color",
        action="store_true",
        help="plain text without colours (also when NO_COLOR is set or stdout is not a terminal)",
    )

    bench = sub.add_parser("bench", help="run a course benchmark and print its measurements")
    bench_sub = bench.add_subparsers(dest="bench", metavar="BENCHMARK", parser_class=_Parser)
    for spec in BENCHMARKS:
        command = bench_sub.add_parser(spec.name, help=spec.help, description=spec.description)
        command.add_argument("--json", action="store_true", help="print the results as JSON")
        command.add_argument(
            "--record",
            action="store_true",
            help="store the GPU results in labkit's reference data (needs a GPU)",
        )
        if spec.quick:
            command.add_argument(
                "--quick",
                action="store_true",
                help="toy sizes and tiny time budgets: checks the command works, numbers mean little",
            )
        for option in spec.options:
            command.add_argument(
                option.flag,
                dest=option.dest,
                type=option.parse,
                default=option.default,
                metavar="N",
                help=option.help,
            )
    return parser


def _check_before_running(args: argparse.Namespace) -> None:
    """Refuse what would fail only after the measurements: bad flag combinations, no place to record.

    ``--record`` with a GPU writes into labkit's reference folder; when that
    folder is read-only (site-packages of a shared install) the run would be
    lost at the very end, so it is checked first.
    """
    if args.command != "bench" or not getattr(args, "record", False):
        return
    check_record_flags(
        f"labkit bench {args.bench}", record=True, quick=getattr(args, "quick", False)
    )
    from labkit.machine import gpu

    try:
        gpu_here = gpu.has_gpu()
    except ImportError:  # no torch: the benchmark itself says what to install
        return
    if gpu_here:
        from labkit.machine.reference import check_writable

        try:
            check_writable()
        except ValueError as exc:  # the folder the learner's setting points at
            raise UsageError(str(exc)) from exc


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``labkit`` command; the exit code: 0 done, 1 nothing measured, 2 bad input.

    Only two errors are expected here: a :class:`UsageError` (a flag combination
    or setting that cannot work, found before anything is measured) and a
    :class:`MissingPackageError` (nothing can be measured without that package).
    Any other exception is a bug in labkit and shows its traceback.
    """
    from labkit.core.optional import MissingPackageError

    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "doctor":
            from labkit.cli.doctor import run_doctor

            return run_doctor(as_json=args.json, color=False if args.no_color else None)
        if args.command == "bench":
            if args.bench is None:
                parser.error(f"labkit bench needs a benchmark: {', '.join(BY_NAME)}")
            _check_before_running(args)
            spec = BY_NAME[args.bench]
            options = {option.dest: getattr(args, option.dest) for option in spec.options}
            if spec.quick:
                options["quick"] = args.quick
            return spec.runner()(as_json=args.json, record=args.record, **options)
        parser.print_help()
        return 0
    except UsageError as exc:
        print(f"labkit: error: {_one_line(str(exc)) or type(exc).__name__}", file=sys.stderr)
        return 2
    except MissingPackageError as exc:  # nothing could be measured: say what to install
        print(f"labkit: {_one_line(str(exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # pragma: no cover - interactive
        print("labkit: interrupted", file=sys.stderr)
        return 130

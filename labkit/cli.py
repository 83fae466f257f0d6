"""The ``labkit`` command line: ``labkit doctor`` and ``labkit bench``.

Bad input ends in one line on stderr and exit code 2, never a traceback: the
people running this are learners in a lab, and a traceback from a typo in a
flag teaches them nothing.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own errors: one line, exit 2
        self.exit(2, f"labkit: error: {message} (see `labkit --help`)\n")


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
    timing = bench_sub.add_parser(
        "timing",
        help="naive versus synchronized timing of the same work, on every available device",
        description=(
            "Time the same work with a naive host clock and with labkit.bench. On a GPU the "
            "naive clock measures only the kernel launch; --record stores the result as the "
            "reference that CPU-only learners see in notebook 00."
        ),
    )
    timing.add_argument("--json", action="store_true", help="print the results as JSON")
    timing.add_argument(
        "--record",
        action="store_true",
        help="store the GPU result in labkit's reference data (needs a GPU)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "doctor":
            from labkit.doctor import run_doctor

            return run_doctor(as_json=args.json, color=False if args.no_color else None)
        if args.command == "bench":
            if args.bench == "timing":
                from labkit.pitfalls import run_timing_benchmark

                return run_timing_benchmark(as_json=args.json, record=args.record)
            parser.parse_args(["bench", "--help"])
        parser.print_help()
        return 0
    except (ValueError, TypeError) as exc:
        print(f"labkit: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # pragma: no cover - interactive
        print("labkit: interrupted", file=sys.stderr)
        return 130

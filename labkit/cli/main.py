"""The ``labkit`` command line: ``labkit doctor`` and ``labkit bench``.

Bad input ends in one line on stderr and exit code 2, never a traceback: the
people running this are learners in a lab, and a traceback from a typo in a
flag teaches them nothing.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

#: Bounds of ``labkit bench bandwidth``'s numbers, checked before anything is measured.
MIN_BYTES_PER_ARRAY = 4096  # labkit.bandwidth.stream.MIN_BYTES_PER_ARRAY: below it a call is all overhead
MAX_ROUNDS = 100  # each round takes seconds; more than this is a typo, not a plan


def _one_line(text: str) -> str:
    """``text`` on one line: an error message, or a bad value echoed in one, may hold newlines."""
    return " ".join(str(text).split())


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own errors: one line, exit 2
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
    bandwidth = bench_sub.add_parser(
        "bandwidth",
        help="memory bandwidth: labkit's STREAM probes next to NumPy and a compiled C loop",
        description=(
            "Measure labkit's CPU copy and triad bandwidth next to NumPy's copy and a C STREAM "
            "loop compiled here, on the same DRAM-sized arrays, and report labkit / best "
            "reference (the bar is 0.90). With a GPU: device-to-device copy against torch, "
            "CuPy and the datasheet peak, host<->device transfers, overlap and strided reads; "
            "--record stores those as the reference CPU-only learners see."
        ),
    )
    bandwidth.add_argument("--json", action="store_true", help="print the results as JSON")
    bandwidth.add_argument(
        "--record",
        action="store_true",
        help="store the GPU results in labkit's reference data (needs a GPU)",
    )
    bandwidth.add_argument(
        "--max-bytes",
        type=_bytes_per_array,
        default=None,
        metavar="N",
        help=(
            f"cap the bytes per array, at least {MIN_BYTES_PER_ARRAY} (a cache-sized cap "
            "measures the cache, not DRAM)"
        ),
    )
    bandwidth.add_argument(
        "--rounds",
        type=_rounds,
        default=4,
        metavar="N",
        help=f"rounds in which labkit and the references take turns, 1 to {MAX_ROUNDS} (default 4)",
    )
    parallel = bench_sub.add_parser(
        "parallel",
        help="size sweeps of a + b and matmul on every backend, GPU launch overhead, crossover",
        description=(
            "Sweep a + b and an n×n matmul over sizes on a Python loop, NumPy, torch on one "
            "and on all threads and, with a GPU, torch on CUDA; measure the GPU's launch "
            "overhead and the sizes where it overtakes the CPU. --record stores the GPU run "
            "as the reference CPU-only learners see."
        ),
    )
    roofline = bench_sub.add_parser(
        "roofline",
        help="the roofline (peak GFLOP/s per dtype, peak GB/s) and standard ops placed under it",
        description=(
            "Measure the compute roofs (best matmul per dtype) and the memory roof (best of "
            "copy and triad) on every device here, then run a standard set of ops (add, sum, "
            "matmuls, a conv2d) and report each one's arithmetic intensity, achieved GFLOP/s, "
            "share of the attainable rate and which roof binds. --record stores the GPU's as "
            "the reference CPU-only learners see."
        ),
    )
    accel = bench_sub.add_parser(
        "accel",
        help="framework acceleration: async launches, sync points, autocast, torch.compile",
        description=(
            "Measure notebook 04's lessons on the best torch device: the host returning "
            "before the GPU finishes (GPU only), .item() every step vs one sync, bfloat16 and "
            "float16 autocast vs float32 for a small MLP, and torch.compile's first call vs "
            "its steady state (skipped by --quick). --record stores the GPU run as the "
            "reference CPU-only learners see."
        ),
    )
    cnn = bench_sub.add_parser(
        "cnn",
        help="images/s of the course's CNN by batch size: NCHW, channels_last, autocast",
        description=(
            "Time labkit.models.cnn.CNN (inference) over batch sizes in float32 NCHW, float32 "
            "channels_last, channels_last under bfloat16 autocast and, on a GPU, under float16 "
            "autocast; report each variant's peak images/s and the gains at the largest batch. "
            "--record stores the GPU run as the reference CPU-only learners see."
        ),
    )
    rnn = bench_sub.add_parser(
        "rnn",
        help="a fused (cuDNN) LSTM against a loop over time steps, Keras or torch",
        description=(
            "Time the Keras SimpleRNN, LSTM (cuDNN-eligible) and LSTM(use_cudnn=False) where "
            "TensorFlow is installed; otherwise torch's nn.LSTM and nn.RNN against an "
            "nn.LSTMCell stepped in a Python loop. --record stores the GPU run as the "
            "reference CPU-only learners see."
        ),
    )
    kernels = bench_sub.add_parser(
        "kernels",
        help="CUDA kernels in CuPy: coalescing, transpose, tiled SGEMM, reduction, occupancy",
        description=(
            "Run notebook 07's CUDA kernels with CuPy, each verified before it is timed: a "
            "strided copy, three transposes, a tiled SGEMM against cuBLAS, reductions and a "
            "block-size sweep, each as a fraction of the device's measured copy bandwidth or "
            "of cuBLAS, with the bars they should reach. Needs a GPU; --record stores the run "
            "(and the Kernel Tuner cache) as the reference CPU-only learners see."
        ),
    )
    batching = bench_sub.add_parser(
        "batching",
        help="samples/s and latency against batch size, and the largest batch that fits",
        description=(
            "Sweep the batch size for training and inference on the best device (samples/s, "
            "latency per batch, where the curve flattens) and find the largest batch that "
            "fits in memory. --record stores the GPU run as the reference CPU-only learners see."
        ),
    )
    profile = bench_sub.add_parser(
        "profile",
        help="torch.profiler over training steps of the course CNN, with and without a sync point",
        description=(
            "Profile a few training steps of the course CNN with torch.profiler: the top "
            "operators, CPU against device time, the phases of a step, and the cost of a "
            ".item() every step. --record stores the GPU run as the reference CPU-only "
            "learners see."
        ),
    )
    for command in (parallel, roofline, accel, cnn, rnn, kernels, batching, profile):
        command.add_argument("--json", action="store_true", help="print the results as JSON")
        command.add_argument(
            "--record",
            action="store_true",
            help="store the GPU results in labkit's reference data (needs a GPU)",
        )
        command.add_argument(
            "--quick",
            action="store_true",
            help="toy sizes and tiny time budgets: checks the command works, numbers mean little",
        )
    return parser


def _positive_int(text: str, *, minimum: int = 1, maximum: int | None = None) -> int:
    bounds = f"from {minimum} to {maximum}" if maximum else f">= {minimum}"
    try:
        value = int(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer {bounds}, got {text!r}") from None
    if value < minimum or (maximum is not None and value > maximum):
        raise argparse.ArgumentTypeError(f"expected an integer {bounds}, got {text!r}")
    return value


def _bytes_per_array(text: str) -> int:
    return _positive_int(text, minimum=MIN_BYTES_PER_ARRAY)


def _rounds(text: str) -> int:
    return _positive_int(text, maximum=MAX_ROUNDS)


def _benchmarks(parser: argparse.ArgumentParser) -> list[str]:
    """The names ``labkit bench`` accepts, read from the parser so the list cannot go stale."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for inner in action.choices["bench"]._actions:
                if isinstance(inner, argparse._SubParsersAction):
                    return list(inner.choices)
    return []


def _check_before_running(args: argparse.Namespace) -> None:
    """Refuse what would fail only after the measurements: bad flag combinations, no place to record.

    ``--record`` with a GPU writes into labkit's reference folder; when that
    folder is read-only (site-packages of a shared install) the run would be
    lost at the very end, so it is checked first.
    """
    if args.command != "bench" or not getattr(args, "record", False):
        return
    from labkit.cli.bench.run import check_record_flags

    check_record_flags(f"labkit bench {args.bench}", record=True, quick=getattr(args, "quick", False))
    from labkit.machine import gpu

    try:
        gpu_here = gpu.has_gpu()
    except ImportError:  # no torch: the benchmark itself says what to install
        return
    if gpu_here:
        from labkit.machine.reference import check_writable

        check_writable()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``labkit`` command; the exit code: 0 done, 1 nothing measured, 2 bad input."""
    from labkit.core.optional import MissingPackageError

    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "bench" and args.bench is None:
            parser.error(f"labkit bench needs a benchmark: {', '.join(_benchmarks(parser))}")
        _check_before_running(args)
        if args.command == "doctor":
            from labkit.cli.doctor import run_doctor

            return run_doctor(as_json=args.json, color=False if args.no_color else None)
        if args.command == "bench":
            if args.bench == "timing":
                from labkit.timing.pitfalls import run_timing_benchmark

                return run_timing_benchmark(as_json=args.json, record=args.record)
            if args.bench == "bandwidth":
                from labkit.cli.bench.bandwidth import run_bandwidth_benchmark

                return run_bandwidth_benchmark(
                    as_json=args.json,
                    record=args.record,
                    max_bytes=args.max_bytes,
                    rounds=args.rounds,
                )
            if args.bench == "parallel":
                from labkit.cli.bench.parallel import run_parallel_benchmark

                return run_parallel_benchmark(
                    as_json=args.json, record=args.record, quick=args.quick
                )
            if args.bench == "roofline":
                from labkit.cli.bench.roofline import run_roofline_benchmark

                return run_roofline_benchmark(
                    as_json=args.json, record=args.record, quick=args.quick
                )
            if args.bench in ("accel", "cnn", "rnn", "kernels", "batching", "profile"):
                import importlib

                module = importlib.import_module(f"labkit.cli.bench.{args.bench}")
                run = getattr(module, f"run_{args.bench}_benchmark")
                return run(as_json=args.json, record=args.record, quick=args.quick)
            parser.parse_args(["bench", "--help"])
        parser.print_help()
        return 0
    except (ValueError, TypeError) as exc:  # bad input, also when found deep inside a benchmark
        print(f"labkit: error: {_one_line(str(exc)) or type(exc).__name__}", file=sys.stderr)
        return 2
    except MissingPackageError as exc:  # nothing could be measured: say what to install
        print(f"labkit: {_one_line(str(exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # pragma: no cover - interactive
        print("labkit: interrupted", file=sys.stderr)
        return 130

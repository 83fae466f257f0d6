"""Every ``labkit bench`` benchmark in one table: its name, help, flags and where it runs.

``labkit.cli.main`` builds its argument parser from :data:`BENCHMARKS`, so adding a
benchmark is one row here and one module beside this file with a
``run_<name>_benchmark(as_json, record, [quick,] **options) -> int`` function.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Bounds of ``labkit bench bandwidth``'s numbers, checked when the command line is parsed.
MIN_BYTES_PER_ARRAY = 4096  # below it a call is all overhead (labkit.bandwidth.stream)
MAX_ROUNDS = 100  # each round takes seconds; more than this is a typo, not a plan

_RECORDED = "--record stores the GPU run as the reference CPU-only learners see."


def bounded_int(minimum: int = 1, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse ``type`` for an integer from ``minimum`` to ``maximum``."""
    bounds = f"from {minimum} to {maximum}" if maximum else f">= {minimum}"

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected an integer {bounds}, got {text!r}"
            ) from None
        if value < minimum or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"expected an integer {bounds}, got {text!r}")
        return value

    return parse


@dataclass(frozen=True)
class Option:
    """One extra flag of a benchmark, passed to its runner as the keyword ``dest``."""

    flag: str
    dest: str
    parse: Callable[[str], Any]
    default: Any
    help: str


@dataclass(frozen=True)
class Benchmark:
    """A ``labkit bench NAME`` command: what ``--help`` says, its flags, and its runner."""

    name: str
    help: str
    description: str
    quick: bool = True  # takes --quick (toy sizes)
    options: tuple[Option, ...] = ()

    @property
    def module(self) -> str:
        return f"labkit.cli.bench.{self.name}"

    def runner(self) -> Callable[..., int]:
        """``run_<name>_benchmark`` from the benchmark's module, imported now (it may be heavy)."""
        return getattr(importlib.import_module(self.module), f"run_{self.name}_benchmark")


BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark(
        "timing",
        "naive versus synchronized timing of the same work, on every available device",
        "Time the same work with a naive host clock and with labkit.bench. On a GPU the naive "
        "clock measures only the kernel launch; --record stores the result as the reference "
        "that CPU-only learners see in notebook 00.",
        quick=False,
    ),
    Benchmark(
        "bandwidth",
        "memory bandwidth: labkit's STREAM probes next to NumPy and a compiled C loop",
        "Measure labkit's CPU copy and triad bandwidth next to NumPy's copy and a C STREAM loop "
        "compiled here, on the same DRAM-sized arrays, and report labkit / best reference (the "
        "bar is 0.90). With a GPU: device-to-device copy against torch, CuPy and the datasheet "
        "peak, host<->device transfers, overlap and strided reads; --record stores those as the "
        "reference CPU-only learners see.",
        quick=False,
        options=(
            Option(
                "--max-bytes",
                "max_bytes",
                bounded_int(MIN_BYTES_PER_ARRAY),
                None,
                f"cap the bytes per array, at least {MIN_BYTES_PER_ARRAY} (a cache-sized cap "
                "measures the cache, not DRAM)",
            ),
            Option(
                "--rounds",
                "rounds",
                bounded_int(1, MAX_ROUNDS),
                4,
                f"rounds in which labkit and the references take turns, 1 to {MAX_ROUNDS} "
                "(default 4)",
            ),
        ),
    ),
    Benchmark(
        "parallel",
        "size sweeps of a + b and matmul on every backend, GPU launch overhead, crossover",
        "Sweep a + b and an n×n matmul over sizes on a Python loop, NumPy, torch on one and on "
        "all threads and, with a GPU, torch on CUDA; measure the GPU's launch overhead and the "
        "sizes where it overtakes the CPU. " + _RECORDED,
    ),
    Benchmark(
        "roofline",
        "the roofline (peak GFLOP/s per dtype, peak GB/s) and standard ops placed under it",
        "Measure the compute roofs (best matmul per dtype) and the memory roof (best of copy "
        "and triad) on every device here, then run a standard set of ops (add, sum, matmuls, a "
        "conv2d) and report each one's arithmetic intensity, achieved GFLOP/s, share of the "
        "attainable rate and which roof binds. " + _RECORDED,
    ),
    Benchmark(
        "accel",
        "framework acceleration: async launches, sync points, autocast, torch.compile",
        "Measure notebook 04's lessons on the best torch device: the host returning before the "
        "GPU finishes (GPU only), .item() every step vs one sync, bfloat16 and float16 autocast "
        "vs float32 for a small MLP, and torch.compile's first call vs its steady state "
        "(skipped by --quick). " + _RECORDED,
    ),
    Benchmark(
        "cnn",
        "images/s of the course's CNN by batch size: NCHW, channels_last, autocast",
        "Time labkit.models.cnn.CNN (inference) over batch sizes in float32 NCHW, float32 "
        "channels_last, channels_last under bfloat16 autocast and, on a GPU, under float16 "
        "autocast; report each variant's peak images/s and the gains at the largest batch. "
        + _RECORDED,
    ),
    Benchmark(
        "levers",
        "every lever of notebooks 04-05 on one CNN training step, before and after",
        "Time the course CNN's training step (forward, cross-entropy, backward, SGD) with the "
        "levers added one at a time: no .item() per step, channels_last, torch.compile, "
        "bfloat16 autocast; each against the line before it and all against before, "
        "interleaved, with torch.compile's first call apart (--quick leaves it out). " + _RECORDED,
    ),
    Benchmark(
        "rnn",
        "a fused (cuDNN) LSTM against a loop over time steps, Keras or torch",
        "Time the Keras SimpleRNN, LSTM (cuDNN-eligible) and LSTM(use_cudnn=False) where "
        "TensorFlow is installed; otherwise torch's nn.LSTM and nn.RNN against an nn.LSTMCell "
        "stepped in a Python loop. " + _RECORDED,
    ),
    Benchmark(
        "kernels",
        "CUDA kernels in CuPy: coalescing, transpose, tiled SGEMM, reduction, occupancy",
        "Run notebook 07's CUDA kernels with CuPy, each verified before it is timed: a strided "
        "copy, three transposes, a tiled SGEMM against cuBLAS, reductions and a block-size "
        "sweep, each as a fraction of the device's measured copy bandwidth or of cuBLAS, with "
        "the bars they should reach. Needs a GPU; --record stores the run (and the Kernel Tuner "
        "cache) as the reference CPU-only learners see.",
    ),
    Benchmark(
        "batching",
        "samples/s and latency against batch size, and the largest batch that fits",
        "Sweep the batch size for training and inference on the best device (samples/s, "
        "latency per batch, where the curve flattens) and find the largest batch that fits in "
        "memory. " + _RECORDED,
    ),
    Benchmark(
        "profile",
        "torch.profiler over training steps of the course CNN, with and without a sync point",
        "Profile a few training steps of the course CNN with torch.profiler: the top operators, "
        "CPU against device time, the phases of a step, and the cost of a .item() every step. "
        + _RECORDED,
    ),
    Benchmark(
        "attention",
        "attention's backends (math vs fused) against sequence length, and decode tokens/s by batch",
        "Time causal scaled_dot_product_attention with each backend that runs on the best device "
        "(math, flash, memory-efficient, cuDNN) against the sequence length, with each one's peak "
        "memory (the math backend stores the N×N scores, the fused ones do not), and one decode "
        "step of a small GPT with a KV cache against the batch size (tokens/s). " + _RECORDED,
    ),
    Benchmark(
        "triton",
        "notebook 12's Triton kernels: checked against torch, timed in the interpreter or on a GPU",
        "Check the Triton copy, strided copy, softmax and matmul kernels against torch on random "
        "inputs and edge sizes. Without a GPU they run in Triton's interpreter, whose time is set "
        "beside torch's and against the number of programs; on an NVIDIA GPU they are timed with "
        "labkit.bench and triton.testing.do_bench against torch and notebook 07's CUDA C, and "
        "triton.autotune picks SGEMM tiles. Shows the code torch.compile's Inductor writes for a "
        "fused softmax (C++ on a CPU, Triton on a GPU). " + _RECORDED,
    ),
)

#: Benchmark name -> its row.
BY_NAME: dict[str, Benchmark] = {b.name: b for b in BENCHMARKS}

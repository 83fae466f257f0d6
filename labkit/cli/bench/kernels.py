"""``labkit bench kernels``: notebook 07's CUDA kernels in CuPy, each against a measured ceiling.

Every kernel is verified before it is timed, and every rate is a fraction of
a ceiling measured in the same run (:mod:`labkit.kernels.cupy_run`): the
device-to-device copy bandwidth for the memory-bound kernels, cuBLAS FP32
for SGEMM. Four fractions have bars a well-written kernel should reach:

==============================================  ======  =================================
kernel                                          bar     ceiling
==============================================  ======  =================================
strided copy, stride 1                          0.90    copy (bytes read + written)
padded transpose (best thread block tried)      0.80    copy (bytes read + written)
warp-shuffle reduction                          0.80    copy; the sum counts bytes *read*
tiled SGEMM at 4096 (best tile sizes tried)     0.50    cuBLAS SGEMM, strict FP32
==============================================  ======  =================================

It also runs the stride sweep, the three transposes, the three reductions,
a block-size sweep, and, where Kernel Tuner is installed, a Kernel Tuner
search of the padded transpose's tile (and of the SGEMM's tiles when time
allows). Each part catches its own exception and reports it, so one failure
never costs the rest of the run. ``--record`` stores the run as the
``kernels`` recording and the Kernel Tuner caches next to it
(``kernel_tuner_<kernel>.cache.json``). ``--quick`` runs toy sizes.

Without a GPU it prints one line saying nothing was measured and exits 0.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from labkit.cli.bench.run import QUICK_NOTE, part_failed
from labkit.core.results import JsonRecord, error_line
from labkit.kernels import autotune

#: The recording ``--record`` writes.
REFERENCE_NAME = "kernels"

#: (label, bar) for the four fractions the benchmark checks.
BARS: tuple[tuple[str, float], ...] = (
    ("strided copy, stride 1 / device copy", 0.90),
    ("padded transpose / device copy", 0.80),
    ("warp-shuffle reduction (bytes read) / device copy", 0.80),
    ("tiled SGEMM / cuBLAS FP32", 0.50),
)

SGEMM_N, QUICK_SGEMM_N = 4096, 256
#: sgemm_tiled tile sizes tried besides the default (128, 128, 8, 8, 8).
SGEMM_TILED_CONFIGS: tuple[dict[str, int], ...] = (
    {"BM": 128, "BN": 128, "BK": 16, "TM": 8, "TN": 8},
    {"BM": 64, "BN": 128, "BK": 8, "TM": 8, "TN": 8},
    {"BM": 128, "BN": 64, "BK": 8, "TM": 8, "TN": 8},
)
#: (TILE_DIM, BLOCK_ROWS) of the padded transpose tried besides the default 32 x 8.
PADDED_CONFIGS: tuple[tuple[int, int], ...] = ((32, 16), (64, 8), (64, 16))
#: Skip the SGEMM tuning when the run has already taken this long (seconds).
SGEMM_TUNING_DEADLINE_S = 75.0
TUNE_TRANSPOSE_N, TUNE_SGEMM_N = 4096, 2048
#: Time budgets of the full run (empty: labkit.bench's defaults, 25 ms warm-up and 100 ms of samples).
FULL_BUDGET: dict[str, float] = {}

COMMAND = "labkit bench kernels"


@dataclass(frozen=True)
class Bar(JsonRecord):
    """One fraction of a ceiling and the bar it should reach (None: not measured)."""

    json_extra = ("verdict",)

    name: str
    bar: float
    fraction: float | None
    detail: str = ""

    @property
    def passed(self) -> bool:
        return self.fraction is not None and self.fraction >= self.bar

    @property
    def verdict(self) -> str:
        return "NOT MEASURED" if self.fraction is None else "PASS" if self.passed else "MISS"

    def line(self) -> str:
        value = "--" if self.fraction is None else f"{self.fraction:.2f}"
        detail = f" ({self.detail})" if self.detail else ""
        return f"{self.name}: {value} (bar {self.bar:.2f}) {self.verdict}{detail}"


@dataclass(frozen=True)
class KernelsBenchResult(JsonRecord):
    """Everything one run measured, what failed, and the bars."""

    device: str
    quick: bool
    experiments: Mapping[str, Any]  # name -> KernelComparison
    errors: Mapping[str, str]  # name -> one line
    bars: tuple[Bar, ...]
    tuning: Mapping[str, Any] = field(default_factory=dict)  # kernel -> TuningReplay
    tuning_notes: tuple[str, ...] = ()
    elapsed_s: float = 0.0

    def summary(self) -> list[str]:
        lines = [f"{self.device}: {bar.line()}" for bar in self.bars]
        for experiment in self.experiments.values():
            lines += experiment.summary()
        for replay in self.tuning.values():
            lines += replay.summary()
        lines += list(self.tuning_notes)
        lines += [f"{name} failed: {error}" for name, error in self.errors.items()]
        if self.quick:
            lines.append(QUICK_NOTE)
        return lines

    def __str__(self) -> str:
        lines = [
            f"CUDA kernels in CuPy on {self.device}: each verified, then timed against a "
            "ceiling measured in this run",
            "Bars (fraction of the ceiling):",
        ]
        lines += [f"  {bar.line()}" for bar in self.bars]
        for experiment in self.experiments.values():
            lines += ["", str(experiment)]
        for replay in self.tuning.values():
            lines += ["", str(replay)]
        lines += [f"  {note}" for note in self.tuning_notes]
        if self.errors:
            lines += ["", "Failed (each part runs on its own):"]
            lines += [f"  {name}: {error}" for name, error in self.errors.items()]
        if self.quick:
            lines.append(QUICK_NOTE)
        return "\n".join(lines)


def _best(experiment: Any, kernel: str) -> tuple[float | None, str]:
    runs = [r for r in experiment.runs if r.name == kernel]
    if not runs:
        return None, f"{kernel} was not run"
    best = max(runs, key=lambda r: r.fraction)
    return best.fraction, best.label


def _bars(experiments: Mapping[str, Any], errors: Mapping[str, str]) -> tuple[Bar, ...]:
    sources: dict[str, tuple[str, Callable[[Any], tuple[float | None, str]]]] = {
        BARS[0][0]: ("stride sweep", lambda e: (e.fraction("stride 1"), "stride 1")),
        BARS[1][0]: ("transposes", lambda e: _best(e, "transpose_padded")),
        BARS[2][0]: ("reductions", lambda e: (e.fraction("warp_shuffle"), "warp_shuffle")),
        BARS[3][0]: ("sgemm", lambda e: _best(e, "sgemm_tiled")),
    }
    bars = []
    for name, bar in BARS:
        part, pick = sources[name]
        if part in experiments:
            try:
                fraction, detail = pick(experiments[part])
            except Exception as exc:
                fraction, detail = None, error_line(exc)
        else:
            fraction, detail = None, f"{part} failed: {errors.get(part, 'not run')}"
        bars.append(Bar(name, bar, fraction, detail))
    return tuple(bars)


def kernel_tuner_available() -> bool:
    """Whether Kernel Tuner can be imported here (without importing it)."""
    from labkit.core.optional import is_installed

    return is_installed("kernel_tuner")


def _log(message: str) -> None:
    print(f"labkit bench kernels: {message}", file=sys.stderr, flush=True)


def measure(quick: bool = False, *, tune: bool = True) -> tuple[KernelsBenchResult, dict[str, str]]:
    """Run every part; returns the result and the Kernel Tuner cache files ({kernel: path})."""
    from labkit.kernels import cupy_run as run
    from labkit.kernels import experiments as kernel_experiments

    start = time.monotonic()
    budget: dict[str, Any] = (
        {"warmup_ms": 1.0, "rep_ms": 5.0, "quick": True} if quick else dict(FULL_BUDGET)
    )
    sgemm_budget: dict[str, Any] = {k: v for k, v in budget.items() if k != "quick"}
    parts: dict[str, Callable[[], Any]] = {
        "stride sweep": lambda: kernel_experiments.stride_sweep(**budget),
        "transposes": lambda: kernel_experiments.transpose_versions(
            padded_configs=PADDED_CONFIGS, **budget
        ),
        "reductions": lambda: kernel_experiments.reduction_versions(**budget),
        "sgemm": lambda: kernel_experiments.sgemm_vs_cublas(
            QUICK_SGEMM_N if quick else SGEMM_N, tiled_configs=SGEMM_TILED_CONFIGS, **sgemm_budget
        ),
        "block sizes": lambda: kernel_experiments.block_size_sweep("strided_copy", **budget),
    }
    experiments: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for name, part in parts.items():
        _log(f"{name}...")
        try:
            experiments[name] = part()
        except Exception as exc:  # one part's failure must not cost the others
            errors[name] = part_failed(COMMAND, name, exc)
    replays: dict[str, Any] = {}
    caches: dict[str, str] = {}
    notes: list[str] = []
    if not tune:
        notes.append("Kernel Tuner: not run")
    elif not kernel_tuner_available():
        notes.append(
            "Kernel Tuner: not installed here (pip install kernel_tuner), so no search ran"
        )
    else:
        searches = {
            "transpose": lambda: autotune.tune_transpose(1024 if quick else TUNE_TRANSPOSE_N),
            "sgemm": lambda: autotune.tune_sgemm(
                256 if quick else TUNE_SGEMM_N, tune_params=_QUICK_SGEMM_PARAMS if quick else None
            ),
        }
        for kernel, search in searches.items():
            elapsed = time.monotonic() - start
            if kernel == "sgemm" and not quick and elapsed > SGEMM_TUNING_DEADLINE_S:
                notes.append(
                    f"Kernel Tuner: the SGEMM search was skipped to keep the run short "
                    f"({elapsed:.0f} s had passed)"
                )
                continue
            _log(f"Kernel Tuner search of {kernel}...")
            try:
                replays[kernel] = search()
                if replays[kernel].path:
                    caches[kernel] = str(replays[kernel].path)
            except Exception as exc:
                errors[f"Kernel Tuner {kernel}"] = part_failed(
                    COMMAND, f"Kernel Tuner {kernel}", exc
                )
    try:
        device = run.gpu_name()
    except Exception as exc:  # pragma: no cover - the GPU was there a moment ago
        device = f"a CUDA GPU ({error_line(exc)})"
    result = KernelsBenchResult(
        device=device,
        quick=quick,
        experiments=experiments,
        errors=errors,
        bars=_bars(experiments, errors),
        tuning=replays,
        tuning_notes=tuple(notes),
        elapsed_s=round(time.monotonic() - start, 1),
    )
    return result, caches


#: A tiny SGEMM search for --quick (two configurations).
_QUICK_SGEMM_PARAMS = {
    "BM": (64, 128),
    "BN": (64,),
    "BK": (8,),
    "TM": (8,),
    "TN": (8,),
    "block_size_x": (64, 128),
}


def no_gpu_line() -> str:
    """What the command prints on a machine without a usable CUDA GPU."""
    return (
        "labkit bench kernels: no CUDA GPU here (CuPy sees none), so nothing was measured; "
        "run it on a machine with an NVIDIA GPU (`labkit doctor` shows what is here)."
    )


def run_kernels_benchmark(
    *, as_json: bool = False, record: bool = False, quick: bool = False
) -> int:
    """``labkit bench kernels``; returns the exit code.

    - ``--record --quick``: UsageError (exit 2), as for every recorder.
    - CuPy missing: one line naming the install command, exit 1.
    - No GPU: one line saying nothing was measured, exit 0 (with or without --record).
    """
    from labkit.cli.bench.run import check_record_flags, record_and_report
    from labkit.core.optional import MissingPackageError, import_optional
    from labkit.kernels.cupy_run import cupy_gpu_available

    check_record_flags("labkit bench kernels", record=record, quick=quick)
    try:
        import_optional("cupy", "labkit bench kernels")
    except MissingPackageError as exc:
        print(f"labkit: {exc}", file=sys.stderr)
        return 1
    if not cupy_gpu_available():
        print(no_gpu_line())
        return 0
    result, caches = measure(quick=quick)
    measured = bool(result.experiments)
    if record and not measured:
        print(
            "labkit bench kernels --record: every part failed, so nothing was recorded",
            file=sys.stderr,
        )
    if record and measured:
        from labkit.kernels import tuning

        extra = {"transpose": ("TILE_DIM", "BLOCK_ROWS"), "sgemm": ("block_size_x",)}
        for kernel, path in caches.items():
            try:
                saved = tuning.record_cache(
                    path, kernel, gpu_name=result.device, block_size_names=extra.get(kernel)
                )
                _log(f"recorded the Kernel Tuner cache of {kernel} to {saved}")
            except Exception as exc:
                _log(f"could not record the Kernel Tuner cache of {kernel}: {error_line(exc)}")
    code = record_and_report(
        "kernels", REFERENCE_NAME, result, as_json=as_json, record=record and measured
    )
    return code if measured else 1

"""``labkit bench triton``: notebook 12's Triton kernels, verified, then timed where they run.

Without a GPU the kernels run in Triton's interpreter, on CPU tensors: every
kernel is checked against torch on random inputs and edge sizes
(:mod:`labkit.triton_kernels.verify`), the interpreter's time is set beside
torch's and against the number of programs (:mod:`labkit.triton_kernels.interp`),
and Inductor's C++ for a fused softmax is shown. On an NVIDIA GPU the same
checks run on the compiled kernels, then :mod:`labkit.triton_kernels.gpu`
times them against torch and notebook 07's CUDA C with both labkit.bench and
``triton.testing.do_bench``, lets ``triton.autotune`` choose SGEMM tiles, and
keeps the Triton code Inductor writes for the fused softmax. ``--record`` on a
GPU machine stores that run as the ``triton`` recording. ``--quick`` runs toy
sizes with tiny budgets: it checks that the command works.

Triton must be imported after this command chooses the interpreter or the
GPU (:mod:`labkit.triton_kernels.setup`), so nothing before it imports Triton.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass
from typing import Any

from labkit.cli.bench.run import QUICK_NOTE, part_failed
from labkit.core.units import format_duration

REFERENCE_NAME = "triton"
COMMAND = "labkit bench triton"


@dataclass(frozen=True)
class TritonResults:
    """What ran where; a part that failed is None and named in ``failed``."""

    device: str
    setup: str
    checks: Any  # list[KernelCheck] | None
    interpreter: Any  # list[InterpreterTime] | None (CPU)
    sweep: Any  # ProgramSweep | None (CPU)
    gpu: Any  # GpuResults | None (GPU)
    inductor: Any  # GeneratedCode | None
    failed: tuple[tuple[str, str], ...] = ()
    quick: bool = False

    @property
    def measured(self) -> bool:
        """Every check passed and, on a GPU, at least one kernel was timed."""
        checked = self.checks is not None and all(c.ok for c in self.checks)
        return checked and (self.gpu is None or bool(self.gpu.times))

    def summary(self) -> list[str]:
        dev = self.device
        lines = [f"{dev}: {self.setup}"]
        if self.checks is not None:
            bad = [c for c in self.checks if not c.ok]
            worst = max((c.rel_err for c in self.checks), default=0.0)
            lines.append(
                f"{dev}: {len(self.checks) - len(bad)} of {len(self.checks)} kernel checks "
                f"against torch passed; the largest error relative to torch's largest element: "
                f"{worst:.1e}"
            )
            lines += [f"{dev}: FAILED: {c.kernel} at {c.shape}" for c in bad]
        for t in self.interpreter or ():
            lines.append(
                f"{dev}: interpreter {t.kernel} ({t.size}): {format_duration(t.interpreter_ms)}, "
                f"torch {format_duration(t.torch_ms)} ({t.ratio:,.0f}× the time)"
            )
        if self.sweep is not None:
            lines.append(
                f"{dev}: the interpreter's copy of {self.sweep.n:,} floats costs about "
                f"{format_duration(self.sweep.per_program_us() / 1e3)} per program"
            )
        if self.gpu is not None:
            for t in self.gpu.times:
                rate = (
                    f"{t.gb_per_s:,.0f} GB/s" if t.gb_per_s is not None else
                    f"{t.tflop_per_s:.1f} TFLOP/s" if t.tflop_per_s is not None else ""
                )  # fmt: skip
                lines.append(
                    f"{dev}: {t.kernel}, {t.variant} ({t.size}): {format_duration(t.median_ms)}"
                    f" (do_bench {format_duration(t.do_bench_ms)}), {rate}"
                )
            if self.gpu.autotune:
                lines.append(f"{dev}: triton.autotune chose {self.gpu.autotune['best']}")
            for kernel, facts in self.gpu.compiled.items():
                lines.append(
                    f"{dev}: {kernel}: {facts['n_regs']} registers per thread, "
                    f"{facts['n_spills']} words of local memory; in the PTX "
                    f"{facts['ptx_ld_global']} ld.global ({facts['ptx_ld_global_v4']} of 4 "
                    f"values, {facts['ptx_ld_global_v2']} of 2) and "
                    f"{facts.get('ptx_cp_async', 0)} cp.async"
                )
            lines += [f"{dev}: skipped: {s}" for s in self.gpu.skipped]
        if self.inductor is not None:
            lines.append(str(self.inductor).replace("\n", "; "))
        lines += [f"{dev}: {what}: not measured ({why})" for what, why in self.failed]
        if self.quick:
            lines.append(QUICK_NOTE)
        return lines

    def to_dict(self) -> dict[str, Any]:
        """The recording's schema, which notebook 12's GPU cell reads."""
        return {
            "device": self.device,
            "setup": self.setup,
            "quick": self.quick,
            "checks": None
            if self.checks is None
            else [{**asdict(c), "ok": c.ok} for c in self.checks],
            "interpreter": None
            if self.interpreter is None
            else [{**asdict(t), "ratio": t.ratio} for t in self.interpreter],
            "program_sweep": None if self.sweep is None else asdict(self.sweep),
            "gpu": None if self.gpu is None else self.gpu.to_dict(),
            "inductor": None
            if self.inductor is None
            else {
                "device": self.inductor.device,
                "language": self.inductor.language,
                "kernels": list(self.inductor.kernels),
                "kernel_source": self.inductor.kernel_source(max_lines=80),
            },
            "failed": [{"name": what, "error": why} for what, why in self.failed],
        }

    def __str__(self) -> str:
        return "\n".join(self.summary())


def measure(quick: bool = False) -> TritonResults:
    """Load the kernels (interpreter or GPU), check them, then time them where they run."""
    from labkit.triton_kernels.launch import load

    kit = load()
    dev = kit.device
    failed: list[tuple[str, str]] = []
    checks = interpreter = sweep = gpu = inductor = None
    try:
        from labkit.triton_kernels.verify import check_kernels

        checks = check_kernels(kit)
    except Exception as exc:
        failed.append(("kernel checks", part_failed(COMMAND, "checks", exc)))
    if checks is not None and all(c.ok for c in checks):  # time only what is right
        try:
            if kit.setup.interpreted:
                from labkit.triton_kernels.interp import interpreter_times, program_sweep

                rounds, rep_ms = (2, 5.0) if quick else (3, 150.0)
                interpreter = interpreter_times(kit, rounds=rounds, rep_ms=rep_ms)
                sweep = program_sweep(kit, rounds=rounds, rep_ms=rep_ms)
            else:
                from labkit.triton_kernels.gpu import gpu_measurements

                gpu = gpu_measurements(kit, quick=quick)
        except Exception as exc:
            failed.append(("timings", part_failed(COMMAND, "timings", exc)))
    try:
        from labkit.triton_kernels.inductor import generated_code

        inductor = generated_code(dev)
    except Exception as exc:
        failed.append(("Inductor's code", part_failed(COMMAND, "inductor", exc)))
    return TritonResults(
        device=gpu.device if gpu is not None else dev,
        setup=str(kit.setup),
        checks=checks,
        interpreter=interpreter,
        sweep=sweep,
        gpu=gpu,
        inductor=inductor,
        failed=tuple(failed),
        quick=quick,
    )


def run_triton_benchmark(
    *, as_json: bool = False, record: bool = False, quick: bool = False
) -> int:
    """``labkit bench triton``; returns the exit code (same rules as the other recorders)."""
    from labkit.cli.bench.run import preflight, record_and_report
    from labkit.core.optional import MissingPackageError

    early = preflight(COMMAND, record=record, quick=quick)
    if early is not None:
        return early
    try:
        results = measure(quick=quick)
    except MissingPackageError as exc:
        print(f"labkit: {exc}", file=sys.stderr)
        return 1
    on_gpu = results.gpu is not None
    if record and on_gpu and not results.measured:
        print(
            f"{COMMAND} --record: a kernel check failed, or no kernel was timed, so nothing was "
            "recorded",
            file=sys.stderr,
        )
    code = record_and_report(
        "triton",
        REFERENCE_NAME,
        results,
        as_json=as_json,
        record=record and on_gpu and results.measured,
    )
    return code if results.measured else 1

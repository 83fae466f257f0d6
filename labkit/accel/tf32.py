"""TF32 and its CPU analogue: what "float32" means for each backend, read and measured.

On Ampere and newer NVIDIA GPUs, matmuls and convolutions may run on tensor
cores in TF32 (10 stored mantissa bits), and the two frameworks choose
differently by default: PyTorch keeps matmuls at full float32 but lets cuDNN
convolutions and RNNs use TF32; TensorFlow enables TF32 for both.
:func:`tf32_defaults` only reads the settings. On a CPU, oneDNN can run
float32 matmuls with bfloat16 inputs (``fp32_precision = "bf16"``) where it
supports bfloat16: :func:`fp32_matmul_in_bf16` measures it, and
:func:`bfloat16_hardware` says what this CPU offers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from labkit.accel.common import times
from labkit.core.optional import import_optional, import_tensorflow, is_installed
from labkit.core.validate import check_choice, check_ms, check_positive_int
from labkit.machine.memory import require_memory_fits

#: torch's float32-precision settings (torch 2.9+ API): printed name -> (backend, op) path.
TORCH_FP32_SETTINGS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("torch.backends.fp32_precision", ()),
    ("torch.backends.cuda.matmul.fp32_precision", ("cuda", "matmul")),
    ("torch.backends.cudnn.fp32_precision", ("cudnn",)),
    ("torch.backends.cudnn.conv.fp32_precision", ("cudnn", "conv")),
    ("torch.backends.cudnn.rnn.fp32_precision", ("cudnn", "rnn")),
    ("torch.backends.mkldnn.fp32_precision", ("mkldnn",)),
    ("torch.backends.mkldnn.matmul.fp32_precision", ("mkldnn", "matmul")),
)


def tf32_defaults(frameworks: Sequence[str] | None = None) -> dict[str, Any]:
    """The float32-precision settings each framework is using now, read without changing them.

    ``frameworks=None`` reads every one that is installed, so a learner
    without TensorFlow still sees torch's settings; naming a missing one
    raises :class:`MissingPackageError`.

    torch (2.9+): one entry per attribute of :data:`TORCH_FP32_SETTINGS`,
    each "ieee" (full float32), "tf32" (TensorFloat-32 allowed, on NVIDIA
    Ampere and newer), "bf16" (oneDNN on a CPU: bfloat16 inside float32 ops)
    or "none" (this one is not set: it inherits its parent's value, and the
    top-level "none" means each backend's own default). torch 2.13's defaults:
    everything "none" except ``cudnn.conv`` and ``cudnn.rnn``, which are
    "tf32". The older ``allow_tf32`` flags are not read: torch deprecates them
    and raises when they are read after the new API was used. On an older
    torch the entries are None. TensorFlow: ``tf_tensor_float_32_execution_enabled``.

    The TF32 settings only act on an NVIDIA GPU of compute capability 8.0+;
    the ``mkldnn`` ones act on a CPU (:func:`fp32_matmul_in_bf16` measures one).
    """
    if frameworks is None:
        frameworks = tuple(f for f in ("torch", "tensorflow") if is_installed(f))
    if isinstance(frameworks, str):
        frameworks = (frameworks,)
    for framework in frameworks:
        check_choice("frameworks", framework, ("torch", "tensorflow"))
    out: dict[str, Any] = {}
    if "torch" in frameworks:
        torch = import_optional("torch", "reading the float32-precision settings")
        for name, path in TORCH_FP32_SETTINGS:
            node: Any = torch.backends
            for part in path:
                node = getattr(node, part, None)
            out[name] = _str_or_none(getattr(node, "fp32_precision", None))
    if "tensorflow" in frameworks:
        tf = import_tensorflow("reading the TF32 defaults")
        out["tf_tensor_float_32_execution_enabled"] = bool(
            tf.config.experimental.tensor_float_32_execution_enabled()
        )
    return out


@dataclass(frozen=True)
class Fp32MatmulResult:
    """One float32 matmul timed round-robin with oneDNN's fp32_precision "ieee" and "bf16".

    ``relative_error`` is max|C_bf16 - C_ieee| / max|C_ieee|: near float32's
    rounding (1e-6) when the setting did nothing, near bfloat16's (1e-3)
    when the matmul really ran in bfloat16.
    """

    size: int
    rounds: Any  # labkit.timing.interleave.Interleaved
    relative_error: float
    hardware: str

    @property
    def used_bf16(self) -> bool:
        return self.relative_error > 1e-4

    @property
    def ieee_gflop_per_s(self) -> float:
        """The float32 ("ieee") matmul's rate: 2·n³ FLOPs at its median."""
        ms = self.rounds["ieee"].median_ms
        return 2.0 * self.size**3 / (ms * 1e-3) / 1e9 if ms > 0 else 0.0

    def __str__(self) -> str:
        bf16 = self.rounds["bf16"]
        span = f"{times(bf16.ratio_low)} to {times(bf16.ratio_high)} per round"
        if self.used_bf16:
            verdict = (
                f'"bf16" ran the matmul in bfloat16 (relative error {self.relative_error:.1e}): '
                f'{times(bf16.ratio)} the speed of "ieee" ({span})'
            )
        else:
            verdict = (
                f'"bf16" did not change the result (relative error {self.relative_error:.1e}): '
                "torch ran the same float32 matmul both times (it takes oneDNN's bfloat16 path "
                f"only where oneDNN supports bfloat16 on this CPU), so the ratio ({span}) is this "
                "run's noise"
            )
        return (
            f"float32 matmul {self.size}×{self.size} on the CPU, "
            f'torch.backends.mkldnn.matmul.fp32_precision = "ieee" vs "bf16" '
            f"({self.hardware}):\n{self.rounds}\n{verdict}"
        )


def fp32_matmul_in_bf16(
    size: int = 1024, *, rounds: int = 3, rep_ms: float = 60.0
) -> Fp32MatmulResult:
    """A CPU analogue of TF32: oneDNN running a float32 matmul in bfloat16, measured.

    ``torch.backends.mkldnn.matmul.fp32_precision = "bf16"`` lets oneDNN
    compute float32 matmuls with bfloat16 inputs (float32 accumulation) where
    the CPU supports it; the setting is restored afterwards. Where oneDNN
    cannot, the result is bit-for-bit float32's and the error says so.
    """
    from labkit.timing.interleave import interleave

    size = check_positive_int("size", size)
    rounds = check_positive_int("rounds", rounds)
    rep_ms = check_ms("rep_ms", rep_ms)
    torch = import_optional("torch", "the oneDNN bfloat16 matmul")
    require_memory_fits(4 * size * size, arrays=4, what=f"fp32_matmul_in_bf16(size={size})")
    matmul = torch.backends.mkldnn.matmul
    previous = matmul.fp32_precision
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=gen)
    b = torch.randn(size, size, generator=gen)

    def setting(value: str) -> Callable[[], None]:
        def apply() -> None:
            matmul.fp32_precision = value

        return apply

    try:
        matmul.fp32_precision = "ieee"
        reference = a @ b
        matmul.fp32_precision = "bf16"
        low = a @ b
        result = interleave(
            {"ieee": lambda: a @ b, "bf16": lambda: a @ b},
            rounds=max(rounds, 2),
            rep_ms=rep_ms,
            setup={"ieee": setting("ieee"), "bf16": setting("bf16")},
        )
    finally:
        matmul.fp32_precision = previous
    error = float((low - reference).abs().max() / reference.abs().max())
    return Fp32MatmulResult(
        size=size, rounds=result, relative_error=error, hardware=bfloat16_hardware()
    )


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def bfloat16_hardware() -> str:
    """What this CPU offers bfloat16 work, in one line: bfloat16 instructions, and AVX-512.

    torch runs a CPU bfloat16 convolution through oneDNN only where oneDNN
    supports bfloat16 on this ISA (``mkldnn_bf16_device_check`` →
    ``ideep::has_bf16_type_support``: on x86 ``avx512_core``, where oneDNN
    emulates bfloat16 if AVX512_BF16 is missing, or ``avx2_vnni_2``, the
    AVX-NE-CONVERT CPUs, which torch's own check leaves to ideep "as cpuinfo has
    no avx_ne_convert check"); elsewhere it uses its generic convolution,
    several times slower than oneDNN's float32 one.
    """
    from labkit.machine.cpu import cpu_info

    simd = cpu_info().simd_features
    found = [name for name in ("AVX512_BF16", "AMX", "AVX_NE_CONVERT", "BF16") if name in simd]
    avx512 = "AVX-512" if "AVX512F" in simd else "no AVX-512"
    if found:
        return f"this CPU reports bfloat16 instructions: {', '.join(found)} ({avx512})"
    return (
        "this CPU reports no bfloat16 instructions (no AVX512_BF16, AMX, AVX-NE-CONVERT or Arm "
        f"BF16) and {avx512}"
    )

"""The roofline model: is an operation limited by arithmetic or by memory traffic?

A kernel does some floating-point work (FLOPs) and must move some bytes
between DRAM and the chip. Its *arithmetic intensity* (AI) is the ratio,
FLOP/byte. A device can do at most P FLOP/s and move at most B bytes/s, so a
kernel of intensity AI can reach at most min(P, AI × B): the "roofline"
(Williams, Waterman and Patterson, CACM 2009). Below the *ridge point*
AI = P / B the memory roof binds ("memory-bound": a faster ALU would not
help), above it the compute roof does ("compute-bound").

This module counts FLOPs and minimum bytes for the course's operations
(:class:`OpCost`) and holds a :class:`Roofline` with its pure questions
(ridge point, attainable rate, which roof binds). Measuring the roofs and
real operations with torch is in :mod:`labkit.roofline.measure`, which
imports this module (never the other way round).

Byte counts are the *minimum* DRAM traffic: every input read once, the
output written once, as if the caches were perfect. Real kernels move at
least this much, so a measured point can sit below its roof for that reason
alone.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from labkit.core.units import format_count, three_digits
from labkit.core.validate import check_choice, check_int, check_real

#: Bytes per element of each storage dtype the course uses.
DTYPE_BYTES: dict[str, int] = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}

#: The kinds of operation :class:`OpCost` describes.
OP_KINDS: tuple[str, ...] = ("add", "matmul", "conv2d", "sum")

MEMORY_BOUND = "memory-bound"
COMPUTE_BOUND = "compute-bound"
NEAR_RIDGE = "near the ridge"


# --------------------------------------------------------------------------- helpers


def dtype_bytes(dtype: Any) -> int:
    """Bytes per element of a dtype given by name ("float32") or as a torch/numpy dtype."""
    name = _dtype_name(dtype)
    return DTYPE_BYTES[name]


def _dtype_name(dtype: Any) -> str:
    """The storage dtype's name ("float32"), from a name or a torch/numpy dtype.

    TF32 is not one: it is a GPU compute mode, and its tensors are float32.
    """
    text = dtype if isinstance(dtype, str) else str(dtype)
    return check_choice("dtype", text.removeprefix("torch.").strip().lower(), tuple(DTYPE_BYTES))


# --------------------------------------------------------------------------- op costs


@dataclass(frozen=True)
class OpCost:
    """The floating-point work and the minimum memory traffic of one operation.

    ``flops`` counts additions and multiplications (a multiply-add is 2);
    ``bytes`` is the minimum DRAM traffic (inputs read once, output written
    once). ``kind`` and ``dims`` say exactly which operation this is, so
    :func:`labkit.roofline.measure.measure_op` can run it.
    """

    name: str
    flops: int
    bytes: int
    dtype: str
    kind: str
    dims: tuple[tuple[str, int], ...] = field(default=())

    @property
    def arithmetic_intensity(self) -> float:
        """FLOP per byte of minimum memory traffic."""
        return self.flops / self.bytes

    def dim(self, name: str) -> int:
        """One of the op's dimensions by name (``op.dim("k")``)."""
        for key, value in self.dims:
            if key == name:
                return value
        raise ValueError(
            f"{self.name} has no dimension {name!r}; it has {[k for k, _ in self.dims]}"
        )

    def __str__(self) -> str:
        return (
            f"{self.name} ({self.dtype}): {format_count(self.flops, 'FLOP')}, "
            f"{format_count(self.bytes, 'B')} moved at least, "
            f"{three_digits(self.arithmetic_intensity)} FLOP/byte"
        )


def add_cost(n: int, dtype: str = "float32", *, name: str | None = None) -> OpCost:
    """``c = a + b`` on n elements: n FLOPs, 3n elements moved (read a and b, write c).

    float32, n = 1,000,000: 1e6 FLOPs and 12e6 bytes, so AI = 1/12 ≈ 0.083
    FLOP/byte, far below any ridge point: memory-bound everywhere.
    """
    n = check_int("n", n, minimum=1)
    size = dtype_bytes(dtype)
    return OpCost(
        name=name or f"add {n:,}",
        flops=n,
        bytes=3 * n * size,
        dtype=_dtype_name(dtype),
        kind="add",
        dims=(("n", n),),
    )


def matmul_cost(
    m: int, n: int, k: int, dtype: str = "float32", *, name: str | None = None
) -> OpCost:
    """``C = A @ B`` with A m×k, B k×n, C m×n: 2·m·n·k FLOPs, (mk + kn + mn) elements moved.

    Each of the m·n outputs is a dot product of length k: k multiplies and k
    adds. float32, m = n = k = 1024: 2.15e9 FLOPs and 3 · 1024² · 4 =
    12.6e6 bytes, AI = 2·1024/12 ≈ 171 FLOP/byte. AI grows with the size,
    which is why big matmuls are compute-bound.
    """
    m, n, k = (check_int(arg, v, minimum=1) for arg, v in (("m", m), ("n", n), ("k", k)))
    size = dtype_bytes(dtype)
    return OpCost(
        name=name or f"matmul {m}×{k} @ {k}×{n}",
        flops=2 * m * n * k,
        bytes=(m * k + k * n + m * n) * size,
        dtype=_dtype_name(dtype),
        kind="matmul",
        dims=(("m", m), ("n", n), ("k", k)),
    )


def conv2d_output_size(
    H: int, W: int, R: int, S: int, stride: int = 1, padding: int = 0
) -> tuple[int, int]:
    """Output height and width of a 2-D convolution (no dilation).

    Ho = (H + 2·padding − R) // stride + 1, and the same for W with S.
    Example: H = W = 224, a 7×7 filter, stride 2, padding 3 gives
    (224 + 6 − 7) // 2 + 1 = 112.
    """
    H, W, R, S, stride = (
        check_int(arg, v, minimum=1)
        for arg, v in (("H", H), ("W", W), ("R", R), ("S", S), ("stride", stride))
    )
    padding = check_int("padding", padding, minimum=0)
    if R > H + 2 * padding or S > W + 2 * padding:
        raise ValueError(
            f"R={R}, S={S}: the filter is larger than the padded {H + 2 * padding}×"
            f"{W + 2 * padding} input (H, W plus 2 × padding): increase padding or use a "
            "smaller filter"
        )
    return (H + 2 * padding - R) // stride + 1, (W + 2 * padding - S) // stride + 1


def conv2d_cost(
    N: int,
    C: int,
    H: int,
    W: int,
    K: int,
    R: int,
    S: int,
    stride: int = 1,
    padding: int = 0,
    dtype: str = "float32",
    *,
    name: str | None = None,
) -> OpCost:
    """A 2-D convolution in cuDNN's notation, without bias: input N×C×H×W, K filters of C×R×S.

    FLOPs = 2·N·K·Ho·Wo·C·R·S: each of the N·K·Ho·Wo outputs is a dot
    product of length C·R·S. Elements moved: the input N·C·H·W, the weights
    K·C·R·S and the output N·K·Ho·Wo. Example (float32): N=1, C=K=64,
    H=W=56, 3×3, stride 1, padding 1 gives Ho=Wo=56, 2·64·56²·64·9 =
    231,211,008 FLOPs and (200,704 + 36,864 + 200,704)·4 = 1,753,088 bytes:
    AI ≈ 132 FLOP/byte.
    """
    N, C, K = (check_int(arg, v, minimum=1) for arg, v in (("N", N), ("C", C), ("K", K)))
    Ho, Wo = conv2d_output_size(H, W, R, S, stride, padding)
    size = dtype_bytes(dtype)
    elements = N * C * H * W + K * C * R * S + N * K * Ho * Wo
    label = f"conv2d {N}×{C}×{H}×{W} * {K}×{C}×{R}×{S}"
    if stride != 1 or padding != 0:
        label += f" (stride {stride}, padding {padding})"
    return OpCost(
        name=name or label,
        flops=2 * N * K * Ho * Wo * C * R * S,
        bytes=elements * size,
        dtype=_dtype_name(dtype),
        kind="conv2d",
        dims=(
            ("N", N),
            ("C", C),
            ("H", H),
            ("W", W),
            ("K", K),
            ("R", R),
            ("S", S),
            ("stride", stride),
            ("padding", padding),
        ),
    )


def sum_cost(n: int, dtype: str = "float32", *, name: str | None = None) -> OpCost:
    """The sum of n elements: n FLOPs (each element added to a running total), n + 1 elements moved.

    (Starting the total from the first element saves one addition, n − 1;
    the difference vanishes for the sizes worth measuring.) float32, n =
    1,000,000: 1e6 FLOPs, 4,000,004 bytes, AI ≈ 0.25 FLOP/byte.
    """
    n = check_int("n", n, minimum=1)
    size = dtype_bytes(dtype)
    return OpCost(
        name=name or f"sum {n:,}",
        flops=n,
        bytes=(n + 1) * size,
        dtype=_dtype_name(dtype),
        kind="sum",
        dims=(("n", n),),
    )


# --------------------------------------------------------------------------- the roofline


@dataclass(frozen=True)
class Roofline:
    """A device's roofs: compute per dtype (GFLOP/s) and memory bandwidth (GB/s).

    ``peak_gflop_per_s`` holds the roofs the verdicts use. On a measured
    roofline (:func:`labkit.roofline.measure.measure_roofline`) they are
    *achieved BLAS ceilings*: the best matmul rate torch reached, not the
    hardware's peak. ``theoretical_gflop_per_s`` holds the peaks computed
    from the hardware (:func:`labkit.machine.peak.cpu_peak` on a CPU), where
    known, so the gap between the two can be shown; ``theoretical_source``
    says where they come from. Units fit together: GB/s × FLOP/byte =
    GFLOP/s. Compute dtypes are the storage dtypes plus "tf32" (float32
    tensors on NVIDIA tensor cores). Methods that take ``dtype=None`` use
    "float32" when it is present, else the first dtype given.
    """

    device: str
    peak_gflop_per_s: Mapping[str, float]
    peak_gb_per_s: float
    theoretical_gflop_per_s: Mapping[str, float] = field(default_factory=dict)
    theoretical_source: str = ""
    ceiling_kind: str = "compute roof"

    def __post_init__(self) -> None:  # read-only copies: the roofs cannot change afterwards
        peaks = types.MappingProxyType(dict(self.peak_gflop_per_s))
        object.__setattr__(self, "peak_gflop_per_s", peaks)
        theory = types.MappingProxyType(dict(self.theoretical_gflop_per_s))
        object.__setattr__(self, "theoretical_gflop_per_s", theory)

    @property
    def dtypes(self) -> tuple[str, ...]:
        return tuple(self.peak_gflop_per_s)

    @property
    def default_dtype(self) -> str:
        return "float32" if "float32" in self.peak_gflop_per_s else self.dtypes[0]

    def peak(self, dtype: str | None = None) -> float:
        """The compute roof of ``dtype`` in GFLOP/s."""
        key = self.default_dtype if dtype is None else dtype
        return self.peak_gflop_per_s[check_choice("dtype", key, self.dtypes)]

    def theoretical(self, dtype: str | None = None) -> float | None:
        """The hardware peak of ``dtype`` in GFLOP/s, None where it is not known."""
        key = self.default_dtype if dtype is None else dtype
        return self.theoretical_gflop_per_s.get(key)

    def ridge_point(self, dtype: str | None = None) -> float:
        """The intensity (FLOP/byte) where the memory roof meets the compute roof: peak / bandwidth.

        With 180 GFLOP/s and 30 GB/s it is 6 FLOP/byte: an op needs 6 FLOPs
        per byte it moves before the arithmetic, not the memory, limits it.
        """
        return self.peak(dtype) / self.peak_gb_per_s

    def verdict_ridge(self, dtype: str | None = None) -> float:
        """The ridge :meth:`verdict` uses: the theoretical peak's where known, else the ceiling's.

        The theoretical peak does not sink when the machine is busy, while a
        measured ceiling can (a loaded run times slower matmuls); it is also
        where the hardware's arithmetic, not one library's, takes over.
        """
        theory = self.theoretical(dtype)
        return theory / self.peak_gb_per_s if theory else self.ridge_point(dtype)

    def attainable_gflop_per_s(self, ai: float, dtype: str | None = None) -> float:
        """The best rate an op of intensity ``ai`` (FLOP/byte) can reach: min(peak, ai × GB/s)."""
        intensity = check_real("ai", ai, low=0, low_open=True)
        return min(self.peak(dtype), intensity * self.peak_gb_per_s)

    def fraction_of_roof(self, ai: float, gflop_per_s: float, dtype: str | None = None) -> float:
        """An achieved rate as a fraction of the roof above it (its dtype's, at its intensity).

        0.5 means the op runs at half of min(compute roof, ai × bandwidth):
        what the kernel leaves on the table, or traffic beyond the minimum.
        """
        rate = check_real("gflop_per_s", gflop_per_s, low=0)
        return rate / self.attainable_gflop_per_s(ai, dtype)

    def bound(self, op: OpCost, dtype: str | None = None) -> str:
        """ "memory-bound" when ``op``'s intensity is below the ridge point, else "compute-bound".

        ``dtype`` picks the compute roof; by default the op's own dtype
        (pass "tf32" to ask about a float32 op on tensor cores).
        """
        key = op.dtype if dtype is None else dtype
        if op.arithmetic_intensity < self.ridge_point(key):
            return MEMORY_BOUND
        return COMPUTE_BOUND

    def verdict(self, op: OpCost, dtype: str | None = None, *, margin: float = 4.0) -> str:
        """:meth:`bound` with a margin: "near the ridge" within ``margin``× of the ridge point.

        A verdict printed from measured roofs must not flip when the machine
        is loaded or another machine runs the notebook: an op at 4 FLOP/byte
        against a ridge near 5 is "near the ridge", where either roof may
        bind; one at 0.08 or 170 is not. The ridge is :meth:`verdict_ridge`.
        """
        factor = check_real("margin", margin, low=1)
        key = op.dtype if dtype is None else dtype
        ridge, ai = self.verdict_ridge(key), op.arithmetic_intensity
        if ai * factor < ridge:
            return MEMORY_BOUND
        if ai > ridge * factor:
            return COMPUTE_BOUND
        return NEAR_RIDGE

    def __str__(self) -> str:
        from labkit.core.units import format_gflop_per_s

        lines = [f"Roofline of {self.device}: memory roof {three_digits(self.peak_gb_per_s)} GB/s"]
        for dtype, peak in self.peak_gflop_per_s.items():
            line = (
                f"  {dtype:>8}: {self.ceiling_kind} {format_gflop_per_s(peak)}, "
                f"ridge point {three_digits(self.ridge_point(dtype))} FLOP/byte"
            )
            theory = self.theoretical(dtype)
            if theory:
                line += (
                    f"; theoretical peak {format_gflop_per_s(theory)}, ridge "
                    f"{three_digits(theory / self.peak_gb_per_s)} FLOP/byte "
                    f"(the ceiling is {peak / theory:.0%} of it)"
                )
            lines.append(line)
        if self.theoretical_source:
            lines.append(f"  theoretical peaks: {self.theoretical_source}")
        return "\n".join(lines)


#: How far above the separate-GEMV limit a batched rate must be before weight_reuse calls
#: the weight reused. A heuristic margin, not a proven bound: it is meant to cover a
#: read-only stream outrunning the triad (about 4/3 from write-allocate accounting alone,
#: more where memory serves pure reads faster than mixed traffic) and a median memory roof
#: that load lowers; nothing measured here bounds either (see weight_reuse).
REUSE_MARGIN = 1.5

#: The three sentences :func:`weight_reuse` prints (notebooks mask exactly these).
REUSED = (
    "faster by more than 1.5× than separate matrix-vector passes could run, reading the weight "
    "at the fastest stream measured (a heuristic margin for noise and a memory roof that load "
    "lowers, not a proven bound): the weight was most likely reused across the rows"
)
NOT_REUSED = (
    "no faster than separate matrix-vector passes could run, reading the weight at the fastest "
    "stream measured: no sign that the weight was reused"
)
REUSE_UNCLEAR = (
    "within 1.5× (a heuristic margin) of what separate matrix-vector passes could reach, "
    "reading the weight at the fastest stream measured: this run cannot tell whether the "
    "weight was reused"
)


def separate_gemv_gflop_per_s(
    roofline: Roofline, op: OpCost, *, read_gb_per_s: float | None = None
) -> float:
    """The fastest rate a matmul of ``op``'s shape could reach as m separate GEMVs.

    ``read_gb_per_s``: a read-only stream measured on the same run (notebook 03
    passes its DRAM-sized sum). Where it is faster than the memory roof, the
    limit uses it: the passes could read the weight that fast, so the margin
    then only has to cover noise, not the read-only stream outrunning the triad.

    Each of the m passes reads the whole k×n weight again, so together they
    run at about a GEMV's intensity times the memory roof, whatever m is.
    That is not a hard limit: the memory roof is STREAM's triad counted
    STREAM's way (3 arrays), while on a write-allocate cache the triad also
    reads each line it writes (McCalpin, STREAM "Philosophy and
    Justification", cs.virginia.edu/~mccalpin/papers/bandwidth/node3.html),
    so a read-only stream like a GEMV's weight can beat it with no reuse at
    all: by about 4/3 from that accounting alone, and by more where the
    memory serves pure reads faster than mixed read/write traffic (nothing
    cited or measured here bounds that); and the roof is a median, which
    load lowers. :func:`weight_reuse` therefore asks for :data:`REUSE_MARGIN`
    times this limit, a heuristic margin rather than a proven bound, before
    it says the weight was most likely read fewer than m times.
    """
    if op.kind != "matmul":
        raise ValueError(f"separate GEMVs only make sense for a matmul, got a {op.kind}")
    gemv = matmul_cost(1, op.dim("k"), op.dim("n"), op.dtype)
    dtype = op.dtype if op.dtype in roofline.dtypes else roofline.default_dtype
    limit = roofline.attainable_gflop_per_s(gemv.arithmetic_intensity, dtype)
    if read_gb_per_s is not None:
        read = check_real("read_gb_per_s", read_gb_per_s, low=0, low_open=True)
        limit = max(limit, min(roofline.peak(dtype), gemv.arithmetic_intensity * read))
    return limit


def weight_reuse(roofline: Roofline, measured: Any, *, read_gb_per_s: float | None = None) -> str:
    """Whether a batched matmul reused its weight: its rate against :func:`separate_gemv_gflop_per_s`.

    The share of the roof cannot say this: near the ridge the roofline's
    min() is most optimistic, so a kernel that does reuse the weight can
    still reach a small share there. The rate can, heuristically: m
    separate GEMVs beat the memory roof at a GEMV's intensity only as far
    as a read-only stream outruns the triad (about 4/3 from the triad's
    unpaid write-allocate traffic, more where pure reads run faster than
    mixed traffic) and by noise (:func:`separate_gemv_gflop_per_s`).
    Beyond :data:`REUSE_MARGIN` of it, a heuristic margin meant to cover
    both, not a proven bound, the weight was most likely reused; a machine
    whose reads run far ahead of its triad could cross it without reuse.
    One of :data:`REUSED`, :data:`NOT_REUSED`, :data:`REUSE_UNCLEAR`.
    ``measured`` is a :class:`labkit.roofline.measure.OpMeasurement` (its
    ``op`` and ``gflop_per_s``); ``read_gb_per_s`` a read-only stream measured
    on the same run (see :func:`separate_gemv_gflop_per_s`).
    """
    limit = separate_gemv_gflop_per_s(roofline, measured.op, read_gb_per_s=read_gb_per_s)
    if measured.gflop_per_s > REUSE_MARGIN * limit:
        return REUSED
    if measured.gflop_per_s <= limit:
        return NOT_REUSED
    return REUSE_UNCLEAR


#: What :func:`ridge_position` says of each verdict of :meth:`Roofline.verdict` (margin 4).
RIDGE_POSITIONS: dict[str, str] = {
    MEMORY_BOUND: "memory-bound (more than {margin} below the ridge)",
    COMPUTE_BOUND: "compute-bound (more than {margin} above the ridge)",
    NEAR_RIDGE: "near the ridge (within {margin} of it): either roof may bind",
}


def _times(ratio: float) -> str:
    """A ratio with a decimal point always ("0.0083×", "0.16×", "1.3×", "73.8×"), as the masks expect."""
    if ratio < 0.1:
        return f"{ratio:.2g}×"
    return f"{ratio:.2f}×" if ratio < 1 else f"{ratio:.1f}×"


def ridge_position(
    roofline: Roofline, op: OpCost, dtype: str | None = None, *, margin: float = 4.0
) -> str:
    """Where ``op`` lands against this roofline's verdict ridge, as one printed line.

    Its intensity, that as a multiple of :meth:`Roofline.verdict_ridge`, and
    the verdict with its margin (:data:`RIDGE_POSITIONS`). A notebook prints
    this instead of asserting where a skinny GEMM lands: an m-row matmul has
    about m/2 FLOP/byte in float32 whatever its weight, while the ridge moves
    with the cores, vector width, clock and bandwidth, so the same m can be
    near the ridge on one run and past the margin on another.
    """
    factor = check_real("margin", margin, low=1)
    key = op.dtype if dtype is None else dtype
    if key not in roofline.dtypes:
        key = roofline.default_dtype
    ridge, ai = roofline.verdict_ridge(key), op.arithmetic_intensity
    verdict = roofline.verdict(op, key, margin=factor)
    where = RIDGE_POSITIONS[verdict].format(margin=f"{factor:g}×")
    return (
        f"{three_digits(ai)} FLOP/byte, {_times(ai / ridge)} the {key} ridge "
        f"({three_digits(ridge)} FLOP/byte): {where}"
    )


def predict_bound(op_cost: OpCost, roofline: Roofline, dtype: str | None = None) -> str:
    """Which roof limits ``op_cost`` on ``roofline``: "memory-bound" or "compute-bound".

    The exercise's reference answer: compare the op's arithmetic intensity
    with the ridge point of the roof for its dtype (or ``dtype``).
    """
    return roofline.bound(op_cost, dtype)

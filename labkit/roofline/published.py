"""Published GPU peaks, cited, and the ridge points they imply.

Notebook 03 runs on a CPU; what it says about a GPU's roofline must come from
a published source, not from memory. This is a small table of vendor
figures, each with where it was read and when, and the ridge point is
computed from them (:func:`published_ridges`) rather than typed into prose.

Spec sheets quote tensor-core rates *with 2:4 structured sparsity* (marked
with an asterisk on NVIDIA's datasheet), twice the dense rate a normal
matmul can reach. Every figure here is **dense**.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.core.results import JsonRecord


@dataclass(frozen=True)
class PublishedPeak(JsonRecord):
    """One vendor figure: a GPU's dense peak for one kind of arithmetic, with its source."""

    gpu: str
    compute: str
    tflop_per_s: float
    memory_tb_per_s: float
    source: str
    read_on: str
    note: str = ""

    @property
    def ridge_flop_per_byte(self) -> float:
        """Where this compute roof meets the memory roof: TFLOP/s over TB/s."""
        return self.tflop_per_s / self.memory_tb_per_s

    def __str__(self) -> str:
        return (
            f"{self.gpu} {self.compute}: {self.tflop_per_s:g} TFLOP/s dense / "
            f"{self.memory_tb_per_s:g} TB/s = ridge {self.ridge_flop_per_byte:.0f} FLOP/byte"
        )


#: Where the H100 SXM figures were read (2026-12-01): a table of NVIDIA's H100 SXM5
#: figures (dense and sparse side by side: FP32 66.9, TF32 494.7 / 989.4, BF16 989.4 /
#: 1978.9 TFLOPS; HBM3 3.35 TB/s), cross-checked with a page quoting NVIDIA's datasheet
#: (FP32 67, TF32 989 and BF16 1,979 TFLOPS "with sparsity", 3.35 TB/s):
#: https://www.clawkipedia.org/wiki/nvidia-h100. NVIDIA's own datasheet
#: (https://www.nvidia.com/en-us/data-center/h100/) could not be opened when this
#: table was written: check the figures there before relying on a digit.
H100_SOURCE = (
    "NVIDIA's H100 SXM5 figures as reproduced on https://glennklockwood.com/garden/processors/h100"
    " (a third-party page; NVIDIA's datasheet could not be opened here). On that page the TF32,"
    " FP8 and INT8 rows are shifted one column left: TF32's 494.7 sits under VFMA and 989.4"
    " (sparse) under Matrix; 494.7 is the dense tensor-core rate, as NVIDIA's datasheet's"
    " 989 TFLOPS with sparsity implies"
)
H100_READ_ON = "2026-12-01"
H100_MEMORY_TB_PER_S = 3.35

PUBLISHED_PEAKS: tuple[PublishedPeak, ...] = (
    PublishedPeak(
        "H100 SXM",
        "FP32 (CUDA cores)",
        66.9,
        H100_MEMORY_TB_PER_S,
        H100_SOURCE,
        H100_READ_ON,
        "no tensor cores: the rate a float32 op gets with TF32 off (PyTorch's matmul default)",
    ),
    PublishedPeak(
        "H100 SXM",
        "TF32 tensor cores",
        494.7,
        H100_MEMORY_TB_PER_S,
        H100_SOURCE,
        H100_READ_ON,
        "dense; the datasheet's 989 is with sparsity",
    ),
    PublishedPeak(
        "H100 SXM",
        "BF16/FP16 tensor cores",
        989.4,
        H100_MEMORY_TB_PER_S,
        H100_SOURCE,
        H100_READ_ON,
        "dense; the datasheet's 1,979 is with sparsity",
    ),
)


def published_ridges(gpu: str = "H100 SXM") -> tuple[PublishedPeak, ...]:
    """The cited peaks of ``gpu``, each able to say its ridge point."""
    rows = tuple(p for p in PUBLISHED_PEAKS if p.gpu == gpu)
    if not rows:
        known = sorted({p.gpu for p in PUBLISHED_PEAKS})
        raise ValueError(f"gpu must be one of {known}, got {gpu!r}")
    return rows


#: The margin of the verdicts (:meth:`labkit.roofline.model.Roofline.verdict`): an op is called
#: compute-bound more than 4× above a ridge and memory-bound more than 4× below it.
VERDICT_MARGIN = 4.0

#: How far apart two ridges must be before some op gets opposite verdicts on the two
#: machines: 4× above the lower ridge and 4× below the higher one, so 16×.
RIDGE_MARGIN = VERDICT_MARGIN**2

#: The three sentences :func:`compare_ridge` prints (notebooks mask exactly these).
CPU_RIDGE_LOWER = (
    "this CPU's float32 ridge is more than 16× below the GPU's: an op more than 4× above "
    "this CPU's ridge and 4× below the GPU's is compute-bound here and memory-bound there"
)
CPU_RIDGE_HIGHER = (
    "this CPU's float32 ridge is more than 16× above the GPU's: an op more than 4× below "
    "this CPU's ridge and 4× above the GPU's is memory-bound here and compute-bound there"
)
RIDGES_CLOSE = (
    "the two float32 ridges are within 16× of each other: with the verdicts' 4× margin, no op "
    "is called compute-bound on one and memory-bound on the other (an op between them is "
    "near the ridge on at least one)"
)


def compare_ridge(cpu_ridge_flop_per_byte: float, gpu: PublishedPeak) -> str:
    """Which ridge is higher, this CPU's (FLOP/byte) or ``gpu``'s; one of three sentences.

    A CPU's ridge depends on its cores, width, clock and memory: a 2-core run
    sits below an H100's FP32 ridge of 20, an all-core AVX-512 server
    can sit above it. So the comparison is printed from the numbers, with the
    verdicts' own margin on both sides (:data:`RIDGE_MARGIN` = 4 × 4): an op
    is "compute-bound here and memory-bound there" only if both verdicts
    would say so.
    """
    from labkit.core.validate import check_real

    cpu = check_real("cpu_ridge_flop_per_byte", cpu_ridge_flop_per_byte, low=0, low_open=True)
    ratio = cpu / gpu.ridge_flop_per_byte
    if ratio * RIDGE_MARGIN < 1:
        return CPU_RIDGE_LOWER
    if ratio > RIDGE_MARGIN:
        return CPU_RIDGE_HIGHER
    return RIDGES_CLOSE


__all__ = [
    "CPU_RIDGE_HIGHER",
    "CPU_RIDGE_LOWER",
    "PUBLISHED_PEAKS",
    "RIDGES_CLOSE",
    "PublishedPeak",
    "compare_ridge",
    "published_ridges",
]

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
H100_SOURCE = "https://glennklockwood.com/garden/processors/h100 (NVIDIA H100 SXM5 figures)"
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


__all__ = ["PUBLISHED_PEAKS", "PublishedPeak", "published_ridges"]

"""Published GPU peaks, cited, and the ridge points they imply.

Notebook 03 runs on a CPU; what it says about a GPU's roofline must come from
a published source, not from memory. The peaks come from labkit's spec table
(:mod:`labkit.machine.published`), each with where it was read and when, and
the ridge point is computed from them (:func:`published_ridges`) rather than
typed into prose.

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


#: The GPU whose ridges notebook 03 prints, and the spec-sheet field of each compute roof.
RIDGE_GPU = "H100 SXM5 80GB"
RIDGE_ROOFS: tuple[tuple[str, str, str], ...] = (
    (
        "FP32 (CUDA cores)",
        "fp32_tflop_per_s",
        "no tensor cores: the rate a float32 op gets with TF32 off (PyTorch's matmul default)",
    ),
    ("TF32 tensor cores", "tf32_tflop_per_s", "dense"),
    ("BF16/FP16 tensor cores", "bf16_tflop_per_s", "dense"),
)


def _peaks(gpu: str) -> tuple[PublishedPeak, ...]:
    """The cited peaks of ``gpu`` from labkit's spec table (:mod:`labkit.machine.published`)."""
    from labkit.machine.published import gpu_spec

    spec = gpu_spec(gpu)
    memory = spec.need("memory_gb_per_s") / 1e3
    rows = []
    for compute, field, note in RIDGE_ROOFS:
        value = spec.get(field)
        if value is None:
            continue
        source = spec.source(field)
        rows.append(
            PublishedPeak(
                spec.name,
                compute,
                value,
                memory,
                f"{source.url} ({source.where}; {source.kind}); memory: "
                f"{spec.source('memory_gb_per_s').url}",
                source.checked,
                note,
            )
        )
    return tuple(rows)


def published_ridges(gpu: str = RIDGE_GPU) -> tuple[PublishedPeak, ...]:
    """The cited peaks of ``gpu`` (a name or alias of the spec table), each able to say its ridge."""
    rows = _peaks(gpu)
    if not rows:
        raise ValueError(f"the spec table has no compute rates for gpu={gpu!r}")
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
    "RIDGES_CLOSE",
    "PublishedPeak",
    "RIDGE_GPU",
    "compare_ridge",
    "published_ridges",
]

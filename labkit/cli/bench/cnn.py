"""``labkit bench cnn``: images/s of the course's CNN by batch size, layout and precision.

Notebook 05 shows that a GPU needs a batch to be busy, and that the layout
(channels_last) and autocast decide how fast a full batch goes. This command
times :class:`labkit.models.cnn.CNN` with :func:`labkit.models.throughput.throughput_by_batch`
(inference) in each variant of :data:`VARIANTS`: float32 NCHW, float32
channels_last, channels_last under bfloat16 autocast and, on a GPU,
channels_last under float16 autocast; 224×224 images on a GPU, 64×64 on a CPU.

``--record`` on a GPU machine stores the GPU run as the ``cnn`` recording.
``--quick`` runs toy sizes with tiny time budgets: it checks that the command
works (the tests use it), and its numbers mean little.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from labkit.accel.common import times
from labkit.cli.bench.run import part_failed

#: The recording ``--record`` writes.
REFERENCE_NAME = "cnn"

#: (name, channels_last, autocast dtype or None, GPU only).
VARIANTS: tuple[tuple[str, bool, str | None, bool], ...] = (
    ("float32 NCHW", False, None, False),
    ("float32 channels_last", True, None, False),
    ("bfloat16 autocast + channels_last", True, "bfloat16", False),
    ("float16 autocast + channels_last", True, "float16", True),
)

#: Batch sizes and image side per machine.
GPU_BATCHES = (1, 8, 32, 64, 128, 256)
CPU_BATCHES = (1, 8, 32)
QUICK_BATCHES = (1, 4)
GPU_IMAGE, CPU_IMAGE, QUICK_IMAGE = 224, 64, 32

_QUICK = "(--quick: toy sizes and tiny time budgets; the numbers mean little)"


@dataclass(frozen=True)
class VariantCurve:
    """One variant's images/s by batch size (:class:`labkit.models.throughput.BatchThroughput` points)."""

    name: str
    points: tuple[Any, ...]

    @property
    def peak(self) -> Any:
        return max(self.points, key=lambda p: p.images_per_s)

    def at(self, batch: int) -> Any:
        """The point at ``batch`` (None when it was not measured)."""
        return next((p for p in self.points if p.batch_size == batch), None)


@dataclass(frozen=True)
class CnnResults:
    """All variants on ``device``; ``failed`` holds (variant, error) pairs."""

    device: str
    image_size: int
    curves: tuple[VariantCurve, ...]
    failed: tuple[tuple[str, str], ...] = ()
    quick: bool = False

    def largest_common_batch(self) -> int | None:
        """The largest batch every measured variant ran (the gains are compared there)."""
        common = None
        for curve in self.curves:
            sizes = {p.batch_size for p in curve.points}
            common = sizes if common is None else common & sizes
        return max(common) if common else None

    def gains(self) -> dict[str, float]:
        """Each variant's images/s over float32 NCHW's at :meth:`largest_common_batch`."""
        batch = self.largest_common_batch()
        if batch is None or not self.curves or self.curves[0].name != VARIANTS[0][0]:
            return {}
        at = {c.name: c.at(batch) for c in self.curves}
        base = at[self.curves[0].name].images_per_s  # the largest common batch is in every curve
        return {c.name: at[c.name].images_per_s / base for c in self.curves[1:]}

    def summary(self) -> list[str]:
        dev, px = self.device, self.image_size
        lines = [
            f"{dev}: {c.name}: peak {c.peak.images_per_s:,.0f} images/s at batch "
            f"{c.peak.batch_size} (batch {c.points[0].batch_size}: "
            f"{c.points[0].images_per_s:,.0f} images/s; labkit.models.cnn.CNN, {px}×{px} images, "
            "inference)"
            for c in self.curves
        ]
        batch = self.largest_common_batch()
        for name, gain in self.gains().items():
            lines.append(f"{dev}: {name} vs float32 NCHW at batch {batch}: {times(gain)}")
        lines += [f"{dev}: {name}: not measured ({error})" for name, error in self.failed]
        if self.quick:
            lines.append(_QUICK)
        return lines

    def to_dict(self) -> dict[str, Any]:
        """The recording's schema, which the notebooks' GPU cells read: a view, not the fields."""
        return {
            "device": self.device,
            "image_size": self.image_size,
            "quick": self.quick,
            "variants": [
                {
                    "name": c.name,
                    "peak_images_per_s": c.peak.images_per_s,
                    "peak_batch": c.peak.batch_size,
                    "points": [
                        {
                            "batch_size": p.batch_size,
                            "images_per_s": p.images_per_s,
                            "median_ms": p.median_ms,
                            "dtype": p.dtype,
                            "channels_last": p.channels_last,
                        }
                        for p in c.points
                    ],
                }
                for c in self.curves
            ],
            "largest_common_batch": self.largest_common_batch(),
            "gain_vs_float32_nchw": self.gains(),
            "failed": [{"name": name, "error": error} for name, error in self.failed],
        }

    def __str__(self) -> str:
        lines = [
            f"labkit.models.cnn.CNN on {self.device}, {self.image_size}×{self.image_size} "
            "images, inference (images/s by batch size):"
        ]
        for c in self.curves:
            lines.append(f"  {c.name}:")
            lines += [f"    {p}" for p in c.points]
        batch = self.largest_common_batch()
        for name, gain in self.gains().items():
            lines.append(f"  {name} vs float32 NCHW at batch {batch}: {times(gain)}")
        lines += [f"  {name}: not measured ({error})" for name, error in self.failed]
        if self.quick:
            lines.append(_QUICK)
        return "\n".join(lines)


def measure(quick: bool = False) -> CnnResults:
    """Every variant of :data:`VARIANTS` that this device runs, on a fresh seeded CNN each."""
    import torch

    from labkit.machine.gpu import has_gpu
    from labkit.models import cnn, throughput

    on_gpu = has_gpu()
    device = "cuda" if on_gpu else "cpu"
    batches: tuple[int, ...]
    if quick:
        batches, image = QUICK_BATCHES, QUICK_IMAGE
    else:
        batches, image = (GPU_BATCHES, GPU_IMAGE) if on_gpu else (CPU_BATCHES, CPU_IMAGE)
    budget: dict[str, Any] = {"warmup_ms": 0.0, "rep_ms": 5.0} if quick else {}
    curves, failed = [], []
    for name, channels_last, amp, gpu_only in VARIANTS:
        if gpu_only and not on_gpu:
            continue
        torch.manual_seed(0)
        try:
            points = throughput.throughput_by_batch(
                cnn.CNN(),
                batches,
                image,
                device=device,
                channels_last=channels_last,
                amp_dtype=None if amp is None else getattr(torch, amp),
                **budget,
            )
        except Exception as exc:  # one variant failing keeps the others
            failed.append((name, part_failed("labkit bench cnn", name, exc)))
            continue
        if points:
            curves.append(VariantCurve(name, tuple(points)))
        else:
            failed.append((name, "no batch size fitted in memory"))
    return CnnResults(
        device=device, image_size=image, curves=tuple(curves), failed=tuple(failed), quick=quick
    )


def run_cnn_benchmark(as_json: bool = False, record: bool = False, quick: bool = False) -> int:
    """``labkit bench cnn``; returns the exit code (same rules as the other recorders)."""
    from labkit.cli.bench.run import preflight, record_and_report

    early = preflight("labkit bench cnn", record=record, quick=quick)
    if early is not None:
        return early
    results = measure(quick=quick)
    return record_and_report(
        "cnn",
        REFERENCE_NAME,
        results,
        as_json=as_json,
        record=record and results.device != "cpu",
    )

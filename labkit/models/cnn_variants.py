"""The CNN's throughput by batch size in each layout and precision: one variable at a time.

Notebook 05 asks two questions of :class:`labkit.models.cnn.CNN`: how does
images/s change with the batch size, and what do the memory layout
(``channels_last``) and the precision (autocast) each add? Measuring the two
switches only together cannot say which one helped, so :data:`VARIANTS` has
each alone and both together. :func:`measure` is what the notebook's cells
and ``labkit bench cnn`` both run, with the same sizes (:data:`SWEEPS`), so a
GPU recording shows exactly what the notebook's GPU cell would.

Points are timed batch by batch, every variant at one batch size before the
next size, in rotating order, so that a change in the machine's state hits
all variants alike rather than one curve. :func:`variant_steps` gives one
forward pass per variant for :func:`labkit.interleave`, which compares them
round by round; :func:`layout_or_precision` reads the rounds.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from labkit.accel.common import times
from labkit.accel.tf32 import bfloat16_hardware  # noqa: F401 - notebook 05 reads it here
from labkit.core.optional import import_optional
from labkit.core.units import format_speedup

if TYPE_CHECKING:
    from labkit.models.throughput import BatchThroughput
    from labkit.timing.interleave import Interleaved


@dataclass(frozen=True)
class Variant:
    """A layout and a precision: ``amp`` is the autocast dtype's name, None for float32."""

    name: str
    channels_last: bool
    amp: str | None
    gpu_only: bool = False


#: float32 and bfloat16, each in both layouts; float16 (autocast on a GPU only) too.
VARIANTS: tuple[Variant, ...] = (
    Variant("float32, NCHW", False, None),
    Variant("float32, channels_last", True, None),
    Variant("bfloat16 autocast, NCHW", False, "bfloat16"),
    Variant("bfloat16 autocast, channels_last", True, "bfloat16"),
    Variant("float16 autocast, NCHW", False, "float16", gpu_only=True),
    Variant("float16 autocast, channels_last", True, "float16", gpu_only=True),
)
BASELINE = VARIANTS[0].name

#: (batch sizes, image side) per kind of run: the notebook and ``labkit bench cnn`` share them.
SWEEPS: dict[str, tuple[tuple[int, ...], int]] = {
    "gpu": ((1, 8, 32, 128), 224),
    "cpu": ((1, 4, 16, 64), 64),
    "quick": ((1, 4), 32),
}

_QUICK = "(--quick: toy sizes and tiny time budgets; the numbers mean little)"


@dataclass(frozen=True)
class VariantCurve:
    """One variant's images/s by batch size (:class:`~labkit.models.throughput.BatchThroughput`)."""

    name: str
    points: tuple[BatchThroughput, ...]

    @property
    def peak(self) -> BatchThroughput:
        return max(self.points, key=lambda p: p.images_per_s)

    def at(self, batch: int) -> BatchThroughput | None:
        """The point at ``batch`` (None when it was not measured)."""
        return next((p for p in self.points if p.batch_size == batch), None)

    def verdict(self) -> str:
        """Where this curve peaks and where it falls, from this one run's data.

        Two points are told apart only when their IQRs do not overlap: the
        batches within the noise of the best are listed with it, and the
        first batch after the best whose faster quartile is below the best's
        slower one is named, with its page faults per call. One run per
        point: drift between runs (which :func:`labkit.interleave` measures)
        can be larger than these IQRs.
        """
        best = self.peak
        first = self.points[0]
        ties = [
            p.batch_size
            for p in self.points
            if p is not best
            and p.images_per_s_high >= best.images_per_s_low
            and p.images_per_s_low <= best.images_per_s_high
        ]
        text = (
            f"{self.name}: best at batch {best.batch_size}, "
            f"{times(best.images_per_s / first.images_per_s)} batch {first.batch_size}'s images/s"
        )
        if ties:
            text += f" (within the noise of it: batch {', '.join(map(str, ties))})"
        after = [p for p in self.points if p.batch_size > best.batch_size]
        fall = next((p for p in after if p.images_per_s_high < best.images_per_s_low), None)
        if fall is None:
            text += "; no larger batch falls below it" if after else "; the largest batch"
        else:
            faults = fall.minor_faults_per_call
            fault_text = "" if faults is None else f", {faults:,.0f} page faults per call there"
            text += (
                f"; falls below it from batch {fall.batch_size} "
                f"({fall.images_per_s / best.images_per_s:.2f} of the best{fault_text})"
            )
        return text + " [one run per point]"


@dataclass(frozen=True)
class CnnResults:
    """Every variant measured on ``device``; ``failed`` holds (variant, error) pairs.

    ``allocator`` says how freed memory was handled (:mod:`labkit.machine.allocator`).
    """

    device: str
    image_size: int
    curves: tuple[VariantCurve, ...]
    failed: tuple[tuple[str, str], ...] = ()
    quick: bool = False
    allocator: str = "as the process found it"

    def __getitem__(self, name: str) -> VariantCurve:
        for curve in self.curves:
            if curve.name == name:
                return curve
        raise KeyError(f"no variant named {name!r}; measured: {[c.name for c in self.curves]}")

    def most_faults(self) -> tuple[str, int]:
        """The (variant, batch) whose calls took the most page faults (the first point if none)."""
        points = [(c.name, p) for c in self.curves for p in c.points]
        name, point = max(points, key=lambda item: item[1].minor_faults_per_call or 0.0)
        return name, point.batch_size

    def largest_common_batch(self) -> int | None:
        """The largest batch every measured variant ran (the gains are compared there)."""
        common: set[int] | None = None
        for curve in self.curves:
            sizes = {p.batch_size for p in curve.points}
            common = sizes if common is None else common & sizes
        return max(common) if common else None

    def gains(self) -> dict[str, float]:
        """Each variant's images/s over float32 NCHW's at :meth:`largest_common_batch`."""
        batch = self.largest_common_batch()
        if batch is None or not self.curves or self.curves[0].name != BASELINE:
            return {}
        at = {c.name: c.at(batch) for c in self.curves}
        base = at[BASELINE]
        if base is None:
            return {}
        return {
            name: point.images_per_s / base.images_per_s
            for name, point in at.items()
            if point is not None and name != BASELINE
        }

    def _what(self) -> str:
        px = self.image_size
        return f"labkit.models.cnn.CNN, {px}×{px} images, inference (forward only)"

    def summary(self) -> list[str]:
        dev = self.device
        lines = [
            f"{dev}: {c.name}: peak {c.peak.images_per_s:,.0f} images/s at batch "
            f"{c.peak.batch_size} (batch {c.points[0].batch_size}: "
            f"{c.points[0].images_per_s:,.0f} images/s; {self._what()})"
            for c in self.curves
        ]
        batch = self.largest_common_batch()
        for name, gain in self.gains().items():
            lines.append(f"{dev}: {name} vs {BASELINE} at batch {batch}: {format_speedup(gain)}")
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
            "allocator": self.allocator,
            "variants": [
                {
                    "name": c.name,
                    "peak_images_per_s": c.peak.images_per_s,
                    "peak_batch": c.peak.batch_size,
                    "points": [
                        {
                            "batch_size": p.batch_size,
                            "images_per_s": p.images_per_s,
                            "images_per_s_iqr": [p.images_per_s_low, p.images_per_s_high],
                            "median_ms": p.median_ms,
                            "minor_faults_per_call": p.minor_faults_per_call,
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
        lines = [f"{self._what()} on {self.device}, images/s by batch size:"]
        for c in self.curves:
            lines.append(f"  {c.name}:")
            lines += [f"    {p}" for p in c.points]
        lines += [f"  {name}: not measured ({error})" for name, error in self.failed]
        if self.quick:
            lines.append(_QUICK)
        return "\n".join(lines)


def variants_for(device_type: str) -> tuple[Variant, ...]:
    """The variants a device runs: float16 autocast only on a GPU."""
    return tuple(v for v in VARIANTS if device_type == "cuda" or not v.gpu_only)


def _chosen(device_type: str, names: Sequence[str] | None) -> tuple[Variant, ...]:
    available = variants_for(device_type)
    if names is None:
        return available
    by_name = {v.name: v for v in available}
    if isinstance(names, str) or not names:
        raise ValueError(f"names must be a non-empty list of variant names, from {list(by_name)}")
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise ValueError(f"names has {unknown}, not variants on {device_type}: {list(by_name)}")
    return tuple(by_name[n] for n in names)


def _amp(torch: Any, variant: Variant) -> Any:
    return None if variant.amp is None else getattr(torch, variant.amp)


def measure(
    device: Any = None,
    *,
    quick: bool = False,
    batch_sizes: Sequence[int] | None = None,
    names: Sequence[str] | None = None,
    keep_freed: bool = False,
    warmup_ms: float = 25.0,
    rep_ms: float = 150.0,
) -> CnnResults:
    """Images/s of a seeded :class:`~labkit.models.cnn.CNN` in every variant this device runs.

    The sizes are :data:`SWEEPS`'s for the device (``quick``: toy sizes and
    5 ms budgets, for tests); ``batch_sizes`` replaces its batch sizes and
    ``names`` picks variants (default: every one this device runs).
    ``keep_freed=True`` times inside :func:`labkit.machine.allocator.keep_freed_memory`.
    Every variant gets a CNN with the same starting weights; a variant that
    fails is reported in ``failed`` and the others still run.
    """
    from labkit.core.validate import check_sizes
    from labkit.machine.allocator import keep_freed_memory
    from labkit.machine.report import resolve_torch_device
    from labkit.models import throughput
    from labkit.models.cnn import CNN

    torch = import_optional("torch", "labkit.models.cnn_variants.measure")
    where = resolve_torch_device(device)
    kind = "quick" if quick else ("gpu" if where.type == "cuda" else "cpu")
    batches, image = SWEEPS[kind]
    if batch_sizes is not None:
        batches = tuple(check_sizes(batch_sizes, "batch_sizes"))
    budget: dict[str, Any] = (
        {"warmup_ms": 0.0, "rep_ms": 5.0} if quick else {"warmup_ms": warmup_ms, "rep_ms": rep_ms}
    )
    chosen = _chosen(where.type, names)
    models = {}
    for variant in chosen:
        torch.manual_seed(0)
        models[variant.name] = CNN()
    points: dict[str, list[BatchThroughput]] = {v.name: [] for v in chosen}
    errors: dict[str, str] = {}
    allocator = "as the process found it"
    context = keep_freed_memory() if keep_freed else contextlib.nullcontext(None)
    with context as setting:
        if setting is not None:
            allocator = str(setting)
        for i, batch in enumerate(batches):
            order = chosen[i % len(chosen) :] + chosen[: i % len(chosen)]
            for variant in order:
                if variant.name in errors:
                    continue
                try:
                    points[variant.name] += throughput.throughput_by_batch(
                        models[variant.name],
                        [batch],
                        image,
                        device=where,
                        channels_last=variant.channels_last,
                        amp_dtype=_amp(torch, variant),
                        **budget,
                    )
                except Exception as exc:  # one variant failing keeps the others
                    errors[variant.name] = _failed(variant.name, exc)
    curves = tuple(VariantCurve(v.name, tuple(points[v.name])) for v in chosen if points[v.name])
    failed = tuple((name, error) for name, error in errors.items())
    failed += tuple(
        (v.name, "no batch size fitted in memory")
        for v in chosen
        if not points[v.name] and v.name not in errors
    )
    return CnnResults(
        device=str(where),
        image_size=image,
        curves=curves,
        failed=failed,
        quick=quick,
        allocator=allocator,
    )


def _failed(name: str, exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ") + f" ({name})"


def variant_steps(
    batch: int, image_size: int, device: Any = None, *, names: Sequence[str] | None = None
) -> dict[str, Callable[[], Any]]:
    """One inference forward pass per variant (name → callable), for :func:`labkit.interleave`.

    Each variant has its own seeded CNN (the same weights) and its own batch,
    in its layout; ``names`` picks variants (default: all this device runs).
    """
    from labkit.core.validate import check_int
    from labkit.machine.report import resolve_torch_device
    from labkit.models.cnn import CNN

    torch = import_optional("torch", "labkit.models.cnn_variants.variant_steps")
    batch = check_int("batch", batch, minimum=1)
    image_size = check_int("image_size", image_size, minimum=2)
    where = resolve_torch_device(device)
    steps: dict[str, Callable[[], Any]] = {}
    for variant in _chosen(where.type, names):
        name = variant.name
        fmt = torch.channels_last if variant.channels_last else torch.contiguous_format
        torch.manual_seed(0)
        model: Any = CNN()
        model = model.to(device=where, memory_format=fmt).train(False)  # inference mode
        x = torch.randn(batch, 3, image_size, image_size, device=where).contiguous(
            memory_format=fmt
        )
        amp = _amp(torch, variant)

        def step(model: Any = model, x: Any = x, amp: Any = amp) -> Any:
            cast = (
                torch.autocast(device_type=where.type, dtype=amp)
                if amp is not None
                else contextlib.nullcontext()
            )
            with torch.inference_mode(), cast:
                return model(x)

        steps[name] = step
    return steps


def layout_or_precision(
    runs: Interleaved,
    layout: str = "float32, channels_last",
    precision: str = "bfloat16 autocast, NCHW",
) -> str:
    """Which switch alone gave more, judged round by round from :func:`labkit.interleave`'s runs.

    In each round, the layout's run median against the precision's (both
    timed in that round). Only what every round agrees on is a verdict.
    """
    a, b = runs[layout], runs[precision]
    per_round = [
        (tb.median_ms / ta.median_ms) if ta.median_ms > 0 else math.inf
        for ta, tb in zip(a.runs, b.runs, strict=True)
    ]
    low, high = min(per_round), max(per_round)
    span = f"{times(low)} to {times(high)}"
    if low > 1:
        return f"{layout} alone was faster than {precision} alone in every round ({span})"
    if high < 1:
        return f"{precision} alone was faster than {layout} alone in every round ({span})"
    return f"neither {layout} nor {precision} alone was faster in every round ({span})"

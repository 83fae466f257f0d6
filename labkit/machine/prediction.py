"""A lesson's model applied to a named GPU's spec sheet, beside published measurements.

Without a GPU and without a recording (:mod:`labkit.machine.reference`), a GPU
cell can still show real GPU evidence: what the lesson's own model predicts
for a GPU whose spec sheet labkit ships (:mod:`labkit.machine.published`),
and what people measured on real GPUs, each labelled as published and not
measured here, with its source. Each lesson package writes its prediction
as a function of a :class:`~labkit.machine.published.GpuSpec` that returns a
:class:`GpuPrediction`; the notebook passes it to :func:`labkit.require_gpu`
(``predict=...``), which calls it with the GPU the learner chose
(:func:`labkit.machine.published.use_gpu`).

The verdict lines are computed from the numbers (the measured fraction of
the spec, the published speedup against the ratio of peaks), never typed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from labkit.machine.published import (
    SPEC_FIELDS,
    SPEC_LABELS,
    GpuSpec,
    PublishedFigure,
    format_number,
    published_figures,
)

#: How a notebook picks another GPU for the predictions.
CHOOSE_HINT = 'labkit.use_gpu("H100"), or LABKIT_GPU=H100, predicts for another GPU of the table'


@dataclass(frozen=True)
class GpuPrediction:
    """What a lesson's model predicts for ``gpu``, and the published measurements beside it.

    ``model`` holds the lesson's prediction, one line per quantity, with the
    arithmetic that produced it; ``used`` the spec-sheet fields it read (their
    sources are printed); ``missing`` those it needed and the sheet does not
    have; ``figures`` the published measurements shown; ``verdicts`` the
    computed sentences comparing prediction and measurement.
    """

    lesson: str
    gpu: GpuSpec
    model: tuple[str, ...]
    figures: tuple[PublishedFigure, ...]
    verdicts: tuple[str, ...]
    used: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        """The text a GPU cell prints: prediction, published figures, verdicts, sources."""
        out = [
            f"Predicted by this lesson's model for the {self.gpu.name} from its spec sheet ({CHOOSE_HINT}):"
        ]
        out += [f"  {line}" for line in self.model]
        for field in self.missing:
            out.append(
                f"  (the spec table has no verified {SPEC_LABELS[field]} for the {self.gpu.name}, so "
                "the model cannot say what depends on it)"
            )
        if self.figures:
            out.append("Published figures, not measured here:")
            out += [f"  - {f.line()}" for f in self.figures]
        if self.verdicts:
            out.append("Computed from the numbers above:")
            out += [f"  - {v}" for v in self.verdicts]
        if self.used:
            out.append(f"Spec-sheet values used ({self.gpu.name}):")
            for field in self.used:
                value = self.gpu.values[field]
                out.append(
                    f"  - {SPEC_LABELS[field]}: {format_number(value.value or 0)} "
                    f"{SPEC_FIELDS[field]}: {value.source.label()}"
                )
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


#: A lesson's prediction for a GPU's spec sheet: what ``labkit.require_gpu(predict=...)`` takes.
Predictor = Callable[[GpuSpec], GpuPrediction]


def spec_values(gpu: GpuSpec, *fields: str) -> tuple[dict[str, float], tuple[str, ...]]:
    """The values of ``fields`` that ``gpu``'s sheet has, and the names of those it lacks."""
    found = {f: v for f in fields if (v := gpu.get(f)) is not None}
    return found, tuple(f for f in fields if f not in found)


def choose_figures(
    lesson: str,
    gpu: GpuSpec,
    keep: Callable[[PublishedFigure], bool] = lambda f: True,
    *,
    limit: int = 6,
) -> tuple[PublishedFigure, ...]:
    """Published figures of ``lesson`` that ``keep`` accepts: the chosen GPU's first, then others.

    "Closest" is the same GPU first, then the order of the table (which keeps
    a source's figures together), up to ``limit``.
    """
    figures = [f for f in published_figures(lesson) if keep(f)]
    same = [f for f in figures if f.spec_name == gpu.name]
    other = [f for f in figures if f.spec_name != gpu.name]
    return tuple((same + other)[:limit])


def spec_verdicts(figures: Iterable[PublishedFigure]) -> list[str]:
    """For each figure that has a spec-sheet value to compare with, the measured fraction."""
    return [v for f in figures if (v := f.against_spec()) is not None]


def by_id(ids: Sequence[str]) -> tuple[PublishedFigure, ...]:
    """The published figures with these ids, in this order (a KeyError names a missing one)."""
    table = {f.id: f for f in published_figures()}
    return tuple(table[i] for i in ids)


def ratio_verdict(label: str, measured: float, predicted: float, predicted_label: str) -> str:
    """ "label: 2.63× measured against 2.00× predicted (132% of it)"."""
    return (
        f"{label}: {measured:.3g}× measured against the {predicted:.3g}× {predicted_label} "
        f"({measured / predicted:.0%} of it)"
    )

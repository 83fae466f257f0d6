"""Compare variants fairly: run them round-robin and report noise and drift apart.

Timing variant A for a second and then variant B for a second compares A
under one machine state with B under another: a browser tab, a clock change
or another user's job that starts between the two runs moves one median and
not the other, and the IQR of each run stays small, so nothing flags it.
:func:`interleave` runs every variant once per *round*, rotating the order,
for several rounds, so every variant sees the same drift:

- **within-run spread**: the IQR / median of one run (what :func:`bench`'s
  noise flag reads), as the median over rounds;
- **between-run spread**: (slowest − fastest run median) / median of the run
  medians;
- **from noise alone**: the range the run medians would have if every sample
  were independent noise with the within-run IQR. A median of *n* samples
  varies far less than one sample (its standard error is about
  1.2533·σ/√n, σ ≈ IQR/1.349 for normal noise), so this is much smaller
  than the IQR. A between-run spread :data:`DRIFT_FACTOR` times larger is
  drift: the machine's state changed between the runs (or within them, in
  steps), and one run per variant would have misled;
- **paired ratios**: in every round, baseline median / variant median. A
  ratio of two runs made seconds apart cancels most of the drift; its range
  over rounds is the uncertainty of the speedup.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from labkit.core.results import JsonRecord
from labkit.core.units import align_columns, format_duration, format_speedup
from labkit.core.validate import check_ms, check_positive_int
from labkit.timing.bench import Timing, bench, quantile

#: Between-run spread this many times the range that within-run noise alone gives the run
#: medians is called drift. For independent normal noise, 5 runs of about 50 samples, the
#: range of the medians exceeds 2.5× its expected value less than once in a thousand trials.
DRIFT_FACTOR = 3.0


def _median(values: list[float]) -> float:
    return quantile(sorted(values), 0.5)


def _expected_range_of_normals(k: int) -> float:
    """d2(k): the expected range of k standard normal draws (1.128 for 2, 2.326 for 5).

    E[range] = ∫ 1 − Φ(x)ᵏ − (1 − Φ(x))ᵏ dx, integrated on a grid (exact to 3 decimals).
    """
    step = 0.01
    total = 0.0
    for i in range(-800, 801):
        phi = 0.5 * (1.0 + math.erf(i * step / math.sqrt(2.0)))
        total += 1.0 - phi**k - (1.0 - phi) ** k
    return total * step


def noise_range(within_run_spread: float, samples_per_run: int, runs: int) -> float:
    """The range (over their median) that ``runs`` run medians have from noise alone.

    Each run has ``samples_per_run`` independent samples whose IQR / median is
    ``within_run_spread``; for normal noise σ = IQR / 1.349, a median of n
    samples has standard error 1.2533·σ/√n, and ``runs`` such medians have an
    expected range of d2(runs) standard errors. Real samples are not
    independent (a step inside a run), so a real run's medians spread more:
    which is what the drift verdict is there to catch.
    """
    if runs < 2 or samples_per_run < 1:
        return 0.0
    sigma = within_run_spread / 1.349
    standard_error = 1.2533 * sigma / math.sqrt(samples_per_run)
    return _expected_range_of_normals(runs) * standard_error


#: A variant is called faster (or slower) than another only when every round's ratio is beyond
#: this factor: two rounds that agree within a few percent are not told apart from the order
#: they ran in.
BAND = 1.10


def band_verdict(low: float, high: float, band: float = BAND) -> str:
    """What per-round speed ratios from ``low`` to ``high`` show ("× as fast"), beyond ``band``."""
    percent = f"{(band - 1) * 100:.0f}%"
    if low > band:
        return f"faster by more than {percent} in every round"
    if high < 1 / band:
        return f"slower by more than {percent} in every round"
    return f"no change beyond {percent} in every round"


def _spread(values: list[float]) -> float:
    middle = _median(values)
    if middle <= 0:
        return 0.0
    return (max(values) - min(values)) / middle


def round_verdict(ratio_low: float, ratio_high: float) -> str:
    """What every round agrees on, from the smallest and largest per-round speed ratio.

    Only a ratio above 1 in every round is "faster" (below 1 in every round,
    "slower"); anything else is within the run's own variation.
    """
    if ratio_low > 1:
        return "faster in every round"
    if ratio_high < 1:
        return "slower in every round"
    return "faster in some rounds and slower in others"


@dataclass(frozen=True)
class VariantRuns(JsonRecord):
    """One variant's runs, one :class:`Timing` per round, and their spreads.

    ``median_ms`` is the median of the run medians. ``within_run_spread`` is
    the median over rounds of IQR / median; ``between_run_spread`` is the range
    of the run medians over their median; ``noise_between_run_spread`` is that
    range as independent within-run noise alone would give it
    (:func:`noise_range`). ``ratio`` is the median over rounds of
    (baseline run median / this run median), with ``ratio_low`` and
    ``ratio_high`` the smallest and largest round's ratio.
    """

    label: str
    runs: tuple[Timing, ...]
    median_ms: float
    within_run_spread: float
    between_run_spread: float
    noise_between_run_spread: float
    ratio: float
    ratio_low: float
    ratio_high: float

    @property
    def minor_faults_per_call(self) -> float | None:
        """The most page faults per call of any round (None where they are not counted)."""
        known = [t.minor_faults_per_call for t in self.runs if t.minor_faults_per_call is not None]
        return max(known) if known else None

    def pooled(self) -> Timing:
        """Every round's samples in one :class:`Timing`, for plots and :func:`labkit.compare`.

        Report :attr:`median_ms` and :attr:`ratio`, not this Timing's median:
        they are the statistics the per-round ranges describe, and a pooled
        median can fall outside them.
        """
        first = self.runs[0]
        faults = self.minor_faults_per_call
        return Timing(
            tuple(s for t in self.runs for s in t.samples_ms),
            label=self.label,
            device=first.device,
            method=first.method,
            minor_faults_per_call=faults,
        )

    @property
    def drifted(self) -> bool:
        """Whether the run medians spread at least :data:`DRIFT_FACTOR` × what noise alone gives them."""
        return self.between_run_spread >= DRIFT_FACTOR * max(self.noise_between_run_spread, 1e-12)


@dataclass(frozen=True)
class Interleaved(JsonRecord):
    """Variants timed round-robin; ``str()`` is a table with both spreads.

    ``variants[baseline_index]`` is the baseline the ratios are taken against.
    """

    variants: tuple[VariantRuns, ...]
    baseline_index: int
    rounds: int

    @property
    def baseline(self) -> VariantRuns:
        return self.variants[self.baseline_index]

    def versus(self, label: str, against: str) -> tuple[float, float, float]:
        """``against``'s run median over ``label``'s, round by round: (median, lowest, highest).

        The speed of ``label`` relative to any other variant, not only the
        baseline ("× as fast": above 1 when ``label`` is faster).
        """
        ratios = sorted(
            _ratio(b.median_ms, a.median_ms)
            for a, b in zip(self[label].runs, self[against].runs, strict=True)
        )
        return _median(ratios), ratios[0], ratios[-1]

    def __getitem__(self, label: str) -> VariantRuns:
        for variant in self.variants:
            if variant.label == label:
                return variant
        raise KeyError(f"no variant labelled {label!r}; the labels are {self.labels}")

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(v.label for v in self.variants)

    def __str__(self) -> str:
        base = self.baseline.label
        header = [
            "",
            "median",
            "within a run (IQR)",
            "between runs (range)",
            "noise alone",
            f"× vs {base}, per round",
        ]
        table = [header]
        for i, v in enumerate(self.variants):
            if i == self.baseline_index:
                ratio = "baseline"
            else:
                ratio = (
                    f"{format_speedup(v.ratio)} "
                    f"({format_speedup(v.ratio_low)} to {format_speedup(v.ratio_high)})"
                )
            table.append(
                [
                    v.label,
                    format_duration(v.median_ms),
                    _format_spread(v.within_run_spread),
                    _format_spread(v.between_run_spread),
                    _format_spread(v.noise_between_run_spread),
                    ratio,
                ]
            )
        lines = align_columns(table)
        lines.append(f"{self.rounds} rounds, variants in rotating order")
        lines += self.verdicts()
        return "\n".join(lines)

    def verdicts(self) -> list[str]:
        """Conclusions from the data: each variant against the baseline, and drift.

        Only what every round agrees on is called faster or slower; drift is
        reported when some variant's between-run spread is at least
        :data:`DRIFT_FACTOR` times what within-run noise alone gives the run
        medians (the "noise alone" column).
        """
        lines = []
        for i, v in enumerate(self.variants):
            if i == self.baseline_index:
                continue
            how = round_verdict(v.ratio_low, v.ratio_high)
            lines.append(f"{v.label} against {self.baseline.label}: {how}")
        drifted = [v.label for v in self.variants if v.drifted]
        if drifted:
            lines.append(
                f"between-run spread at least {DRIFT_FACTOR:g}× what noise alone gives the run "
                f"medians for {', '.join(drifted)}: the machine's state changed between runs "
                "or within them"
            )
        else:
            lines.append(
                f"no between-run spread reaches {DRIFT_FACTOR:g}× what noise alone gives the "
                "run medians: no drift beyond the noise"
            )
        return lines


def _format_spread(fraction: float) -> str:
    """A spread as ``±x%`` of the median (half the range or IQR, so ± reads naturally)."""
    if math.isinf(fraction):
        return "±inf%"
    return f"±{fraction * 50:.1f}%"


def interleave(
    variants: Mapping[str, Callable[[], Any]],
    *,
    rounds: int = 5,
    rep_ms: float = 50.0,
    warmup_ms: float = 25.0,
    baseline: str | None = None,
    setup: Mapping[str, Callable[[], Any]] | None = None,
    **bench_options: Any,
) -> Interleaved:
    """Time each variant once per round, for ``rounds`` rounds, in rotating order.

    Args:
        variants: label → a callable without arguments (use
            :func:`functools.partial` or a lambda to bind them).
        rounds: how many runs each variant gets (at least 2: one run has no
            between-run spread).
        rep_ms, warmup_ms: :func:`bench`'s budgets for each run. Every run
            warms up, since the variant before it may have evicted the caches.
        baseline: the label the ratios are taken against (default: the first).
        setup: label → a callable run before each of that variant's runs,
            outside the timed region (e.g. ``torch.set_num_threads``).
        **bench_options: passed to :func:`bench` (``device``, ``min_reps``,
            ``calls_per_sample``, ...). ``warn`` is always False: the table
            reports the spread itself.
    """
    if not variants:
        raise ValueError("variants is empty: interleave() needs {label: callable}")
    labels = list(variants)
    rounds = check_positive_int("rounds", rounds)
    if rounds < 2:
        raise ValueError(
            f"rounds must be >= 2, got {rounds}: one run per variant cannot show drift between runs"
        )
    rep_ms = check_ms("rep_ms", rep_ms)
    warmup_ms = check_ms("warmup_ms", warmup_ms, allow_zero=True)
    if baseline is None:
        base = 0
    elif baseline in variants:
        base = labels.index(baseline)
    else:
        raise ValueError(
            f"baseline={baseline!r} is not one of the variants: {', '.join(map(repr, labels))}"
        )
    hooks = dict(setup or {})
    unknown = sorted(set(hooks) - set(labels))
    if unknown:
        raise ValueError(f"setup names {unknown}, which are not variants: {labels}")
    bench_options["warn"] = False

    runs: dict[str, list[Timing]] = {label: [] for label in labels}
    for r in range(rounds):
        order = labels[r % len(labels) :] + labels[: r % len(labels)]
        for label in order:
            hook = hooks.get(label)
            if hook is not None:
                hook()
            runs[label].append(
                bench(
                    variants[label],
                    warmup_ms=warmup_ms,
                    rep_ms=rep_ms,
                    label=label,
                    **bench_options,
                )
            )

    base_medians = [t.median_ms for t in runs[labels[base]]]
    summaries = []
    for label in labels:
        medians = [t.median_ms for t in runs[label]]
        within = _median([t.relative_spread for t in runs[label]])
        samples = int(_median([float(t.n) for t in runs[label]]))
        ratios = [_ratio(b, m) for b, m in zip(base_medians, medians, strict=True)]
        summaries.append(
            VariantRuns(
                label=label,
                runs=tuple(runs[label]),
                median_ms=_median(medians),
                within_run_spread=within,
                between_run_spread=_spread(medians),
                noise_between_run_spread=noise_range(within, samples, rounds),
                ratio=_median(ratios),
                ratio_low=min(ratios),
                ratio_high=max(ratios),
            )
        )
    return Interleaved(variants=tuple(summaries), baseline_index=base, rounds=rounds)


def _ratio(base_ms: float, ms: float) -> float:
    if ms > 0:
        return base_ms / ms
    return 1.0 if base_ms == 0 else math.inf

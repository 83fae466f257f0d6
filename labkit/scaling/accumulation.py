"""Gradient accumulation: the batch of several devices, on one device, a micro-batch at a time.

Data parallelism gives a global batch of N × b. When a batch that large
does not fit in one device's memory (activations grow with the batch), one
device can still compute *the same gradient*: run k micro-batches of b
samples, scale each loss by 1/k, let ``backward()`` add the gradients into
``.grad``, and step the optimizer once. The mean loss over k·b samples is
the mean of the k micro-batch means, so its gradient is the sum of the
micro-batch gradients ÷ k, exactly, up to float rounding (the additions
happen in another order).

"Exactly" needs a model in which no layer mixes the samples of a batch.
Batch normalization does: it normalizes each micro-batch by its own mean
and variance, which differ from the big batch's, so ``batch_norm=True``
shows the equivalence break.

:func:`accumulate_equivalence` checks the gradients both ways (and the
parameters after one SGD step), then times one effective batch both ways,
taking turns (:func:`labkit.timing.interleave.interleave`): accumulation trades time (k smaller
matrix products, k launches) for memory (activations of b samples, not k·b).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from labkit.core.results import JsonRecord
from labkit.core.units import format_duration
from labkit.core.validate import (
    check_choice,
    check_ms,
    check_positive_int,
    check_real,
    check_seed,
    check_torch_device,
)
from labkit.machine.report import resolve_torch_device
from labkit.timing.bench import Timing

#: Largest gradient difference, relative to the largest gradient, that counts as "the same".
TOLERANCE = {"float32": 1e-5, "float64": 1e-12}


@dataclass(frozen=True)
class Accumulation(JsonRecord):
    """k micro-batches with loss/k and one step, against one batch of k·b: errors and times."""

    micro_batch: int
    accum_steps: int
    width: int
    parameter_count: int
    dtype: str
    batch_norm: bool
    device: str
    max_abs_grad_diff: float
    max_rel_grad_diff: float  # the largest |difference| ÷ the largest |gradient|
    max_param_diff: float  # after one SGD step from the same start
    tolerance: float
    accumulated: Timing  # k micro-batches + one optimizer step
    direct: Timing  # one batch of k·b + one optimizer step

    json_extra = ("effective_batch", "equivalent")

    @property
    def effective_batch(self) -> int:
        return self.micro_batch * self.accum_steps

    @property
    def equivalent(self) -> bool:
        """Whether the two gradients agree within float rounding (``tolerance``)."""
        return self.max_rel_grad_diff <= self.tolerance

    @property
    def slowdown(self) -> float:
        """Accumulated time ÷ direct time for one effective batch (> 1: accumulation is slower)."""
        return self.accumulated.median_ms / self.direct.median_ms

    def __str__(self) -> str:
        k, b = self.accum_steps, self.micro_batch
        layers = (
            "with batch norm (mixes the samples of a batch)"
            if self.batch_norm
            else ("no layer mixes the samples of a batch")
        )
        verdict = "the same gradient" if self.equivalent else "NOT the same gradient"
        lines = [
            f"Gradient accumulation: {k} micro-batches of {b} (each loss ÷ {k}, one optimizer "
            f"step) against one batch of {self.effective_batch}",
            f"  MLP width {self.width} ({self.parameter_count:,} parameters), {self.dtype}, "
            f"{layers}, on {self.device}",
            f"  largest gradient difference: {self.max_rel_grad_diff:.1e} of the largest gradient "
            f"(tolerance {self.tolerance:.0e}): {verdict}",
            f"  largest parameter difference after one SGD step: {self.max_param_diff:.1e}",
            f"  time per effective batch: accumulated {format_duration(self.accumulated.median_ms)}"
            f", direct {format_duration(self.direct.median_ms)} ({self.slowdown:.2f}× the direct "
            "time)",
        ]
        return "\n".join(lines)


def _grads(model: Any) -> list[Any]:
    return [p.grad.detach().clone() for p in model.parameters()]


def accumulate_equivalence(
    *,
    micro_batch: int = 32,
    accum_steps: int = 4,
    width: int = 256,
    batch_norm: bool = False,
    dtype: str = "float32",
    device: str | None = None,
    seed: int = 0,
    lr: float = 0.1,
    warmup_ms: float = 25.0,
    rep_ms: float = 200.0,
    min_reps: int = 5,
) -> Accumulation:
    """Compare k accumulated micro-batches with one big batch: gradients, one step, time.

    ``device=None`` picks the best device here (a GPU where there is one).

    Both paths start from the same weights and see the same k·b samples.
    The check comes first (correctness before timing); the times are
    medians of one effective batch each (forward, backward, optimizer step),
    the two timed in turns over 3 rounds and each one's samples pooled.
    """
    micro_batch = check_positive_int("micro_batch", micro_batch)
    accum_steps = check_positive_int("accum_steps", accum_steps)
    width = check_positive_int("width", width)
    min_reps = check_positive_int("min_reps", min_reps)
    if batch_norm and micro_batch < 2:
        raise ValueError(
            "micro_batch must be >= 2 with batch_norm=True (BatchNorm needs 2 samples)"
        )
    check_choice("dtype", dtype, tuple(TOLERANCE))
    seed = check_seed("seed", seed)
    lr = check_real("lr", lr, low=0, low_open=True)
    check_ms("warmup_ms", warmup_ms, allow_zero=True)
    check_ms("rep_ms", rep_ms)
    check_torch_device(device)
    from labkit.core.optional import import_optional
    from labkit.scaling.train_ddp import build_mlp, synthetic_batches
    from labkit.timing.interleave import interleave

    torch = import_optional("torch", "gradient accumulation")
    dev = resolve_torch_device(device)
    from labkit.machine.memory import require_fits
    from labkit.scaling.train_ddp import IN_FEATURES, mlp_parameter_count

    rows = micro_batch * accum_steps
    item = 8 if dtype == "float64" else 4
    require_fits(
        (4 * mlp_parameter_count(width) + 6 * rows * (width + IN_FEATURES)) * item,
        device="cuda" if dev.type == "cuda" else "cpu",
        what=f"gradient accumulation of {rows} samples (micro_batch={micro_batch} × "
        f"accum_steps={accum_steps}) at width {width}",
        name="micro_batch, accum_steps or width",
    )
    torch_dtype = getattr(torch, dtype)
    torch.manual_seed(seed)
    model = build_mlp(width, batch_norm=batch_norm).to(dev, torch_dtype)
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    ((x, y),) = synthetic_batches(1, micro_batch * accum_steps, seed=seed, dtype=torch_dtype)
    x, y = x.to(dev), y.to(dev)
    micro = list(zip(x.split(micro_batch), y.split(micro_batch), strict=True))
    loss_fn = torch.nn.MSELoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)

    def direct_step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        optimizer.step()

    def accumulated_step() -> None:
        optimizer.zero_grad(set_to_none=True)
        for xb, yb in micro:
            (loss_fn(model(xb), yb) / accum_steps).backward()
        optimizer.step()

    def run_once(step: Callable[[], None]) -> tuple[list[Any], list[Any]]:
        model.load_state_dict(start)
        step()
        return _grads(model), [p.detach().clone() for p in model.parameters()]

    grads_direct, params_direct = run_once(direct_step)
    grads_accum, params_accum = run_once(accumulated_step)
    largest = max(float(g.abs().max()) for g in grads_direct)
    abs_diff = max(
        float((a - b).abs().max()) for a, b in zip(grads_accum, grads_direct, strict=True)
    )
    param_diff = max(
        float((a - b).abs().max()) for a, b in zip(params_accum, params_direct, strict=True)
    )
    model.load_state_dict(start)

    # The two take turns (3 rounds, rotating order), so that drift falls on both alike.
    rounds = 3
    acc_label = f"{accum_steps} × {micro_batch} accumulated"
    direct_label = f"1 × {micro_batch * accum_steps} direct"
    turns = interleave(
        {acc_label: accumulated_step, direct_label: direct_step},
        rounds=rounds,
        rep_ms=rep_ms / rounds,
        warmup_ms=warmup_ms,
        min_reps=min_reps,
        device=str(dev),
    )
    accumulated = turns[acc_label].pooled()
    direct = turns[direct_label].pooled()
    return Accumulation(
        micro_batch=micro_batch,
        accum_steps=accum_steps,
        width=width,
        parameter_count=sum(p.numel() for p in model.parameters()),
        dtype=dtype,
        batch_norm=batch_norm,
        device=str(dev),
        max_abs_grad_diff=abs_diff,
        max_rel_grad_diff=abs_diff / largest if largest > 0 else abs_diff,
        max_param_diff=param_diff,
        tolerance=TOLERANCE[dtype],
        accumulated=accumulated,
        direct=direct,
    )

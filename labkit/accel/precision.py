"""Precision: TF32 defaults and mixed precision, measured against float32.

Two lessons. First, "float32" is not one thing on a GPU: on Ampere and newer,
matmuls and convolutions may run on tensor cores in TF32 (10-bit mantissa),
and the two frameworks choose differently by default. PyTorch keeps matmuls
at full float32 ("highest"/"ieee") but lets cuDNN convolutions use TF32;
TensorFlow enables TF32 for both. The same model can give (slightly)
different numbers in the two frameworks. :func:`tf32_defaults` only reads the
settings, it changes nothing.

Second, mixed precision (``torch.autocast``, Keras ``mixed_bfloat16`` /
``mixed_float16``) runs matmuls in 16 bits and keeps float32 where precision
matters. bfloat16 has float32's exponent range, so gradients do not underflow
and no loss scaling is needed; float16 has a 5-bit exponent, so small
gradients flush to zero unless the loss is scaled up first
(``torch.amp.GradScaler("cuda")``; Keras wraps the optimizer in a
``LossScaleOptimizer`` by itself for ``mixed_float16``). Every measurement
here reports the numerical price next to the speed.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from labkit.accel.common import ratio, round_median_ms, times
from labkit.core.optional import import_optional, import_tensorflow
from labkit.core.units import format_duration
from labkit.core.validate import (
    check_choice,
    check_ms,
    check_positive_int,
    check_real,
    check_seed,
    check_torch_device,
)
from labkit.machine.memory import require_memory_fits
from labkit.machine.report import resolve_torch_device
from labkit.timing.bench import Timing

PURPOSE = "the mixed-precision demo"

#: Unit roundoff (half the machine epsilon) of each 16-bit format: errors are
#: reported as multiples of it so the text does not depend on the hardware.
UNIT_ROUNDOFF: dict[str, float] = {"bfloat16": 2.0**-8, "float16": 2.0**-11}
TORCH_DTYPES = ("bfloat16", "float16")
KERAS_POLICIES = ("mixed_bfloat16", "mixed_float16")


# TF32 and oneDNN's bf16 for float32 matmuls are labkit.accel.tf32's.

# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class MixedPrecisionResult:
    """float32 vs mixed precision for one model: speed and numerical difference.

    ``max_abs_error`` is the largest |output_mixed - output_fp32| of one
    forward pass from identical weights and ``max_abs_output`` the largest
    |output_fp32|, so their ratio is a relative error; ``loss_fp32`` and
    ``loss_mixed`` are the losses after ``steps`` identical SGD updates. The
    timings (a forward pass, one training step) pool the samples of
    :func:`labkit.interleave`'s rounds, whose result is ``rounds`` (None for a
    result built by hand): float32 and mixed are timed round-robin.
    """

    framework: str
    device: str
    dtype: str
    steps: int
    forward_fp32: Timing
    forward_mixed: Timing
    train_fp32: Timing
    train_mixed: Timing
    max_abs_error: float
    loss_fp32: float
    loss_mixed: float
    used_loss_scaling: bool
    max_abs_output: float = 1.0
    rounds: Any = None

    @property
    def relative_error(self) -> float:
        return self.max_abs_error / self.max_abs_output if self.max_abs_output > 0 else math.inf

    def _pair(self, kind: str) -> tuple[float, float, float] | None:
        """(median, lowest, highest) per-round speed of mixed against float32, for "forward" or
        "train step"; None for a result built by hand (no rounds)."""
        if self.rounds is None:
            return None
        return self.rounds.versus(f"{kind} {self.dtype}", f"{kind} float32")

    def _median_ms(self, timing: Timing) -> float:
        return round_median_ms(timing, self.rounds)

    def _span(self, kind: str) -> str:
        pair = self._pair(kind)
        if pair is None:
            return ""
        return f", {times(pair[1])} to {times(pair[2])} per round"

    def _faults(self, *timings: Timing) -> str:
        counts = [
            (self.rounds[t.label].minor_faults_per_call if self.rounds else t.minor_faults_per_call)
            for t in timings
        ]
        if any(c is None for c in counts):
            return ""
        return f"; {' and '.join(f'{c:,.0f}' for c in counts)} page faults per call"

    @property
    def forward_speedup(self) -> float:
        pair = self._pair("forward")
        if pair is not None:
            return pair[0]
        return ratio(self.forward_fp32.median_ms, self.forward_mixed.median_ms)

    @property
    def train_speedup(self) -> float:
        pair = self._pair("train step")
        if pair is not None:
            return pair[0]
        return ratio(self.train_fp32.median_ms, self.train_mixed.median_ms)

    @property
    def loss_abs_difference(self) -> float:
        return abs(self.loss_mixed - self.loss_fp32)

    def timings(self) -> list[Timing]:
        return [self.forward_fp32, self.forward_mixed, self.train_fp32, self.train_mixed]

    def __str__(self) -> str:
        name = self.dtype.removeprefix("mixed_")
        u = UNIT_ROUNDOFF.get(name, 2.0**-8)
        scaling = "with loss scaling" if self.used_loss_scaling else "no loss scaling"
        loss_rel = self.loss_abs_difference / abs(self.loss_fp32) if self.loss_fp32 else math.inf
        return "\n".join(
            [
                f"{self.framework} {self.dtype} vs float32 on {self.device} ({scaling}), "
                "timed round-robin; speed against float32:",
                f"  forward     {format_duration(self._median_ms(self.forward_fp32))} -> "
                f"{format_duration(self._median_ms(self.forward_mixed))} "
                f"({times(self.forward_speedup)}{self._span('forward')}"
                f"{self._faults(self.forward_fp32, self.forward_mixed)})",
                f"  train step  {format_duration(self._median_ms(self.train_fp32))} -> "
                f"{format_duration(self._median_ms(self.train_mixed))} "
                f"({times(self.train_speedup)}{self._span('train step')}"
                f"{self._faults(self.train_fp32, self.train_mixed)})",
                f"  max |output difference| / max |output| = {times(self.relative_error / u)} "
                f"the {name} unit roundoff",
                f"  loss after {self.steps} updates: {self.loss_fp32:.4f} float32, "
                f"{self.loss_mixed:.4f} {name} (relative difference "
                f"{times(loss_rel / u)} the unit roundoff)",
            ]
        )


# --------------------------------------------------------------------------- torch


def mixed_precision_torch(
    model_fn: Callable[[], Any],
    data: tuple[Any, Any],
    *,
    dtype: str = "bfloat16",
    device: Any = None,
    steps: int = 5,
    lr: float = 0.05,
    warmup_ms: float = 10.0,
    rep_ms: float = 100.0,
) -> MixedPrecisionResult:
    """Measure ``torch.autocast(device_type, dtype)`` against float32 for one model.

    Args:
        model_fn: builds the model (a fresh ``nn.Module`` in float32); called once,
            the copy for mixed precision gets identical weights.
        data: ``(x, y)``. Integer ``y`` means classification (cross-entropy),
            floating ``y`` regression (MSE).
        dtype: "bfloat16" (no loss scaling needed) or "float16" (on CUDA a
            ``torch.amp.GradScaler("cuda")`` scales the loss).
        device: a torch device; None picks the best (:func:`labkit.pick_device`).
        steps: SGD steps before the losses are compared.
    """
    dtype = check_choice("dtype", dtype, TORCH_DTYPES)
    steps = check_positive_int("steps", steps)
    lr = check_real("lr", lr, low=0, low_open=True)
    warmup_ms, rep_ms = check_ms("warmup_ms", warmup_ms), check_ms("rep_ms", rep_ms)
    check_torch_device(device)
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        # A tensor would unpack into its first two rows and train on them without a word.
        raise TypeError(f"data must be a pair (x, y) of tensors, got {type(data).__name__}")
    torch = import_optional("torch", PURPOSE)
    dev = resolve_torch_device(device)
    if not torch.amp.is_autocast_available(dev.type):
        raise ValueError(f"torch.autocast does not support device type {dev.type!r}")
    amp_dtype = getattr(torch, dtype)
    x, y = (t.to(dev) for t in data)
    classify = not torch.is_floating_point(y)
    loss_fn = torch.nn.functional.cross_entropy if classify else torch.nn.functional.mse_loss

    base = model_fn().to(dev).float()
    use_scaler = dtype == "float16" and dev.type == "cuda"

    def autocast() -> Any:
        return torch.autocast(device_type=dev.type, dtype=amp_dtype)

    # Accuracy first: one forward pass from identical weights.
    with torch.no_grad():
        out32 = base(x).float()
        with autocast():
            out_mixed = base(x).float()
    max_err = float((out_mixed - out32).abs().max())
    if not math.isfinite(max_err):
        raise FloatingPointError(
            f"the {dtype} forward pass produced inf/nan: the model's activations overflow {dtype}"
        )

    def make_step(mixed: bool) -> tuple[Any, Callable[[], Any]]:
        model = copy.deepcopy(base)
        # fused on CUDA, in both variants: GradScaler.step then checks found_inf on the device
        # instead of reading it with .item(), so float16 pays no sync per step float32 does not
        opt = torch.optim.SGD(model.parameters(), lr=lr, fused=dev.type == "cuda")
        scaler = torch.amp.GradScaler("cuda") if (mixed and use_scaler) else None

        def step() -> Any:
            opt.zero_grad(set_to_none=True)
            if mixed:
                with autocast():
                    loss = loss_fn(model(x), y)
            else:
                loss = loss_fn(model(x), y)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()
            return loss.detach()

        return model, step

    losses = {}
    for mixed in (False, True):
        model, step = make_step(mixed)
        for _ in range(steps):
            step()
        with torch.no_grad():  # the loss after the last update, in float32
            losses[mixed] = float(loss_fn(model(x).float(), y))

    def forward32() -> Any:
        with torch.no_grad():
            return base(x)

    def forward_mixed() -> Any:
        with torch.no_grad(), autocast():
            return base(x)

    _, step32 = make_step(False)
    _, step_mixed = make_step(True)
    timed = _round_robin(
        {
            "forward float32": forward32,
            f"forward {dtype}": forward_mixed,
            "train step float32": step32,
            f"train step {dtype}": step_mixed,
        },
        warmup_ms,
        rep_ms,
        device=str(dev),
    )
    return MixedPrecisionResult(
        framework="torch",
        device=str(dev),
        dtype=dtype,
        steps=steps,
        forward_fp32=timed.timings[0],
        forward_mixed=timed.timings[1],
        train_fp32=timed.timings[2],
        train_mixed=timed.timings[3],
        max_abs_error=max_err,
        loss_fp32=losses[False],
        loss_mixed=losses[True],
        used_loss_scaling=use_scaler,
        max_abs_output=float(out32.abs().max()),
        rounds=timed.rounds,
    )


@dataclass(frozen=True)
class _Timed:
    timings: tuple[Timing, ...]
    rounds: Any


def _round_robin(
    calls: dict[str, Callable[[], Any]], warmup_ms: float, rep_ms: float, device: Any = None
) -> _Timed:
    """The four variants (forward and train step, float32 and mixed) timed round-robin together.

    One rotation for all four, so that a change in the machine's state hits
    every variant alike; inside :func:`~labkit.machine.allocator.keep_freed_memory`,
    so that no variant pays page faults the others do not (each line prints
    its faults per call). Each mixed variant is compared with its float32
    twin round by round (:meth:`Interleaved.versus`).
    """
    from labkit.machine.allocator import keep_freed_memory
    from labkit.timing.interleave import interleave

    with keep_freed_memory():
        result = interleave(
            calls, rounds=3, rep_ms=rep_ms, warmup_ms=warmup_ms, device=device, min_reps=3
        )
    return _Timed(tuple(v.pooled() for v in result.variants), result)


# --------------------------------------------------------------------------- keras


def mixed_precision_keras(
    policy: str = "mixed_bfloat16",
    *,
    batch: int = 256,
    features: int = 64,
    hidden: int = 128,
    classes: int = 10,
    steps: int = 5,
    warmup_ms: float = 10.0,
    rep_ms: float = 100.0,
    seed: int = 0,
) -> MixedPrecisionResult:
    """The Keras version: the same MLP under "float32" and under ``policy``.

    The global dtype policy (``keras.mixed_precision.set_global_policy``) is
    restored afterwards, whatever happens, because it silently applies to
    every layer built later in the notebook. The output layer is kept in
    float32 (``dtype="float32"``), as the Keras guide recommends, so the
    softmax and loss are computed at full precision.
    """
    policy = check_choice("policy", policy, KERAS_POLICIES)
    for name, value in (
        ("batch", batch),
        ("features", features),
        ("hidden", hidden),
        ("classes", classes),
        ("steps", steps),
    ):
        check_positive_int(name, value)
    seed = check_seed("seed", seed)
    warmup_ms, rep_ms = check_ms("warmup_ms", warmup_ms), check_ms("rep_ms", rep_ms)
    require_memory_fits(
        4 * batch * (features + 2 * hidden + classes),
        arrays=8,
        what=f"mixed_precision_keras(batch={batch}, hidden={hidden})",
    )
    tf = import_tensorflow(PURPOSE)
    keras = import_optional("keras", PURPOSE)
    mp = keras.mixed_precision
    original = mp.global_policy()
    try:
        rng = tf.random.Generator.from_seed(seed)
        x = rng.normal((batch, features))
        y = rng.uniform((batch,), maxval=classes, dtype=tf.int64)

        def build(policy_name: str) -> Any:
            mp.set_global_policy(policy_name)
            keras.utils.set_random_seed(seed)
            model = keras.Sequential(
                [
                    keras.Input((features,)),
                    keras.layers.Dense(hidden, activation="relu"),
                    keras.layers.Dense(hidden, activation="relu"),
                    keras.layers.Dense(classes),
                    keras.layers.Activation("linear", dtype="float32"),
                ]
            )
            model.compile(
                optimizer=keras.optimizers.SGD(learning_rate=0.05),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            )
            return model

        model32 = build("float32")
        model_mixed = build(policy)
        model_mixed.set_weights(model32.get_weights())
        ref = model32(x)
        max_err = float(tf.reduce_max(tf.abs(tf.cast(model_mixed(x), tf.float32) - ref)))
        max_out = float(tf.reduce_max(tf.abs(ref)))
        scaled = type(model_mixed.optimizer).__name__ == "LossScaleOptimizer"
        losses = []
        for model in (model32, model_mixed):
            for _ in range(steps):
                model.train_on_batch(x, y)
            losses.append(float(model.evaluate(x, y, verbose=0)))  # after the last update
        # The forward pass in a graph, as predict runs it: eagerly it would time Python.
        graph32, graph_mixed = tf.function(model32), tf.function(model_mixed)
        graph32(x), graph_mixed(x)  # trace outside the timing
        timed = _round_robin(
            {
                "forward float32": lambda: graph32(x),
                f"forward {policy}": lambda: graph_mixed(x),
                "train step float32": lambda: model32.train_on_batch(x, y),
                f"train step {policy}": lambda: model_mixed.train_on_batch(x, y),
            },
            warmup_ms,
            rep_ms,
        )
    finally:
        mp.set_global_policy(original)
    from labkit.machine.report import pick_device

    return MixedPrecisionResult(
        framework="keras",
        device=pick_device("tensorflow"),
        dtype=policy,
        steps=steps,
        forward_fp32=timed.timings[0],
        forward_mixed=timed.timings[1],
        train_fp32=timed.timings[2],
        train_mixed=timed.timings[3],
        max_abs_error=max_err,
        loss_fp32=losses[0],
        loss_mixed=losses[1],
        used_loss_scaling=scaled,
        max_abs_output=max_out,
        rounds=timed.rounds,
    )

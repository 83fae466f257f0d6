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
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from labkit.accel.common import ratio, times
from labkit.core.optional import import_optional, import_tensorflow, is_installed
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
from labkit.timing.bench import Timing, bench

PURPOSE = "the mixed-precision demo"

#: Unit roundoff (half the machine epsilon) of each 16-bit format: errors are
#: reported as multiples of it so the text does not depend on the hardware.
UNIT_ROUNDOFF: dict[str, float] = {"bfloat16": 2.0**-8, "float16": 2.0**-11}
TORCH_DTYPES = ("bfloat16", "float16")
KERAS_POLICIES = ("mixed_bfloat16", "mixed_float16")


# --------------------------------------------------------------------------- TF32


def tf32_defaults(frameworks: Sequence[str] | None = None) -> dict[str, Any]:
    """The TF32 settings each framework is using now, read without changing them.

    ``frameworks=None`` reads every one that is installed, so a learner
    without TensorFlow still sees torch's settings; naming a missing one
    raises :class:`MissingPackageError`.

    Keys (present for each framework asked for):

    - ``torch_float32_matmul_precision``: ``torch.get_float32_matmul_precision()``
      ("highest" by default: no TF32 for matmuls).
    - ``torch_matmul_fp32_precision`` / ``torch_cudnn_conv_fp32_precision``: the
      torch 2.9+ per-backend settings ("ieee", "tf32", or "none" = inherit), or
      None on older torch.
    - ``torch_matmul_allow_tf32`` / ``torch_cudnn_allow_tf32``: the older flags
      (False and True by default).
    - ``tf_tensor_float_32_execution_enabled``: TensorFlow's switch (True by default).

    The settings only matter on an NVIDIA GPU of compute capability 8.0+; on a
    CPU they are read but have no effect.
    """
    if frameworks is None:
        frameworks = tuple(f for f in ("torch", "tensorflow") if is_installed(f))
    if isinstance(frameworks, str):
        frameworks = (frameworks,)
    for framework in frameworks:
        check_choice("frameworks", framework, ("torch", "tensorflow"))
    out: dict[str, Any] = {}
    if "torch" in frameworks:
        torch = import_optional("torch", "reading the TF32 defaults")
        with warnings.catch_warnings():  # the old flags warn in newer torch
            warnings.simplefilter("ignore")
            matmul = torch.backends.cuda.matmul
            conv = getattr(torch.backends.cudnn, "conv", None)
            out["torch_float32_matmul_precision"] = str(torch.get_float32_matmul_precision())
            out["torch_matmul_fp32_precision"] = _str_or_none(
                getattr(matmul, "fp32_precision", None)
            )
            out["torch_cudnn_conv_fp32_precision"] = _str_or_none(
                getattr(conv, "fp32_precision", None) if conv is not None else None
            )
            out["torch_matmul_allow_tf32"] = bool(matmul.allow_tf32)
            out["torch_cudnn_allow_tf32"] = bool(torch.backends.cudnn.allow_tf32)
    if "tensorflow" in frameworks:
        tf = import_tensorflow("reading the TF32 defaults")
        out["tf_tensor_float_32_execution_enabled"] = bool(
            tf.config.experimental.tensor_float_32_execution_enabled()
        )
    return out


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class MixedPrecisionResult:
    """float32 vs mixed precision for one model: speed and numerical difference.

    ``max_abs_error`` is the largest |output_mixed - output_fp32| of one
    forward pass from identical weights; ``loss_fp32`` and ``loss_mixed`` are
    the training losses after ``steps`` identical SGD steps. Timings are of a
    forward pass and of one training step.
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

    @property
    def forward_speedup(self) -> float:
        return ratio(self.forward_fp32.median_ms, self.forward_mixed.median_ms)

    @property
    def train_speedup(self) -> float:
        return ratio(self.train_fp32.median_ms, self.train_mixed.median_ms)

    @property
    def loss_abs_difference(self) -> float:
        return abs(self.loss_mixed - self.loss_fp32)

    def timings(self) -> list[Timing]:
        return [self.forward_fp32, self.forward_mixed, self.train_fp32, self.train_mixed]

    def __str__(self) -> str:
        u = UNIT_ROUNDOFF.get(self.dtype.removeprefix("mixed_"), 2.0**-8)
        scaling = "with loss scaling" if self.used_loss_scaling else "no loss scaling"
        return "\n".join(
            [
                f"{self.framework} {self.dtype} vs float32 on {self.device} ({scaling}):",
                f"  forward     {format_duration(self.forward_fp32.median_ms)} -> "
                f"{format_duration(self.forward_mixed.median_ms)} "
                f"(speedup {times(self.forward_speedup)})",
                f"  train step  {format_duration(self.train_fp32.median_ms)} -> "
                f"{format_duration(self.train_mixed.median_ms)} "
                f"(speedup {times(self.train_speedup)})",
                f"  max |output difference| = {times(self.max_abs_error / u)} the "
                f"{self.dtype.removeprefix('mixed_')} unit roundoff",
                f"  loss after {self.steps} steps differs by "
                f"{times(self.loss_abs_difference / u)} the unit roundoff",
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
        opt = torch.optim.SGD(model.parameters(), lr=lr)
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
        _, step = make_step(mixed)
        for _ in range(steps):
            loss = step()
        losses[mixed] = float(loss)

    def forward32() -> Any:
        with torch.no_grad():
            return base(x)

    def forward_mixed() -> Any:
        with torch.no_grad(), autocast():
            return base(x)

    opts: dict[str, Any] = {"warmup_ms": warmup_ms, "rep_ms": rep_ms, "warn": False}
    _, step32 = make_step(False)
    _, step_mixed = make_step(True)
    return MixedPrecisionResult(
        framework="torch",
        device=str(dev),
        dtype=dtype,
        steps=steps,
        forward_fp32=bench(forward32, label="forward float32", **opts),
        forward_mixed=bench(forward_mixed, label=f"forward {dtype}", **opts),
        train_fp32=bench(step32, label="train step float32", **opts),
        train_mixed=bench(step_mixed, label=f"train step {dtype}", **opts),
        max_abs_error=max_err,
        loss_fp32=losses[False],
        loss_mixed=losses[True],
        used_loss_scaling=use_scaler,
    )


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
        max_err = float(tf.reduce_max(tf.abs(tf.cast(model_mixed(x), tf.float32) - model32(x))))
        scaled = type(model_mixed.optimizer).__name__ == "LossScaleOptimizer"
        losses = []
        for model in (model32, model_mixed):
            for _ in range(steps):
                loss = model.train_on_batch(x, y)
            losses.append(float(loss))
        opts: dict[str, Any] = {"warmup_ms": warmup_ms, "rep_ms": rep_ms, "warn": False}
        fwd32 = bench(lambda: model32(x), label="forward float32", **opts)
        fwd_mixed = bench(lambda: model_mixed(x), label=f"forward {policy}", **opts)
        train32 = bench(lambda: model32.train_on_batch(x, y), label="train step float32", **opts)
        train_mixed = bench(
            lambda: model_mixed.train_on_batch(x, y), label=f"train step {policy}", **opts
        )
    finally:
        mp.set_global_policy(original)
    from labkit.machine.report import pick_device

    return MixedPrecisionResult(
        framework="keras",
        device=pick_device("tensorflow"),
        dtype=policy,
        steps=steps,
        forward_fp32=fwd32,
        forward_mixed=fwd_mixed,
        train_fp32=train32,
        train_mixed=train_mixed,
        max_abs_error=max_err,
        loss_fp32=losses[0],
        loss_mixed=losses[1],
        used_loss_scaling=scaled,
    )

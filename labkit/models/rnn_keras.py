"""The article's Keras RNN, its ``.cuda()`` bug, and the RNN timing experiment.

The article builds a subclassed ``RNN(tf.keras.Model)`` and then calls
``RNN().cuda()`` and ``tf.random.normal(...).cuda()``. Keras models and
TensorFlow tensors have no ``.cuda()`` (that is PyTorch's API): both raise
``AttributeError: 'RNN' object has no attribute 'cuda'``. TensorFlow needs no
such call: it places ops on a visible GPU by itself.

TensorFlow is imported inside each function, through
:func:`labkit.core.optional.import_tensorflow` (which keeps TF's C++ banner out
of notebooks); without it every function raises :class:`MissingPackageError`
naming the install command.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from labkit.core.optional import import_tensorflow
from labkit.core.validate import (
    check_choice,
    check_ms,
    check_positive_int,
    check_seed,
    check_tf_device,
)
from labkit.machine.memory import require_memory_fits

#: The layer kinds :func:`keras_rnn` builds. Only LSTM and GRU have a cuDNN path.
KERAS_RNN_KINDS: tuple[str, ...] = ("SimpleRNN", "LSTM", "LSTM-no-cudnn", "GRU")


def _seed_rnn_class(tf: Any) -> type:
    """The article's class, verbatim apart from the missing ``.cuda()`` calls."""

    class RNN(tf.keras.Model):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = tf.keras.layers.SimpleRNN(50, return_sequences=True)

        def call(self, x: Any) -> Any:
            return self.rnn(x)

    return RNN


def seed_rnn() -> Any:
    """The article's subclassed Keras ``RNN`` (``SimpleRNN(50, return_sequences=True)``).

    Built without ``.cuda()``, which is the article's bug (see
    :func:`seed_rnn_calls_cuda`); TensorFlow puts it on a GPU by itself when
    one is visible. On a [batch=10, time=20, features=50] input it returns
    (10, 20, 50); after that first call it has 5,050 parameters
    (50·50 input weights + 50·50 recurrent weights + 50 biases).
    """
    tf = import_tensorflow("seed_rnn")
    return _seed_rnn_class(tf)()


def seed_rnn_calls_cuda() -> str:
    """Run the article's ``model = RNN().cuda()`` and return the error message it raises.

    Returns e.g. ``"'RNN' object has no attribute 'cuda'"`` (the real
    AttributeError text from this Keras version), so a notebook can show it
    without a traceback. Raises ``AssertionError`` if ``.cuda()`` ever
    succeeds, since then the lesson would be wrong.
    """
    model = seed_rnn()
    try:
        model.cuda()
    except AttributeError as exc:
        return str(exc)
    raise AssertionError("RNN().cuda() succeeded: Keras models were expected to have no .cuda()")


def seed_tensor_calls_cuda() -> str:
    """Run the article's ``tf.random.normal([10, 20, 50]).cuda()``; return the AttributeError text."""
    tf = import_tensorflow("seed_tensor_calls_cuda")
    try:
        tf.random.normal([10, 20, 50]).cuda()
    except AttributeError as exc:
        return str(exc)
    raise AssertionError("EagerTensor.cuda() succeeded: TF tensors were expected to have none")


def keras_rnn(
    kind: str = "SimpleRNN",
    units: int = 50,
    return_sequences: bool = True,
    return_state: bool = False,
) -> Any:
    """One Keras recurrent layer for the timing experiment.

    - "SimpleRNN": no cuDNN path at all; a loop over time steps on any device.
    - "LSTM" / "GRU": Keras defaults, which are the cuDNN-eligible settings
      (tanh, sigmoid recurrent activation, no recurrent dropout, no unroll,
      bias); on a GPU in eager mode they run one fused cuDNN kernel.
    - "LSTM-no-cudnn": the same LSTM with ``use_cudnn=False``: the loop,
      for a like-for-like comparison.
    """
    _check_layer(kind, units)
    import_tensorflow("keras_rnn")
    import keras

    options = {"return_sequences": return_sequences, "return_state": return_state}
    if kind == "SimpleRNN":
        return keras.layers.SimpleRNN(units, **options)
    if kind == "GRU":
        return keras.layers.GRU(units, **options)
    # "auto" (the default), not True: True raises a ValueError wherever cuDNN cannot run (CPU).
    use_cudnn: Any = "auto" if kind == "LSTM" else False
    return keras.layers.LSTM(units, use_cudnn=use_cudnn, **options)


def _check_layer(kind: Any, units: Any) -> None:
    check_choice("kind", kind, KERAS_RNN_KINDS)
    check_positive_int("units", units)


@dataclass(frozen=True)
class RnnTiming:
    """One layer's forward pass: its kind, whether cuDNN may run it, and the labkit Timing."""

    kind: str
    cudnn_eligible: bool
    device: str
    batch: int
    steps: int
    features: int
    units: int
    timing: Any  # labkit.Timing

    @property
    def median_ms(self) -> float:
        return self.timing.median_ms

    def __str__(self) -> str:
        path = "cuDNN-eligible" if self.cudnn_eligible else "loop"
        return f"{self.kind:<14} {self.median_ms:9.3f} ms  ({path}, {self.device})"


def time_keras_rnns(
    batch: int = 64,
    steps: int = 100,
    features: int = 50,
    units: int = 50,
    *,
    kinds: tuple[str, ...] = ("SimpleRNN", "LSTM", "LSTM-no-cudnn"),
    device: str | None = None,
    warmup_ms: float = 25.0,
    rep_ms: float = 200.0,
) -> list[RnnTiming]:
    """Time a forward pass of each Keras RNN kind on a [batch, steps, features] input.

    ``device=None`` uses :func:`labkit.pick_device` ("/GPU:0" or "/CPU:0").
    Each call is synchronised with ``tf.test.experimental.sync_devices()``
    (``bench(device="tf")``). Expect, on a GPU, the cuDNN LSTM far ahead of
    ``LSTM-no-cudnn``; on a CPU all of them run a loop, and SimpleRNN (less
    work per step) is fastest.
    """
    for name, value in (("batch", batch), ("steps", steps), ("features", features)):
        check_positive_int(name, value)
    kinds = (kinds,) if isinstance(kinds, str) else kinds  # one kind: not its letters
    if not kinds:
        raise ValueError(f"kinds must be a non-empty list drawn from {KERAS_RNN_KINDS}")
    for kind in kinds:
        check_choice("kinds", kind, KERAS_RNN_KINDS)
    check_positive_int("units", units)
    check_tf_device(device, allow_none=True)
    check_ms("warmup_ms", warmup_ms, allow_zero=True)
    check_ms("rep_ms", rep_ms)
    require_memory_fits(
        4 * batch * steps * (features + 4 * units),
        arrays=2,
        what=f"time_keras_rnns(batch={batch}, steps={steps})",
    )
    tf = import_tensorflow("time_keras_rnns")
    from labkit.machine.report import pick_device
    from labkit.timing.bench import bench

    where = device or pick_device("tensorflow")
    gpu = "GPU" in where.upper()
    results = []
    with tf.device(where):
        x = tf.random.normal([batch, steps, features], seed=0)
        for kind in kinds:
            layer = keras_rnn(kind, units, return_sequences=True)
            layer(x)  # build the weights outside the timing
            timing = bench(
                layer, x, warmup_ms=warmup_ms, rep_ms=rep_ms, device="tf", label=kind, warn=False
            )
            results.append(
                RnnTiming(
                    kind=kind,
                    cudnn_eligible=gpu and kind in ("LSTM", "GRU"),
                    device=where,
                    batch=batch,
                    steps=steps,
                    features=features,
                    units=units,
                    timing=timing,
                )
            )
    return results


def train_keras_rnn(
    train: tuple[Any, Any],
    test: tuple[Any, Any],
    *,
    kind: str = "SimpleRNN",
    units: int = 50,
    epochs: int = 5,
    batch_size: int = 64,
    lr: float = 3e-3,
    seed: int = 0,
) -> Any:
    """Train a Keras RNN classifier (layer → Dense) on numpy arrays; returns a TrainingResult.

    The Keras twin of :func:`labkit.models.train.train_torch_rnn`, on the same
    arrays (:func:`labkit.models.data.sequence_task`). ``keras.utils.set_random_seed``
    makes the run repeatable on the CPU.
    """
    from labkit.models.train import TrainingResult, check_hyper, check_split

    _check_layer(kind, units)
    check_hyper(epochs, batch_size, lr)
    seed = check_seed("seed", seed)
    x_train, y_train = check_split("train", train)
    x_test, y_test = check_split("test", test)
    tf = import_tensorflow("train_keras_rnn")
    import keras

    num_classes = max(int(y_train.max()), int(y_test.max()), 1) + 1
    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [
            keras.Input(tuple(x_train.shape[1:])),
            keras_rnn(kind, units, return_sequences=False),
            keras.layers.Dense(num_classes),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=lr),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    losses, accuracies, seconds = [], [], []
    for _ in range(epochs):
        start = time.perf_counter()
        history = model.fit(x_train, y_train, batch_size=batch_size, epochs=1, verbose=0)
        seconds.append(time.perf_counter() - start)  # fit returns after the epoch has run
        losses.append(float(history.history["loss"][-1]))
        _, acc = model.evaluate(x_test, y_test, batch_size=512, verbose=0)
        accuracies.append(float(acc))
    gpus = tf.config.list_physical_devices("GPU")
    return TrainingResult(
        model=f"keras {kind}({units})",
        device="/GPU:0" if gpus else "/CPU:0",
        losses=tuple(losses),
        test_accuracies=tuple(accuracies),
        epoch_seconds=tuple(seconds),
        framework="tensorflow",
    )

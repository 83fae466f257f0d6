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
from labkit.core.units import align_columns
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
      bias; GRU also ``reset_after=True``); where TensorFlow sees a GPU they
      run as one cuDNN call (a CudnnRNNV3 op), eagerly or in a graph.
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


#: How a layer is called: eagerly (each step of the loop runs from Python) or in a graph.
MODES: tuple[str, ...] = ("eager", "graph")


def graph_op_types(concrete: Any) -> set[str]:
    """Every op type in a traced ``tf.function`` (its graph and the functions it calls)."""
    graph_def = concrete.graph.as_graph_def()
    types = {node.op for node in graph_def.node}
    for function in graph_def.library.function:
        types |= {node.op for node in function.node_def}
    return types


@dataclass(frozen=True)
class RnnTiming:
    """One layer in one mode: its runs (one per round) and whether its graph holds a cuDNN op.

    ``uses_cudnn`` is read from the layer traced with ``tf.function``: True
    when the graph holds a ``CudnnRNN*`` op, i.e. Keras chose the cuDNN path
    (it does so only for LSTM and GRU with the cuDNN-compatible settings and
    a visible GPU, ``keras/src/backend/tensorflow/rnn.py``); the eager call
    takes the same branch.
    """

    kind: str
    mode: str
    uses_cudnn: bool
    device: str
    batch: int
    steps: int
    features: int
    units: int
    runs: Any  # labkit.timing.interleave.VariantRuns

    @property
    def label(self) -> str:
        return f"{self.kind} ({self.mode})"

    @property
    def median_ms(self) -> float:
        return float(self.runs.median_ms)

    def __str__(self) -> str:
        path = "cuDNN op in the graph" if self.uses_cudnn else "no cuDNN op: a loop over steps"
        return f"{self.label:<22} {self.median_ms:9.3f} ms  ({path}, {self.device})"


@dataclass(frozen=True)
class KerasRnnTimings:
    """Keras recurrent layers timed eagerly and in a graph, round-robin (:func:`labkit.interleave`)."""

    rows: tuple[RnnTiming, ...]
    rounds: Any  # labkit.timing.interleave.Interleaved

    def __iter__(self) -> Any:
        return iter(self.rows)

    def get(self, kind: str, mode: str) -> RnnTiming | None:
        return next((r for r in self.rows if r.kind == kind and r.mode == mode), None)

    def table(self) -> str:
        """One row per kind: eager and graph medians, their ratio, and the cuDNN check."""
        from labkit.core.units import format_duration

        header = ["", "eager", "graph", "eager / graph, per round", "cuDNN op in the graph"]
        table = [header]
        for kind in dict.fromkeys(r.kind for r in self.rows):
            eager, graph = self.get(kind, "eager"), self.get(kind, "graph")
            uses_cudnn = any(r.uses_cudnn for r in self.rows if r.kind == kind)
            table.append(
                [
                    kind,
                    format_duration(eager.median_ms) if eager else "-",
                    format_duration(graph.median_ms) if graph else "-",
                    _paired(eager, graph) if eager and graph else "-",
                    "yes" if uses_cudnn else "no",
                ]
            )
        return "\n".join(align_columns(table))

    def __str__(self) -> str:
        first = self.rows[0]
        return (
            f"[batch={first.batch}, steps={first.steps}, features={first.features}], "
            f"{first.units} units, forward pass on {first.device}:\n{self.table()}"
        )


def _paired(eager: RnnTiming, graph: RnnTiming) -> str:
    """The eager / graph ratio of each round's medians: their median and range."""
    from labkit.accel.common import times
    from labkit.timing.bench import quantile

    ratios = sorted(
        e.median_ms / g.median_ms
        for e, g in zip(eager.runs.runs, graph.runs.runs, strict=True)
        if g.median_ms > 0
    )
    if not ratios:
        return "-"
    return f"{times(quantile(ratios, 0.5))} ({times(ratios[0])} to {times(ratios[-1])})"


def time_keras_rnns(
    batch: int = 64,
    steps: int = 20,
    features: int = 50,
    units: int = 50,
    *,
    kinds: tuple[str, ...] = ("SimpleRNN", "LSTM", "LSTM-no-cudnn"),
    modes: tuple[str, ...] = MODES,
    device: str | None = None,
    rounds: int = 2,
    warmup_ms: float = 10.0,
    rep_ms: float = 50.0,
) -> KerasRnnTimings:
    """Time a forward pass of each Keras RNN kind on a [batch, steps, features] input.

    Each kind is timed in each of ``modes``: "eager" calls the layer from
    Python, so every time step of its loop is dispatched from Python;
    "graph" calls it through ``tf.function`` (traced once, outside the
    timing), which is how ``fit`` and ``predict`` run it. All variants are
    timed round-robin for ``rounds`` rounds (:func:`labkit.interleave`), with
    ``tf.test.experimental.sync_devices()`` around each call. ``device=None``
    uses :func:`labkit.pick_device` ("/GPU:0" or "/CPU:0").
    """
    for name, value in (("batch", batch), ("steps", steps), ("features", features)):
        check_positive_int(name, value)
    kinds = (kinds,) if isinstance(kinds, str) else kinds  # one kind: not its letters
    if not kinds:
        raise ValueError(f"kinds must be a non-empty list drawn from {KERAS_RNN_KINDS}")
    for kind in kinds:
        check_choice("kinds", kind, KERAS_RNN_KINDS)
    modes = (modes,) if isinstance(modes, str) else modes
    if not modes:
        raise ValueError(f"modes must be a non-empty list drawn from {MODES}")
    for mode in modes:
        check_choice("modes", mode, MODES)
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
    from labkit.timing.interleave import interleave

    where = device or pick_device("tensorflow")
    calls: dict[str, Any] = {}
    meta: dict[str, tuple[str, str, bool]] = {}
    with tf.device(where):
        x = tf.random.normal([batch, steps, features], seed=0)
        for kind in kinds:
            layer = keras_rnn(kind, units, return_sequences=True)
            layer(x)  # build the weights outside the timing
            graph = tf.function(layer)
            uses_cudnn = any(
                t.startswith("CudnnRNN") for t in graph_op_types(graph.get_concrete_function(x))
            )
            for mode in modes:
                label = f"{kind} ({mode})"
                calls[label] = (lambda f=layer: f(x)) if mode == "eager" else (lambda g=graph: g(x))
                meta[label] = (kind, mode, uses_cudnn)
        result = interleave(
            calls,
            rounds=rounds,
            rep_ms=rep_ms,
            warmup_ms=warmup_ms,
            device="tf",
            min_reps=3,
        )
    rows = tuple(
        RnnTiming(
            kind=meta[v.label][0],
            mode=meta[v.label][1],
            uses_cudnn=meta[v.label][2],
            device=where,
            batch=batch,
            steps=steps,
            features=features,
            units=units,
            runs=v,
        )
        for v in result.variants
    )
    return KerasRnnTimings(rows=rows, rounds=result)


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

"""The same MLP training step in PyTorch and in Keras/TensorFlow, timed alike.

Same data (numpy, fixed seed), same architecture (784→512→512→10, ReLU),
same optimizer (plain SGD), same batch. Before anything is timed, each
version's first loss is checked to be near ln(10) ≈ 2.30, the loss of an
untrained 10-class classifier: a timing of a broken step is worthless.

TensorFlow shows three ways to run the step: Keras layers under a
``GradientTape`` called eagerly (Python drives every op), the same step in
``tf.function`` (traced once into a graph), and Keras's own
``train_on_batch`` (its compiled train function: a plain graph on a CPU-only
host; with a GPU, Keras's ``jit_compile="auto"`` compiles it with XLA, so
that row means something else there). The gap between eager and graph is
framework overhead, which matters most for small models.

The variants are timed round-robin (:func:`labkit.interleave`), so a change
in the machine's state hits them alike, and each is given a rate: one step
is the forward pass's 2·B·W FLOPs plus a backward pass of twice that, less
the first layer's input gradient (the input needs none), which says whether
the step is dominated by arithmetic or by overhead.
torch and TensorFlow keep their own thread pools in one process; the
printout gives both sizes.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from labkit.accel.common import round_median_ms
from labkit.core.optional import import_optional, import_tensorflow
from labkit.core.validate import (
    check_choice,
    check_ms,
    check_positive_int,
    check_real,
    check_seed,
    check_shape,
)
from labkit.machine.memory import require_memory_fits
from labkit.timing.bench import Timing
from labkit.timing.compare import Comparison, compare

VARIANTS = ("torch", "tf eager", "tf.function", "keras train_on_batch")
LOSS_BOUNDS = (0.5, 10.0)


#: What each variant runs, printed under the table.
DESCRIPTIONS = {
    "torch": "torch, eager (autograd, torch.optim.SGD)",
    "tf eager": "Keras layers and a GradientTape, called eagerly",
    "tf.function": "the same step traced once with tf.function",
    "keras train_on_batch": "Keras's compiled train function (XLA on a GPU host, not here)",
}


@dataclass(frozen=True)
class SideBySide:
    """Timings of one training step per variant, and each variant's first loss.

    Each Timing pools the samples of every round; ``rounds`` is
    :func:`labkit.interleave`'s result (None for one built by hand).
    ``flops_per_step`` counts the forward pass (2·batch·weights) and the
    backward pass (twice that, except that the input needs no gradient, so
    the first layer only computes its weight gradient).
    """

    timings: tuple[Timing, ...]
    first_losses: dict[str, float]
    batch: int
    sizes: tuple[int, ...]
    rounds: Any = None
    threads: str = ""

    @property
    def flops_per_step(self) -> float:
        """Forward 2·B·W, backward 4·B·W, less the first layer's input gradient (2·B·W1)."""
        layers = [a * b for a, b in zip(self.sizes[:-1], self.sizes[1:], strict=True)]
        return self.batch * (6.0 * sum(layers) - 2.0 * layers[0])

    def comparison(self, baseline: int | str | None = None) -> Comparison:
        return compare(list(self.timings), baseline)

    def rates(self) -> list[str]:
        """Each variant's GFLOP/s at its median, with what it runs."""
        lines = []
        for t in self.timings:
            # the median of the round medians, the number the table above prints
            ms = round_median_ms(t, self.rounds)
            rate = self.flops_per_step / (ms * 1e-3) / 1e9 if ms > 0 else 0.0
            label = t.label or "?"
            lines.append(f"{label}: {rate:.1f} GFLOP/s ({DESCRIPTIONS.get(label, label)})")
        return lines

    def __str__(self) -> str:
        arch = "→".join(str(s) for s in self.sizes)
        table = str(self.rounds) if self.rounds is not None else str(self.comparison())
        head = (
            f"MLP {arch}, batch {self.batch}, one SGD step "
            f"(about {self.flops_per_step / 1e9:.2f} GFLOP):"
        )
        tail = [*self.rates(), self.threads] if self.threads else self.rates()
        return "\n".join([head, table, *tail])


def _data(batch: int, features: int, classes: int, seed: int) -> tuple[Any, Any]:
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, features), dtype=np.float32)
    y = rng.integers(0, classes, size=batch).astype(np.int64)
    return x, y


def _check_loss(variant: str, loss: float) -> float:
    lo, hi = LOSS_BOUNDS
    if not (math.isfinite(loss) and lo < loss < hi):
        raise AssertionError(
            f"{variant}: first loss {loss!r} is not near ln(classes); the step is broken, "
            "so its timing would mean nothing"
        )
    return loss


def _torch_step(x_np: Any, y_np: Any, sizes: Sequence[int], lr: float, seed: int) -> Any:
    torch = import_optional("torch", "the side-by-side benchmark")
    from labkit.machine.report import pick_device

    dev = pick_device("torch")
    torch.manual_seed(seed)
    layers: list[Any] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        layers.append(torch.nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    x = torch.from_numpy(x_np).to(dev)
    y = torch.from_numpy(y_np).to(dev)

    def step() -> Any:
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    return step


def _tf_steps(x_np: Any, y_np: Any, sizes: Sequence[int], lr: float, seed: int) -> dict[str, Any]:
    tf = import_tensorflow("the side-by-side benchmark")
    keras = import_optional("keras", "the side-by-side benchmark")
    steps: dict[str, Any] = {}
    x, y = tf.constant(x_np), tf.constant(y_np)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def build() -> Any:
        keras.utils.set_random_seed(seed)
        hidden = [keras.layers.Dense(s, activation="relu") for s in sizes[1:-1]]
        return keras.Sequential([keras.Input((sizes[0],)), *hidden, keras.layers.Dense(sizes[-1])])

    for variant in ("tf eager", "tf.function"):
        model = build()
        opt = keras.optimizers.SGD(learning_rate=lr)

        def step(model: Any = model, opt: Any = opt) -> Any:
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        steps[variant] = step if variant == "tf eager" else tf.function(step)
    model = build()
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=lr), loss=loss_fn)
    steps["keras train_on_batch"] = lambda: model.train_on_batch(x, y)
    return steps


def mlp_side_by_side(
    batch: int = 256,
    sizes: Sequence[int] = (784, 512, 512, 10),
    *,
    variants: Sequence[str] = VARIANTS,
    lr: float = 0.01,
    seed: int = 0,
    warmup_ms: float = 25.0,
    rep_ms: float = 200.0,
) -> SideBySide:
    """Time one SGD step of the same MLP in each of ``variants``."""
    batch = check_positive_int("batch", batch)
    sizes = check_shape("sizes", sizes)
    if len(sizes) < 2:
        raise ValueError(f"sizes needs at least an input and an output size, got {sizes!r}")
    if isinstance(variants, str):
        variants = (variants,)
    if not variants:
        raise ValueError(f"variants must be a non-empty subset of {VARIANTS}, got {variants!r}")
    for variant in variants:
        check_choice("variants", variant, VARIANTS)
    lr = check_real("lr", lr, low=0, low_open=True)
    seed = check_seed("seed", seed)
    warmup_ms, rep_ms = check_ms("warmup_ms", warmup_ms), check_ms("rep_ms", rep_ms)
    weights = sum(a * b for a, b in zip(sizes[:-1], sizes[1:], strict=True))
    require_memory_fits(
        4 * (2 * batch * sum(sizes) + 3 * weights),
        arrays=4,
        what=f"mlp_side_by_side(batch={batch}, sizes={sizes})",
    )
    x_np, y_np = _data(batch, sizes[0], sizes[-1], seed)
    steps: dict[str, Any] = {}
    if "torch" in variants:
        steps["torch"] = _torch_step(x_np, y_np, sizes, lr, seed)
    if any(v != "torch" for v in variants):
        steps.update(_tf_steps(x_np, y_np, sizes, lr, seed))
    first_losses = {}
    for variant in variants:
        loss = steps[variant]()
        value = float(loss.item() if hasattr(loss, "item") else loss)
        first_losses[variant] = _check_loss(variant, value)
    from labkit.timing.interleave import interleave

    tf_variants = [v for v in variants if v != "torch"]
    from labkit.machine.allocator import keep_freed_memory

    with keep_freed_memory():  # no variant pays page faults the others do not
        rounds = interleave(
            {v: steps[v] for v in variants}, rounds=3, rep_ms=rep_ms, warmup_ms=warmup_ms
        )
    tf_device = None
    if tf_variants:
        from labkit.machine.report import pick_device

        tf_device = "tf:" + pick_device("tensorflow").strip("/")
    # train_on_batch returns numpy, so bench saw no TF tensor: name TF's device here
    timings = tuple(
        dataclasses.replace(v.pooled(), device=tf_device)
        if v.label in tf_variants and tf_device
        else v.pooled()
        for v in rounds.variants
    )
    return SideBySide(
        timings=timings,
        first_losses=first_losses,
        batch=batch,
        sizes=sizes,
        rounds=rounds,
        threads=_threads(bool(tf_variants), "torch" in variants),
    )


def _threads(tensorflow: bool, torch: bool) -> str:
    """The thread pools the two frameworks use in this process, in one line."""
    parts = []
    if torch:
        parts.append(
            f"torch intra-op threads: {import_optional('torch', 'threads').get_num_threads()}"
        )
    if tensorflow:
        tf = import_tensorflow("threads")
        intra = tf.config.threading.get_intra_op_parallelism_threads()
        env = os.environ.get("TF_NUM_INTRAOP_THREADS", "").strip()
        if intra:
            what = str(intra)
        elif env:  # TensorFlow reads it when its thread pools start
            what = f"{env} (TF_NUM_INTRAOP_THREADS)"
        else:
            what = "its default (0: one per logical CPU)"
        parts.append(f"TensorFlow intra-op threads: {what}")
    return "; ".join(parts)

"""Train a classifier for a few epochs and say how long each epoch took, on which device.

The notebooks train the same small model on the CPU and on a GPU and compare
seconds per epoch, so the loop must be (1) deterministic on the CPU with a
fixed seed, so a committed notebook reruns to the same accuracy, and (2)
timed honestly: an epoch's time is read only after the device has finished
(``loss.item()`` at the end of the epoch waits for the GPU; no per-step
``.item()``, which would force a sync every step and slow the GPU run).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from labkit.core.optional import import_optional
from labkit.core.validate import check_positive_int, check_real, check_seed, check_torch_device
from labkit.machine.report import resolve_torch_device


@dataclass(frozen=True)
class TrainingResult:
    """Per-epoch mean training loss, test accuracy (0–1) and wall time in seconds."""

    model: str
    device: str
    losses: tuple[float, ...]
    test_accuracies: tuple[float, ...]
    epoch_seconds: tuple[float, ...]
    framework: str = "torch"

    @property
    def final_accuracy(self) -> float:
        return self.test_accuracies[-1]

    @property
    def final_loss(self) -> float:
        return self.losses[-1]

    @property
    def total_seconds(self) -> float:
        return math.fsum(self.epoch_seconds)

    def epoch_times(self) -> str:
        """The first epoch apart from the median of the others, in seconds.

        A first epoch pays one-off costs (TensorFlow traces ``fit``'s step into
        a graph; caches and allocators warm up), so it is not a rate to compare.
        """
        from labkit.core.units import format_duration
        from labkit.timing.bench import quantile

        first = format_duration(self.epoch_seconds[0] * 1e3)
        rest = sorted(self.epoch_seconds[1:])
        if not rest:
            return f"1 epoch: {first}"
        later = format_duration(quantile(rest, 0.5) * 1e3)
        return f"epoch 1: {first}; epochs 2-{len(self.epoch_seconds)}: median {later} each"

    def __str__(self) -> str:
        return (
            f"{self.model} ({self.framework}) on {self.device}: {len(self.losses)} epochs in "
            f"{self.total_seconds:.2f} s, final loss {self.final_loss:.3f}, "
            f"test accuracy {self.final_accuracy:.1%}"
        )


def check_split(name: str, split: tuple[Any, Any]) -> tuple[Any, Any]:
    """``split`` as (x, y), when x and y are non-empty and as long as each other."""
    x, y = split
    if len(x) != len(y) or len(x) == 0:
        raise ValueError(
            f"{name}: x and y must be non-empty and the same length, got {len(x)} and {len(y)}"
        )
    return x, y


def check_hyper(epochs: Any, batch_size: Any, lr: Any) -> None:
    check_positive_int("epochs", epochs)
    check_positive_int("batch_size", batch_size)
    check_real("lr", lr, low=0, low_open=True)


def accuracy(model: Any, x: Any, y: Any, batch_size: int = 512) -> float:
    """Fraction of ``x`` that ``model`` classifies as ``y`` (eval mode, no gradients)."""
    torch = import_optional("torch", "accuracy")
    check_positive_int("batch_size", batch_size)
    if len(x) != len(y) or len(x) == 0:
        raise ValueError(
            f"x and y must be non-empty and the same length, got {len(x)} and {len(y)}"
        )
    was_training = model.training
    model.eval()
    correct = 0
    with torch.inference_mode():
        for start in range(0, len(x), batch_size):
            logits = model(x[start : start + batch_size])
            correct += int((logits.argmax(dim=1) == y[start : start + batch_size]).sum())
    model.train(was_training)
    return correct / len(x)


def train_classifier(
    model: Any,
    train: tuple[Any, Any],
    test: tuple[Any, Any],
    *,
    epochs: int = 3,
    batch_size: int = 64,
    lr: float = 1e-3,
    device: Any = None,
    seed: int = 0,
) -> TrainingResult:
    """Train ``model`` with Adam and cross-entropy; test accuracy after every epoch.

    ``train`` and ``test`` are ``(x, y)`` pairs (tensors or numpy arrays; y
    holds class indices). The data is moved to ``device`` once (the sets are
    small), so the epoch times measure compute, not host-to-device copies.
    ``device=None`` picks the best device (:func:`labkit.pick_device`).

    ``seed`` fixes the shuffling (and dropout, if any). The model's initial
    weights are the caller's: seed before building it
    (``torch.manual_seed(0); model = CNN()``) for a fully repeatable run.
    A model with lazy layers (``LazyLinear``) gets one dry forward pass before
    the optimizer is built, so the optimizer sees the real parameters.
    """
    check_hyper(epochs, batch_size, lr)
    seed = check_seed("seed", seed)
    x_train, y_train = check_split("train", train)
    x_test, y_test = check_split("test", test)
    torch = import_optional("torch", "train_classifier")
    device = resolve_torch_device(device)

    def to_device(x: Any, dtype: Any) -> Any:
        return torch.as_tensor(x).to(device=device, dtype=dtype)

    x_train, x_test = to_device(x_train, torch.float32), to_device(x_test, torch.float32)
    y_train, y_test = to_device(y_train, torch.long), to_device(y_test, torch.long)

    torch.manual_seed(seed)
    shuffle = torch.Generator().manual_seed(seed)
    model = model.to(device)
    if any(isinstance(p, torch.nn.parameter.UninitializedParameter) for p in model.parameters()):
        with torch.no_grad():
            model(x_train[:1])
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = torch.nn.CrossEntropyLoss()

    losses: list[float] = []
    accuracies: list[float] = []
    seconds: list[float] = []
    n = len(x_train)
    for _ in range(epochs):
        model.train()
        start = time.perf_counter()
        order = torch.randperm(n, generator=shuffle).to(device)
        total = torch.zeros((), device=device)
        for first in range(0, n, batch_size):
            idx = order[first : first + batch_size]
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x_train[idx]), y_train[idx])
            loss.backward()
            optimizer.step()
            total += loss.detach() * len(idx)
        mean_loss = float(total.item()) / n  # .item() waits for the device: the epoch is done
        seconds.append(time.perf_counter() - start)
        losses.append(mean_loss)
        accuracies.append(accuracy(model, x_test, y_test))
    return TrainingResult(
        model=type(model).__name__,
        device=str(device),
        losses=tuple(losses),
        test_accuracies=tuple(accuracies),
        epoch_seconds=tuple(seconds),
    )


def train_torch_rnn(
    train: tuple[Any, Any],
    test: tuple[Any, Any],
    *,
    hidden_size: int = 50,
    epochs: int = 5,
    batch_size: int = 64,
    lr: float = 3e-3,
    device: Any = None,
    seed: int = 0,
) -> TrainingResult:
    """Train a :class:`~labkit.models.rnn_torch.TorchRNN` classifier on a sequence task (numpy arrays).

    Seeds torch before building the model, so the whole run repeats on the CPU.
    Pair it with :func:`labkit.models.data.sequence_task` and compare with
    :func:`labkit.models.rnn_keras.train_keras_rnn` on the same arrays.
    """
    check_positive_int("hidden_size", hidden_size)
    check_hyper(epochs, batch_size, lr)
    seed = check_seed("seed", seed)
    check_torch_device(device)
    x_train, y_train = check_split("train", train)
    _x_test, y_test = check_split("test", test)
    torch = import_optional("torch", "train_torch_rnn")
    from labkit.models.rnn_torch import TorchRNN

    num_classes = int(max(int(y_train.max()), int(y_test.max())) + 1)
    torch.manual_seed(seed)
    model = TorchRNN(int(x_train.shape[-1]), hidden_size, max(num_classes, 2))
    return train_classifier(
        model, train, test, epochs=epochs, batch_size=batch_size, lr=lr, device=device, seed=seed
    )

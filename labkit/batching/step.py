"""The training step every batching lesson times: a model, a batch, loss, backward, optimizer step.

:mod:`labkit.batching.sweep` times it per batch size and :mod:`labkit.batching.largest`
measures its memory, so both take it from here: one definition of "a training step".
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

from labkit.core import validate
from labkit.core.validate import check_positive_int

#: The optimizers a training step can use ("adam" keeps two extra copies of the weights).
OPTIMIZERS: tuple[str, ...] = ("adam", "sgd")

#: The built-in models: name -> (description, input shape per sample).
MODELS: dict[str, tuple[str, tuple[int, ...]]] = {
    "mlp": ("MLP 256 → 512 → 512 → 10", (256,)),
    "cnn": ("labkit.models.cnn.CNN, 3×32×32 images", (3, 32, 32)),
}


# --------------------------------------------------------------------------- models and steps


def mlp(in_features: int = 256, hidden: Sequence[int] = (512, 512), num_classes: int = 10) -> Any:
    """A small multilayer perceptron (Linear + ReLU layers) as a ``torch.nn.Sequential``.

    The default (256 → 512 → 512 → 10, 400k parameters) runs a batch of 512
    in a few ms on two CPU cores: big enough for the batch size to matter,
    small enough for a notebook to sweep it in seconds.
    """
    from labkit.core.optional import import_optional

    sizes = [
        check_positive_int("in_features", in_features),
        *(check_positive_int(f"hidden[{i}]", h) for i, h in enumerate(hidden)),
        check_positive_int("num_classes", num_classes),
    ]
    torch = import_optional("torch", "labkit.batching.step.mlp")
    layers: list[Any] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        layers.append(torch.nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def resolve_model(
    model: Any, input_shape: Sequence[int] | None
) -> tuple[Callable[[], Any], str, tuple[int, ...]]:
    """``(model_fn, description, input_shape)`` for "mlp", "cnn" or an ``nn.Module``.

    A module is deep-copied by ``model_fn``, so measuring never trains the
    caller's own weights.
    """
    from labkit.core.optional import import_optional

    torch = import_optional("torch", "labkit.batching.sweep")
    if isinstance(model, str):
        description, default_shape = MODELS[model]
        shape = default_shape if input_shape is None else check_shape(input_shape)
        if model == "mlp":
            if len(shape) != 1:
                raise ValueError(f"input_shape for the MLP must be (features,), got {shape!r}")
            if shape != default_shape:
                description = description.replace("256", str(shape[0]), 1)
            return (lambda: mlp(in_features=shape[0])), description, shape

        def cnn() -> Any:
            from labkit.models.cnn import CNN

            return CNN()

        return cnn, description.split(",")[0] + f", {'×'.join(map(str, shape))} inputs", shape
    if isinstance(model, torch.nn.Module):
        if input_shape is None:
            raise ValueError(
                "input_shape is required with a custom model: the shape of one sample, "
                "without the batch dimension, e.g. (3, 32, 32)"
            )
        shape = check_shape(input_shape)
        return (lambda: copy.deepcopy(model)), type(model).__name__, shape
    raise TypeError(
        f"model must be 'mlp', 'cnn' or a torch.nn.Module, got {type(model).__name__} instead"
    )


def check_shape(input_shape: Sequence[int]) -> tuple[int, ...]:
    """``input_shape`` as a tuple of positive ints (one sample, no batch dimension)."""
    return validate.check_shape("input_shape", input_shape)


def make_optimizer(model: Any, optimizer: str) -> Any:
    """Adam (lr 1e-3) or plain SGD (lr 1e-2) over the model's parameters."""
    import torch

    if optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=1e-3)
    return torch.optim.SGD(model.parameters(), lr=1e-2)


def make_batch(
    model: Any, input_shape: Sequence[int], batch: int, device: Any, seed: int = 0
) -> tuple[Any, Any]:
    """Random inputs and matching targets for one batch, made on ``device``.

    Classifier outputs (2-D) get class labels for a cross-entropy loss;
    anything else gets zeros for a mean-squared-error loss. The values do not
    change the speed; the shapes do.
    """
    import torch

    device = torch.device(device)
    where = device if device.type == "cuda" else torch.device("cpu")  # big GPU batches: made there
    gen = torch.Generator(device=where).manual_seed(seed)
    x = torch.randn(batch, *input_shape, generator=gen, device=where).to(device)
    was_training = model.training
    model.eval()  # a dry pass of one sample: batch norm in train mode would refuse it
    with torch.no_grad():
        out = model(x[:1])
    model.train(was_training)
    if out.dim() == 2 and out.is_floating_point():
        y = torch.randint(0, out.shape[1], (batch,), generator=gen, device=where).to(device)
    else:
        y = torch.zeros(batch, *out.shape[1:], dtype=out.dtype, device=device)
    return x, y


def loss_fn(output: Any, target: Any) -> Any:
    import torch

    if target.dtype == torch.long:
        return torch.nn.functional.cross_entropy(output, target)
    return torch.nn.functional.mse_loss(output, target)


def train_step(model: Any, optimizer: Any, x: Any, y: Any) -> None:
    """One training step: clear gradients, forward, loss, backward, optimizer step."""
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()

"""PyTorch's counterpart of the article's Keras RNN.

Imports torch when it is imported (an ``nn.Module`` subclass), through
``import_optional``: without torch that is a ``MissingPackageError``.

Two traps this class exists to show (course brief, section 3):

- ``nn.RNN`` defaults to ``batch_first=False``: a (10, 20, 50) batch-first
  tensor is then read as time=10, batch=20. The output shape is the same
  (10, 20, 50) and nothing errors; only ``h_n`` changes, (1, 20, 50) instead
  of (1, 10, 50). Here ``batch_first=True`` is the default.
- ``h_0`` is never batch-first: it is (num_layers, batch, hidden) even with
  ``batch_first=True``; (10, 1, 50) raises "Expected hidden size (1, 10, 50)".

It has 5,100 parameters at 50→50 against Keras SimpleRNN's 5,050: PyTorch
keeps two bias vectors (``bias_ih`` and ``bias_hh``), Keras one.
"""

from __future__ import annotations

from labkit.core.optional import import_optional
from labkit.core.validate import check_positive_int

import_optional(
    "torch", "labkit.models.rnn_torch"
)  # without torch: one line that names the install command
import torch  # noqa: E402
from torch import nn  # noqa: E402


class TorchRNN(nn.Module):
    """``nn.RNN(input_size, hidden_size, batch_first=True)`` plus an optional linear head.

    Without a head (``num_classes=None``) ``forward`` returns the per-step
    outputs (batch, time, hidden), like Keras ``SimpleRNN(return_sequences=True)``.
    With one it returns logits (batch, num_classes) read from the last step,
    for sequence classification (:func:`labkit.models.train.train_torch_rnn`).
    The raw layer is ``self.rnn`` (it returns ``(out, h_n)``).
    """

    def __init__(
        self,
        input_size: int = 50,
        hidden_size: int = 50,
        num_classes: int | None = None,
        *,
        batch_first: bool = True,
    ) -> None:
        super().__init__()
        check_positive_int("input_size", input_size)
        check_positive_int("hidden_size", hidden_size)
        if num_classes is not None:
            check_positive_int("num_classes", num_classes)
        self.batch_first = batch_first
        self.rnn = nn.RNN(input_size, hidden_size, batch_first=batch_first)
        self.head = nn.Linear(hidden_size, num_classes) if num_classes is not None else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _h_n = self.rnn(x)
        if self.head is None:
            return out
        last = out[:, -1] if self.batch_first else out[-1]
        return self.head(last)

"""The article's CNN, its two bugs, and three fixes.

The article (``/work/shared/seed``) defines a CNN whose ``fc1`` expects
32·32·32 = 32,768 features, then feeds it a 224×224 image. ``conv1`` keeps
the size (padding=1) and ``MaxPool2d(2)`` halves it, so each sample reaches
the flatten as 32×112×112 = 401,408 values, not 32,768. :class:`SeedCNN`
keeps that code so notebooks can show what happens; :class:`CNN64`,
:class:`CNN224` and :class:`CNN` are the three fixes.

This module imports torch when it is imported, because ``nn.Module`` subclasses
need it when they are defined; it does so through ``import_optional``, so without
torch the import is a ``MissingPackageError`` naming the install command.
"""

from __future__ import annotations

from labkit.core.optional import import_optional
from labkit.core.validate import check_positive_int

import_optional(
    "torch", "labkit.models.cnn"
)  # without torch: one line that names the install command
import torch  # noqa: E402
from torch import nn  # noqa: E402

#: Features the seed's fc1 expects: 32 channels × 32 × 32, i.e. a 64×64 input after pooling.
SEED_FLAT_FEATURES = 32 * 32 * 32


def count_params(model: nn.Module) -> int:
    """Number of trainable parameters (a LazyLinear must have run one forward pass first)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


class _SeedLayers(nn.Module):
    """conv 3→32 (k3, p1) → ReLU → MaxPool2d(2): the article's feature extractor, shared."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, kernel_size=3, stride=1, padding=1)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(kernel_size=2, stride=2)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.relu(self.conv1(x)))


class SeedCNN(_SeedLayers):
    """The article's CNN exactly, minus ``.cuda()`` (place it with ``.to(device)``).

    It has two bugs, both in ``x.view(-1, 32 * 32 * 32)``:

    1. At 224×224 (the article's own input) the pooled map has 401,408 values
       per sample, 12.25 rows of 32,768, so for a batch of 1 to 3 ``view`` raises
       ``RuntimeError: shape '[-1, 32768]' is invalid for input of size 401408``.
    2. Worse, when the element count happens to divide by 32,768, ``view(-1, …)``
       silently folds spatial data into the batch: a batch of 4 at 224×224 gives
       (49, 10) logits, a 1×3×128×128 input (4, 10), a 2×3×128×128 input (8, 10).
       Inference returns them without an error. Training stops at the loss:
       ``F.cross_entropy`` raises ``ValueError: Expected input batch_size (8) to
       match target batch_size (2).``

    The 32,768 features fit any input whose pooled map has 32 × 32 = 1,024
    positions: 64×64, but also 65×65 (pooling floors) or 32×128 (pooled to 16×64).

    Never flatten with ``view(-1, N)``; use ``torch.flatten(x, 1)`` or ``nn.Flatten()``.
    fc1 has 327,690 parameters (32,768 × 10 + 10); the whole model 328,586
    (conv1 adds 896).
    """

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(32 * 32 * 32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = x.view(-1, 32 * 32 * 32)  # the bug, kept on purpose
        return self.fc1(x)


class CNN64(_SeedLayers):
    """Fix 1: the seed's layers, which were sized for 64×64 inputs, fed 64×64 inputs.

    The only code change is the flatten: ``torch.flatten(x, 1)`` keeps the
    batch dimension, so a wrong input size no longer folds into the batch
    (SeedCNN's silent bug) but fails loudly in ``fc1``
    ("mat1 and mat2 shapes cannot be multiplied"). 328,586 parameters
    (327,690 of them in fc1).
    """

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.fc1 = nn.Linear(SEED_FLAT_FEATURES, check_positive_int("num_classes", num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc1(torch.flatten(self.features(x), 1))


class CNN224(_SeedLayers):
    """Fix 2: size ``fc1`` for the article's 224×224 input: ``Linear(32*112*112, 10)``.

    This fixes the ``view`` RuntimeError at 224 px, at a cost: fc1 grows from
    327,690 to 4,014,090 parameters (12×; 4,014,986 for the whole model), and
    the model is locked to inputs whose pooled map has 112 × 112 = 12,544 positions
    (224×224, but also 225×225 or 112×448; any other size fails in fc1, loudly, thanks to
    ``flatten``).
    """

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.fc1 = nn.Linear(32 * 112 * 112, check_positive_int("num_classes", num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc1(torch.flatten(self.features(x), 1))


class CNN(_SeedLayers):
    """Fix 3, size-agnostic: pool to a fixed 4×4 grid before the classifier.

    conv/ReLU/pool → ``AdaptiveAvgPool2d((4, 4))`` → ``Flatten`` → ``Linear(512, num_classes)``.
    Whatever the input size (224, 64, 97 px, odd sizes; at least 2×2), fc1
    sees 32·4·4 = 512 features, so the seed's size mismatch cannot happen and
    the classifier shrinks to 5,130 parameters (6,026 in all for 10 classes).
    """

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        check_positive_int("num_classes", num_classes)
        self.avgpool = nn.AdaptiveAvgPool2d((4, 4))
        self.flatten = nn.Flatten()
        self.fc1 = nn.Linear(32 * 4 * 4, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc1(self.flatten(self.avgpool(self.features(x))))


class LazyCNN(_SeedLayers):
    """Fix 2 without arithmetic: ``nn.LazyLinear`` infers fc1's input size on the first call.

    At 224×224 it infers 401,408 features (4,014,090 parameters, like CNN224)
    and is then locked to that size. Order matters: ``.to(device)``, then one
    dry forward pass, *then* build the optimizer, or the optimizer holds
    uninitialised parameters.
    """

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.flatten = nn.Flatten()
        self.fc1 = nn.LazyLinear(check_positive_int("num_classes", num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc1(self.flatten(self.features(x)))

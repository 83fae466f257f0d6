"""Small data sets for the CNN and RNN notebooks, built locally: nothing is downloaded.

A course that times training must not depend on a download that fails behind
a proxy or on an offline JupyterHub. So the image tasks are synthetic or come
from scikit-learn's bundled 8×8 digits (shipped inside the package), and the
sequence task is generated in numpy so that PyTorch and Keras can train on
the very same arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from labkit.core.optional import import_optional
from labkit.core.validate import check_int, check_real, check_seed
from labkit.machine.memory import require_memory_fits


def synthetic_images(
    n: int, size: int = 32, num_classes: int = 10, seed: int = 0, *, noise: float = 1.0
) -> tuple[Any, Any]:
    """``n`` learnable 3×size×size images and their labels, as torch tensors.

    Each class has its own smooth colour pattern (a random 3×4×4 grid,
    upsampled); an image is its class's pattern plus Gaussian noise of std
    ``noise``. The patterns depend only on ``num_classes`` (never on
    ``seed``), so a train set and a test set drawn with different seeds
    describe the same task; ``seed`` picks the labels and the noise. A small
    CNN learns it to near 100%: the task exists to time training, not to be hard.

    Returns ``(x, y)``: x float32 (n, 3, size, size), y int64 (n,).
    """
    n = check_int("n", n, minimum=1)
    size = check_int("size", size, minimum=2)
    num_classes = check_int("num_classes", num_classes, minimum=2)
    seed = check_seed("seed", seed)
    noise = check_real("noise", noise, low=0)
    require_memory_fits(
        4 * 3 * size * size * (n + num_classes),
        arrays=3,
        what=f"synthetic_images(n={n}, size={size})",
    )
    torch = import_optional("torch", "synthetic_images")
    functional = torch.nn.functional
    patterns_gen = torch.Generator().manual_seed(10_000 + num_classes)
    grid = torch.randn(num_classes, 3, 4, 4, generator=patterns_gen)
    patterns = functional.interpolate(grid, size=(size, size), mode="bilinear", align_corners=False)
    gen = torch.Generator().manual_seed(int(seed))
    y = torch.randint(0, num_classes, (n,), generator=gen)
    x = patterns[y] + noise * torch.randn(n, 3, size, size, generator=gen)
    return x.float().contiguous(), y.long()


def digits_images(
    size: int = 32, seed: int = 0, *, test_fraction: float = 0.25
) -> tuple[tuple[Any, Any], tuple[Any, Any]]:
    """scikit-learn's 1,797 handwritten digits, upsampled to 3×size×size, split train/test.

    The 8×8 images ship with scikit-learn (no download). They are scaled to
    [0, 1], normalised to mean 0 and std 1, bilinearly upsampled to
    ``size``×``size`` and repeated over 3 channels so they fit the course's
    RGB CNNs. ``seed`` fixes the split.

    Returns ``((x_train, y_train), (x_test, y_test))`` as torch tensors
    (float32 (n, 3, size, size) and int64 (n,)).
    """
    size = check_int("size", size, minimum=2)
    seed = check_seed("seed", seed)
    check_real("test_fraction", test_fraction, low=0, high=1, low_open=True, high_open=True)
    require_memory_fits(4 * 3 * size * size * 1797, arrays=3, what=f"digits_images(size={size})")
    import_optional("sklearn", "digits_images")
    datasets = import_optional("sklearn.datasets", "digits_images")
    torch = import_optional("torch", "digits_images")
    digits = datasets.load_digits()
    images = torch.from_numpy(digits.images.astype(np.float32) / 16.0)
    images = (images - images.mean()) / images.std()
    x = torch.nn.functional.interpolate(
        images[:, None], size=(size, size), mode="bilinear", align_corners=False
    ).repeat(1, 3, 1, 1)
    y = torch.from_numpy(digits.target.astype(np.int64))
    (xtr, ytr), (xte, yte) = train_test_split(x, y, test_fraction=test_fraction, seed=seed)
    return (xtr.contiguous(), ytr), (xte.contiguous(), yte)


def sequence_task(
    n: int, steps: int = 20, features: int = 50, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """A binary sequence task that needs memory: is the sum of feature 0 over all steps > 0?

    No single time step decides the label: the model must accumulate feature
    0 across the whole sequence in its hidden state, and ignore the other
    ``features - 1`` (noise). Shapes follow the article's RNN: batch, time,
    features, so ``sequence_task(10)`` gives x (10, 20, 50).

    Returns numpy arrays (both frameworks take them): x float32 (n, steps,
    features) and y int64 (n,) in {0, 1}, about half of each.
    """
    n = check_int("n", n, minimum=1)
    steps = check_int("steps", steps, minimum=1)
    features = check_int("features", features, minimum=1)
    seed = check_seed("seed", seed)
    require_memory_fits(
        4 * n * steps * features,
        arrays=2,
        what=f"sequence_task(n={n}, steps={steps}, features={features})",
    )
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, steps, features), dtype=np.float32)
    y = (x[:, :, 0].sum(axis=1) > 0).astype(np.int64)
    return x, y


def train_test_split(
    x: Any, y: Any, *, test_fraction: float = 0.25, seed: int = 0
) -> tuple[tuple[Any, Any], tuple[Any, Any]]:
    """Shuffle ``(x, y)`` with ``seed`` and split off ``test_fraction`` (numpy arrays or tensors)."""
    if len(x) != len(y):
        raise ValueError(f"x and y must have the same length, got {len(x)} and {len(y)}")
    check_real("test_fraction", test_fraction, low=0, high=1, low_open=True, high_open=True)
    seed = check_seed("seed", seed)
    n = len(x)
    n_test = max(1, round(n * float(test_fraction)))
    if n_test >= n:
        raise ValueError(f"{n} samples are too few to split with test_fraction={test_fraction}")
    order = np.random.default_rng(seed).permutation(n)
    if type(x).__module__.startswith("torch"):
        torch = import_optional("torch")
        order = torch.from_numpy(order)
    test, train = order[:n_test], order[n_test:]
    return (x[train], y[train]), (x[test], y[test])

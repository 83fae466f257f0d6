"""Models, data and training loops for the CNN and RNN notebooks.

Nothing here is imported by ``import labkit``: this package needs torch (the
CNN and PyTorch RNN classes subclass ``nn.Module``, so torch must exist when
they are *defined*) or TensorFlow (the Keras RNNs). Even ``import
labkit.models`` imports no framework: every name below is loaded on first use
(module ``__getattr__``), so a learner with only TensorFlow can still call
:func:`seed_rnn`, and a missing framework is a :class:`MissingPackageError`
naming the install command rather than an ImportError at import time.

The article's code is kept as it was written (``SeedCNN``, :func:`seed_rnn`)
so the notebooks can show its bugs; each fix is its own class whose docstring
names the bug it addresses.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Public name -> (submodule, framework it needs at import time, or None).
_EXPORTS: dict[str, tuple[str, str | None]] = {
    # CNNs (torch at definition time)
    "SeedCNN": ("cnn", "torch"),
    "CNN64": ("cnn", "torch"),
    "CNN224": ("cnn", "torch"),
    "CNN": ("cnn", "torch"),
    "LazyCNN": ("cnn", "torch"),
    "count_params": ("cnn", "torch"),
    # shape tracing (torch imported inside the functions)
    "LayerShape": ("trace", None),
    "ShapeTrace": ("trace", None),
    "trace_shapes": ("trace", None),
    "format_trace": ("trace", None),
    # RNNs
    "TorchRNN": ("rnn_torch", "torch"),
    "seed_rnn": ("rnn_keras", None),
    "seed_rnn_calls_cuda": ("rnn_keras", None),
    "seed_tensor_calls_cuda": ("rnn_keras", None),
    "keras_rnn": ("rnn_keras", None),
    "KERAS_RNN_KINDS": ("rnn_keras", None),
    "RnnTiming": ("rnn_keras", None),
    "time_keras_rnns": ("rnn_keras", None),
    "train_keras_rnn": ("rnn_keras", None),
    # data (no downloads)
    "synthetic_images": ("data", None),
    "digits_images": ("data", None),
    "sequence_task": ("data", None),
    "train_test_split": ("data", None),
    # training and throughput
    "TrainingResult": ("train", None),
    "train_classifier": ("train", None),
    "train_torch_rnn": ("train", None),
    "BatchThroughput": ("throughput", None),
    "throughput_by_batch": ("throughput", None),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    try:
        module_name, framework = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'labkit.models' has no attribute {name!r}") from None
    if framework is not None:
        from labkit._optional import import_optional

        import_optional(framework, f"labkit.models.{name}")
    module = importlib.import_module(f"labkit.models.{module_name}")
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

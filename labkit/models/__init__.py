"""Models, data and training loops for the CNN and RNN notebooks (05 and 06).

Nothing here is imported by ``import labkit``, and ``import labkit.models`` imports
no framework: it re-exports the names below from modules that import torch or
TensorFlow inside their functions. The modules:

- :mod:`labkit.models.cnn`: the CNNs (``SeedCNN``, ``CNN``, ``CNN64``, ``CNN224``);
- :mod:`labkit.models.rnn_torch`: the PyTorch RNN classifier;
- :mod:`labkit.models.rnn_keras`: the seed's Keras RNN and its fixed twins;
- :mod:`labkit.models.data`: synthetic images and sequences (no downloads);
- :mod:`labkit.models.train`: the training loops; :mod:`labkit.models.throughput`: images/s by batch;
- :mod:`labkit.models.trace`: the shapes a model's layers produce.

``cnn`` and ``rnn_torch`` define ``nn.Module`` subclasses, so they import torch
when they are imported, and are not re-exported here: import them by name
(``from labkit.models.cnn import CNN``). Without torch that import is a
:class:`~labkit.core.optional.MissingPackageError` naming the install command.

The article's code is kept as it was written (``SeedCNN``, ``seed_rnn``) so the
notebooks can show its bugs; each fix is its own class whose docstring names the
bug it addresses.
"""

from __future__ import annotations

from labkit.models.data import digits_images, sequence_task, synthetic_images, train_test_split
from labkit.models.plots import plot_throughput
from labkit.models.rnn_keras import (
    KERAS_RNN_KINDS,
    RnnTiming,
    keras_rnn,
    seed_rnn,
    seed_rnn_calls_cuda,
    seed_tensor_calls_cuda,
    time_keras_rnns,
    train_keras_rnn,
)
from labkit.models.throughput import BatchThroughput, throughput_by_batch
from labkit.models.trace import LayerShape, ShapeTrace, format_trace, trace_shapes
from labkit.models.train import TrainingResult, train_classifier, train_torch_rnn

__all__ = [
    "BatchThroughput",
    "KERAS_RNN_KINDS",
    "LayerShape",
    "RnnTiming",
    "ShapeTrace",
    "TrainingResult",
    "digits_images",
    "format_trace",
    "keras_rnn",
    "plot_throughput",
    "seed_rnn",
    "seed_rnn_calls_cuda",
    "seed_tensor_calls_cuda",
    "sequence_task",
    "synthetic_images",
    "throughput_by_batch",
    "time_keras_rnns",
    "trace_shapes",
    "train_classifier",
    "train_keras_rnn",
    "train_test_split",
    "train_torch_rnn",
]

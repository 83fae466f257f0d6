"""``labkit bench rnn``: a cuDNN recurrent layer (one call per sequence) against a loop over time steps.

Notebook 06's lesson: on a GPU an LSTM with cuDNN-eligible settings runs the
whole sequence as one cuDNN call (one op), while a loop launches small kernels for
every time step. Where TensorFlow is importable this times the article's
Keras layers with :func:`labkit.models.rnn_keras.time_keras_rnns`, the function
and the input shape notebook 06's cells use (SimpleRNN, LSTM with the
cuDNN-eligible defaults, LSTM with ``use_cudnn=False``; each eagerly and in a
``tf.function`` graph, interleaved). Without TensorFlow (or with a TensorFlow
that sees no GPU on a GPU machine) it times the torch counterparts on the
best device instead: ``nn.LSTM`` and ``nn.RNN`` (cuDNN on a GPU) against an
``nn.LSTMCell`` stepped in a Python loop. That is a different measurement
from the notebook's Keras cell, so the summary's first line names the
framework and why.

``--record`` on a GPU machine stores the GPU run as the ``rnn`` recording.
``--quick`` runs toy sizes with tiny time budgets: it checks that the command
works (the tests use it), and its numbers mean little.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from labkit.accel.common import ratio, times
from labkit.cli.bench.run import QUICK_NOTE
from labkit.core.units import format_duration

#: The recording ``--record`` writes.
REFERENCE_NAME = "rnn"

#: Input shape [batch, steps, features] and hidden units, as in the article.
SHAPE = {"batch": 64, "steps": 20, "features": 50, "units": 50}
QUICK_SHAPE = {"batch": 4, "steps": 8, "features": 8, "units": 8}

#: The kinds each framework times; the first of each pair is compared with the second.
KERAS_KINDS = ("SimpleRNN", "LSTM", "LSTM-no-cudnn")
TORCH_KINDS = ("nn.RNN", "nn.LSTM", "nn.LSTMCell loop")


def tensorflow_available() -> bool:
    """Whether TensorFlow can be imported here (without importing it)."""
    from labkit.core.optional import is_installed

    return is_installed("tensorflow")


@dataclass(frozen=True)
class RnnResults:
    """Median forward-pass ms per kind, on ``device``, measured with ``framework``."""

    framework: str  # "tensorflow" or "torch"
    device: str
    shape: dict[str, int]
    median_ms: dict[str, float]
    quick: bool = False
    note: str = ""  # why torch was measured rather than Keras

    @property
    def cudnn(self) -> bool:
        return "GPU" in self.device.upper() or self.device.startswith("cuda")

    def ratios(self) -> dict[str, float]:
        """The comparisons the notebook makes (loop time / fused time, and so on)."""
        m = self.median_ms
        if self.framework == "tensorflow":
            return {
                "LSTM-no-cudnn / LSTM (graph)": ratio(
                    m["LSTM-no-cudnn (graph)"], m["LSTM (graph)"]
                ),
                "SimpleRNN / LSTM (graph)": ratio(m["SimpleRNN (graph)"], m["LSTM (graph)"]),
                "LSTM eager / graph": ratio(m["LSTM (eager)"], m["LSTM (graph)"]),
            }
        return {
            "nn.LSTMCell loop / nn.LSTM": ratio(m["nn.LSTMCell loop"], m["nn.LSTM"]),
            "nn.RNN / nn.LSTM": ratio(m["nn.RNN"], m["nn.LSTM"]),
        }

    def _describe(self) -> str:
        s = self.shape
        what = "Keras (TensorFlow)" if self.framework == "tensorflow" else "torch"
        if self.note:
            what += f" ({self.note})"
        return (
            f"{what} on {self.device}, input [{s['batch']}, {s['steps']}, {s['features']}], "
            f"{s['units']} units, forward pass"
        )

    def summary(self) -> list[str]:
        dev = self.device
        fused = "LSTM" if self.framework == "tensorflow" else "nn.LSTM"
        path = "one cuDNN call per sequence" if self.cudnn else "no cuDNN on a CPU"
        lines = [f"{dev}: measured {self._describe()}"]
        lines += [f"{dev}: {kind}: {format_duration(ms)}" for kind, ms in self.median_ms.items()]
        for name, r in self.ratios().items():
            both = self.framework == "torch" and "loop" not in name  # nn.RNN is fused too
            note = f"both: {path}" if both else f"{fused}: {path}"
            lines.append(f"{dev}: {name} = {times(r)} ({note})")
        if self.quick:
            lines.append(QUICK_NOTE)
        return lines

    def to_dict(self) -> dict[str, Any]:
        """The recording's schema, which the notebooks' GPU cells read: a view, not the fields."""
        return {
            "framework": self.framework,
            "device": self.device,
            "quick": self.quick,
            "shape": dict(self.shape),
            "cudnn": self.cudnn,
            "median_ms": dict(self.median_ms),
            "ratios": self.ratios(),
        }

    def __str__(self) -> str:
        lines = [f"Recurrent layers, {self._describe()}:"]
        lines += [f"  {kind:<18} {format_duration(ms)}" for kind, ms in self.median_ms.items()]
        lines += [f"  {name} = {times(r)}" for name, r in self.ratios().items()]
        if self.quick:
            lines.append(QUICK_NOTE)
        return "\n".join(lines)


def _measure_keras(shape: dict[str, Any], budget: dict[str, Any]) -> RnnResults:
    from labkit.models.rnn_keras import time_keras_rnns

    timings = time_keras_rnns(**shape, kinds=KERAS_KINDS, **budget)
    return RnnResults(
        "tensorflow", timings.rows[0].device, shape, {t.label: t.median_ms for t in timings}
    )


def _measure_torch(shape: dict[str, int], budget: dict[str, float], device: str) -> RnnResults:
    import torch

    from labkit.timing.bench import bench

    batch, steps, features, units = (shape[k] for k in ("batch", "steps", "features", "units"))
    torch.manual_seed(0)
    dev = torch.device(device)
    x = torch.randn(batch, steps, features, device=dev)
    lstm = torch.nn.LSTM(features, units, batch_first=True).to(dev)
    rnn = torch.nn.RNN(features, units, batch_first=True).to(dev)
    cell = torch.nn.LSTMCell(features, units).to(dev)

    def layer(module: Any) -> Any:
        with torch.inference_mode():
            return module(x)[0]

    def cell_loop() -> Any:
        with torch.inference_mode():
            h = x.new_zeros(batch, units)
            c = x.new_zeros(batch, units)
            outs = []
            for t in range(steps):
                h, c = cell(x[:, t], (h, c))
                outs.append(h)
            return torch.stack(outs, dim=1)

    opts: dict[str, Any] = {"device": str(dev), "warn": False, **budget}
    medians = {
        "nn.RNN": bench(layer, rnn, label="nn.RNN", **opts).median_ms,
        "nn.LSTM": bench(layer, lstm, label="nn.LSTM", **opts).median_ms,
        "nn.LSTMCell loop": bench(cell_loop, label="nn.LSTMCell loop", **opts).median_ms,
    }
    return RnnResults("torch", str(dev), shape, medians)


def measure(quick: bool = False) -> RnnResults:
    """Keras where TensorFlow is importable, else torch; on the GPU where there is one."""
    import dataclasses

    from labkit.machine.gpu import has_gpu

    shape = dict(QUICK_SHAPE if quick else SHAPE)
    budget = {"warmup_ms": 1.0, "rep_ms": 5.0} if quick else {}
    on_gpu = has_gpu()
    result = _measure_keras(shape, budget) if tensorflow_available() else None
    note = ""
    if result is None or (on_gpu and not result.cudnn):  # no TF, or a TF that sees no GPU
        note = (
            "TensorFlow is not installed here"
            if result is None
            else "the TensorFlow here sees no GPU"
        )
        result = _measure_torch(shape, budget, "cuda" if on_gpu else "cpu")
    return dataclasses.replace(result, quick=quick, note=note)


def run_rnn_benchmark(as_json: bool = False, record: bool = False, quick: bool = False) -> int:
    """``labkit bench rnn``; returns the exit code (same rules as the other recorders)."""
    from labkit.cli.bench.run import preflight, record_and_report

    early = preflight("labkit bench rnn", record=record, quick=quick)
    if early is not None:
        return early
    results = measure(quick=quick)
    if record and not results.cudnn:  # a GPU that TensorFlow cannot see: say so, record nothing
        print(
            f"labkit bench rnn --record: the run was on {results.device}, not a GPU, so "
            "nothing was recorded",
            file=sys.stderr,
        )
    return record_and_report(
        "rnn",
        REFERENCE_NAME,
        results,
        as_json=as_json,
        record=record and results.cudnn,
    )

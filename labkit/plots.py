"""One look for every notebook's plots: units on every axis, the device in the title.

matplotlib is imported inside each function, so ``import labkit`` stays
light and a missing matplotlib is one clear message.
"""

from __future__ import annotations

from typing import Any

from labkit.timing import Timing, duration_unit

_UNIT_SCALE = {"ns": 1e6, "µs": 1e3, "ms": 1.0, "s": 1e-3}


def device_name(device: str) -> str:
    """A readable name for a ``Timing.device`` string: the CPU model, or the GPU's name."""
    if not isinstance(device, str) or not device:
        raise TypeError(f"device must be a non-empty string such as 'cpu', got {device!r}")
    kind = device.split(":")[0]
    if kind == "cpu":
        from labkit.cpu import cpu_info

        return cpu_info().model
    if kind == "cuda":
        import sys

        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            index = int(device.split(":")[1]) if ":" in device else torch.cuda.current_device()
            return torch.cuda.get_device_name(index)
    return device


def _pyplot() -> Any:
    from labkit._optional import import_optional

    import_optional("matplotlib", "the course's plots")
    import matplotlib.pyplot as plt

    return plt


def style_axes(
    ax: Any,
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    device: str | None = None,
    logx: bool = False,
    logy: bool = False,
) -> Any:
    """Label both axes (with units), log-scale where asked, and name the device in the title."""
    if not xlabel or not ylabel:
        raise ValueError("xlabel and ylabel must be non-empty: every axis says what it measures")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(f"{title}\non {device_name(device)}" if device else title)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.grid(True, which="major", alpha=0.3)
    return ax


def _plain_log_ticks(axis: Any) -> None:
    """Log axes labelled 2, 5, 10 rather than 2×10⁰: easier to read off."""
    from matplotlib.ticker import FuncFormatter

    fmt = FuncFormatter(lambda v, _pos: f"{v:g}")
    axis.set_major_formatter(fmt)
    axis.set_minor_formatter(fmt)


def plot_samples(timing: Timing, *, ax: Any = None) -> Any:
    """Every sample of a :class:`Timing` in the order it was taken, with its median and IQR.

    The first call (lazy initialisation, compilation) is drawn apart from the
    samples because it is not one of them: this picture is why ``bench`` warms
    up, and why it reports the median rather than the mean.
    """
    if not isinstance(timing, Timing):
        raise TypeError(f"Expected an instance of Timing, got {type(timing).__name__} instead.")
    plt = _pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.5))
    values = [timing.median_ms, timing.min_ms]
    if timing.first_call_ms is not None:
        values.append(timing.first_call_ms)
    unit = duration_unit(min(values))
    scale = _UNIT_SCALE[unit]
    xs = range(1, timing.n + 1)
    ax.plot(xs, [s * scale for s in timing.samples_ms], ".", ms=4, label="timed calls")
    ax.axhline(timing.median_ms * scale, color="C1", label="median")
    ax.axhspan(timing.q1_ms * scale, timing.q3_ms * scale, color="C1", alpha=0.2, label="IQR")
    if timing.first_call_ms is not None:
        ax.plot([0], [timing.first_call_ms * scale], "x", color="C3", ms=8, label="first call")
    ax.set_yscale("log")
    _plain_log_ticks(ax.yaxis)
    shown = [timing.min_ms, timing.max_ms] + [v for v in [timing.first_call_ms] if v is not None]
    # headroom above keeps the legend off the data (the axis is logarithmic)
    ax.set_ylim(min(shown) * scale / 1.5, max(shown) * scale * 3)
    ax.legend(loc="upper center", ncol=4, fontsize="small")
    return style_axes(
        ax,
        xlabel="call number (0 = first call, before warm-up)",
        ylabel=f"time per call ({unit})",
        title=f"{timing.label or 'timed call'}: every sample",
        device=timing.device,
    )

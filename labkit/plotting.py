"""One look for every notebook's plots: units on every axis, the device in the title.

The shared style only; each ``plot_*`` lives beside the results it draws
(``labkit.timing.plots``, ``labkit.bandwidth.plots``, ...). matplotlib is
imported inside each function, so ``import labkit`` stays light and a missing
matplotlib is one clear message.
"""

from __future__ import annotations

from typing import Any


def device_name(device: str) -> str:
    """A readable name for a ``Timing.device`` string: the CPU model, or the GPU's name."""
    kind = device.split(":")[0]
    if kind == "tf" or device.startswith("/"):  # TensorFlow's names: "tf:CPU:0", "/GPU:0"
        kind = "cuda" if "GPU" in device.upper() else "cpu"
        if kind == "cuda":
            return f"TensorFlow {device.split('/')[-1]}"
    if kind == "cpu":
        from labkit.machine.cpu import cpu_info

        return cpu_info().model
    if kind == "cuda":
        import sys

        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            index = int(device.split(":")[1]) if ":" in device else torch.cuda.current_device()
            return torch.cuda.get_device_name(index)
    return device


def pyplot() -> Any:
    from labkit.core.optional import import_optional

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
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(f"{title}\non {device_name(device)}" if device else title)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.grid(True, which="major", alpha=0.3)
    return ax


def plain_log_ticks(axis: Any) -> None:
    """Log axes labelled 2, 5, 10 rather than 2×10⁰; minor ticks 2 and 5 past a decade."""
    from matplotlib.ticker import FuncFormatter

    def minor(value: float, _pos: Any) -> str:
        low, high = sorted(axis.get_view_interval())
        if low > 0 and high / low < 10:
            return f"{value:g}"
        return f"{value:g}" if f"{value:e}"[0] in "25" else ""  # 2 and 5 only past a decade

    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    axis.set_minor_formatter(FuncFormatter(minor))


def bytes_ticks(axis: Any, low: float, high: float) -> None:
    """Ticks at powers of two labelled "16 KiB", "1 MiB", "1 GiB", at most about eight of them."""
    import math

    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    from labkit.core.units import format_bytes

    first, last = math.floor(math.log2(low)), math.ceil(math.log2(high))
    step = max(1, math.ceil((last - first + 1) / 8))
    ticks = [2.0**e for e in range(first, last + 1) if e % step == 0]
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: format_bytes(int(round(v)))))

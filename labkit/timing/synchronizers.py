"""One synchronizer per kind of device: the host, CUDA, MPS and XPU through torch, CuPy, TensorFlow.

Each waits until its device has finished the work it was given; the CUDA ones also time with
device events. :mod:`labkit.timing.sync` groups them and finds the right ones for a call.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from labkit.core.optional import import_optional, import_tensorflow

#: Flush buffer size when a device does not report its cache size: triton's
#: choice, larger than twice the L2 of any GPU so far.
DEFAULT_FLUSH_BYTES = 256 * 1024 * 1024


#: CPU last-level-cache size assumed when /sys does not say.
DEFAULT_CPU_CACHE_BYTES = 64 * 1024 * 1024


class HostSync:
    """The CPU: work is finished when the call returns, so there is nothing to wait for."""

    name = "cpu"

    def synchronize(self) -> None:
        return None

    def cache_flusher(self) -> Callable[[], None]:
        """Write a numpy buffer of twice the CPU's last-level cache (read from /sys on Linux)."""
        import numpy as np

        from labkit.machine.memory import require_fits

        nbytes = require_fits(
            2 * cpu_last_level_cache_bytes(),
            what="bench(flush_l2=True)'s "
            "cache-flush buffer (twice the last-level cache; flush_l2=False "
            "needs none)",
        )
        buffer = np.empty(nbytes, dtype=np.uint8)

        def flush() -> None:
            buffer.fill(0)

        return flush

    def __repr__(self) -> str:
        return "HostSync()"


class TorchCudaSync:
    """A CUDA (or ROCm) device driven by torch; times with ``torch.cuda.Event``."""

    def __init__(self, index: int | None = None) -> None:
        self._torch = import_optional("torch", "timing CUDA work")
        if not self._torch.cuda.is_available():
            raise ValueError(
                "device='cuda' but torch.cuda.is_available() is False: this machine has no "
                "CUDA GPU that torch can use. Use device='cpu' (or device=None to infer it); "
                "`labkit doctor` explains why no GPU is visible."
            )
        self.index = index
        self.name = "cuda" if index is None else f"cuda:{index}"

    def _device(self) -> Any:
        return self._torch.device(self.name)

    def synchronize(self) -> None:
        self._torch.cuda.synchronize(self._device())

    def create_event(self) -> Any:
        torch = self._torch
        event = torch.cuda.Event(enable_timing=True)
        stream = torch.cuda.current_stream(self._device())
        return _BoundEvent(event, stream)

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return float(start.event.elapsed_time(end.event))

    def cache_flusher(self) -> Callable[[], None]:
        torch = self._torch
        try:
            l2_bytes = int(torch.cuda.get_device_properties(self._device()).L2_cache_size)
        except (AttributeError, RuntimeError):
            l2_bytes = 0
        nbytes = 2 * l2_bytes if l2_bytes > 0 else DEFAULT_FLUSH_BYTES
        buffer = torch.empty(nbytes, dtype=torch.int8, device=self._device())
        return buffer.zero_

    def __repr__(self) -> str:
        return f"TorchCudaSync({self.index!r})"


class _BoundEvent:
    """A framework event plus the stream it must be recorded on."""

    def __init__(self, event: Any, stream: Any) -> None:
        self.event = event
        self.stream = stream

    def record(self) -> None:
        self.event.record(self.stream)


class TorchMpsSync:
    """Apple-silicon GPU through torch's MPS backend (host clock after ``torch.mps.synchronize``)."""

    name = "mps"

    def __init__(self) -> None:
        self._torch = import_optional("torch", "timing MPS work")
        if not self._torch.backends.mps.is_available():
            raise ValueError(
                "device='mps' but torch.backends.mps.is_available() is False: MPS needs "
                "an Apple-silicon Mac and a torch built with MPS. Use device='cpu' or None."
            )

    def synchronize(self) -> None:
        self._torch.mps.synchronize()

    def cache_flusher(self) -> Callable[[], None]:
        buffer = self._torch.empty(DEFAULT_FLUSH_BYTES, dtype=self._torch.int8, device="mps")
        return buffer.zero_

    def __repr__(self) -> str:
        return "TorchMpsSync()"


class TorchXpuSync:
    """An Intel GPU through torch's XPU backend (host clock after ``torch.xpu.synchronize``)."""

    def __init__(self, index: int | None = None) -> None:
        self._torch = import_optional("torch", "timing XPU work")
        xpu = getattr(self._torch, "xpu", None)
        if xpu is None or not xpu.is_available():
            raise ValueError(
                "device='xpu' but torch.xpu.is_available() is False: this machine has no "
                "Intel GPU that torch can use. Use device='cpu' or None."
            )
        self.index = index
        self.name = "xpu" if index is None else f"xpu:{index}"

    def synchronize(self) -> None:
        self._torch.xpu.synchronize(self._torch.device(self.name))

    def cache_flusher(self) -> Callable[[], None]:
        buffer = self._torch.empty(
            DEFAULT_FLUSH_BYTES, dtype=self._torch.int8, device=self._torch.device(self.name)
        )
        return buffer.zero_

    def __repr__(self) -> str:
        return f"TorchXpuSync({self.index!r})"


class CupySync:
    """A CUDA device driven by CuPy; times with ``cupy.cuda.Event``."""

    def __init__(self, index: int | None = None) -> None:
        self._cupy = import_optional("cupy", "timing CuPy work")
        if not self._cupy.is_available():
            raise ValueError(
                "device='cupy' but cupy.is_available() is False: CuPy needs an NVIDIA GPU and "
                "driver. Use device='cpu' or None; `labkit doctor` explains what is missing."
            )
        self.index = self._cupy.cuda.Device().id if index is None else index
        self.name = f"cupy:{self.index}"

    def synchronize(self) -> None:
        self._cupy.cuda.Device(self.index).synchronize()

    def create_event(self) -> Any:
        cupy = self._cupy
        with cupy.cuda.Device(self.index):
            return _BoundEvent(cupy.cuda.Event(), cupy.cuda.get_current_stream())

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return float(self._cupy.cuda.get_elapsed_time(start.event, end.event))

    def cache_flusher(self) -> Callable[[], None]:
        cupy = self._cupy
        device = cupy.cuda.Device(self.index)
        l2_bytes = int(device.attributes.get("L2CacheSize", 0))
        nbytes = 2 * l2_bytes if l2_bytes > 0 else DEFAULT_FLUSH_BYTES
        with device:
            buffer = cupy.empty(nbytes, dtype=cupy.int8)

        def flush() -> None:
            with device:
                buffer.fill(0)

        return flush

    def __repr__(self) -> str:
        return f"CupySync({self.index!r})"


class TensorFlowSync:
    """TensorFlow: ``tf.test.experimental.sync_devices()`` waits for every device it uses."""

    def __init__(self, device_name: str | None = None) -> None:
        self._tf = import_tensorflow("timing TensorFlow work")
        self.name = "tf" if not device_name else f"tf:{_short_tf_device(device_name)}"

    def synchronize(self) -> None:
        self._tf.test.experimental.sync_devices()

    def cache_flusher(self) -> Callable[[], None]:
        tf = self._tf
        where = self.name[3:] if self.name.startswith("tf:") else None

        def flush() -> None:
            # A fresh zero-filled tensor is a write of the whole buffer on the device.
            if where:
                with tf.device(where):
                    tf.zeros([DEFAULT_FLUSH_BYTES], dtype=tf.int8)
            else:
                tf.zeros([DEFAULT_FLUSH_BYTES], dtype=tf.int8)

        return flush

    def __repr__(self) -> str:
        return f"TensorFlowSync({self.name!r})"


def _short_tf_device(device: str) -> str:
    """'/job:localhost/replica:0/task:0/device:GPU:0' -> 'GPU:0'."""
    match = re.search(r"(?:device:)?([A-Za-z]+:\d+)$", device)
    return match.group(1).upper() if match else device


def cpu_last_level_cache_bytes(sysfs: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> int:
    """Size of the CPU's largest cache, read from Linux's /sys; 64 MiB where unknown.

    ``flush_l2=True`` on the CPU writes twice this many bytes between calls,
    so the next call finds its inputs in main memory, not in cache.
    """
    from labkit.machine.cpu import parse_cache_size

    sizes: list[int] = []
    try:
        for entry in sorted(sysfs.glob("index*/size")):
            parsed = parse_cache_size(entry.read_text())
            if parsed:
                sizes.append(parsed)
    except OSError:
        return DEFAULT_CPU_CACHE_BYTES
    return max(sizes) if sizes else DEFAULT_CPU_CACHE_BYTES

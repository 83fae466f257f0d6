"""Where did TensorFlow really run that op? Soft placement, shown rather than told.

``with tf.device("/GPU:0")`` reads like an order, but TensorFlow treats it as a
wish: with *soft device placement* on (the default), an op that cannot run on
the requested device silently runs on another one. On a machine without a GPU
the "GPU" matmul runs on the CPU and nothing says so. Turning soft placement
off turns the silent fallback into an ``InvalidArgumentError`` ("Could not
satisfy device specification ..."), which is the honest behaviour to teach.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from labkit.accel.common import first_line
from labkit.core.optional import import_tensorflow
from labkit.core.validate import check_positive_int, check_tf_device
from labkit.machine.memory import require_memory_fits

PURPOSE = "the TensorFlow device-placement demo"


@dataclass(frozen=True)
class PlacementDemo:
    """What ``with tf.device(requested)`` did, with soft placement on and off.

    ``actual_device`` is ``y.device`` of the matmul run under soft placement
    (the default). ``strict_error`` is the first line of the error raised with
    soft placement off, or None when the requested device exists (a GPU
    machine: then ``strict_device`` says where the strict run landed).
    ``soft_placement_restored`` confirms the global setting was put back.
    """

    requested_device: str
    gpus_visible: int
    soft_placement_default: bool
    actual_device: str
    strict_error_type: str | None
    strict_error: str | None
    strict_device: str | None
    soft_placement_restored: bool

    @property
    def fell_back(self) -> bool:
        """Whether the op ran somewhere other than the requested device type."""
        wanted = self.requested_device.rsplit("/", 1)[-1].split(":")[0].upper()
        return f"/DEVICE:{wanted}:" not in self.actual_device.upper()

    def __str__(self) -> str:
        lines = [
            f'with tf.device("{self.requested_device}"): y = tf.matmul(a, b)',
            f"  GPUs TensorFlow can see: {self.gpus_visible}",
            f"  soft placement (default {self.soft_placement_default}): y.device = "
            f"{self.actual_device}",
        ]
        if self.fell_back:
            lines.append("  -> the op silently ran on another device; nothing warned you.")
        if self.strict_error is not None:
            lines.append(f"  soft placement off: {self.strict_error_type}: {self.strict_error}")
        else:
            lines.append(f"  soft placement off: y.device = {self.strict_device}")
        lines.append(
            "  soft placement restored afterwards: "
            + ("yes" if self.soft_placement_restored else "NO")
        )
        return "\n".join(lines)


def tf_soft_placement_demo(requested_device: str = "/GPU:0", size: int = 64) -> PlacementDemo:
    """Run a matmul "on" ``requested_device`` with soft placement on, then off.

    The global soft-placement setting is restored afterwards, even on error.
    """
    check_tf_device(requested_device, "requested_device")
    size = check_positive_int("size", size)  # the matrix side
    require_memory_fits(4 * size * size, arrays=4, what=f"tf_soft_placement_demo(size={size})")
    tf = import_tensorflow(PURPOSE)
    a = tf.random.stateless_normal((size, size), seed=(1, 2))
    b = tf.random.stateless_normal((size, size), seed=(3, 4))
    gpus = tf.config.list_physical_devices("GPU")
    original = bool(tf.config.get_soft_device_placement())
    try:
        tf.config.set_soft_device_placement(True)
        with tf.device(requested_device):
            y = tf.matmul(a, b)
        actual = str(y.device)
        strict_type = strict_error = strict_device = None
        tf.config.set_soft_device_placement(False)
        try:
            with tf.device(requested_device):
                y_strict = tf.matmul(a, b)
            strict_device = str(y_strict.device)
        except tf.errors.InvalidArgumentError as exc:
            strict_type = type(exc).__name__
            strict_error = first_line(exc)
    finally:
        tf.config.set_soft_device_placement(original)
    return PlacementDemo(
        requested_device=requested_device,
        gpus_visible=len(gpus),
        soft_placement_default=original,
        actual_device=actual,
        strict_error_type=strict_type,
        strict_error=strict_error,
        strict_device=strict_device,
        soft_placement_restored=bool(tf.config.get_soft_device_placement()) == original,
    )


@dataclass(frozen=True)
class DeviceLog:
    """What ``tf.debugging.set_log_device_placement(True)`` printed while ``fn`` ran.

    ``log_lines`` is whatever reached the process's stderr (file descriptor 2)
    during the call: TensorFlow writes the placement log from C++, not through
    Python, so it can only be caught at the descriptor level. It may be empty:
    labkit sets ``TF_CPP_MIN_LOG_LEVEL=3`` before importing TensorFlow (to keep
    notebooks clean), which also drops these INFO lines, and TF 2.21 on the
    development machine printed nothing even without it. ``result_devices``
    is the reliable answer: ``.device`` of each tensor ``fn`` returned.
    """

    log_lines: tuple[str, ...]
    result_devices: tuple[str, ...]

    def __str__(self) -> str:
        lines = ["devices of the results: " + (", ".join(self.result_devices) or "(none)")]
        if self.log_lines:
            lines.append("placement log:")
            lines.extend(f"  {line}" for line in self.log_lines)
        else:
            lines.append(
                "placement log: TensorFlow printed nothing here (its C++ log is filtered by "
                "TF_CPP_MIN_LOG_LEVEL); read the devices above, or run a script with "
                "TF_CPP_MIN_LOG_LEVEL=0 set before TensorFlow is imported"
            )
        return "\n".join(lines)


def tf_device_log(fn: Callable[[], Any]) -> DeviceLog:
    """Call ``fn()`` with device-placement logging on and capture what it printed.

    Capturing swaps file descriptor 2 for a temporary file, which works in a
    script and in a Jupyter kernel alike. Logging is switched off afterwards.
    """
    tf = import_tensorflow(PURPOSE)
    tf.debugging.set_log_device_placement(True)
    with tempfile.TemporaryFile() as capture:
        try:
            sys.stderr.flush()
            saved = os.dup(2)
        except (OSError, ValueError):
            saved = None
        try:
            if saved is not None:
                os.dup2(capture.fileno(), 2)
            result = fn()
        finally:
            if saved is not None:
                sys.stderr.flush()
                os.dup2(saved, 2)
                os.close(saved)
            tf.debugging.set_log_device_placement(False)
        capture.seek(0)
        text = capture.read().decode("utf-8", errors="replace")
    values = result if isinstance(result, (tuple, list)) else (result,)
    devices = tuple(str(v.device) for v in values if hasattr(v, "device"))
    lines = tuple(line for line in text.splitlines() if line.strip())
    return DeviceLog(log_lines=lines, result_devices=devices)

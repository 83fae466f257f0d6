"""gpu-labkit: the helper package behind the course notebooks.

``import labkit`` imports no deep-learning framework. torch, TensorFlow and
CuPy are imported inside the functions that need them, so that opening a
notebook (or running ``labkit doctor``) never pays for a framework it does not
use, and a missing framework is a clear message rather than an ImportError at
import time.
"""

from __future__ import annotations

__version__ = "0.1.0"

from labkit.core.optional import MissingPackageError, import_tensorflow, is_installed, try_import
from labkit.machine.gpu import has_gpu, require_gpu
from labkit.machine.published import use_gpu
from labkit.machine.report import DeviceReport, device_report, pick_device
from labkit.timing.bench import NoisyTimingWarning, Timing, bench
from labkit.timing.compare import compare
from labkit.timing.interleave import interleave

__all__ = [
    "DeviceReport",
    "MissingPackageError",
    "NoisyTimingWarning",
    "Timing",
    "bench",
    "compare",
    "interleave",
    "device_report",
    "has_gpu",
    "import_tensorflow",
    "is_installed",
    "pick_device",
    "require_gpu",
    "try_import",
    "use_gpu",
    "__version__",
]

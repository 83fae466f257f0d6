"""Optional frameworks: find them without importing, import them on demand.

Every framework the course uses is optional for some learner (a laptop
without TensorFlow, a JupyterHub image without CuPy). A missing one must end
in one sentence that names the install command, never a traceback.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from types import ModuleType

#: What to install for each optional module, in words a learner can paste.
INSTALL_HINTS: dict[str, str] = {
    "torch": "pip install torch",
    "tensorflow": "pip install 'gpu-labkit[cpu]' (or: pip install tensorflow-cpu)",
    "keras": "pip install keras",
    "cupy": "pip install cupy-cuda12x (it needs an NVIDIA GPU and driver to run kernels)",
    "numba": "pip install numba numba-cuda",
    "matplotlib": "pip install matplotlib",
    "sklearn": "pip install scikit-learn",
    "nbformat": "pip install nbformat",
    "triton": "pip install 'gpu-labkit[cpu]' (or: pip install triton; Linux only)",
}

#: Set before TensorFlow is imported; afterwards they have no effect.
#: Level 3 keeps TensorFlow's C++ INFO/WARNING/ERROR lines out of notebooks.
TF_QUIET_ENV: dict[str, str] = {"TF_CPP_MIN_LOG_LEVEL": "3"}


class MissingPackageError(ImportError):
    """An optional package is not installed; the message says how to install it."""

    def __init__(self, package: str, purpose: str | None = None) -> None:
        self.package = package
        hint = INSTALL_HINTS.get(package, f"pip install {package}")
        what = f" for {purpose}" if purpose else ""
        super().__init__(f"{package} is not installed{what}. Install it with: {hint}")


def is_installed(name: str) -> bool:
    """Whether ``name`` can be imported, without importing it.

    A module set to ``None`` in ``sys.modules`` counts as missing: that is how
    Python (and our tests) mark a module as unimportable.
    """
    if name in sys.modules:
        return sys.modules[name] is not None
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def import_optional(name: str, purpose: str | None = None) -> ModuleType:
    """Import ``name`` or raise :class:`MissingPackageError` naming the install command."""
    if name == "tensorflow":
        return import_tensorflow(purpose)
    if not is_installed(name):
        raise MissingPackageError(name, purpose)
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise MissingPackageError(name, purpose) from exc


@contextlib.contextmanager
def stderr_fd_silenced() -> Iterator[None]:
    """Send file descriptor 2 to /dev/null for the duration of the block.

    Python exceptions still propagate; only C-level writes are dropped.
    """
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real fd 2 (some embedded interpreters)
        yield
        return
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def import_tensorflow(purpose: str | None = None) -> ModuleType:
    """Import TensorFlow with its C++ log noise turned off.

    TensorFlow prints C++ log lines at import time straight to the process's
    stderr (absl's "log messages before InitializeLog", oneDNN's notice). In a
    notebook they land in the cell output, where they bury the lesson and
    break nbval. ``TF_CPP_MIN_LOG_LEVEL=3`` (set as a default, before the first
    import) silences later logs but not the oneDNN notice, and the variable
    that does (``TF_ENABLE_ONEDNN_OPTS=0``) would also switch off TensorFlow's
    fast CPU kernels, changing the very speed the course measures. So the
    import itself runs with the process's stderr pointed at /dev/null.
    """
    if "tensorflow" in sys.modules and sys.modules["tensorflow"] is not None:
        return sys.modules["tensorflow"]
    if not is_installed("tensorflow"):
        raise MissingPackageError("tensorflow", purpose)
    preload_triton()
    for key, value in TF_QUIET_ENV.items():
        os.environ.setdefault(key, value)
    try:
        with stderr_fd_silenced():
            tf = importlib.import_module("tensorflow")
    except ImportError as exc:
        raise MissingPackageError("tensorflow", purpose) from exc
    # Python-side logging (absl) is separate from the C++ logs; some TF builds lack it.
    with contextlib.suppress(Exception):
        tf.get_logger().setLevel("ERROR")
    return tf


def preload_triton() -> None:
    """Import Triton now, if it is installed, so that TensorFlow can come after it.

    Why: Triton and TensorFlow each bring their own LLVM. With the pinned
    versions (triton 3.9.0, TensorFlow 2.21), importing Triton *after*
    TensorFlow kills the process (``LLVM ERROR: inconsistency in registered
    CommandLine options``), and the other order works. torch imports Triton by
    itself wherever it is installed (``torch._dynamo`` does, so every
    ``torch.compile``), and torch's CUDA wheels install Triton on Linux, so a
    process with TensorFlow would die at its first ``torch.compile``. Every
    TensorFlow import in labkit goes through :func:`import_tensorflow`, which
    calls this first; code that imports TensorFlow directly must import
    Triton before it (``tests/test_optional.py`` checks that the clash still
    exists). Nothing happens where TensorFlow is already imported: it is
    too late then, and importing Triton would end the process.
    """
    if "tensorflow" in sys.modules or "triton" in sys.modules or not is_installed("triton"):
        return
    with contextlib.suppress(ImportError):
        importlib.import_module("triton")


def try_import(name: str, purpose: str | None = None) -> ModuleType | None:
    """Import an optional package for a notebook cell, or explain in one line why not.

    Returns ``None`` (after printing the install command) when the package is
    missing, so a notebook cell can write ``if (tf := try_import("tensorflow")):``
    and keep running on a machine without it.
    """
    try:
        return import_optional(name, purpose)
    except MissingPackageError as exc:
        print(f"Skipped: {exc}")
        return None

"""Where Triton's kernels run here: compiled for an NVIDIA GPU, or by the interpreter on the CPU.

Why this step comes first: ``@triton.jit`` reads ``TRITON_INTERPRET`` when a
function is *defined*, not when it runs. With ``TRITON_INTERPRET=1`` it
returns an interpreted function that runs each program of the grid in turn,
with NumPy, on CPU tensors; without it, a function that compiles for the GPU
on its first launch. Triton's own library functions (``tl.max``, ``tl.sum``,
...) are defined when ``triton`` is first imported, and an interpreted kernel
cannot call compiled ones (checked with triton 3.9.0: "Cannot call
@triton.jit'd outside of the scope of a kernel"). So the variable must be set
before anything imports Triton (``torch.compile`` does), and the choice
cannot change in that process afterwards.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import sys
from dataclasses import dataclass
from types import ModuleType

from labkit.core.optional import MissingPackageError, is_installed

INTERPRET_ENV = "TRITON_INTERPRET"


@dataclass(frozen=True)
class TritonSetup:
    """Triton's version, and whether its kernels run interpreted (``device`` ``"cpu"``) or compiled."""

    version: str
    interpreted: bool
    device: str  # where the kernels' tensors must live: "cpu" (interpreter) or "cuda"
    reason: str

    def __str__(self) -> str:
        how = "interpreter, on CPU tensors" if self.interpreted else "compiled for the GPU"
        return f"Triton {self.version}: {how} ({self.reason})"


def _gpu_name() -> str | None:
    import torch

    if not torch.cuda.is_available() or torch.version.hip is not None:
        return None
    return str(torch.cuda.get_device_name(0))


def triton_setup(*, prefer_gpu: bool = True) -> TritonSetup:
    """Choose how Triton runs here, and set ``TRITON_INTERPRET`` to match.

    On a machine with an NVIDIA GPU (and ``prefer_gpu``) the kernels compile
    for it, unless ``TRITON_INTERPRET=1`` is already set; everywhere else the
    interpreter runs them. Raises :class:`MissingPackageError` (one line with
    the install command) where Triton is not installed.
    """
    if not is_installed("triton"):
        raise MissingPackageError("triton", "notebook 12's kernels")
    imported = triton_imported_interpreted()
    if imported is not None:  # Triton's library exists already: its mode is fixed
        interpreted = imported
        reason = f"{INTERPRET_ENV}={int(imported)} when Triton was first imported here"
        if not interpreted and _gpu_name() is None:
            raise RuntimeError(
                "Triton was imported in this process before TRITON_INTERPRET=1 was set, and "
                "without a GPU its kernels can only run interpreted: restart the kernel "
                "(Kernel → Restart) and load the kernels before anything imports Triton "
                "(torch.compile does)."
            )
    elif os.environ.get(INTERPRET_ENV) == "1":
        interpreted, reason = True, f"{INTERPRET_ENV}=1 was set"
    elif prefer_gpu and (name := _gpu_name()) is not None:
        interpreted, reason = False, f"NVIDIA GPU: {name}"
    else:
        why = "asked for the CPU" if not prefer_gpu else "no NVIDIA GPU visible"
        interpreted, reason = True, why
    if imported is None:
        os.environ[INTERPRET_ENV] = "1" if interpreted else "0"
    return TritonSetup(
        version=importlib.metadata.version("triton"),
        interpreted=interpreted,
        device="cpu" if interpreted else "cuda",
        reason=reason,
    )


def triton_imported_interpreted() -> bool | None:
    """None where Triton is not imported yet; else whether it was imported for the interpreter."""
    if sys.modules.get("triton.language") is None:
        return None
    import triton.language as tl

    return type(tl.max).__name__ == "InterpretedFunction"


def kernels_interpreted(module: ModuleType) -> bool:
    """Whether ``module``'s kernels were defined for the interpreter."""
    return type(module.copy_kernel).__name__ == "InterpretedFunction"


def load_kernels(setup: TritonSetup) -> ModuleType:
    """The kernels' module, defined the way ``setup`` chose (see the module's docstring)."""
    module = importlib.import_module("labkit.triton_kernels.kernels")
    if kernels_interpreted(module) != setup.interpreted:
        raise RuntimeError(
            f"The Triton kernels in this process were defined "
            f"{'for the interpreter' if kernels_interpreted(module) else 'for the GPU'}, and "
            "that cannot change now: restart the kernel (Kernel → Restart) and run again."
        )
    return module

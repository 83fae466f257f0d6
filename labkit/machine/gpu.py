"""Gate notebook cells on a GPU: run them where one exists, show a recording elsewhere.

Most learners open the course on a laptop or a CPU-only JupyterHub. A cell
that needs a GPU must neither crash nor silently run on the CPU and claim a
GPU result. ``require_gpu`` makes the choice explicit::

    if labkit.require_gpu("the naive clock under-reporting a GPU matmul",
                          reference="naive_timing"):
        ...  # the real measurement

Without a GPU it prints what the cell would show and, when one was made, the
result recorded on a real GPU, labelled with that GPU and its date. The text
depends only on the shipped recording, so it is the same on every CPU-only
machine and notebooks can test their outputs.
"""

from __future__ import annotations

from labkit.core.optional import import_optional, is_installed
from labkit.machine import profile as _profile
from labkit.machine import reference as _reference


def _check_reference(reference: object) -> None:
    """None, or a valid recording name; the error names ``reference``."""
    if reference is None:
        return
    try:
        _reference.check_name(reference)
    except ValueError as exc:
        raise ValueError(f"reference: {exc}") from None


def has_gpu() -> bool:
    """Whether a CUDA GPU is usable here: by torch (ROCm builds count), or by CuPy without torch.

    Apple's MPS and Intel's XPU do not count: the course's GPU cells use CUDA
    (CuPy kernels, CUDA events, nvidia-smi), so "has a GPU" means an NVIDIA
    (or ROCm) device. Use ``torch.backends.mps.is_available()`` to ask about MPS.
    Under a profile that hides GPUs (:mod:`labkit.machine.profile`) the answer is False.
    """
    if _profile.hides_gpu():
        return False
    if is_installed("torch"):
        torch = import_optional("torch", "detecting a GPU")
        try:
            return bool(torch.cuda.is_available())
        except Exception:  # a broken driver is "no usable GPU", not a crash
            return False
    if is_installed("cupy"):
        try:
            cupy = import_optional("cupy", "detecting a GPU")
            return bool(cupy.is_available())
        except Exception:
            return False
    return False


def no_gpu_lines(what: str, reference: str | None = None) -> list[str]:
    """The lines :func:`require_gpu` prints on a machine without a GPU."""
    _check_reference(reference)
    lines = [f"No GPU here: this cell would show {what}."]
    if reference is None:
        return lines
    recording = _reference.load(reference)
    if recording is None:
        lines.append(
            "No recording from a real GPU exists yet; make one on a GPU machine with: "
            f"{_reference.record_command(reference)}"
        )
    else:
        lines.extend(_reference.format_reference(recording).splitlines())
    return lines


def require_gpu(what: str, reference: str | None = None) -> bool:
    """True where a GPU exists; elsewhere print what the cell would show and return False.

    Args:
        what: what the cell demonstrates, completing "this cell would show ...".
        reference: the name of a recording (see :mod:`labkit.machine.reference`) to
            print in place of the live result, e.g. "naive_timing".
    """
    _check_reference(reference)
    if has_gpu():
        return True
    for line in no_gpu_lines(what.strip().rstrip("."), reference):
        print(line)
    return False

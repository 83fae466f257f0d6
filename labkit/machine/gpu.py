"""Gate notebook cells on a GPU: run them where one exists, show a recording elsewhere.

Most learners open the course on a laptop or a CPU-only JupyterHub. A cell
that needs a GPU must neither crash nor silently run on the CPU and claim a
GPU result. ``require_gpu`` makes the choice explicit::

    if labkit.require_gpu("the naive clock under-reporting a GPU matmul",
                          reference="naive_timing"):
        ...  # the real measurement

Without a GPU it prints what the cell would show and then, in this order of
precedence: the result recorded on a real GPU, labelled with that GPU and its
date, where one was made; otherwise the lesson's own model applied to a named
GPU's spec sheet beside published measurements with their sources
(``predict=``, :mod:`labkit.machine.prediction`), or the published measurements
alone. The text depends only on shipped tables and recordings, so it is the
same on every CPU-only machine and notebooks can test their outputs.
"""

from __future__ import annotations

from labkit.core.optional import import_optional, is_installed
from labkit.machine import profile as _profile
from labkit.machine import reference as _reference
from labkit.machine.prediction import Predictor
from labkit.machine.published import chosen_gpu, published_figures

#: How many published figures a cell without a predictor shows.
FIGURES_WITHOUT_PREDICTION = 6


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


def no_gpu_lines(
    what: str, reference: str | None = None, predict: Predictor | None = None
) -> list[str]:
    """The lines :func:`require_gpu` prints on a machine without a GPU."""
    _check_reference(reference)
    lines = [f"No GPU here: this cell would show {what}."]
    recording = _reference.load(reference) if reference is not None else None
    if recording is not None:
        lines.extend(_reference.format_reference(recording).splitlines())
        return lines
    if predict is not None:
        lines.extend(predict(chosen_gpu()).lines())
    elif reference is not None:
        figures = published_figures(reference)[:FIGURES_WITHOUT_PREDICTION]
        if figures:
            lines.append("Published figures, not measured here:")
            lines.extend(f"  - {f.line()}" for f in figures)
    if reference is not None:
        lines.append(
            "No recording from a real GPU exists yet; make one on a GPU machine with: "
            f"{_reference.record_command(reference)}"
        )
    return lines


def require_gpu(what: str, reference: str | None = None, predict: Predictor | None = None) -> bool:
    """True where a GPU exists; elsewhere print what the cell would show and return False.

    Args:
        what: what the cell demonstrates, completing "this cell would show ...".
        reference: the name of a recording (see :mod:`labkit.machine.reference`) to
            print in place of the live result, e.g. "naive_timing".
        predict: the lesson's prediction for a GPU's spec sheet, shown (with the
            published measurements it picks) where no recording exists; it is
            called with the GPU :func:`labkit.machine.published.chosen_gpu` returns.
    """
    _check_reference(reference)
    if has_gpu():
        return True
    for line in no_gpu_lines(what.strip().rstrip("."), reference, predict):
        print(line)
    return False

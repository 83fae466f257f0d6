"""The reference profile: what the committed notebook outputs assume about the machine.

The notebooks are committed with their outputs, and strict nbval (``make test``)
compares a fresh run with them. A measured *value* is masked by the sanitize
file, but the *structure* of an output (how many rows a sweep has, which
thread counts a table compares, whether a GPU cell runs live) must be the same
on every machine that runs the test: a 24 GiB VM, an 8 GiB JupyterHub pod, a
laptop with a browser open, a GPU server.

Left to itself, labkit adapts to the machine: a probe sizes its buffers from
the memory free *now*, "all threads" means the CPUs this process may use, and
a GPU runs the GPU cells. A profile pins those three inputs, so that every
machine that can provide it produces the same structure:

- ``threads``: torch's, OpenMP's, MKL's, OpenBLAS's and TensorFlow's thread
  count, and what :func:`labkit.parallelism.threads.cpu_threads` answers;
- ``host_memory_bytes``: the free host memory labkit sizes every buffer from
  (:func:`labkit.machine.memory.available_bytes`), whatever is really free, as long as
  the machine has at least that much free when the run starts;
- ``hide_gpu``: GPUs are invisible (``CUDA_VISIBLE_DEVICES=""``, and labkit's
  own driver probe reports none), so GPU cells print their CPU-side output.

``make notebooks`` and ``make test`` run the notebooks under :data:`REFERENCE`
(through ``tools/with_profile.py``, which sets :data:`ENV_VAR` and the thread
variables before any kernel starts, and stops at once, with the reason, where
the machine cannot provide the profile). A student's ``make lab`` runs
without a profile: there labkit measures the machine as it is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

#: The environment variable that names the active profile ("" or unset: none).
ENV_VAR = "LABKIT_PROFILE"

_GIB = 1024**3

#: The variables that fix the thread count of each library the notebooks use.
THREAD_VARIABLES = (
    "OMP_NUM_THREADS",  # torch's intra-op pool (and any OpenMP code)
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",  # NumPy's BLAS
    "TF_NUM_INTRAOP_THREADS",
    "TF_NUM_INTEROP_THREADS",
)


class ProfileError(RuntimeError):
    """The machine cannot provide the active profile, or the profile's name is unknown."""


@dataclass(frozen=True)
class Profile:
    """One named set of machine assumptions (see the module docstring)."""

    name: str
    threads: int
    host_memory_bytes: int
    hide_gpu: bool
    description: str

    def environment(self) -> dict[str, str]:
        """The variables a process and its children need for this profile, set before they start.

        Thread counts must be set before torch, NumPy or TensorFlow is
        imported (their pools are sized at start-up), and
        ``CUDA_VISIBLE_DEVICES`` before the CUDA runtime initialises, so a
        profile is applied to a whole process tree, never switched on mid-run.
        """
        env = {ENV_VAR: self.name}
        env.update({name: str(self.threads) for name in THREAD_VARIABLES})
        if self.hide_gpu:
            env["CUDA_VISIBLE_DEVICES"] = ""
            env["HIP_VISIBLE_DEVICES"] = ""  # ROCm builds of torch
        return env

    def summary(self) -> str:
        gpu = "GPUs hidden" if self.hide_gpu else "GPUs visible"
        return (
            f"profile {self.name!r}: {self.threads} threads, buffers sized for "
            f"{self.host_memory_bytes / _GIB:g} GiB of free host memory, {gpu}"
        )


#: The profile of the committed notebook outputs: CI's machine (2 cores, no GPU),
#: with a memory budget that an 8 GiB JupyterHub pod can still provide.
REFERENCE = Profile(
    name="reference",
    threads=2,
    host_memory_bytes=6 * _GIB,
    hide_gpu=True,
    description=(
        "the machine the committed notebook outputs were made on: 2 threads, buffers sized "
        "for 6 GiB of free host memory, no GPU"
    ),
)

PROFILES: dict[str, Profile] = {REFERENCE.name: REFERENCE}


def get(name: str) -> Profile:
    """The profile called ``name``; the error lists the names that exist."""
    try:
        return PROFILES[name]
    except (KeyError, TypeError):
        raise ProfileError(
            f"unknown profile {name!r}: the profiles are {', '.join(map(repr, PROFILES))}"
        ) from None


_warned: set[str] = set()


def active() -> Profile | None:
    """The profile named by ``LABKIT_PROFILE``, or None where it is unset, empty or unknown.

    An unknown name (a typo in a shell) is not worth a traceback in every
    cell: it is ignored, with one warning that names the profiles. The tools
    that apply a profile (``tools/with_profile.py``) refuse unknown names.
    """
    name = os.environ.get(ENV_VAR, "").strip()
    if not name:
        return None
    try:
        return get(name)
    except ProfileError as exc:
        if name not in _warned:
            _warned.add(name)
            import warnings

            warnings.warn(f"{ENV_VAR}: {exc}; ignoring it", UserWarning, stacklevel=2)
        return None


def hides_gpu() -> bool:
    """Whether the active profile hides GPUs (False without a profile)."""
    profile = active()
    return profile is not None and profile.hide_gpu


def missing(profile: Profile, *, free_host_bytes: int) -> list[str]:
    """What this machine lacks to provide ``profile``, one sentence each (empty: nothing).

    Only memory can be missing: threads can always be started (more threads
    than CPUs run slower, but the output has the same structure, and its
    measured values are masked), and hiding a GPU always works. The free
    memory is what labkit would use without a profile
    (:func:`labkit.machine.memory.available_bytes`), container limits included.
    """
    if free_host_bytes < profile.host_memory_bytes:
        return [
            f"the profile sizes buffers for {profile.host_memory_bytes / _GIB:g} GiB of free "
            f"host memory, but only {free_host_bytes / _GIB:.1f} GiB is free here (the "
            "container's memory limit included); close other programs (notebooks, kernels, "
            "browsers), or run on a machine with more memory"
        ]
    return []

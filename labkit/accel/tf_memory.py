"""What TensorFlow will do with GPU memory here, found out without touching a GPU.

By default TensorFlow maps nearly all of a GPU's memory the first time it
initialises it, so a PyTorch process (or a second notebook) on the same GPU
then fails with out-of-memory. Memory growth makes TF allocate as it goes.
Two ways to turn it on, both *before* TensorFlow initialises the GPUs (the
first op or device query that touches them):

- ``export TF_FORCE_GPU_ALLOW_GROWTH=true`` before starting Python/Jupyter, or
- ``for gpu in tf.config.list_physical_devices("GPU"):
  tf.config.experimental.set_memory_growth(gpu, True)`` at the top of the
  notebook. Afterwards it raises ``RuntimeError: Physical devices cannot be
  modified after being initialized``.

Safest of all: run TensorFlow and PyTorch in separate kernels.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from labkit.core.optional import import_tensorflow

ENV_VAR = "TF_FORCE_GPU_ALLOW_GROWTH"
HOW_TO = (
    "set TF_FORCE_GPU_ALLOW_GROWTH=true before starting the kernel, or call "
    "tf.config.experimental.set_memory_growth(gpu, True) for every GPU before the first op"
)


@dataclass(frozen=True)
class TfMemoryStatus:
    """GPUs TensorFlow sees and whether each will grow its memory or grab it all.

    ``memory_growth`` maps each GPU name to True/False, or None when it was not
    set explicitly (then ``env_allow_growth`` decides).
    """

    gpus: tuple[str, ...]
    memory_growth: dict[str, bool | None]
    env_allow_growth: str | None

    @property
    def grabs_all_memory(self) -> bool:
        """Whether at least one GPU will have nearly all its memory mapped by TensorFlow."""
        env_on = (self.env_allow_growth or "").strip().lower() == "true"
        if env_on:  # the variable overrides the per-GPU setting
            return False
        return any(g is not True for g in self.memory_growth.values())

    def __str__(self) -> str:
        env = self.env_allow_growth if self.env_allow_growth is not None else "(not set)"
        if not self.gpus:
            return (
                f"TensorFlow sees no GPU: there is no GPU memory to manage. "
                f"{ENV_VAR}={env}. On a GPU machine: {HOW_TO}."
            )
        lines = [f"{ENV_VAR}={env}"]
        for gpu, growth in self.memory_growth.items():
            state = {True: "on", False: "off", None: "not set"}[growth]
            lines.append(f"  {gpu}: memory growth {state}")
        if self.grabs_all_memory:
            lines.append(f"TensorFlow will map nearly all GPU memory; to avoid it, {HOW_TO}.")
        else:
            lines.append("TensorFlow will allocate GPU memory as it needs it.")
        return "\n".join(lines)


def tf_memory_growth_status() -> TfMemoryStatus:
    """Read the memory-growth setting of every GPU TensorFlow lists (initialises nothing)."""
    tf = import_tensorflow("the TensorFlow GPU memory status")
    gpus = tf.config.list_physical_devices("GPU")
    growth: dict[str, bool | None] = {}
    for gpu in gpus:
        try:
            value = tf.config.experimental.get_memory_growth(gpu)
        except (ValueError, RuntimeError):
            value = None
        growth[gpu.name] = None if value is None else bool(value)
    return TfMemoryStatus(
        gpus=tuple(g.name for g in gpus),
        memory_growth=growth,
        env_allow_growth=os.environ.get(ENV_VAR),
    )

"""The CUDA C sources of notebook 07, shipped inside labkit, and what each kernel takes.

The kernels live in ``labkit/kernels/*.cu`` as plain, commented CUDA C, one
file per algorithm, so a learner can open them next to the notebook. Each
kernel is ``extern "C" __global__`` (its name is not mangled, so CuPy finds it
by name), and its compile-time parameters are ``#ifndef NAME / #define NAME
default / #endif`` macros, so both ways of compiling set them the same way:

- CuPy: ``cupy.RawModule(code=kernel_source(name), options=compile_options(name, TILE_DIM=64))``
  passes ``-DTILE_DIM=64`` to NVRTC;
- Kernel Tuner prepends ``#define TILE_DIM 64`` (one line per tunable
  parameter) to the source before it compiles each configuration.

The files are read with :mod:`importlib.resources`, so they are found the
same way in a source checkout and in an installed wheel.
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from labkit.core.validate import check_int

_PACKAGE = "labkit.kernels"


@dataclass(frozen=True)
class KernelSpec:
    """One kernel: the file that holds it, its macros with their defaults, and what it shows.

    ``block`` says how the launch's thread block relates to the macros (for a
    reader; the launchers in :mod:`labkit.kernels.cupy_run` apply it).
    ``broken`` marks the kernel that is wrong on purpose (the exercise).
    """

    name: str
    file: str
    macros: Mapping[str, int] = field(default_factory=dict)
    block: str = ""
    description: str = ""
    broken: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "macros", MappingProxyType(dict(self.macros)))


def _spec(
    name: str, file: str, macros: dict[str, int], block: str, description: str, broken: bool = False
) -> tuple[str, KernelSpec]:
    return name, KernelSpec(name, file, macros, block, description, broken)


_TRANSPOSE_MACROS = {"TILE_DIM": 32, "BLOCK_ROWS": 8}
_SGEMM_TILED_MACROS = {"BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 8}

#: Every kernel labkit ships, by name.
KERNELS: Mapping[str, KernelSpec] = MappingProxyType(
    dict(
        [
            _spec(
                "strided_copy",
                "strided_copy.cu",
                {"ITEMS_PER_THREAD": 4},
                "(B, 1, 1), any B",
                "copies n floats, reading neighbouring threads' values `stride` apart",
            ),
            _spec(
                "transpose_naive",
                "transpose.cu",
                _TRANSPOSE_MACROS,
                "(TILE_DIM, BLOCK_ROWS, 1)",
                "coalesced reads, strided writes",
            ),
            _spec(
                "transpose_tiled",
                "transpose.cu",
                _TRANSPOSE_MACROS,
                "(TILE_DIM, BLOCK_ROWS, 1)",
                "a shared-memory tile: coalesced reads and writes, bank conflicts",
            ),
            _spec(
                "transpose_padded",
                "transpose.cu",
                _TRANSPOSE_MACROS,
                "(TILE_DIM, BLOCK_ROWS, 1)",
                "the tiled transpose with a padded tile: no bank conflicts",
            ),
            _spec(
                "transpose_tiled_nosync",
                "transpose_nosync.cu",
                _TRANSPOSE_MACROS,
                "(TILE_DIM, BLOCK_ROWS, 1)",
                "BROKEN ON PURPOSE: transpose_tiled without __syncthreads() (a race)",
                broken=True,
            ),
            _spec("sgemm_naive", "sgemm.cu", {}, "(32, 8, 1)", "one thread per element of C"),
            _spec(
                "sgemm_shared",
                "sgemm.cu",
                {"TILE_SIZE": 32},
                "(TILE_SIZE, TILE_SIZE, 1)",
                "shared-memory tiles, one element of C per thread",
            ),
            _spec(
                "sgemm_tiled",
                "sgemm.cu",
                _SGEMM_TILED_MACROS,
                "((BM / TM) * (BN / TN), 1, 1)",
                "shared-memory tiles and a TM x TN register tile per thread, float4 loads",
            ),
            _spec(
                "reduce_atomic",
                "reduce.cu",
                {},
                "(B, 1, 1), any B",
                "every thread atomicAdd()s to one float",
            ),
            _spec(
                "reduce_shared",
                "reduce.cu",
                {"BLOCK_SIZE": 256},
                "(BLOCK_SIZE, 1, 1)",
                "a shared-memory tree per block, one atomicAdd per block",
            ),
            _spec(
                "reduce_warp_shuffle",
                "reduce.cu",
                {},
                "(B, 1, 1), B a multiple of 32",
                "grid-stride loop, warp shuffles, one atomicAdd per block",
            ),
        ]
    )
)

#: The largest value any macro may take (a sanity bound for typos such as 3200).
_MACRO_MAX = 4096


def kernel_files() -> tuple[str, ...]:
    """The ``.cu`` files shipped with labkit, sorted."""
    return tuple(sorted({spec.file for spec in KERNELS.values()}))


def kernel_spec(name: str) -> KernelSpec:
    """The registry entry for ``name``; a ValueError lists the kernels there are."""
    try:
        return KERNELS[name]
    except KeyError:
        raise ValueError(
            f"unknown kernel {name!r}; labkit ships: {', '.join(sorted(KERNELS))} (name must be "
            "one of them)"
        ) from None


def _file_for(name: str) -> str:
    """A kernel's file, or the file itself when ``name`` is a file name or stem ("transpose")."""
    file = name if name.endswith(".cu") else f"{name}.cu"
    if name not in KERNELS and file in kernel_files():
        return file
    return kernel_spec(name).file  # a ValueError listing the names for an unknown one


def kernel_path(name: str) -> Path:
    """The path of the ``.cu`` file that holds kernel ``name`` (or of file ``name``).

    For reading the source prefer :func:`kernel_source`, which also works when
    labkit is installed as a zip; a path is what ``nvcc`` and editors need.
    """
    resource = importlib.resources.files(_PACKAGE).joinpath(_file_for(name))
    path = Path(str(resource))
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: the labkit install lacks its CUDA sources. Reinstall labkit "
            "(pip install --force-reinstall gpu-labkit); its package data includes kernels/*.cu"
        )
    return path


def kernel_source(name: str) -> str:
    """The CUDA C source of the file that holds kernel ``name`` (or of file ``name``)."""
    resource = importlib.resources.files(_PACKAGE).joinpath(_file_for(name))
    try:
        return resource.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise FileNotFoundError(
            f"{_file_for(name)} is missing from labkit.kernels: the install lacks its CUDA "
            "sources. Reinstall labkit (pip install --force-reinstall gpu-labkit)."
        ) from exc


def macros_for(name: str, **overrides: Any) -> dict[str, int]:
    """The macros kernel ``name`` is compiled with: its defaults, updated by ``overrides``.

    An override the kernel does not take is an error that names the ones it
    does, so a typo (``TILE=64``) cannot silently compile the default.
    """
    spec = kernel_spec(name)
    values = dict(spec.macros)
    for key, value in overrides.items():
        if key not in spec.macros:
            takes = ", ".join(spec.macros) if spec.macros else "no macros"
            raise ValueError(f"kernel {name!r} takes {takes}; got {key}={value!r}")
        values[key] = check_int(key, value, minimum=1, maximum=_MACRO_MAX)
    return values


def compile_options(name: str, **overrides: Any) -> tuple[str, ...]:
    """NVRTC/nvcc options that set kernel ``name``'s macros: ("-DTILE_DIM=32", ...), sorted."""
    return tuple(f"-D{key}={value}" for key, value in sorted(macros_for(name, **overrides).items()))

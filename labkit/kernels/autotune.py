"""Kernel Tuner on a GPU: tune the transpose and the tiled SGEMM, every configuration verified.

The caches it writes are what :mod:`labkit.kernels.tuning` replays on a machine without a GPU.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from labkit.core.validate import check_int
from labkit.kernels.tuning import (
    COMPILER_OPTIONS,
    SGEMM_RESTRICTIONS,
    SGEMM_TUNE_PARAMS,
    TRANSPOSE_RESTRICTIONS,
    TRANSPOSE_TUNE_PARAMS,
    TuningReplay,
    replay,
)


def _tune(
    kernel_name: str,
    problem_size: tuple[int, int],
    arguments: list[Any],
    tune_params: Mapping[str, Sequence[int]],
    *,
    answer: list[Any],
    verify: Callable[..., bool],
    restrictions: Sequence[str],
    block_size_names: Sequence[str],
    grid_div_x: list[str],
    grid_div_y: list[str],
    cache_path: str | os.PathLike[str] | None,
    iterations: int,
    quiet: bool,
) -> TuningReplay:
    from labkit.core.optional import import_optional
    from labkit.kernels.sources import kernel_source

    kernel_tuner = import_optional("kernel_tuner", "auto-tuning a CUDA kernel")
    params = {k: list(v) for k, v in tune_params.items()}
    with contextlib.ExitStack() as stack:
        if cache_path is None:  # a fresh file: every configuration is measured in this run
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="labkit-kt-"))
            path = Path(folder) / f"{kernel_name}.json"
        else:
            path = Path(cache_path)
        printed = io.StringIO()
        if quiet:  # Kernel Tuner prints a line per configuration otherwise
            stack.enter_context(contextlib.redirect_stdout(printed))
        try:
            kernel_tuner.tune_kernel(
                kernel_name,
                kernel_source(kernel_name),
                problem_size,
                arguments,
                params,
                grid_div_x=grid_div_x,
                grid_div_y=grid_div_y,
                restrictions=list(restrictions),
                answer=answer,
                verify=verify,
                lang="cupy",
                block_size_names=list(block_size_names),
                compiler_options=list(COMPILER_OPTIONS),
                cache=str(path),
                iterations=iterations,
                quiet=quiet,
            )
        except Exception as exc:
            tail = "\n".join(printed.getvalue().strip().splitlines()[-8:])
            raise RuntimeError(
                f"Kernel Tuner failed on {kernel_name}: {type(exc).__name__}: {exc}"
                + (f"\nits last output:\n{tail}" if tail else "")
            ) from exc
        result = replay(path, use_kernel_tuner=False)
        if cache_path is None:
            kept = Path(tempfile.mkdtemp(prefix="labkit-kt-cache-")) / path.name
            shutil.copyfile(path, kept)
            path = kept
    from dataclasses import replace

    return replace(
        result,
        path=str(path),
        method="measured on this GPU by Kernel Tuner",
        extra={"block_size_names": list(block_size_names)},
    )


def _check_tune_args(
    tune_params: Mapping[str, Sequence[int]] | None, defaults: Mapping[str, Sequence[int]]
) -> dict[str, list[int]]:
    """``tune_params`` as {name: [values]}, with the same names as ``defaults`` and int values."""
    params = defaults if tune_params is None else tune_params
    if set(params) != set(defaults):
        raise ValueError(
            f"tune_params must give {', '.join(defaults)}, got {sorted(map(str, params))}"
        )
    checked = {}
    for key, values in params.items():
        name = f"tune_params[{key!r}]"
        checked[key] = [check_int(name, v, minimum=1, maximum=4096) for v in values]
        if not checked[key]:
            raise ValueError(f"{name} must be a non-empty list of ints, got {values!r}")
    return checked


def _exact_verify(index: int) -> Callable[..., bool]:
    def verify(answer: list[Any], result_host: list[Any], atol: float = 0.0) -> bool:
        import numpy as np

        return bool(np.array_equal(answer[index], result_host[index]))

    return verify


def _close_verify(index: int, rtol: float) -> Callable[..., bool]:
    def verify(answer: list[Any], result_host: list[Any], atol: float = 0.0) -> bool:
        import numpy as np

        expected = np.asarray(answer[index], dtype=np.float64)
        got = np.asarray(result_host[index], dtype=np.float64).reshape(expected.shape)
        scale = float(np.abs(expected).max()) or 1.0
        return bool(np.abs(got - expected).max() / scale <= rtol)

    return verify


def tune_transpose(
    n: int = 4096,
    *,
    tune_params: Mapping[str, Sequence[int]] | None = None,
    cache_path: str | os.PathLike[str] | None = None,
    iterations: int = 7,
    quiet: bool = True,
) -> TuningReplay:
    """Search ``transpose_padded``'s TILE_DIM and BLOCK_ROWS on this GPU for an n x n matrix.

    Every configuration's output is compared exactly with ``x.T`` before it
    is timed. Returns what the cache recorded; ``result.path`` is the cache
    file (a temporary copy unless ``cache_path`` is given, in which case an
    existing cache for this GPU and kernel is continued, not re-measured).
    """
    from labkit.kernels.cupy_run import require_cupy

    side = check_int("n", n, minimum=16, maximum=32768)
    iterations = check_int("iterations", iterations, minimum=1, maximum=1000)
    params = _check_tune_args(tune_params, TRANSPOSE_TUNE_PARAMS)
    cupy = require_cupy("tuning the transpose")
    import numpy as np

    x = cupy.asnumpy(
        cupy.random.RandomState(0).uniform(-1.0, 1.0, size=(side, side), dtype=cupy.float32)
    )
    arguments = [x, np.zeros_like(x), np.int32(side), np.int32(side)]
    return _tune(
        "transpose_padded",
        (side, side),
        arguments,
        params,
        answer=[None, np.ascontiguousarray(x.T), None, None],
        verify=_exact_verify(1),
        restrictions=TRANSPOSE_RESTRICTIONS,
        block_size_names=("TILE_DIM", "BLOCK_ROWS"),
        grid_div_x=["TILE_DIM"],
        grid_div_y=["TILE_DIM"],
        cache_path=cache_path,
        iterations=iterations,
        quiet=quiet,
    )


def tune_sgemm(
    n: int = 2048,
    *,
    tune_params: Mapping[str, Sequence[int]] | None = None,
    cache_path: str | os.PathLike[str] | None = None,
    iterations: int = 7,
    quiet: bool = True,
) -> TuningReplay:
    """Search ``sgemm_tiled``'s BM, BN, BK, TM, TN on this GPU for n x n matrices.

    ``block_size_x`` is the thread count, (BM/TM)·(BN/TN), listed so Kernel
    Tuner launches the right block; the restrictions keep only consistent
    combinations. Each result is checked against a float64 product (max error
    at most 5e-5 of the largest value) before it is timed. n must be a
    multiple of every BM, BN and BK searched (the default 2048 is).
    """
    from labkit.kernels.cupy_run import SGEMM_RTOL, require_cupy

    side = check_int("n", n, minimum=64, maximum=16384)
    iterations = check_int("iterations", iterations, minimum=1, maximum=1000)
    params = _check_tune_args(tune_params, SGEMM_TUNE_PARAMS)
    for key in ("BM", "BN", "BK"):
        bad = [v for v in params[key] if side % v]
        if bad:
            raise ValueError(
                f"n={side} must be a multiple of every {key} searched; {bad} do not divide it"
            )
    cupy = require_cupy("tuning the SGEMM")
    import numpy as np

    rs = cupy.random.RandomState(1)
    a = rs.uniform(-1.0, 1.0, size=(side, side), dtype=cupy.float32)
    b = rs.uniform(-1.0, 1.0, size=(side, side), dtype=cupy.float32)
    expected = cupy.asnumpy(cupy.matmul(a.astype(cupy.float64), b.astype(cupy.float64)))
    a_host, b_host = cupy.asnumpy(a), cupy.asnumpy(b)
    del a, b
    arguments = [
        a_host,
        b_host,
        np.zeros((side, side), dtype=np.float32),
        np.int32(side),
        np.int32(side),
        np.int32(side),
    ]
    return _tune(
        "sgemm_tiled",
        (side, side),
        arguments,
        params,
        answer=[None, None, expected.astype(np.float32), None, None, None],
        verify=_close_verify(2, SGEMM_RTOL),
        restrictions=SGEMM_RESTRICTIONS,
        block_size_names=("block_size_x",),
        grid_div_x=["BN"],
        grid_div_y=["BM"],
        cache_path=cache_path,
        iterations=iterations,
        quiet=quiet,
    )

"""labkit.kernels.tuning: Kernel Tuner caches written in Kernel Tuner's own format, replayed without a GPU.

The caches here are written by Kernel Tuner's own cache functions
(``kernel_tuner.util.process_cache`` for the header, ``store_cache`` for each
configuration, ``close_cache`` at the end: what a real tuning run calls), so
the format is Kernel Tuner's, not a guess. The replay then runs Kernel
Tuner's simulation mode on them, which needs no GPU.
"""

from __future__ import annotations

import datetime
import itertools
import json
import sys
import types
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import labkit.machine.memory
from labkit.kernels import autotune, cupy_run, tuning
from labkit.kernels import plots as kernels_plots

kt_util = pytest.importorskip("kernel_tuner.util")
from kernel_tuner.interface import Options  # noqa: E402

TRANSPOSE_PARAMS = {"TILE_DIM": [16, 32], "BLOCK_ROWS": [4, 8, 32]}
TIMES = {(16, 4): 0.30, (16, 8): 0.25, (32, 4): 0.20, (32, 8): 0.125}


def write_kt_cache(
    path: Path,
    *,
    device: str = "NVIDIA H200",
    kernel: str = "transpose_padded",
    problem_size: tuple[int, ...] = (4096, 4096),
    tune_params: dict[str, list[int]] | None = None,
    times: dict[tuple[int, ...], float] | None = None,
    failed: tuple[tuple[int, ...], ...] = ((32, 32),),
    close: bool = True,
) -> Path:
    """A cache written the way Kernel Tuner 1.x writes one during a run."""
    params = tune_params or TRANSPOSE_PARAMS
    kernel_options = Options(kernel_name=kernel, problem_size=problem_size)
    tuning_options = Options(tune_params=params, objective="time", simulation_mode=False)
    runner = types.SimpleNamespace(
        get_device_info=lambda: types.SimpleNamespace(name=device), simulation_mode=False
    )
    cache = kt_util.process_cache(str(path), kernel_options, tuning_options, runner)
    for values, time_ms in (times or TIMES).items():
        entry: dict[str, Any] = dict(zip(params, values, strict=True))
        entry.update(
            time=time_ms,
            times=[time_ms] * 7,
            compile_time=210.0,
            verification_time=3.0,
            benchmark_time=1.5,
            timestamp="2026-11-30 12:00:00+00:00",
        )
        kt_util.store_cache(",".join(map(str, values)), entry, str(path), cache)
    for values in failed:
        entry = dict(zip(params, values, strict=True))
        entry.update(
            __error__=kt_util.RuntimeFailedConfig(),
            compile_time=200.0,
            verification_time=0,
            benchmark_time=0,
            timestamp="2026-11-30 12:00:01+00:00",
        )
        kt_util.store_cache(",".join(map(str, values)), entry, str(path), cache)
    if close:
        kt_util.close_cache(str(path))
    return path


@pytest.fixture
def cache_file(tmp_path: Path) -> Path:
    return write_kt_cache(tmp_path / "run.json")


@pytest.fixture(autouse=True)
def _private_reference_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    folder = tmp_path / "reference"
    monkeypatch.setenv("LABKIT_REFERENCE_DIR", str(folder))
    return folder


# --------------------------------------------------------------------------- reading and replaying


def test_the_written_cache_is_kernel_tuners_format(cache_file: Path) -> None:
    data = kt_util.read_cache(str(cache_file), open_cache=False)  # Kernel Tuner's own reader
    assert data["device_name"] == "NVIDIA H200" and list(data["cache"]) == [
        "16,4",
        "16,8",
        "32,4",
        "32,8",
        "32,32",
    ]
    assert str(data["cache"]["32,32"]["__error__"]) == "RuntimeFailedConfig"
    assert tuning.read_cache(cache_file)["tune_params_keys"] == ["TILE_DIM", "BLOCK_ROWS"]


@pytest.mark.parametrize("use_kernel_tuner", [True, False])
def test_replay_without_a_gpu(cache_file: Path, use_kernel_tuner: bool) -> None:
    before = cache_file.read_text()
    result = tuning.replay(cache_file, use_kernel_tuner=use_kernel_tuner)
    assert cache_file.read_text() == before  # replaying never rewrites the cache
    assert ("simulation mode" in result.method) is use_kernel_tuner
    assert result.kernel == "transpose_padded" and result.device == "NVIDIA H200"
    assert result.problem_size == (4096, 4096)
    assert [c.time_ms for c in result.valid] == [0.125, 0.20, 0.25, 0.30]
    assert result.best.params == {"TILE_DIM": 32, "BLOCK_ROWS": 8}
    assert [(c.params, c.error) for c in result.failed] == [
        ({"TILE_DIM": 32, "BLOCK_ROWS": 32}, "RuntimeFailedConfig")
    ]
    text = str(result)
    assert text.startswith(
        "Kernel Tuner search of transpose_padded on NVIDIA H200, problem size 4,096 x 4,096: "
        "5 configurations, 1 failed"
    )
    assert "TILE_DIM=32, BLOCK_ROWS=8" in text and "2.40×" in text
    assert result.summary()[1] == "  best: TILE_DIM=32, BLOCK_ROWS=8: 125 µs"
    assert json.loads(json.dumps(result.to_dict()))["configs"][0]["params"] == {
        "TILE_DIM": 16,
        "BLOCK_ROWS": 4,
    }


def test_replay_reads_a_cache_left_open_by_an_interrupted_run(tmp_path: Path) -> None:
    path = write_kt_cache(tmp_path / "open.json", close=False)
    assert path.read_text().rstrip().endswith(",")
    result = tuning.replay(path, use_kernel_tuner=False)
    assert len(result.configs) == 5 and result.best.time_ms == 0.125


def test_replay_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(
        FileNotFoundError, match=r"none has been recorded yet.*labkit bench kernels --record"
    ):
        tuning.replay()
    with pytest.raises(FileNotFoundError, match="no Kernel Tuner cache at"):
        tuning.replay(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text('{"cache": {}}')
    with pytest.raises(ValueError, match="lacks device_name, kernel_name"):
        tuning.replay(tmp_path / "bad.json")
    (tmp_path / "text.json").write_text("not json")
    with pytest.raises(ValueError, match="not JSON"):
        tuning.replay(tmp_path / "text.json")


def test_record_cache_labels_it_and_kernel_tuner_still_reads_it(
    cache_file: Path, _private_reference_dir: Path
) -> None:
    saved = tuning.record_cache(
        cache_file,
        "transpose",
        block_size_names=("TILE_DIM", "BLOCK_ROWS"),
        recorded=datetime.date(2026, 11, 30),
    )
    assert saved == _private_reference_dir / "kernel_tuner_transpose.cache.json"
    assert saved == tuning.recorded_cache_path("transpose")
    data = json.loads(saved.read_text())
    assert list(data)[-1] == "cache"  # Kernel Tuner appends entries at the end
    assert data["labkit"]["gpu"] == "NVIDIA H200" and data["labkit"]["recorded"] == "2026-11-30"
    assert kt_util.read_cache(str(saved), open_cache=False)["cache"].keys() == data["cache"].keys()
    result = tuning.replay()  # the recorded one, through Kernel Tuner's simulation mode
    assert result.recorded == "2026-11-30" and "simulation mode" in result.method
    assert tuning.best_configuration() == {"TILE_DIM": 32, "BLOCK_ROWS": 8}
    assert tuning.best_configuration(result) == {"TILE_DIM": 32, "BLOCK_ROWS": 8}
    # it is not mistaken for a labkit recording (those have another format)
    from labkit.machine import reference

    assert reference.available() == []


def test_plot_tuning(cache_file: Path) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    result = tuning.replay(cache_file, use_kernel_tuner=False)
    ax = kernels_plots.plot_tuning(result, top=3)
    assert len(ax.patches) == 3 and ax.get_xlabel() == "mean time per launch (µs)"
    assert "fastest 3 of 4 verified configurations" in ax.get_title()
    with pytest.raises(ValueError, match="top must be a positive integer"):
        kernels_plots.plot_tuning(result, top=0)


# --------------------------------------------------------------------------- the search spaces


def _kt_space(params: dict[str, Any], restrictions: Any, names: list[str]) -> set[tuple[int, ...]]:
    from kernel_tuner.searchspace import Searchspace

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        space = Searchspace(
            {k: list(v) for k, v in params.items()},
            list(restrictions),
            1024,
            block_size_names=names,
        )
    return {tuple(c) for c in space.list}


def test_sgemm_restrictions_are_the_kernels_static_asserts() -> None:
    """Kernel Tuner's parse of the restriction strings keeps exactly the configs sgemm.cu compiles."""
    params = tuning.SGEMM_TUNE_PARAMS
    expected = set()
    for combo in itertools.product(*params.values()):
        macros = dict(zip(params, combo, strict=True))
        threads = macros.pop("block_size_x")
        if not cupy_run.sgemm_tiled_problems(**macros) and threads == (
            macros["BM"] // macros["TM"]
        ) * (macros["BN"] // macros["TN"]):
            expected.add(combo)
    found = _kt_space(params, tuning.SGEMM_RESTRICTIONS, ["block_size_x"])
    assert found == expected and len(found) == 19


def test_transpose_space() -> None:
    found = _kt_space(
        tuning.TRANSPOSE_TUNE_PARAMS, tuning.TRANSPOSE_RESTRICTIONS, ["TILE_DIM", "BLOCK_ROWS"]
    )
    assert (
        len(found) == 16 and (64, 32) not in found and (32, 32) in found
    )  # 64 x 32 = 2048 threads
    assert all(t % r == 0 and t * r <= 1024 for t, r in found)


# --------------------------------------------------------------------------- tuning, with a fake GPU


@pytest.fixture
def fake_tuner(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """A fake CuPy GPU, and kernel_tuner.tune_kernel replaced by one that checks its arguments.

    The fake runs each configuration's kernel emulation once, applies the
    verify function, and writes the cache with Kernel Tuner's own functions.
    """
    sys.path.insert(0, str(Path(__file__).parent))
    from test_kernels_cupy import FakeCupy, _install_linalg

    fake = FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    _install_linalg(monkeypatch, fake)
    monkeypatch.setattr(labkit.machine.memory, "available_bytes", lambda device="cpu": 64 << 20)
    calls: list[dict[str, Any]] = []

    def tune_kernel(
        kernel_name: str,
        kernel_source: str,
        problem_size: Any,
        arguments: list[Any],
        tune_params: dict[str, list[Any]],
        **kw: Any,
    ) -> tuple[list[Any], dict[str, Any]]:
        calls.append(
            dict(
                kw,
                kernel_name=kernel_name,
                problem_size=problem_size,
                arguments=arguments,
                tune_params=tune_params,
                source=kernel_source,
            )
        )
        assert 'extern "C" __global__' in kernel_source and kernel_name in kernel_source
        assert kw["lang"] == "cupy" and kw["compiler_options"] == ["--std=c++17"]
        assert all(isinstance(a, np.ndarray) or type(a) is np.int32 for a in arguments)
        space = sorted(_kt_space(tune_params, kw["restrictions"], kw["block_size_names"]))
        written = write_kt_cache(
            Path(kw["cache"]),
            device="Fake GPU 9000",
            kernel=kernel_name,
            problem_size=problem_size,
            tune_params=tune_params,
            times={c: 0.1 + 0.01 * i for i, c in enumerate(space)},
            failed=(),
        )
        ok = kw["verify"](
            kw["answer"],
            [
                kw["answer"][i] if a is not None and i == _out(kw["answer"]) else a
                for i, a in enumerate(arguments)
            ],
        )
        assert ok, "the verify function must accept the right answer"
        return [], {"cache": str(written)}

    import kernel_tuner

    monkeypatch.setattr(kernel_tuner, "tune_kernel", tune_kernel)
    return calls


def _out(answer: list[Any]) -> int:
    return next(i for i, a in enumerate(answer) if a is not None)


def test_tune_transpose_passes_a_consistent_problem(fake_tuner: list[dict[str, Any]]) -> None:
    result = autotune.tune_transpose(64)
    call = fake_tuner[0]
    assert call["kernel_name"] == "transpose_padded" and call["problem_size"] == (64, 64)
    assert call["block_size_names"] == ["TILE_DIM", "BLOCK_ROWS"]
    assert call["grid_div_x"] == ["TILE_DIM"] and call["grid_div_y"] == ["TILE_DIM"]
    x, out, rows, cols = call["arguments"]
    np.testing.assert_array_equal(call["answer"][1], x.T)
    assert out.shape == (64, 64) and rows == cols == 64
    assert not call["verify"](call["answer"], [x, x, rows, cols])  # a non-transposed output fails
    assert len(result.configs) == 16 and result.method == "measured on this GPU by Kernel Tuner"
    assert Path(result.path).is_file() and result.best.params == {"TILE_DIM": 16, "BLOCK_ROWS": 1}


def test_tune_sgemm_checks_and_passes_the_problem(fake_tuner: list[dict[str, Any]]) -> None:
    result = autotune.tune_sgemm(256)
    call = fake_tuner[0]
    assert (
        call["kernel_name"] == "sgemm_tiled"
        and call["grid_div_x"] == ["BN"]
        and call["grid_div_y"] == ["BM"]
    )
    a, b, c, m, n, k = call["arguments"]
    np.testing.assert_allclose(call["answer"][2], a @ b, rtol=1e-4, atol=1e-4)
    assert len(result.configs) == 19
    with pytest.raises(ValueError, match="multiple of every BM searched"):
        autotune.tune_sgemm(320)
    with pytest.raises(ValueError, match="tune_params must give BM, BN, BK"):
        autotune.tune_sgemm(256, tune_params={"BM": (64,)})


def test_tuning_without_a_gpu_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    cupy = pytest.importorskip("cupy")
    if cupy.is_available():  # pragma: no cover
        pytest.skip("this machine has a GPU")
    with pytest.raises(cupy_run.NoCudaGpuError, match="tuning the transpose"):
        autotune.tune_transpose()


def test_a_failing_search_says_what_kernel_tuner_printed(
    fake_tuner: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    import kernel_tuner

    def broken(*args: Any, **kwargs: Any) -> Any:
        print("compile_kernel failed due to error: identifier 'oops' is undefined")
        raise RuntimeError("NVRTC_ERROR_COMPILATION")

    monkeypatch.setattr(kernel_tuner, "tune_kernel", broken)
    with pytest.raises(
        RuntimeError,
        match=r"(?s)Kernel Tuner failed on transpose_padded: RuntimeError: "
        r"NVRTC_ERROR_COMPILATION\nits last output:\n.*'oops'",
    ):
        autotune.tune_transpose(64)


@pytest.mark.skipif(not cupy_run.cupy_gpu_available(), reason="needs a CUDA GPU that CuPy can use")
def test_gpu_kernel_tuner_search(tmp_path: Path) -> None:  # pragma: no cover - GPU machines
    result = autotune.tune_transpose(256, tune_params={"TILE_DIM": (16, 32), "BLOCK_ROWS": (4, 8)})
    assert len(result.valid) == 4 and result.best.time_ms > 0
    saved = tuning.record_cache(result.path, "transpose", directory=tmp_path)
    assert tuning.replay(saved).best.params == result.best.params

"""Kernel Tuner: search a kernel's compile-time parameters on a GPU, and replay the search without one.

The best tile size of a transpose or an SGEMM depends on the GPU (its shared
memory, registers, L2), so it is found by measuring, not by reasoning.
Kernel Tuner (Van Werkhoven, 2019; ``pip install kernel_tuner``) compiles
one version of the kernel per configuration (it prepends ``#define TILE_DIM
32`` and so on to the ``.cu`` file, which our ``#ifndef`` defaults allow),
checks each result against a reference, times it with CUDA events, and
writes every configuration it tried to a JSON *cache file*.

- :func:`labkit.kernels.autotune.tune_transpose` and :func:`~labkit.kernels.autotune.tune_sgemm` run a search on a GPU
  (``lang="cupy"``) and return what the cache recorded.
- :func:`record_cache` stores a cache in labkit's reference directory as
  ``kernel_tuner_<kernel>.cache.json``, labelled with the GPU and the date
  (``labkit bench kernels --record`` does it). The ``.cache.json`` name keeps
  it out of the list of labkit recordings, which have another format.
- :func:`replay` reads a recorded cache *on any machine*: where Kernel Tuner
  is installed it re-runs the search in Kernel Tuner's simulation mode
  (``kernel_tuner.tune_cache``: every "measurement" comes from the cache, no
  GPU is touched), else it reads the JSON. :func:`best_configuration` and
  :func:`plot_tuning` work on the result.

Cache format (Kernel Tuner 1.x, ``kernel_tuner.util.process_cache``)::

    {"device_name": "NVIDIA H200", "kernel_name": "transpose_padded",
     "problem_size": [4096, 4096], "tune_params_keys": ["TILE_DIM", "BLOCK_ROWS"],
     "tune_params": {"TILE_DIM": [16, 32, 64], ...}, "objective": "time",
     "cache": {"32,8": {"TILE_DIM": 32, "BLOCK_ROWS": 8, "time": 0.123,
                        "times": [...], "compile_time": ..., "timestamp": ...}, ...}}

keyed by the parameter values joined with commas; ``time`` is the mean of
the timed runs in ms; a configuration that failed has ``"__error__"``
(e.g. ``"CompilationFailedConfig"``) and no time. Kernel Tuner appends one
entry per line while it runs, so "cache" must stay the last key.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import json
import math
import os
import shutil
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labkit.core.results import JsonRecord
from labkit.core.units import format_duration

#: The file name a recorded cache gets in the reference directory.
CACHE_NAME = "kernel_tuner_{kernel}.cache.json"

#: What each tuner searches by default. The transpose space is small: 16 of its
#: 18 configurations pass the restrictions (BLOCK_ROWS must divide TILE_DIM, and
#: a block holds at most 1,024 threads, which rules out 64 x 32); the SGEMM one
#: keeps to tiles whose float4 loads divide evenly (19 pass).
TRANSPOSE_TUNE_PARAMS: Mapping[str, tuple[int, ...]] = {
    "TILE_DIM": (16, 32, 64),
    "BLOCK_ROWS": (1, 2, 4, 8, 16, 32),
}
TRANSPOSE_RESTRICTIONS: tuple[str, ...] = (
    "TILE_DIM % BLOCK_ROWS == 0",
    "TILE_DIM * BLOCK_ROWS <= 1024",
)

SGEMM_TUNE_PARAMS: Mapping[str, tuple[int, ...]] = {
    "BM": (64, 128),
    "BN": (64, 128),
    "BK": (8, 16),
    "TM": (4, 8),
    "TN": (4, 8),
    "block_size_x": (64, 128, 256, 512),
}
#: The static_asserts of sgemm.cu, as Kernel Tuner restrictions. block_size_x
#: is the thread count, which the kernel derives from the tile sizes. No
#: integer division (//): python-constraint, which parses these strings,
#: mishandles it (it turned "block_size_x == (BM // TM) * (BN // TN)" into an
#: empty search space), so every rule is written with products and remainders.
SGEMM_RESTRICTIONS: tuple[str, ...] = (
    "BM % TM == 0",
    "BN % TN == 0",
    "block_size_x * TM * TN == BM * BN",
    "block_size_x >= 32",
    "BK % 4 == 0",
    "BN % 4 == 0",
    "TM % 4 == 0",
    "TN % 4 == 0",
    "BN % (8 * TN) == 0",
    "BM % (4 * TM) == 0",
    "(4 * block_size_x) % BK == 0",
    "(BM * BK) % (4 * block_size_x) == 0",
    "(4 * block_size_x) % BN == 0",
    "(BK * BN) % (4 * block_size_x) == 0",
    "(BK * BM + BK * BN) * 4 <= 49152",
)

#: Kernel Tuner's compiler options: it adds --std=c++11 unless a standard is given.
COMPILER_OPTIONS: tuple[str, ...] = ("--std=c++17",)

_REQUIRED_KEYS = ("device_name", "kernel_name", "tune_params_keys", "tune_params", "cache")


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class TunedConfig:
    """One configuration Kernel Tuner tried: its parameters and mean time, or why it failed."""

    params: Mapping[str, Any]
    time_ms: float | None
    times_ms: tuple[float, ...] = ()
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.time_ms is not None

    def describe(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.params.items())


@dataclass(frozen=True)
class TuningReplay(JsonRecord):
    """Every configuration of one Kernel Tuner search, read back from its cache.

    ``method`` says how: Kernel Tuner's simulation mode (a real replay of the
    search, no GPU), or the cache's JSON read directly. ``recorded`` and
    ``labkit_version`` come from labkit's label on a recorded cache.
    """

    kernel: str
    device: str
    problem_size: tuple[int, ...]
    tune_params: Mapping[str, tuple[Any, ...]]
    configs: tuple[TunedConfig, ...]
    method: str
    path: str | None = None
    recorded: str | None = None
    labkit_version: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def valid(self) -> tuple[TunedConfig, ...]:
        """The configurations that compiled, ran and were verified, fastest first.

        Equal times are ordered by their parameters, so the order (and
        :attr:`best`) does not depend on the order of the cache's entries.
        """
        return tuple(
            sorted(
                (c for c in self.configs if c.ok),
                key=lambda c: (c.time_ms or 0.0, sorted(map(str, c.params.items()))),
            )
        )

    @property
    def failed(self) -> tuple[TunedConfig, ...]:
        return tuple(c for c in self.configs if not c.ok)

    @property
    def best(self) -> TunedConfig:
        valid = self.valid
        if not valid:
            raise ValueError(f"no configuration of {self.kernel} ran successfully in this cache")
        return valid[0]

    def _head(self) -> str:
        size = " x ".join(f"{d:,}" for d in self.problem_size)
        when = f" on {self.recorded}" if self.recorded else ""
        return (
            f"Kernel Tuner search of {self.kernel} on {self.device}{when}, problem size {size}: "
            f"{len(self.configs)} configurations, {len(self.failed)} failed"
        )

    def summary(self) -> list[str]:
        lines = [self._head()]
        valid = self.valid
        if valid:
            best, worst = valid[0], valid[-1]
            lines.append(f"  best: {best.describe()}: {format_duration(best.time_ms or 0.0)}")
            lines.append(
                f"  slowest: {worst.describe()}: {format_duration(worst.time_ms or 0.0)} "
                f"({(worst.time_ms or 0.0) / (best.time_ms or 1.0):.2f}× the best)"
            )
        return lines

    def __str__(self) -> str:
        lines = [self._head(), f"  ({self.method})"]
        valid = self.valid
        if valid:
            best = valid[0].time_ms or 1.0
            width = max(len(c.describe()) for c in valid)
            for c in valid[:12]:
                lines.append(
                    f"  {c.describe():<{width}}  {format_duration(c.time_ms or 0.0):>9}  "
                    f"{(c.time_ms or 0.0) / best:5.2f}×"
                )
            if len(valid) > 12:
                lines.append(f"  ... and {len(valid) - 12} slower configurations")
        for c in self.failed:
            lines.append(f"  {c.describe()}: {c.error or 'no time recorded'}")
        return "\n".join(lines)


# --------------------------------------------------------------------------- reading caches


def recorded_cache_path(
    kernel: str = "transpose", directory: str | os.PathLike[str] | None = None
) -> Path:
    """Where the recorded cache of ``kernel`` ("transpose", "sgemm") lives."""
    from labkit.machine.reference import reference_dir

    _check_kernel_name(kernel)
    return reference_dir(directory) / CACHE_NAME.format(kernel=kernel)


def _check_kernel_name(kernel: Any) -> str:
    """A recording's kernel name ("transpose", "sgemm"): letters, digits, "_" and "-" only."""
    from labkit.machine.reference import check_name

    try:
        return check_name(kernel)
    except ValueError:
        raise ValueError(
            f"kernel must be a name such as 'transpose' or 'sgemm' (letters, digits, '_' and '-'), "
            f"got {kernel!r}"
        ) from None


def read_cache(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A Kernel Tuner cache file as a dict, also when the run that wrote it was cut short.

    Kernel Tuner leaves the file open-ended while it runs ("...entry," with
    no closing braces); like Kernel Tuner, this closes it before parsing.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise FileNotFoundError(f"no Kernel Tuner cache at {path}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        try:  # an open-ended file: close it as Kernel Tuner does
            data = json.loads(text.rstrip(",") + "}\n}")
        except json.JSONDecodeError:
            raise ValueError(f"{path} is not a Kernel Tuner cache file (not JSON: {exc})") from exc
    missing = [key for key in _REQUIRED_KEYS if not isinstance(data, dict) or key not in data]
    if missing:
        raise ValueError(f"{path} is not a Kernel Tuner cache file: it lacks {', '.join(missing)}")
    return data


def _configs_from_cache(data: Mapping[str, Any]) -> list[tuple[str, TunedConfig]]:
    keys = list(data["tune_params_keys"])
    configs = []
    for key, entry in data["cache"].items():
        params = {k: entry.get(k) for k in keys}
        error = entry.get("__error__")
        time = entry.get("time")
        if error is None and isinstance(time, str):  # older caches stored the error as the time
            error, time = time, None
        if error is None and not (isinstance(time, (int, float)) and math.isfinite(time)):
            error = "no time recorded"
        times = tuple(float(t) for t in entry.get("times", ()) if isinstance(t, (int, float)))
        configs.append(
            (
                key,
                TunedConfig(
                    params,
                    None if error else float(time),
                    times,
                    None if error is None else str(error),
                ),
            )
        )
    return configs


def _simulate(path: Path, data: Mapping[str, Any]) -> dict[str, float]:
    """Replay the search with Kernel Tuner's simulation mode: {cache key: time in ms}.

    It runs on a copy (Kernel Tuner may rewrite the end of a cache file it
    opens), quietly, with Kernel Tuner's own cache reader and search.
    """
    import kernel_tuner

    meta = data.get("labkit")
    labkit = meta if isinstance(meta, dict) else {}
    names = labkit.get("block_size_names") or None
    with tempfile.TemporaryDirectory(prefix="labkit-kt-") as folder:
        copy = Path(folder) / "cache.json"
        shutil.copyfile(path, copy)
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            results, _env = kernel_tuner.tune_cache(
                cache_path=str(copy), quiet=True, lang="cupy", block_size_names=names
            )
    keys = list(data["tune_params_keys"])
    return {
        ",".join(str(r[k]) for k in keys): float(r["time"])
        for r in results
        if r and "__error__" not in r and "time" in r
    }


def replay(
    cache_path: str | os.PathLike[str] | None = None,
    *,
    kernel: str = "transpose",
    use_kernel_tuner: bool | None = None,
) -> TuningReplay:
    """Read a Kernel Tuner cache, by default the one recorded for ``kernel``; no GPU needed.

    With Kernel Tuner installed (or ``use_kernel_tuner=True``) the search is
    replayed in its simulation mode, and its times must agree with the file;
    otherwise the file is read directly. A missing recording raises
    FileNotFoundError with the command that makes one.
    """
    from labkit.core.optional import import_optional, is_installed

    _check_kernel_name(kernel)
    path = Path(cache_path) if cache_path is not None else recorded_cache_path(kernel)
    if not path.is_file():
        hint = (
            ""
            if cache_path is not None
            else (
                "; none has been recorded yet: make one on a GPU machine with "
                "`labkit bench kernels --record`"
            )
        )
        raise FileNotFoundError(f"no Kernel Tuner cache at {path}{hint}")
    data = read_cache(path)
    entries = _configs_from_cache(data)
    if use_kernel_tuner is None:
        use_kernel_tuner = is_installed("kernel_tuner")
    method = "read from the cache file"
    if use_kernel_tuner:
        import_optional("kernel_tuner", "replaying a Kernel Tuner search")
        simulated = _simulate(path, data)
        for key, config in entries:
            if config.ok and not math.isclose(simulated.get(key, math.nan), config.time_ms or 0.0):
                raise ValueError(
                    f"Kernel Tuner's replay of {path} disagrees with the file at {key}"
                )
        method = "replayed with Kernel Tuner's simulation mode: times from the cache, no GPU used"
    meta = data.get("labkit")
    label = meta if isinstance(meta, dict) else {}
    size = data.get("problem_size")
    size = (size,) if isinstance(size, int) else tuple(size) if isinstance(size, list) else ()
    return TuningReplay(
        kernel=str(data["kernel_name"]),
        device=str(label.get("gpu") or data["device_name"]),
        problem_size=tuple(int(d) for d in size),
        tune_params={k: tuple(v) for k, v in data["tune_params"].items()},
        configs=tuple(config for _, config in entries),
        method=method,
        path=str(path),
        recorded=label.get("recorded"),
        labkit_version=label.get("labkit_version"),
    )


def best_configuration(
    source: TuningReplay | str | os.PathLike[str] | None = None, *, kernel: str = "transpose"
) -> dict[str, Any]:
    """The parameters of the fastest verified configuration (of a replay, a cache file, or the recording)."""
    result = (
        source
        if isinstance(source, TuningReplay)
        else replay(source, kernel=kernel, use_kernel_tuner=False)
    )
    return dict(result.best.params)


def record_cache(
    source: str | os.PathLike[str],
    kernel: str,
    *,
    directory: str | os.PathLike[str] | None = None,
    gpu_name: str | None = None,
    block_size_names: Sequence[str] | None = None,
    recorded: datetime.date | None = None,
) -> Path:
    """Copy a finished Kernel Tuner cache into the reference directory, labelled; return its path.

    The label (``"labkit": {"gpu", "recorded", "labkit_version", ...}``) goes
    before "cache", which Kernel Tuner needs last; the file is written to a
    temporary name and renamed, so a crash never leaves half a recording.
    """
    from labkit import __version__
    from labkit.machine.reference import reference_dir

    _check_kernel_name(kernel)
    data = read_cache(source)
    when = recorded or datetime.datetime.now(datetime.timezone.utc).date()
    label = {
        "gpu": gpu_name or str(data["device_name"]),
        "recorded": when.isoformat(),
        "labkit_version": __version__,
        "kernel": kernel,
        "block_size_names": list(block_size_names) if block_size_names else None,
    }
    ordered = {k: v for k, v in data.items() if k not in ("labkit", "cache")}
    ordered["labkit"] = label
    ordered["cache"] = data["cache"]
    text = json.dumps(ordered, indent=1)
    folder = reference_dir(directory)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / CACHE_NAME.format(kernel=kernel)
    handle, temp = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text + "\n")
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    return target


# --------------------------------------------------------------------------- tuning on a GPU


# --------------------------------------------------------------------------- plot

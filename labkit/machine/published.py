"""Published GPU measurements and spec sheets, each with its source, for learners without a GPU.

Most learners run the course with no NVIDIA GPU. They can still see real GPU
numbers: other people's measurements, published by vendors, maintainers,
papers and individuals, and the vendors' spec sheets. labkit ships both as
two JSON tables in ``labkit/reference/published/``:

- ``gpus.json``: one spec sheet per GPU the course names (SMs, memory size
  and bandwidth, L2, dense FP32 / TF32 / BF16 / FP8 rates, host link), every
  value with the source it was read from;
- ``measurements.json``: one entry per published figure, with the quantity,
  value, unit, GPU, software, method and the source (URL, where in it, a
  quote containing the number, the kind of source and the date it was checked).

Only numbers found in their source are in either table; ``tests/test_published.py``
checks the schema and that every entry has a source. A recording made by this kit
on a real GPU (:mod:`labkit.machine.reference`) always wins over these.

Spec sheets quote tensor-core rates *with 2:4 structured sparsity* as well as
dense ones; every rate in ``gpus.json`` is **dense**, and its quote says where
the dense figure came from.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labkit.core.results import JsonRecord

#: Set this to the name of a GPU in the spec table ("T4", "H100") to choose the GPU that
#: the GPU cells predict for on a machine without one.
GPU_ENV_VAR = "LABKIT_GPU"
#: The GPU the predictions are for when nothing else is chosen and no GPU is present:
#: the A100, the data-centre card that university clusters and clouds most often lend, and the
#: one with the most published measurements in the table.
DEFAULT_GPU = "A100 SXM4 80GB"

SOURCE_KINDS = ("vendor", "maintainer", "paper", "individual", "third-party")

#: What each spec-sheet field is, in words.
SPEC_LABELS: dict[str, str] = {
    "sms": "streaming multiprocessors",
    "memory_gb": "memory size",
    "memory_gb_per_s": "peak memory bandwidth",
    "l2_mb": "L2 cache",
    "fp32_tflop_per_s": "FP32 on the CUDA cores",
    "tf32_tflop_per_s": "TF32 tensor cores, dense",
    "bf16_tflop_per_s": "BF16 tensor cores, dense",
    "fp16_tflop_per_s": "FP16 tensor cores, dense",
    "fp8_tflop_per_s": "FP8 tensor cores, dense",
    "host_link_gb_per_s": "host link",
}

#: The fields of a spec sheet, with their units. A rate a GPU does not have is null.
SPEC_FIELDS: dict[str, str] = {
    "sms": "SMs",
    "memory_gb": "GB",
    "memory_gb_per_s": "GB/s",
    "l2_mb": "MB",
    "fp32_tflop_per_s": "TFLOP/s",
    "tf32_tflop_per_s": "TFLOP/s",
    "bf16_tflop_per_s": "TFLOP/s",
    "fp16_tflop_per_s": "TFLOP/s",
    "fp8_tflop_per_s": "TFLOP/s",
    "host_link_gb_per_s": "GB/s",
}


def _folder() -> Path:
    return Path(__file__).resolve().parents[1] / "reference" / "published"


@dataclass(frozen=True)
class Source(JsonRecord):
    """Where a number was read: the page, the place in it, the words, and when."""

    url: str
    where: str
    kind: str
    checked: str
    quote: str

    def label(self) -> str:
        """ "https://... (README, table 2; vendor, checked 2026-12-04)"."""
        return f"{self.url} ({self.where}; {self.kind}, checked {self.checked})"


@dataclass(frozen=True)
class SpecValue(JsonRecord):
    """One value of a spec sheet, with its source; ``value`` is None where the GPU lacks it."""

    value: float | None
    unit: str
    source: Source
    note: str = ""


@dataclass(frozen=True)
class GpuSpec(JsonRecord):
    """One GPU's spec sheet: each value with its source (see :data:`SPEC_FIELDS`)."""

    name: str
    aliases: tuple[str, ...]
    arch: str
    memory_type: str
    host_link: str
    values: dict[str, SpecValue]

    def get(self, field: str) -> float | None:
        """The value of ``field`` (one of :data:`SPEC_FIELDS`), None where the GPU lacks it."""
        if field not in SPEC_FIELDS:
            raise ValueError(f"field must be one of {', '.join(SPEC_FIELDS)}, got {field!r}")
        spec = self.values.get(field)
        return None if spec is None else spec.value

    def need(self, field: str) -> float:
        """The value of ``field``; a ValueError that names the GPU where it has none."""
        value = self.get(field)
        if value is None:
            raise ValueError(f"{self.name} has no {field} in its spec sheet")
        return value

    def source(self, field: str) -> Source:
        return self.values[field].source


@dataclass(frozen=True)
class PublishedFigure(JsonRecord):
    """One published measurement: what, how much, on which GPU, how, and where it was read."""

    id: str
    quantity: str
    value: float
    unit: str
    gpu: str
    method: str
    source: Source
    lessons: tuple[str, ...]
    software: str | None = None
    driver: str | None = None
    spec_name: str | None = None
    spec_field: str | None = None
    note: str = ""

    @property
    def amount(self) -> str:
        """The value with its unit: "2,039 GB/s"."""
        return f"{format_number(self.value)} {self.unit}"

    def line(self) -> str:
        """One line for a notebook: the figure, the GPU, how, and the source."""
        soft = f"; {self.software}" if self.software else ""
        return (
            f"{self.gpu}: {self.quantity}: {self.amount} ({self.method}{soft}). "
            f"Published, not measured here: {self.source.label()}"
        )

    def spec_fraction(self) -> tuple[float, GpuSpec] | None:
        """This figure over its GPU's spec-sheet value (``spec_field``), where both exist."""
        if self.spec_name is None or self.spec_field is None:
            return None
        spec = gpu_spec(self.spec_name)
        rated = spec.get(self.spec_field)
        if rated is None or rated <= 0:
            return None
        return self.value / rated, spec

    def against_spec(self) -> str | None:
        """The computed sentence: what fraction of its spec sheet this measurement reached."""
        found = self.spec_fraction()
        if found is None or self.spec_field is None:
            return None
        fraction, spec = found
        rated = spec.need(self.spec_field)
        above = (
            " (more than the sheet: its figure may be rounded, or the benchmark counts bytes "
            "or operations differently)"
            if fraction > 1
            else ""
        )
        return (
            f"{self.gpu}: {format_number(self.value)} {self.unit} measured is {fraction:.0%} "
            f"of the {spec.name} spec sheet's {format_number(rated)} "
            f"{SPEC_FIELDS[self.spec_field]} ({SPEC_LABELS[self.spec_field]}){above}"
        )


def format_number(value: float) -> str:
    """A published number as its source wrote it, with thousands separators: 2,039; 271.2; 0.0013."""
    if value == int(value) and abs(value) >= 1:
        return f"{int(value):,}"
    if abs(value) >= 100:
        return f"{value:,.2f}".rstrip("0").rstrip(".")
    return f"{value:.4g}"


def _source(raw: dict[str, Any], where: str) -> Source:
    try:
        source = Source(
            url=str(raw["url"]),
            where=str(raw["where"]),
            kind=str(raw["kind"]),
            checked=str(raw["checked"]),
            quote=str(raw["quote"]),
        )
    except KeyError as exc:
        raise ValueError(f"{where}: the source has no {exc.args[0]!r}") from None
    if source.kind not in SOURCE_KINDS:
        raise ValueError(f"{where}: kind must be one of {SOURCE_KINDS}, got {source.kind!r}")
    return source


@functools.lru_cache(maxsize=1)
def _load_specs() -> tuple[GpuSpec, ...]:
    data = json.loads((_folder() / "gpus.json").read_text(encoding="utf-8"))
    sources = data.get("sources", {})
    specs = []
    for raw in data["gpus"]:
        values = {}
        for field, entry in raw["values"].items():
            if field not in SPEC_FIELDS:
                raise ValueError(f"gpus.json, {raw['name']}: unknown field {field!r}")
            base = sources.get(entry["source"], {}) if isinstance(entry["source"], str) else {}
            merged = {**base, **{k: v for k, v in entry.items() if k in ("where", "quote")}}
            if not isinstance(entry["source"], str):
                merged = entry["source"]
            values[field] = SpecValue(
                value=entry["value"],
                unit=SPEC_FIELDS[field],
                source=_source(merged, f"gpus.json, {raw['name']}.{field}"),
                note=entry.get("note", ""),
            )
        specs.append(
            GpuSpec(
                name=raw["name"],
                aliases=tuple(raw.get("aliases", ())),
                arch=raw["arch"],
                memory_type=raw["memory_type"],
                host_link=raw["host_link"],
                values=values,
            )
        )
    return tuple(specs)


@functools.lru_cache(maxsize=1)
def _load_figures() -> tuple[PublishedFigure, ...]:
    data = json.loads((_folder() / "measurements.json").read_text(encoding="utf-8"))
    figures = []
    for raw in data["figures"]:
        figures.append(
            PublishedFigure(
                id=raw["id"],
                quantity=raw["quantity"],
                value=float(raw["value"]),
                unit=raw["unit"],
                gpu=raw["gpu"],
                method=raw["method"],
                source=_source(raw["source"], f"measurements.json, {raw['id']}"),
                lessons=tuple(raw["lessons"]),
                software=raw.get("software"),
                driver=raw.get("driver"),
                spec_name=raw.get("spec_name"),
                spec_field=raw.get("spec_field"),
                note=raw.get("note", ""),
            )
        )
    return tuple(figures)


def gpu_specs() -> tuple[GpuSpec, ...]:
    """Every spec sheet in the table."""
    return _load_specs()


def published_figures(lesson: str | None = None) -> tuple[PublishedFigure, ...]:
    """Every published figure, or those a lesson's GPU cells show (``lesson`` = a recording name)."""
    figures = _load_figures()
    if lesson is None:
        return figures
    return tuple(f for f in figures if lesson in f.lessons)


def _key(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


def gpu_spec(name: str) -> GpuSpec:
    """The spec sheet of ``name`` ("A100", "h100 sxm5", "RTX 4090"), by name or alias."""
    wanted = _key(name)
    for spec in gpu_specs():
        if wanted in {_key(spec.name), *(_key(a) for a in spec.aliases)}:
            return spec
    names = ", ".join(s.name for s in gpu_specs())
    raise ValueError(f"gpu must be one of {names} (or a short name such as 'A100'), got {name!r}")


_chosen: str | None = None


def use_gpu(name: str | None) -> GpuSpec | None:
    """Choose the GPU the GPU cells predict for on a machine without one; None resets.

    ``labkit.use_gpu("T4")`` before the cells, or ``LABKIT_GPU=T4`` in the
    environment. Without either, the cells predict for the GPU present (if
    it is in the table), else for :data:`DEFAULT_GPU`.
    """
    global _chosen
    if name is None:
        _chosen = None
        return None
    spec = gpu_spec(name)
    _chosen = spec.name
    return spec


def chosen_gpu() -> GpuSpec:
    """The GPU to predict for: :func:`use_gpu`'s, else ``$LABKIT_GPU``, else the one present, else
    :data:`DEFAULT_GPU`."""
    if _chosen is not None:
        return gpu_spec(_chosen)
    env = os.environ.get(GPU_ENV_VAR, "").strip()
    if env:
        try:
            return gpu_spec(env)
        except ValueError as exc:
            raise ValueError(f"${GPU_ENV_VAR}: {exc}") from None
    present = _present_gpu_name()
    if present:
        try:
            return gpu_spec(present.removeprefix("NVIDIA ").strip())
        except ValueError:
            pass
    return gpu_spec(DEFAULT_GPU)


def _present_gpu_name() -> str | None:
    from labkit.machine import nvidia

    info = nvidia.nvidia_info()
    if info.devices:
        return info.devices[0].name
    return info.smi_gpus[0].name if info.smi_gpus else None

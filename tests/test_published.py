"""Published GPU figures and spec sheets (issue 18): the tables, the predictions, the GPU cells.

The tables in ``labkit/reference/published/`` hold only numbers found in their
sources; these tests check what can be checked offline: the schema, that
every value has a source with a quote containing the number, that the names
resolve, that every GPU cell of the notebooks has evidence to show, and that
the committed GPU cells print a source or a recording.
"""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path

import pytest

import labkit
from labkit.machine import gpu, prediction, published, reference

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
TABLES = ROOT / "labkit" / "reference" / "published"

#: The lessons a published figure may belong to: every recording name, and two without a cell yet.
LESSONS = set(reference.RECORD_COMMANDS) | {
    "bandwidth",
    "roofline",
    "accel",
    "cnn",
    "levers",
    "rnn",
    "kernels",
    "batching",
    "profile",
    "allreduce",
    "attention",
    "triton",
}


#: Spec fields the device itself reports (deviceQuery), which a published query may source.
DEVICE_REPORTED = ("sms", "l2_mb")


def _number_in(value: float, quote: str) -> bool:
    """Whether ``value`` appears in ``quote`` as its source wrote it (commas and spaces aside)."""
    text = quote.replace(",", "").replace("\u202f", "")
    if value == 2 and "twice" in text:  # "up to twice as slow"
        return True
    candidates = set()
    # the source may give TB/s where the table has GB/s, or FLOP/s and bytes/s in code
    for scaled in (value, value / 1000, value * 1e9, value * 1e12):
        candidates |= {f"{scaled:g}", f"{scaled}", f"{scaled:.1f}", f"{scaled:.2f}"}
        if scaled == int(scaled):
            candidates.add(str(int(scaled)))
    return any(re.search(rf"(?<![\d.])0*{re.escape(c)}(?![\d])", text) for c in candidates)


# --------------------------------------------------------------------------- the tables


def test_both_tables_load_with_the_expected_sizes() -> None:
    specs, figures = published.gpu_specs(), published.published_figures()
    names = {s.name for s in specs}
    for gpu_name in ("T4", "L4", "A100", "H100", "H200", "B200", "RTX 4090", "RTX 5090"):
        assert published.gpu_spec(gpu_name).name in names
    assert len(figures) >= 90
    assert len({f.id for f in figures}) == len(figures), "figure ids must be unique"


def test_every_spec_value_has_a_checked_source_quoting_it() -> None:
    for spec in published.gpu_specs():
        for field, value in spec.values.items():
            assert field in published.SPEC_FIELDS
            source = value.source
            assert source.url.startswith("https://"), (spec.name, field)
            # vendor or maintainer sources; what the device reports (SMs, L2) may come from a
            # published device query
            kinds = ("vendor", "maintainer", "individual") if field in DEVICE_REPORTED else None
            if source.kind == "third-party":  # only a fork's copy of a vendor file, and said so
                assert "fork of NVIDIA's" in value.note, (spec.name, field)
            else:
                assert source.kind in (kinds or ("vendor", "maintainer")), (spec.name, field)
            assert source.where and source.quote, (spec.name, field)
            datetime.date.fromisoformat(source.checked)
            if value.value is not None:
                assert value.value > 0
                # a value computed from the quote (bytes to MB, "989 / 2") says so in its note
                assert _number_in(value.value, source.quote) or "not verbatim" in value.note, (
                    spec.name,
                    field,
                    source.quote,
                )


def test_every_published_figure_has_a_source_quoting_its_number() -> None:
    for f in published.published_figures():
        assert f.source.url.startswith("https://"), f.id
        assert f.source.kind in published.SOURCE_KINDS, f.id
        assert f.source.where and f.method and f.quantity and f.unit, f.id
        datetime.date.fromisoformat(f.source.checked)
        assert set(f.lessons) <= LESSONS and f.lessons, f.id
        assert _number_in(f.value, f.source.quote), (f.id, f.value, f.source.quote)
        if f.spec_name is not None:
            assert published.gpu_spec(f.spec_name).name == f.spec_name, f.id
        if f.spec_field is not None:
            assert f.spec_name is not None and f.spec_field in published.SPEC_FIELDS, f.id


def test_spec_aliases_are_unique_and_resolve() -> None:
    seen: dict[str, str] = {}
    for spec in published.gpu_specs():
        for alias in (spec.name, *spec.aliases):
            key = published._key(alias)
            assert seen.setdefault(key, spec.name) == spec.name, alias
            assert published.gpu_spec(alias) is spec
    assert published.gpu_spec("NVIDIA H200").name == "H200 SXM 141GB"  # the driver's name


def test_tensor_core_rates_are_dense() -> None:
    """The sheets print sparse rates; the table keeps dense ones (A100 BF16 312, not 624)."""
    a100 = published.gpu_spec("A100")
    assert a100.get("bf16_tflop_per_s") == 312 and a100.get("tf32_tflop_per_s") == 156
    h100 = published.gpu_spec("H100")
    assert h100.get("bf16_tflop_per_s") == 989 and h100.get("fp8_tflop_per_s") == 1979


def test_the_measured_fraction_of_a_spec_is_computed() -> None:
    (mamf,) = [f for f in published.published_figures() if f.id == "a100-sxm-bf16-mamf"]
    fraction, spec = mamf.spec_fraction() or (None, None)
    assert fraction == pytest.approx(271.2 / 312) and spec is not None
    assert mamf.against_spec() == (
        f"{mamf.gpu}: 271.2 TFLOP/s measured is 87% of the A100 SXM4 80GB spec sheet's "
        "312 TFLOP/s (BF16 tensor cores, dense)"
    )


def test_tables_are_valid_json_with_no_stray_fields() -> None:
    gpus = json.loads((TABLES / "gpus.json").read_text())
    assert set(gpus) == {"sources", "gpus"}
    allowed = {"value", "source", "where", "quote", "note"}
    for g in gpus["gpus"]:
        assert set(g) == {"name", "aliases", "arch", "memory_type", "host_link", "values"}
        for entry in g["values"].values():
            assert set(entry) <= allowed
    figures = json.loads((TABLES / "measurements.json").read_text())["figures"]
    keys = {"id", "quantity", "value", "unit", "gpu", "spec_name", "spec_field", "method"}
    keys |= {"software", "driver", "lessons", "source", "note"}
    assert all(set(f) <= keys for f in figures)


# --------------------------------------------------------------------------- choosing the GPU


def test_the_default_and_the_chosen_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(published.GPU_ENV_VAR, raising=False)
    monkeypatch.setattr(published, "_present_gpu_name", lambda: None)
    labkit.use_gpu(None)
    assert published.chosen_gpu().name == published.DEFAULT_GPU
    monkeypatch.setenv(published.GPU_ENV_VAR, "h100")
    assert published.chosen_gpu().name == "H100 SXM5 80GB"
    assert labkit.use_gpu("L4").name == "L4" and published.chosen_gpu().name == "L4"
    labkit.use_gpu(None)
    monkeypatch.setattr(published, "_present_gpu_name", lambda: "NVIDIA A100-SXM4-80GB")
    monkeypatch.delenv(published.GPU_ENV_VAR)
    assert published.chosen_gpu().name == "A100 SXM4 80GB"  # the GPU present wins the default


def test_a_bad_gpu_name_says_what_is_known(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match=r"gpu must be one of .*A100 SXM4 80GB.*got 'X9'"):
        labkit.use_gpu("X9")
    monkeypatch.setenv(published.GPU_ENV_VAR, "X9")
    labkit.use_gpu(None)
    with pytest.raises(ValueError, match=r"\$LABKIT_GPU: gpu must be one of"):
        published.chosen_gpu()


# --------------------------------------------------------------------------- the predictions


def _predictors() -> dict[str, prediction.Predictor]:
    import labkit.roofline as rf
    from labkit.accel import gpu_prediction as accel
    from labkit.bandwidth import gpu_prediction as bandwidth
    from labkit.batching import gpu_prediction as batching
    from labkit.kernels import gpu_prediction as kernels
    from labkit.models import gpu_prediction as models
    from labkit.parallelism import gpu_prediction as parallelism
    from labkit.profiling import gpu_prediction as profiling
    from labkit.roofline import gpu_prediction as roofline
    from labkit.timing import gpu_prediction as timing

    ops = {"add": rf.add_cost(1 << 20), "matmul 1024": rf.matmul_cost(1024, 1024, 1024)}
    return {
        "predict_naive_timing": timing.predict_naive_timing,
        "predict_parallelism": parallelism.predict_parallelism,
        "predict_device_copy": bandwidth.predict_device_copy,
        "predict_strided": bandwidth.predict_strided,
        "predict_transfers": bandwidth.predict_transfers,
        "predict_roofline": lambda g: roofline.predict_roofline(g, ops),
        "predict_async_launch": accel.predict_async_launch,
        "predict_mixed_precision": accel.predict_mixed_precision,
        "predict_cnn": models.predict_cnn,
        "predict_levers": models.predict_levers,
        "predict_rnn": models.predict_rnn,
        "predict_kernels": kernels.predict_kernels,
        "predict_batch_sweep": batching.predict_batch_sweep,
        "predict_largest_batch": batching.predict_largest_batch,
        "predict_sync_stall": profiling.predict_sync_stall,
    }


@pytest.mark.parametrize("name", sorted(_predictors()))
def test_every_prediction_runs_for_every_gpu_of_the_table(name: str) -> None:
    pytest.importorskip("torch")
    predict = _predictors()[name]
    for spec in published.gpu_specs():
        result = predict(spec)
        lines = result.lines()
        assert lines[0].startswith(f"Predicted by this lesson's model for the {spec.name}")
        assert set(result.used) <= set(spec.values) and not set(result.missing) & set(spec.values)
        for field in result.used:  # every spec value a prediction reads is printed with its source
            assert any(spec.source(field).url in line for line in lines), (name, field)
        for f in result.figures:
            assert any(f.source.url in line for line in lines)
        assert all("nan" not in line and "inf×" not in line for line in lines)


def test_the_default_gpu_gets_a_full_prediction_in_every_cell() -> None:
    """The A100 (the default) has every field the predictions read: none says it is missing."""
    pytest.importorskip("torch")
    a100 = published.gpu_spec(published.DEFAULT_GPU)
    for name, predict in _predictors().items():
        result = predict(a100)
        assert result.missing == (), name
        assert result.model and (result.verdicts or result.figures), name


def test_predictions_compute_their_numbers() -> None:
    from labkit.timing.gpu_prediction import matmul_floor_ms, predict_naive_timing

    assert matmul_floor_ms(2048, 19.5) == pytest.approx(2 * 2048**3 / 19.5e12 * 1e3)
    text = "\n".join(predict_naive_timing(published.gpu_spec("A100")).lines())
    assert "takes at least 881 µs" in text and "44× to 176×" in text


def test_require_gpu_prints_the_prediction_then_how_to_record(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from labkit.bandwidth.gpu_prediction import predict_transfers

    monkeypatch.setattr(gpu, "has_gpu", lambda: False)
    monkeypatch.setenv(reference.ENV_VAR, str(tmp_path))
    monkeypatch.delenv(published.GPU_ENV_VAR, raising=False)
    monkeypatch.setattr(published, "_present_gpu_name", lambda: None)
    labkit.use_gpu(None)
    assert gpu.require_gpu("transfers", reference="bandwidth", predict=predict_transfers) is False
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "No GPU here: this cell would show transfers."
    assert lines[1].startswith("Predicted by this lesson's model for the A100 SXM4 80GB")
    assert "Published figures, not measured here:" in lines
    assert any(
        "25.7 GB/s measured is 82% of the A100 SXM4 80GB spec sheet's 31.5" in ln for ln in lines
    )
    assert lines[-1].endswith("labkit bench bandwidth --record")
    # a recording takes precedence over the prediction
    reference.record("bandwidth", {"summary": ["copy 3.9 TB/s"]}, gpu_name="NVIDIA H200")
    gpu.require_gpu("transfers", reference="bandwidth", predict=predict_transfers)
    out = capsys.readouterr().out
    assert "recorded on NVIDIA H200" in out and "Predicted" not in out


# --------------------------------------------------------------------------- the notebooks


def _gpu_cells() -> list[tuple[str, int, str, str]]:
    cells = []
    for path in NOTEBOOKS:
        nb = json.loads(path.read_text(encoding="utf-8"))
        for i, cell in enumerate(nb["cells"]):
            source = "".join(cell["source"])
            if cell["cell_type"] == "code" and "labkit.require_gpu(" in source:
                out = "".join("".join(o.get("text", "")) for o in cell.get("outputs", []))
                cells.append((path.name, i, source, out))
    return cells


def test_every_gpu_cell_names_a_reference_with_evidence() -> None:
    cells = _gpu_cells()
    assert len(cells) >= 15
    for name, i, source, _ in cells:
        found = re.search(r'reference="([\w-]+)"', source)
        assert found, f"{name} cell {i}: require_gpu without a reference"
        lesson = found.group(1)
        has_prediction = "predict=" in source
        assert has_prediction or published.published_figures(lesson), (name, i, lesson)


def test_no_committed_gpu_cell_prints_only_that_no_recording_exists() -> None:
    for name, i, _, out in _gpu_cells():
        assert out.startswith("No GPU here") or "recorded on" in out, (name, i)
        assert "recorded on" in out or "https://" in out, f"{name} cell {i} shows no source"
        # published figures beside the prediction, or the prediction says that none exists
        shown = ("Published figures, not measured here:", "recorded on", "no published")
        assert any(s in out for s in shown), (name, i)


def test_the_tables_ship_in_the_package() -> None:
    """pyproject's package data names them, so an installed labkit (not only a checkout) has them."""
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "reference/published/*.json" in data["tool"]["setuptools"]["package-data"]["labkit"]
    assert sorted(p.name for p in TABLES.glob("*.json")) == ["gpus.json", "measurements.json"]

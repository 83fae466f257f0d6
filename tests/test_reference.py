"""labkit.machine.reference: recordings from real GPUs, written atomically, read back exactly.

Every test writes into tmp_path (by argument or LABKIT_REFERENCE_DIR), never
into the package.
"""

from __future__ import annotations

import datetime
import json
import math
from pathlib import Path

import pytest

import labkit
from labkit.machine import reference

RESULTS = {"summary": ["matmul 2048² on cuda:0: naive 9.87 µs, synchronized 312 µs"], "x": [1, 2]}
DAY = datetime.date(2026, 11, 30)


@pytest.fixture(autouse=True)
def no_env_dir(monkeypatch):
    monkeypatch.delenv(reference.ENV_VAR, raising=False)


def test_record_and_load_roundtrip(tmp_path):
    path = reference.record(
        "naive_timing",
        RESULTS,
        gpu_name="NVIDIA H200",
        directory=tmp_path,
        driver="560.35.03",
        cuda="12.4",
        torch="2.13.0",
        recorded=DAY,
    )
    assert path == tmp_path / "naive_timing.json"
    ref = reference.load("naive_timing", directory=tmp_path)
    assert ref is not None
    assert (ref.name, ref.gpu, ref.recorded) == ("naive_timing", "NVIDIA H200", "2026-11-30")
    assert (ref.driver, ref.cuda, ref.torch) == ("560.35.03", "12.4", "2.13.0")
    assert ref.labkit_version == labkit.__version__
    assert ref.results == RESULTS
    assert ref.path == path
    on_disk = json.loads(path.read_text(encoding="utf-8"))
    assert set(on_disk) == {
        "name",
        "gpu",
        "recorded",
        "labkit_version",
        "driver",
        "cuda",
        "torch",
        "results",
    }


def test_recorded_defaults_to_today_as_an_iso_date(tmp_path):
    reference.record("x", {}, gpu_name="GPU", directory=tmp_path)
    recorded = reference.load("x", directory=tmp_path).recorded  # type: ignore[union-attr]
    assert datetime.date.fromisoformat(recorded)


def test_environment_variable_overrides_the_package_directory(tmp_path, monkeypatch):
    monkeypatch.setenv(reference.ENV_VAR, str(tmp_path / "refs"))
    assert reference.reference_dir() == tmp_path / "refs"
    reference.record("envtest", {"a": 1}, gpu_name="GPU")
    assert (tmp_path / "refs" / "envtest.json").is_file()
    assert reference.load("envtest") is not None
    assert reference.available() == ["envtest"]


def test_default_directory_is_inside_the_package():
    assert reference.reference_dir() == Path(reference.__file__).resolve().parents[1] / "reference"


def test_shipped_recordings_are_real_and_valid():
    # No fabricated data: whatever ships must at least name the GPU and date it was made on.
    for name in reference.available():
        ref = reference.load(name)
        assert ref is not None and ref.gpu.strip() and ref.recorded
        datetime.date.fromisoformat(ref.recorded)


def test_missing_recording_is_none(tmp_path):
    assert reference.load("naive_timing", directory=tmp_path) is None
    assert reference.load("naive_timing", directory=tmp_path / "absent") is None
    assert reference.available(tmp_path / "absent") == []


def test_overwrite_replaces_the_file(tmp_path):
    reference.record("r", {"v": 1}, gpu_name="GPU", directory=tmp_path)
    reference.record("r", {"v": 2}, gpu_name="GPU", directory=tmp_path)
    assert reference.load("r", directory=tmp_path).results == {"v": 2}  # type: ignore[union-attr]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_failed_write_leaves_the_old_recording_and_no_temp_file(tmp_path, monkeypatch):
    reference.record("r", {"v": 1}, gpu_name="GPU", directory=tmp_path)
    before = (tmp_path / "r.json").read_bytes()

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(reference.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        reference.record("r", {"v": 2}, gpu_name="GPU", directory=tmp_path)
    assert (tmp_path / "r.json").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_unserializable_results_write_nothing(tmp_path):
    with pytest.raises(ValueError, match="cannot be stored as JSON"):
        reference.record("r", {"v": math.nan}, gpu_name="GPU", directory=tmp_path)
    with pytest.raises(ValueError, match="cannot be stored as JSON"):
        reference.record("r", {"v": object()}, gpu_name="GPU", directory=tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["../evil", "a/b", "a\\b", "a.b", "", "a b", "naïve", "x.json"])
def test_bad_names_are_rejected(name, tmp_path):
    with pytest.raises(ValueError, match="not a valid recording name"):
        reference.record(name, {}, gpu_name="GPU", directory=tmp_path)
    with pytest.raises(ValueError, match="not a valid recording name"):
        reference.load(name, directory=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_non_string_name_is_not_a_valid_name():
    with pytest.raises(ValueError, match="not a valid recording name"):
        reference.load(3)  # type: ignore[arg-type]


def test_corrupt_file_is_a_clear_error(tmp_path):
    (tmp_path / "naive_timing.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match=r"naive_timing.json is not a valid labkit recording"):
        reference.load("naive_timing", directory=tmp_path)
    (tmp_path / "naive_timing.json").write_text('{"results": {}}', encoding="utf-8")
    with pytest.raises(ValueError, match="labkit bench timing --record"):
        reference.load("naive_timing", directory=tmp_path)


def test_describe_and_format(tmp_path):
    reference.record(
        "naive_timing", RESULTS, gpu_name="NVIDIA H200", directory=tmp_path, recorded=DAY
    )
    ref = reference.load("naive_timing", directory=tmp_path)
    assert reference.describe(ref) == "recorded on NVIDIA H200 on 2026-11-30"  # type: ignore[arg-type]
    text = reference.format_reference(ref)  # type: ignore[arg-type]
    assert text.splitlines() == [
        f"Result recorded on NVIDIA H200 on 2026-11-30 (labkit {labkit.__version__}):",
        "  matmul 2048² on cuda:0: naive 9.87 µs, synchronized 312 µs",
    ]


def test_format_without_summary_lists_results_sorted(tmp_path):
    reference.record(
        "other", {"b": 2, "a": {"y": 1, "x": 0}}, gpu_name="GPU", directory=tmp_path, recorded=DAY
    )
    lines = reference.format_reference(reference.load("other", directory=tmp_path)).splitlines()  # type: ignore[arg-type]
    assert lines[1:] == ['  a: {"x": 0, "y": 1}', "  b: 2"]


def test_record_command():
    assert reference.record_command("naive_timing") == "labkit bench timing --record"
    assert reference.record_command("bandwidth") == "labkit bench bandwidth --record"

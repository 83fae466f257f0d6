"""labkit.machine.gpu: has_gpu and the text require_gpu prints where there is no GPU."""

from __future__ import annotations

import datetime
from types import SimpleNamespace

import pytest

import labkit
from labkit.machine import gpu, reference


@pytest.fixture
def no_gpu(monkeypatch, tmp_path):
    """A CPU-only machine with an empty recordings directory of its own."""
    monkeypatch.setattr(gpu, "has_gpu", lambda: False)
    monkeypatch.setenv(reference.ENV_VAR, str(tmp_path))
    return tmp_path


def test_has_gpu_agrees_with_torch():
    torch = pytest.importorskip("torch")
    assert gpu.has_gpu() is bool(torch.cuda.is_available())


def test_has_gpu_uses_cupy_only_without_torch(monkeypatch):
    monkeypatch.setattr(gpu, "is_installed", lambda name: name == "cupy")
    monkeypatch.setattr(
        gpu,
        "import_optional",
        lambda name, purpose=None: SimpleNamespace(is_available=lambda: True),
    )
    assert gpu.has_gpu() is True
    monkeypatch.setattr(gpu, "is_installed", lambda name: False)
    assert gpu.has_gpu() is False


def test_has_gpu_treats_a_broken_cuda_as_no_gpu(monkeypatch):
    def broken():
        raise RuntimeError("driver exploded")

    monkeypatch.setattr(gpu, "is_installed", lambda name: name == "torch")
    monkeypatch.setattr(
        gpu,
        "import_optional",
        lambda name, purpose=None: SimpleNamespace(cuda=SimpleNamespace(is_available=broken)),
    )
    assert gpu.has_gpu() is False


def test_require_gpu_returns_true_silently_with_a_gpu(monkeypatch, capsys):
    monkeypatch.setattr(gpu, "has_gpu", lambda: True)
    assert gpu.require_gpu("the speedup", reference="naive_timing") is True
    assert capsys.readouterr().out == ""


def test_require_gpu_without_gpu_and_without_reference(no_gpu, capsys):
    assert gpu.require_gpu("the speedup of a GPU matmul") is False
    assert (
        capsys.readouterr().out
        == "No GPU here: this cell would show the speedup of a GPU matmul.\n"
    )


def test_require_gpu_without_a_recording_names_the_command(no_gpu, capsys):
    assert gpu.require_gpu("the naive clock under-reporting", reference="naive_timing") is False
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "No GPU here: this cell would show the naive clock under-reporting."
    assert lines[-1] == (
        "No recording from a real GPU exists yet; make one on a GPU machine with: "
        "labkit bench timing --record"
    )
    # between them, the lesson's published measurements, each with its source
    assert lines[1] == "Published figures, not measured here:"
    assert all("https://" in line for line in lines[2:-1]) and len(lines) > 3
    gpu.require_gpu("a bandwidth curve", reference="bandwidth")
    assert capsys.readouterr().out.splitlines()[-1].endswith("labkit bench bandwidth --record")


def test_require_gpu_with_a_recording_prints_it_labelled(no_gpu, capsys):
    reference.record(
        "naive_timing",
        {"summary": ["matmul 2048² on cuda:0: naive clock 9.87 µs per call"]},
        gpu_name="NVIDIA H200",
        recorded=datetime.date(2026, 11, 30),
    )
    assert gpu.require_gpu("the naive clock under-reporting.", reference="naive_timing") is False
    first = capsys.readouterr().out
    assert first.splitlines() == [
        "No GPU here: this cell would show the naive clock under-reporting.",
        f"Result recorded on NVIDIA H200 on 2026-11-30 (labkit {labkit.__version__}):",
        "  matmul 2048² on cuda:0: naive clock 9.87 µs per call",
    ]
    gpu.require_gpu("the naive clock under-reporting.", reference="naive_timing")
    assert capsys.readouterr().out == first  # deterministic


@pytest.mark.parametrize(
    ("what", "ref", "error", "match"),
    [
        ("x", "../etc", ValueError, "reference: .*not a valid recording name"),
        ("x", 5, ValueError, "reference: .*not a valid recording name"),
    ],
)
def test_require_gpu_rejects_bad_arguments(what, ref, error, match, no_gpu):
    with pytest.raises(error, match=match):
        gpu.require_gpu(what, reference=ref)


def test_exported_from_labkit():
    assert labkit.has_gpu is gpu.has_gpu
    assert labkit.require_gpu is gpu.require_gpu

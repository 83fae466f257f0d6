"""``labkit doctor``: text and JSON output, colour rules, and runs with frameworks missing or broken.

The subprocess tests hide a framework with ``sys.modules[name] = None`` (or
shadow it with a package whose import raises ``OSError``) before running the
CLI, and check what a learner would see: exit code 0, no traceback, the
framework reported as missing or broken.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fakes import H100

from labkit.cli import doctor as doctor_cli
from labkit.cli.doctor import run_doctor
from labkit.cli.main import main
from labkit.core.units import format_bytes
from labkit.machine.cpu import CpuInfo
from labkit.machine.diagnose import Finding
from labkit.machine.frameworks import FrameworkInfo, GpuDevice
from labkit.machine.nvidia import NvidiaInfo, SmiGpu
from labkit.machine.report import DeviceReport, SystemInfo, format_report, use_color

REPO = Path(__file__).resolve().parents[1]


def gpu_report() -> DeviceReport:
    """A fake H100 machine, so the GPU rows are formatted on a machine without one."""
    h100 = H100
    device = GpuDevice(
        index=0,
        kind="cuda",
        name=h100.name,
        compute_capability="9.0",
        sm_count=132,
        memory_bytes=h100.memory_bytes,
        bandwidth_gb_per_s=3352.32,
        uuid=h100.uuid,
    )
    return DeviceReport(
        system=SystemInfo(
            os="Linux",
            os_release="6.8.0",
            wsl=False,
            python_version="3.11.7",
            labkit_version="0.1.0",
            cuda_visible_devices=None,
            tf_force_gpu_allow_growth=None,
        ),
        cpu=CpuInfo(
            model="AMD EPYC 9654",
            architecture="x86_64",
            physical_cores=96,
            logical_cores=192,
            simd_features=("SSE4.2", "AVX", "AVX2", "FMA3", "AVX512F"),
            simd_source="/proc/cpuinfo",
            memory_total_bytes=1024**4,
            memory_available_bytes=900 * 1024**3,
            l1d_cache_bytes=32 * 1024,
            l2_cache_bytes=1024**2,
            l3_cache_bytes=32 * 1024**2,
        ),
        nvidia=NvidiaInfo(
            library="libcuda.so.1",
            library_error=None,
            init_error=None,
            init_error_code=None,
            cuda_driver_version="12.4",
            driver_version="550.54.15",
            devices=(h100,),
            smi_gpus=(SmiGpu(h100.name, "550.54.15", 81559 * 1024**2),),
            smi_error=None,
            pci_gpus=(),
        ),
        frameworks=(
            FrameworkInfo(
                name="torch",
                installed=True,
                version="2.13.0+cu128",
                distributions=("torch",),
                built_with_cuda=True,
                built_with_rocm=False,
                cuda_version="12.8",
                cuda_major=12,
                cudnn_version="9.10.2",
                gpu_available=True,
                devices=(device,),
                mps_built=False,
                mps_available=False,
            ),
            FrameworkInfo(name="tensorflow", installed=False),
            FrameworkInfo(
                name="cupy",
                installed=True,
                version="14.2.0",
                distributions=("cupy-cuda12x",),
                error="the import fails: OSError: libcudart.so.12: cannot open shared object file",
            ),
        ),
        findings=(
            Finding("cupy-broken", "error", "CuPy is installed but unusable.", "Reinstall it."),
        ),
    )


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (None, "unknown"),
        (512, "512 B"),
        (48 * 1024, "48 KiB"),
        (2 * 1024**2, "2 MiB"),
        (int(23.4 * 1024**3), "23.4 GiB"),
        (24677752832, "23.0 GiB"),
        (85520809984, "79.6 GiB"),
        (300 * 1024**2, "300 MiB"),
    ],
)
def test_format_bytes(n, text):
    assert format_bytes(n) == text


def test_format_report_gpu_machine():
    text = format_report(gpu_report())
    assert "\033[" not in text
    assert (
        "cuda:0  NVIDIA H100 80GB HBM3 (compute capability 9.0, 132 SMs, 79.6 GiB, 3352 GB/s peak)"
        in text
    )
    assert "  driver         550.54.15, supports CUDA <= 12.4 (libcuda.so.1)" in text
    assert "  build          CUDA 12.8, cuDNN 9.10.2" in text
    assert "  installed      no; install with: pip install" in text  # TensorFlow
    assert "  error          the import fails: OSError: libcudart.so.12" in text  # CuPy
    assert "  error    CuPy is installed but unusable. [cupy-broken]" in text
    assert "           Fix: Reinstall it." in text


def test_format_report_rows_are_aligned():
    for line in format_report(gpu_report()).splitlines():
        if line.startswith("  ") and not line.startswith("   ") and "  " in line[2:]:
            label_end = line.index(" ", 2)
            if line[2:label_end] in {
                "model",
                "cores",
                "SIMD",
                "memory",
                "caches",
                "driver",
                "version",
                "build",
            }:
                assert line[16] == " " and line[17] != " ", line


def test_format_report_colour():
    coloured = format_report(gpu_report(), color=True)
    assert "\033[1mCPU\033[0m" in coloured
    assert "\033[31m" in coloured  # the error finding in red
    plain = format_report(gpu_report(), color=False)
    assert "\033[" not in plain


def test_use_color_rules():
    tty, pipe = FakeTty(), io.StringIO()
    assert use_color(True, pipe, {}) is True
    assert use_color(False, tty, {}) is False
    assert use_color(None, tty, {}) is True
    assert use_color(None, pipe, {}) is False
    assert use_color(None, tty, {"NO_COLOR": "1"}) is False
    assert (
        use_color(None, tty, {"NO_COLOR": ""}) is True
    )  # no-color.org: only a non-empty value counts


@pytest.fixture
def fake_report(monkeypatch):
    monkeypatch.setattr(doctor_cli, "device_report", gpu_report)


def test_no_color_env_is_respected_on_a_terminal(fake_report, monkeypatch):
    tty = FakeTty()
    monkeypatch.setattr(sys, "stdout", tty)
    monkeypatch.setenv("NO_COLOR", "1")
    assert run_doctor(as_json=False, color=None) == 0
    assert "\033[" not in tty.getvalue()

    tty = FakeTty()
    monkeypatch.setattr(sys, "stdout", tty)
    monkeypatch.delenv("NO_COLOR")
    assert run_doctor(as_json=False, color=None) == 0
    assert "\033[" in tty.getvalue()


def test_no_color_flag(fake_report, monkeypatch):
    tty = FakeTty()
    monkeypatch.setattr(sys, "stdout", tty)
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert main(["doctor", "--no-color"]) == 0
    assert "\033[" not in tty.getvalue()


def test_json_output(fake_report, capsys):
    assert main(["doctor", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["frameworks"][0]["devices"][0]["bandwidth_gb_per_s"] == 3352.32
    assert data["frameworks"][1] == {
        **data["frameworks"][1],
        "name": "tensorflow",
        "installed": False,
    }
    assert data["findings"][0]["code"] == "cupy-broken"


def test_a_report_that_cannot_be_built_is_a_bug_and_propagates(monkeypatch):
    """The probes turn a broken setup into findings; what still raises is labkit's bug (issue 14)."""

    def boom():
        raise RuntimeError("unexpected")

    monkeypatch.setattr(doctor_cli, "device_report", boom)
    with pytest.raises(RuntimeError, match="unexpected"):
        run_doctor()


# Real runs, in subprocesses ----------------------------------------------------------------


SEPARATOR = "----- next run -----"


def _run_cli(
    runs: list[list[str]], hide: tuple[str, ...] = (), extra_path: Path | None = None
) -> list[str]:
    """Run ``labkit.cli.main.main`` once per argument list in one fresh interpreter; their stdouts.

    One interpreter for several runs pays TensorFlow's import (~3 s) once.
    """
    code = textwrap.dedent(
        f"""
        import sys
        for name in {hide!r}:
            sys.modules[name] = None
        from labkit.cli.main import main
        codes = []
        for i, args in enumerate({runs!r}):
            if i:
                print({SEPARATOR!r}, flush=True)
            codes.append(main(args))
            sys.stdout.flush()
        sys.exit(max(codes))
        """
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(extra_path or ""), str(REPO)) if p),
    }
    env.pop("NO_COLOR", None)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=300
    )
    return _ok(result).split(SEPARATOR + "\n")


def _ok(result: subprocess.CompletedProcess) -> str:
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "Traceback" not in output
    return result.stdout


@pytest.mark.parametrize("hidden", [("tensorflow",), ("cupy",), ("tensorflow", "cupy")])
def test_doctor_without_tensorflow_or_cupy(hidden):
    text, as_json = _run_cli([["doctor"], ["doctor", "--json"]], hide=hidden)
    by_name = {fw["name"]: fw for fw in json.loads(as_json)["frameworks"]}
    section = {"tensorflow": "TensorFlow", "cupy": "CuPy"}
    for name in hidden:
        assert by_name[name]["installed"] is False
        assert by_name[name]["error"] is None
        block = text.split(f"\n{section[name]}\n", 1)[1]
        assert block.startswith("  installed      no; install with: pip install")


def test_doctor_with_every_framework_importable():
    from labkit.core.optional import is_installed

    (as_json,) = _run_cli([["doctor", "--json"]])
    for fw in json.loads(as_json)["frameworks"]:
        assert fw["installed"] == is_installed(fw["name"])
        assert fw["error"] is None, fw


def test_doctor_when_imports_raise_oserror(tmp_path):
    """A broken install (a missing .so) is a finding, not a crash."""
    for name in ("cupy", "torch"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(
            f"raise OSError('lib{name}_fake.so: cannot open shared object file: No such file or directory')\n"
        )
    text, as_json = _run_cli(
        [["doctor"], ["doctor", "--json"]], hide=("tensorflow",), extra_path=tmp_path
    )
    data = json.loads(as_json)
    by_name = {fw["name"]: fw for fw in data["frameworks"]}
    for name in ("cupy", "torch"):
        assert by_name[name]["installed"] is True
        assert by_name[name]["error"].startswith("the import fails: OSError: lib" + name)
    assert {"torch-broken", "cupy-broken"} <= {f["code"] for f in data["findings"]}
    assert "the import fails: OSError: libtorch_fake.so" in text


def test_python_dash_m_labkit_doctor():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("NO_COLOR", None)
    result = subprocess.run(
        [sys.executable, "-m", "labkit", "doctor"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    text = _ok(result)
    assert "\033[" not in text  # stdout is a pipe, not a terminal
    for section in ("CPU", "NVIDIA driver", "torch", "TensorFlow", "CuPy", "Findings"):
        assert f"\n{section}\n" in text

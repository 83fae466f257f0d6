"""The reference profile (labkit/machine/profile.py, tools/with_profile.py): what the committed outputs assume.

Under a profile labkit must answer the same on every machine that can provide
it: the same free memory, the same thread count, no GPU. These tests play
machines that differ (more or less memory, one CPU, a GPU) and check that the
answers, and so the notebooks' table structure, do not.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

from labkit import notebook
from labkit.bandwidth import sizes
from labkit.machine import gpu, memory, nvidia, profile
from labkit.machine.memory import MemoryBudgetError, MemoryBudgetWarning
from labkit.parallelism import threads

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "tools"
sys.path.insert(0, str(TOOLS))

import build_notebooks  # noqa: E402
import with_profile  # noqa: E402

GiB = 1024**3


@pytest.fixture
def reference(monkeypatch: pytest.MonkeyPatch) -> profile.Profile:
    monkeypatch.setenv(profile.ENV_VAR, "reference")
    return profile.REFERENCE


def test_the_reference_profile_is_ci_s_machine() -> None:
    ref = profile.REFERENCE
    assert (ref.threads, ref.host_memory_bytes, ref.hide_gpu) == (2, 6 * GiB, True)
    env = ref.environment()
    assert env["LABKIT_PROFILE"] == "reference"
    assert all(env[name] == "2" for name in profile.THREAD_VARIABLES)
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["HIP_VISIBLE_DEVICES"] == ""
    assert ref.summary() == (
        "profile 'reference': 2 threads, buffers sized for 6 GiB of free host memory, GPUs hidden"
    )


def test_active_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert profile.active() is None and not profile.hides_gpu()
    monkeypatch.setenv(profile.ENV_VAR, "  ")
    assert profile.active() is None
    monkeypatch.setenv(profile.ENV_VAR, "reference")
    assert profile.active() is profile.REFERENCE and profile.hides_gpu()
    monkeypatch.setenv(profile.ENV_VAR, "refrence")  # a typo: ignored, with one warning
    monkeypatch.setattr(profile, "_warned", set())
    with pytest.warns(UserWarning, match="unknown profile 'refrence'.*'reference'.*ignoring it"):
        assert profile.active() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert profile.active() is None  # warned once only
    with pytest.raises(profile.ProfileError, match="unknown profile 'refrence'"):
        profile.get("refrence")


def test_missing_names_the_memory_it_lacks() -> None:
    assert profile.missing(profile.REFERENCE, free_host_bytes=6 * GiB) == []
    (problem,) = profile.missing(profile.REFERENCE, free_host_bytes=int(3.5 * GiB))
    assert "6 GiB" in problem and "3.5 GiB is free" in problem and "close other programs" in problem


# --------------------------------------------------------------------------- memory


@pytest.mark.parametrize("real_free", [3 * GiB, 7 * GiB, 22 * GiB, 500 * GiB])
def test_free_memory_is_the_profile_s_whatever_is_free(
    monkeypatch: pytest.MonkeyPatch, reference: profile.Profile, real_free: int
) -> None:
    monkeypatch.setattr(memory, "_host_available_bytes", lambda: real_free)
    assert memory.available_bytes("cpu") == 6 * GiB
    assert memory.budget_bytes() == int(6 * GiB * memory.DEFAULT_FRACTION)
    # so the STREAM grid fits the same way on every machine: all 21 sizes, 3 arrays each
    kept, dropped = memory.fit_sizes(sizes.default_sizes(), arrays=3)
    assert len(kept) == 21 and dropped == ()


def test_a_budget_the_machine_cannot_hold_is_refused(
    monkeypatch: pytest.MonkeyPatch, reference: profile.Profile
) -> None:
    monkeypatch.setattr(memory, "_host_available_bytes", lambda: 3 * GiB)
    assert memory.budget_bytes() == 3 * GiB // 2  # exactly half of what is really free: allowed
    monkeypatch.setattr(memory, "_host_available_bytes", lambda: 3 * GiB - 2)
    with pytest.raises(MemoryBudgetError, match=r"'reference' profile.*more than half of the"):
        memory.budget_bytes()


def test_without_a_profile_free_memory_is_the_machine_s(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "_host_available_bytes", lambda: 3 * GiB)
    assert memory.available_bytes("cpu") == 3 * GiB


# --------------------------------------------------------------------------- threads and GPU


def test_threads_are_the_profile_s_even_on_one_cpu(
    monkeypatch: pytest.MonkeyPatch, reference: profile.Profile
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert threads.cpu_threads() == 2
    monkeypatch.delenv(profile.ENV_VAR)
    assert threads.cpu_threads() == 1


def test_a_hidden_gpu_is_no_gpu(
    monkeypatch: pytest.MonkeyPatch, reference: profile.Profile
) -> None:
    fake_torch = SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: True))
    monkeypatch.setattr(gpu, "is_installed", lambda name: name == "torch")
    monkeypatch.setattr(gpu, "import_optional", lambda name, why: fake_torch)
    assert gpu.has_gpu() is False
    monkeypatch.delenv(profile.ENV_VAR)
    assert gpu.has_gpu() is True


def test_a_hidden_gpu_is_not_probed(
    monkeypatch: pytest.MonkeyPatch, reference: profile.Profile
) -> None:
    def probe(*args: object, **kwargs: object) -> None:
        raise AssertionError("the driver was probed although the profile hides GPUs")

    for name in ("_probe_driver_library", "_probe_smi", "_probe_pci", "_kernel_module_version"):
        monkeypatch.setattr(nvidia, name, probe)
    info = nvidia.nvidia_info()
    assert not info.hardware_present and info.library is None and info.driver_version is None
    assert "LABKIT_PROFILE=reference profile hides GPUs" in (info.library_error or "")


# --------------------------------------------------------------------------- notebooks


def test_setup_prints_memory_warnings_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    saved = warnings.showwarning
    try:
        with warnings.catch_warnings():
            notebook.setup()
            warnings.warn(
                "peak_bandwidth: measuring 128 MiB per array", MemoryBudgetWarning, stacklevel=1
            )
        out, err = capsys.readouterr()
    finally:
        warnings.showwarning = saved
    assert out == "note: peak_bandwidth: measuring 128 MiB per array\n" and err == ""


def test_build_notebooks_refuses_to_run_without_the_profile(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert build_notebooks.main(["notebooks/00_setup_and_devices.ipynb"]) == 2
    assert "make notebooks" in capsys.readouterr().err


# --------------------------------------------------------------------------- tools/with_profile.py


def test_with_profile_stops_at_once_where_memory_is_short(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    monkeypatch.setattr(with_profile, "free_host_bytes", lambda: 2 * GiB)
    status = with_profile.main(["reference", "--", "touch", str(marker)])
    err = capsys.readouterr().err
    assert status == 2 and not marker.exists()
    assert "cannot provide the 'reference' profile" in err and "only 2.0 GiB is free" in err
    assert "Nothing was run" in err


def test_with_profile_rejects_an_unknown_profile(capsys: pytest.CaptureFixture[str]) -> None:
    assert with_profile.main(["gpu-box", "--", "true"]) == 2
    assert "unknown profile 'gpu-box'" in capsys.readouterr().err


def test_with_profile_needs_a_command() -> None:
    with pytest.raises(SystemExit) as info:
        with_profile.main(["reference"])
    assert info.value.code == 2


@pytest.mark.skipif(memory.available_bytes() < 6 * GiB, reason="needs the profile's 6 GiB free")
def test_with_profile_hands_its_variables_to_every_child_even_on_one_cpu() -> None:
    probe = (
        "import os, torch; print(os.environ['LABKIT_PROFILE'], repr(os.environ['CUDA_VISIBLE_DEVICES']),"
        " torch.get_num_threads(), len(os.sched_getaffinity(0)))"
    )
    done = subprocess.run(
        [
            sys.executable,
            str(TOOLS / "with_profile.py"),
            "reference",
            "--",
            sys.executable,
            "-c",
            probe,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}),
        env={k: v for k, v in os.environ.items() if k not in profile.THREAD_VARIABLES},
    )
    if done.returncode == 2 and "cannot provide" in done.stderr:
        pytest.skip(
            "less than the profile's 6 GiB became free meanwhile (other tests run alongside)"
        )
    assert done.returncode == 0, done.stderr
    first, last = done.stdout.strip().splitlines()
    assert first.startswith("with_profile: profile 'reference'")
    assert last == "reference '' 2 1"  # 2 torch threads on the 1 CPU this process may use

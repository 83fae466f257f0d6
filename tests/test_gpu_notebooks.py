"""tools/gpu_notebooks.py (`make test-gpu`), tested without a GPU: its checks on fake outputs, its runners
on fake notebooks whose "GPU cells" print what a GPU would.

What this cannot test here is the real thing: the course's notebooks on a real
GPU. tools/gpu_checks.sh runs `make test-gpu`'s script on the GPU machine.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import nbformat
import pytest

TOOLS = Path(__file__).resolve().parent.parent / "tools"
sys.path.insert(0, str(TOOLS))

import gpu_notebooks  # noqa: E402

PEAK = 4_800.0  # GB/s, an H200's theoretical bandwidth

FAKE_GPU = (
    "import types\nlabkit = types.SimpleNamespace(require_gpu=lambda what, reference=None: True)"
)


def _notebook(*sources: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])


def _executed(*cells: tuple[str, str]) -> nbformat.NotebookNode:
    """A notebook whose code cells printed these texts: (source, stdout)."""
    nb = _notebook(*(source for source, _ in cells))
    for cell, (_, text) in zip(nb.cells, cells, strict=True):
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
    return nb


# --------------------------------------------------------------------------- sanity of printed values


def test_sane_gpu_output_passes() -> None:
    text = (
        "device-to-device copy: 4.31 TB/s = 0.90× of the 4.80 TB/s peak\n"
        "pinned: 55.1 GB/s, pageable 12.0 GB/s; matmul 4096×4096 @ 4096×4096\n"
    )
    assert gpu_notebooks.sanity_problems(text, peak_gb_per_s=PEAK) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("copy 5.20 TB/s", "above the card's theoretical peak of 4,800 GB/s"),
        ("copy 0 GB/s", "not above zero"),
        ("speedup inf×", "not a finite positive number"),
        ("speedup 0.00×", "not a finite positive number"),
        ("median nan ms", "'nan' printed"),
        ("rate -inf GFLOP/s", "'-inf' printed"),
        (
            "Strided copy on H200\n  rates count bytes read and written\n  stride 1 ...",
            "1 kernel experiment(s), but only 0 say",
        ),
    ],
)
def test_implausible_gpu_output_is_caught(text: str, expected: str) -> None:
    problems = gpu_notebooks.sanity_problems(text, peak_gb_per_s=PEAK)
    assert any(expected in p for p in problems), problems


def test_without_a_known_peak_only_the_peak_check_is_skipped() -> None:
    assert gpu_notebooks.sanity_problems("copy 9.99 TB/s", peak_gb_per_s=None) == []
    assert gpu_notebooks.sanity_problems("copy 0 GB/s", peak_gb_per_s=None)


def test_verified_kernel_tables_pass() -> None:
    text = (
        "Strided copy on H200: 64 MiB\n  rates count bytes read and written\n"
        "  every kernel's output was verified before timing (largest error 0)\n"
    ) * 2
    assert gpu_notebooks.sanity_problems(text, peak_gb_per_s=PEAK) == []


# --------------------------------------------------------------------------- GPU cells


def test_a_live_cell_that_mentions_a_missing_package_is_still_checked() -> None:
    """notebook 02's device copy also says CuPy's references were skipped: still a live cell."""
    call = 'if labkit.require_gpu("x"):\n    print(1)'
    nb = _executed(
        (
            call,
            "device copy 7.0 TB/s\nCuPy references skipped: cupy is not installed. "
            "Install it with: pip install cupy-cuda12x\n",
        )
    )
    run = gpu_notebooks.GpuRun("fake.ipynb")
    gpu_notebooks.check_gpu_cells(nb, run, peak_gb_per_s=PEAK)
    assert run.gpu_cells_live == [0] and run.gpu_cells_skipped == {}
    assert run.problems == [
        "cell 0: a bandwidth of 7.0 TB/s, above the card's theoretical peak of 4,800 GB/s"
    ]


@pytest.mark.parametrize(
    ("text", "bad"),
    [
        ("copy -3.2 GB/s", True),
        ("copy 3.2 GiB/s", False),
        ("pinned 55 MB/s", False),
        ("copy 6000 GB/sec", True),
    ],
)
def test_rates_in_every_unit_are_read(text: str, bad: bool) -> None:
    assert bool(gpu_notebooks.sanity_problems(text, peak_gb_per_s=PEAK)) is bad


def test_each_gpu_cell_must_run_live() -> None:
    call = 'if labkit.require_gpu("x"):\n    print(1)'
    nb = _executed(
        ("print('cpu cell')", "cpu cell\n"),
        (call, "copy 4.31 TB/s\n"),
        (call, "No GPU here: this cell would show x.\n"),
        (
            call,
            "tensorflow is not installed (needed for the cuDNN LSTM on a GPU). Install it "
            "with: pip install tensorflow\n",
        ),
        (call, ""),
        (call, "copy 7.0 TB/s\n"),
    )
    run = gpu_notebooks.GpuRun("fake.ipynb")
    gpu_notebooks.check_gpu_cells(nb, run, peak_gb_per_s=PEAK)
    assert run.gpu_cells_live == [1, 5]
    assert run.gpu_cells_skipped == {3: "tensorflow is not installed"}
    assert run.problems == [
        "cell 2: the GPU cell did not run live ('No GPU here: this cell would show ...')",
        "cell 4: the GPU cell printed nothing",
        "cell 5: a bandwidth of 7.0 TB/s, above the card's theoretical peak of 4,800 GB/s",
    ]


# --------------------------------------------------------------------------- running the notebooks


def _write(tmp_path: Path, nb: nbformat.NotebookNode, name: str = "01_fake.ipynb") -> Path:
    path = tmp_path / name
    nbformat.write(nb, path)
    return path


@pytest.mark.parametrize("runner", ["script", "jupyter"])
def test_a_fake_gpu_notebook_runs_and_is_checked(
    tmp_path: Path, runner: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUPYTER_PATH", os.environ.get("JUPYTER_PATH", ""))  # _kernelspec edits it
    nb = _notebook(
        FAKE_GPU,
        'if labkit.require_gpu("the copy"):\n    print("device copy 4.31 TB/s, 0.90× of the peak")',
        'if labkit.require_gpu("the kernels"):\n    print("speedup inf×")',
    )
    path = _write(tmp_path, nb)
    work = tmp_path / "work"
    work.mkdir()
    kernel = None
    if runner == "jupyter":
        if not gpu_notebooks.uses_jupyter():
            pytest.skip("nbclient/ipykernel not installed")
        kernel = gpu_notebooks.run_notebooks._kernelspec(work)
    run = gpu_notebooks.run_notebook(path, work, kernel, peak_gb_per_s=PEAK, keep=tmp_path / "kept")
    assert run.runner == runner
    assert run.gpu_cells_live == [1, 2]
    assert run.problems == ["cell 2: a ratio of inf×, not a finite positive number"]
    kept = json.loads((tmp_path / "kept" / path.name).read_text())
    assert "4.31 TB/s" in "".join(kept["cells"][1]["outputs"][0]["text"])


def test_a_kernel_that_dies_is_reported_in_the_cell_it_died_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On the H200 a kernel died in notebook 03 and nbclient raised a bare AssertionError
    # (its kernel-alive poll), which named no cell; now the cell that was running is named.
    if not gpu_notebooks.uses_jupyter():
        pytest.skip("nbclient/ipykernel not installed")
    monkeypatch.setenv("JUPYTER_PATH", os.environ.get("JUPYTER_PATH", ""))  # _kernelspec edits it
    nb = _notebook(
        FAKE_GPU,
        "import os\nos._exit(1)",
        'if labkit.require_gpu("x"):\n    print("never")',
    )
    path = _write(tmp_path, nb)
    work = tmp_path / "work"
    work.mkdir()
    kernel = gpu_notebooks.run_notebooks._kernelspec(work)
    run = gpu_notebooks.run_notebook(path, work, kernel, peak_gb_per_s=PEAK)
    assert not run.ok and run.stopped_at == 1
    assert any("stopped in cell 1: the kernel died" in p for p in run.problems), run.problems
    assert "cell 2: the GPU cell did not run (cell 1 failed first)" in run.problems


def test_the_script_runner_names_the_cell_that_raised(tmp_path: Path) -> None:
    nb = _notebook(
        FAKE_GPU,
        "print('one', end='')\nraise ValueError('broken kernel')",
        'if labkit.require_gpu("x"):\n    print("never")',
    )
    path = _write(tmp_path, nb)
    work = tmp_path / "work"
    work.mkdir()
    run = gpu_notebooks.run_notebook(path, work, None, peak_gb_per_s=PEAK, keep=tmp_path / "kept")
    assert run.runner == "script" and not run.ok and run.stopped_at == 1
    assert "cell 1: error output ScriptError: ValueError: broken kernel" in run.problems
    assert any(p.startswith("cell 1: 'Traceback' in stdout") for p in run.problems)  # stderr kept
    assert "cell 2: the GPU cell did not run (cell 1 failed first)" in run.problems
    kept = json.loads((tmp_path / "kept" / path.name).read_text())
    assert kept["cells"][1]["outputs"][0]["text"].startswith("one")  # no marker glued onto it


def test_a_gpu_cell_that_only_draws_counts_as_live_in_a_script(tmp_path: Path) -> None:
    nb = _notebook(
        FAKE_GPU,
        'if labkit.require_gpu("a plot"):\n'
        "    import matplotlib.pyplot as plt\n    plt.plot([1, 2])",
    )
    path = _write(tmp_path, nb)
    work = tmp_path / "work"
    work.mkdir()
    run = gpu_notebooks.run_notebook(path, work, None, peak_gb_per_s=PEAK)
    assert run.ok and run.gpu_cells_live == [1], run.problems


def test_dataloader_workers_do_not_rerun_the_script(tmp_path: Path) -> None:
    """Workers start with forkserver/spawn; a script with a file would be re-run by each one."""
    nb = _notebook(
        "import torch\nfrom torch.utils.data import DataLoader\n"
        "ctx = __import__('multiprocessing').get_context('spawn')\n"
        "print(sum(len(b) for b in DataLoader(list(range(8)), batch_size=4, num_workers=1,"
        " multiprocessing_context=ctx)))"
    )
    path = _write(tmp_path, nb)
    work = tmp_path / "work"
    work.mkdir()
    run = gpu_notebooks.run_notebook(path, work, None, peak_gb_per_s=PEAK, keep=tmp_path / "kept")
    assert run.ok, run.problems
    kept = json.loads((tmp_path / "kept" / path.name).read_text())
    assert kept["cells"][0]["outputs"][0]["text"] == "8\n"


def test_the_script_runner_reads_notebooks_without_nbformat(tmp_path: Path) -> None:
    path = _write(tmp_path, _notebook("print('hi')"))
    nb = gpu_notebooks._nodes(json.loads(path.read_text()))
    assert nb.cells[0].cell_type == "code" and gpu_notebooks._source(nb.cells[0]) == "print('hi')"
    assert (
        "print('\\n' + '<<<labkit-test-gpu cell 0>>>', flush=True)"
        in gpu_notebooks.script_source(nb)
    )


def test_without_a_gpu_it_stops_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    import labkit

    if labkit.has_gpu():
        pytest.skip("this machine has a GPU")
    assert gpu_notebooks.main([]) == 2
    assert "make test-gpu needs one" in capsys.readouterr().err


def test_under_a_profile_it_refuses(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LABKIT_PROFILE", "reference")
    assert gpu_notebooks.main([]) == 2
    assert "runs without a profile" in capsys.readouterr().err


def test_main_with_a_fake_gpu_writes_its_summary(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("PYTHONPATH", "LABKIT_PROGRESS"):  # main() sets them for the notebooks
        monkeypatch.setenv(name, os.environ.get(name, ""))
    monkeypatch.setattr(gpu_notebooks, "gpu_here", lambda: ("Fake H200", PEAK))
    monkeypatch.setattr(gpu_notebooks, "uses_jupyter", lambda: False)
    path = _write(
        tmp_path,
        _notebook(FAKE_GPU, 'if labkit.require_gpu("the copy"):\n    print("copy 4.31 TB/s")'),
    )
    out_json = tmp_path / "out.json"
    assert gpu_notebooks.main(["--json", str(out_json), str(path)]) == 0
    out = capsys.readouterr().out
    assert "gpu_notebooks: Fake H200 (theoretical bandwidth 4,800 GB/s)" in out
    assert "1 GPU cell(s) live" in out
    result = json.loads(out_json.read_text())
    assert result["gpu_cells_live"] == 1 and result["failed"] == 0

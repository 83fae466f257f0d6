"""Bad input to the ``labkit`` command: one line on stderr, exit code 2, never a traceback.

Issue 8 ("Bad input"): "The CLI turns these errors into a one-line message and
exit code 2, with no traceback." A representative set runs ``python -m labkit``
in a subprocess, as a learner would; hypothesis drives ``labkit.cli.main.main``
in-process over garbage option values and unknown commands. No benchmark is
run: every case is refused before anything is measured (the runners are
replaced by ones that fail the test if they are reached). A missing optional
package keeps its documented exit code 1, with one line that names the install
command. Any other error raised inside a benchmark is a bug: it propagates with
its traceback (exit 1), as issue 14 asks, instead of passing for bad input.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from labkit.cli import main as cli
from labkit.cli.bench import registry
from labkit.core.optional import MissingPackageError
from labkit.machine.memory import MemoryBudgetError

ROOT = Path(__file__).resolve().parent.parent

#: Every benchmark `labkit bench` knows, and the module.function that runs it.
RUNNERS = {
    "timing": ("labkit.cli.bench.timing", "run_timing_benchmark"),
    "bandwidth": ("labkit.cli.bench.bandwidth", "run_bandwidth_benchmark"),
    "parallel": ("labkit.cli.bench.parallel", "run_parallel_benchmark"),
    "roofline": ("labkit.cli.bench.roofline", "run_roofline_benchmark"),
    "accel": ("labkit.cli.bench.accel", "run_accel_benchmark"),
    "cnn": ("labkit.cli.bench.cnn", "run_cnn_benchmark"),
    "levers": ("labkit.cli.bench.levers", "run_levers_benchmark"),
    "rnn": ("labkit.cli.bench.rnn", "run_rnn_benchmark"),
    "kernels": ("labkit.cli.bench.kernels", "run_kernels_benchmark"),
    "batching": ("labkit.cli.bench.batching", "run_batching_benchmark"),
    "profile": ("labkit.cli.bench.profile", "run_profile_benchmark"),
    "attention": ("labkit.cli.bench.attention", "run_attention_benchmark"),
    "triton": ("labkit.cli.bench.triton", "run_triton_benchmark"),
}
WITH_QUICK = [name for name in RUNNERS if name not in ("timing", "bandwidth")]
COMMANDS = ["doctor", *(f"bench {name}" for name in RUNNERS)]
CLI_SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def assert_one_line_error(out: str, err: str, prefix: str = "labkit: error:") -> str:
    """Nothing on stdout; exactly one non-empty line on stderr, with the prefix; no traceback."""
    assert out == "", f"stdout should be empty, got {out!r}"
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1 and err.endswith("\n"), f"expected one line on stderr, got {err!r}"
    assert lines[0].startswith(prefix) and lines[0][len(prefix) :].strip(), lines[0]
    return lines[0]


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "LABKIT_PROGRESS": "0", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "labkit", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=environ,
        timeout=120,
        check=False,
    )


@pytest.fixture
def no_benchmarks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replace every benchmark runner and the doctor by one that fails the test if reached."""
    import importlib

    def reached(*_args: Any, **_kwargs: Any) -> int:
        raise AssertionError("a benchmark ran although its arguments were bad")

    for module, name in RUNNERS.values():
        monkeypatch.setattr(importlib.import_module(module), name, reached)
    monkeypatch.setattr("labkit.cli.doctor.run_doctor", reached)
    monkeypatch.setenv("LABKIT_PROGRESS", "0")


def main_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run ``cli.main(argv)``, which must end with exit code 2 and one line on stderr."""
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse's own errors exit from inside the parser
        code = exc.code
    captured = capsys.readouterr()
    assert code == 2, (argv, code, captured.err)
    return assert_one_line_error(captured.out, captured.err)


# --------------------------------------------------------------------------- as a learner runs it

SUBPROCESS_CASES = [
    pytest.param(["nosuch"], "invalid choice", id="unknown-command"),
    pytest.param(["--bogus"], "unrecognized arguments", id="unknown-global-flag"),
    pytest.param(["doctor", "--bogus"], "unrecognized arguments", id="doctor-unknown-flag"),
    pytest.param(["doctor", "extra"], "unrecognized arguments", id="doctor-extra-argument"),
    pytest.param(["bench"], "needs a benchmark", id="bench-without-a-name"),
    pytest.param(["bench", "nosuch"], "invalid choice", id="unknown-benchmark"),
    pytest.param(
        ["bench", "timing", "--json=yes"], "ignored explicit argument", id="flag-with-a-value"
    ),
    pytest.param(["bench", "bandwidth", "--max-bytes", "lots"], "--max-bytes", id="not-a-number"),
    pytest.param(["bench", "bandwidth", "--max-bytes", "12"], "4096", id="max-bytes-too-small"),
    pytest.param(
        ["bench", "bandwidth", "--max-bytes"], "expected one argument", id="missing-value"
    ),
    pytest.param(["bench", "bandwidth", "--rounds", "0"], "--rounds", id="rounds-zero"),
    pytest.param(["bench", "bandwidth", "--rounds", "1e3"], "--rounds", id="rounds-float"),
    pytest.param(["bench", "bandwidth", "--rounds", "100000"], "1 to 100", id="rounds-too-many"),
    pytest.param(
        ["bench", "parallel", "--quick", "--record"],
        "--record cannot be combined",
        id="record-with-quick",
    ),
    pytest.param(
        ["bench", "timing", "--x\ny"], "unrecognized arguments", id="newline-in-an-argument"
    ),
]


@pytest.mark.parametrize(("args", "says"), SUBPROCESS_CASES)
def test_python_m_labkit_prints_one_line_and_exits_2(args: list[str], says: str) -> None:
    result = run_cli(*args)
    assert result.returncode == 2, result
    line = assert_one_line_error(result.stdout, result.stderr)
    assert says in line


def test_unwritable_reference_folder_is_refused_before_measuring(tmp_path: Path) -> None:
    """``--record`` with a GPU checks the recordings folder first, so no run is lost at the end.

    Without a GPU ``--record`` records nothing (exit 0, one line); the check
    needs a GPU, so a fake one is installed in a fresh interpreter.
    """
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    code = (
        "import sys, labkit.machine.gpu, labkit.cli.bench.timing\n"
        "labkit.machine.gpu.has_gpu = lambda: True\n"
        "labkit.cli.bench.timing.run_timing_benchmark = lambda **kw: sys.exit('benchmark ran')\n"
        "from labkit.cli.main import main\n"
        "raise SystemExit(main(['bench', 'timing', '--record']))\n"
    )
    env = {**os.environ, "LABKIT_REFERENCE_DIR": str(blocker / "sub")}
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2, result
    line = assert_one_line_error(result.stdout, result.stderr)
    assert "LABKIT_REFERENCE_DIR" in line and str(blocker / "sub") in line


# --------------------------------------------------------------------------- in-process, by hypothesis


def _is_int_in(text: str, low: int, high: int | None) -> bool:
    try:
        value = int(text.strip())
    except ValueError:
        return False
    return value >= low and (high is None or value <= high)


@CLI_SETTINGS
@given(
    text=st.one_of(
        st.text(max_size=12),
        st.integers(max_value=registry.MIN_BYTES_PER_ARRAY - 1).map(str),
        st.floats().map(repr),
    )
)
def test_garbage_max_bytes_is_refused(no_benchmarks: None, capsys: Any, text: str) -> None:
    assume(not _is_int_in(text, registry.MIN_BYTES_PER_ARRAY, None))
    line = main_error(capsys, ["bench", "bandwidth", f"--max-bytes={text}"])
    assert "--max-bytes" in line


@CLI_SETTINGS
@given(text=st.one_of(st.text(max_size=12), st.integers().map(str), st.floats().map(repr)))
def test_garbage_rounds_are_refused(no_benchmarks: None, capsys: Any, text: str) -> None:
    assume(not _is_int_in(text, 1, registry.MAX_ROUNDS))
    line = main_error(capsys, ["bench", "bandwidth", "--rounds", text, "--json"])
    assert "--rounds" in line or "expected one argument" in line


@CLI_SETTINGS
@given(name=st.text(min_size=1, max_size=12))
def test_unknown_benchmarks_and_commands_are_refused(
    no_benchmarks: None, capsys: Any, name: str
) -> None:
    assume(name not in RUNNERS and not name.startswith("-"))
    main_error(capsys, ["bench", name])
    assume(name not in ("doctor", "bench"))
    main_error(capsys, [name])


@CLI_SETTINGS
@given(
    command=st.sampled_from(COMMANDS),
    extra=st.lists(st.text(min_size=1, max_size=10), min_size=1, max_size=3),
)
def test_unknown_arguments_to_every_command_are_refused(
    no_benchmarks: None, capsys: Any, command: str, extra: list[str]
) -> None:
    known = {
        "--json",
        "--record",
        "--quick",
        "--no-color",
        "--max-bytes",
        "--rounds",
        "-h",
        "--help",
    }
    # argparse accepts unambiguous prefixes of options ("--js" for "--json", "--rou=5"), and
    # "-hx" is -h (help, exit 0) followed by -x: leave out what could be a valid option
    options = [e.split("=", 1)[0] for e in extra if e.startswith("-")]
    assume(not any(any(k.startswith(o) for k in known) for o in options))
    assume(not any(o.startswith("-h") for o in options))
    main_error(capsys, [*command.split(), *extra])


@pytest.mark.parametrize("name", WITH_QUICK)
def test_record_with_quick_is_refused_for_every_benchmark(
    no_benchmarks: None, capsys: Any, name: str
) -> None:
    line = main_error(capsys, ["bench", name, "--record", "--quick"])
    assert "--record cannot be combined with --quick" in line


BUGS_FROM_INSIDE = st.sampled_from([ValueError, TypeError, KeyError, MemoryBudgetError])
MESSAGES = st.text(min_size=0, max_size=60)


@CLI_SETTINGS
@given(name=st.sampled_from(list(RUNNERS)), error=BUGS_FROM_INSIDE, message=MESSAGES)
def test_any_other_error_from_inside_a_benchmark_is_a_bug_and_propagates(
    monkeypatch: pytest.MonkeyPatch, name: str, error: type[Exception], message: str
) -> None:
    """The command line was checked when it was parsed: what a benchmark raises later is a bug,
    and hiding it as "bad input, exit 2" would hide the bug (issue 14)."""
    import importlib

    def raise_it(**_kwargs: Any) -> int:
        raise error(message)

    module, attribute = RUNNERS[name]
    monkeypatch.setattr(importlib.import_module(module), attribute, raise_it)
    with pytest.raises(error):
        cli.main(["bench", name])


def test_an_error_inside_a_benchmark_prints_a_traceback() -> None:
    code = (
        "import sys\n"
        "import labkit.cli.bench.timing as t\n"
        "def boom(**kw): raise TypeError('a bug in labkit')\n"
        "t.run_timing_benchmark = boom\n"
        "from labkit.cli.main import main\n"
        "sys.exit(main(['bench', 'timing']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert "Traceback" in done.stderr and "TypeError: a bug in labkit" in done.stderr


@pytest.mark.parametrize("name", list(RUNNERS))
def test_a_missing_package_keeps_exit_code_1_and_names_the_install(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, name: str
) -> None:
    """MissingPackageError (an ImportError) keeps its documented behaviour: one line, exit 1."""
    import importlib

    def missing(**_kwargs: Any) -> int:
        raise MissingPackageError("torch", f"labkit bench {name}")

    module, attribute = RUNNERS[name]
    monkeypatch.setattr(importlib.import_module(module), attribute, missing)
    assert cli.main(["bench", name]) == 1
    captured = capsys.readouterr()
    line = assert_one_line_error(captured.out, captured.err, prefix="labkit:")
    assert "pip install torch" in line and not line.startswith("labkit: error:")


def test_record_to_an_unwritable_folder_is_refused_before_any_benchmark(
    no_benchmarks: None, monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("LABKIT_REFERENCE_DIR", str(blocker / "recordings"))
    monkeypatch.setattr("labkit.machine.gpu.has_gpu", lambda: True)
    for name in RUNNERS:
        line = main_error(capsys, ["bench", name, "--record"])
        assert "LABKIT_REFERENCE_DIR" in line


def test_record_without_a_gpu_does_not_check_the_folder(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path
) -> None:
    """Without a GPU there is nothing to record: the benchmark's own one-line note stays."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("LABKIT_REFERENCE_DIR", str(blocker / "recordings"))
    monkeypatch.setattr("labkit.machine.gpu.has_gpu", lambda: False)
    monkeypatch.setattr("labkit.cli.bench.timing.run_timing_benchmark", lambda **kw: 0)
    assert cli.main(["bench", "timing", "--record"]) == 0
    assert capsys.readouterr().err == ""

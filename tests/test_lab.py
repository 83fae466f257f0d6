"""`make lab` (and `--root`, for `make lab-student`): JupyterLab on 127.0.0.1 with a token, --allow-root only as root."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import lab  # noqa: E402


def test_allow_root_only_for_root() -> None:
    assert "--allow-root" in lab.lab_command([], uid=0)
    assert "--allow-root" not in lab.lab_command([], uid=1000)


def test_listens_on_loopback_and_serves_the_notebooks() -> None:
    cmd = lab.lab_command([], uid=1000)
    assert "--ServerApp.ip=127.0.0.1" in cmd
    assert f"--ServerApp.root_dir={ROOT / 'notebooks'}" in cmd


@pytest.mark.parametrize("arg", ["--ip=0.0.0.0", "--ServerApp.ip=0.0.0.0"])
def test_refuses_other_interfaces(arg: str) -> None:
    with pytest.raises(SystemExit, match="127.0.0.1 only"):
        lab.lab_command([arg], uid=1000)


def test_refuses_an_empty_token() -> None:
    with pytest.raises(SystemExit, match="empty token"):
        lab.lab_command(["--IdentityProvider.token="], uid=1000)


def test_root_serves_another_folder(tmp_path: Path) -> None:
    cmd = lab.lab_command([], uid=1000, root=tmp_path)
    assert f"--ServerApp.root_dir={tmp_path.resolve()}" in cmd
    assert "--ServerApp.ip=127.0.0.1" in cmd  # the security rules hold for any root
    with pytest.raises(SystemExit, match="127.0.0.1 only"):
        lab.lab_command(["--ip=0.0.0.0"], uid=1000, root=tmp_path)
    with pytest.raises(SystemExit, match="empty token"):
        lab.lab_command(["--IdentityProvider.token="], uid=1000, root=tmp_path)


@pytest.mark.parametrize(
    ("argv", "root", "extra"),
    [
        (["--root", "build/student", "--no-browser"], Path("build/student"), ["--no-browser"]),
        (["--no-browser", "--root=build/student"], Path("build/student"), ["--no-browser"]),
        (["--ServerApp.port=9"], None, ["--ServerApp.port=9"]),
    ],
)
def test_root_is_taken_out_of_jupyters_arguments(
    argv: list[str], root: Path | None, extra: list[str]
) -> None:
    assert lab.split_args(argv) == (root, extra)


@pytest.mark.parametrize("argv", [["--root"], ["--root="], ["--root", "--no-browser"]])
def test_root_needs_a_folder(argv: list[str]) -> None:
    with pytest.raises(SystemExit, match="--root needs a folder"):
        lab.split_args(argv)


def test_a_missing_root_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "build" / "student"
    with pytest.raises(SystemExit, match=r"does not exist.*make student") as excinfo:
        lab.main(["--root", str(missing), "--no-browser"])  # fails before starting Jupyter
    assert str(missing) in str(excinfo.value)
    (tmp_path / "file.ipynb").write_text("{}")
    with pytest.raises(SystemExit, match="is not a folder"):
        lab.main(["--root", str(tmp_path / "file.ipynb")])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _launch_command(args: list[str]) -> list[str]:
    """`make lab` itself when this venv is the set-up one, else the script make runs."""
    venv = Path(sys.prefix)
    up_to_date = (
        subprocess.run(
            ["make", "-q", "-C", str(ROOT), f"VENV={venv}", "setup"], capture_output=True
        ).returncode
        == 0
    )
    if up_to_date and list(venv.glob(".installed-*")):
        return ["make", "-s", "-C", str(ROOT), f"VENV={venv}", f"LAB_ARGS={' '.join(args)}", "lab"]
    return [sys.executable, str(ROOT / "tools" / "lab.py"), *args]


@contextlib.contextmanager
def _serving(tmp_path: Path, launch: Callable[[list[str]], list[str]]) -> Iterator[str]:
    """Start JupyterLab with ``launch(jupyter_args)``; yields its base URL once it answers."""
    port, token = _free_port(), secrets.token_hex(16)
    args = [
        "--no-browser",
        f"--ServerApp.port={port}",
        f"--IdentityProvider.token={token}",
        "--ServerApp.port_retries=0",
    ]
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path), JUPYTER_CONFIG_DIR=str(tmp_path))
    log = tmp_path / "lab.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            launch(args),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        status, deadline = None, time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                status = _get(f"http://127.0.0.1:{port}/api/status?token={token}")
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.5)
        text = log.read_text(errors="replace")
        assert status == 200, f"/api/status did not answer 200 (got {status}); log:\n{text}"
        assert _get(f"http://127.0.0.1:{port}/api/status") == 403, "served without a token"
        assert f"http://127.0.0.1:{port}/lab?token=" in text, text
        yield f"http://127.0.0.1:{port}/api/%s?token={token}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def test_make_lab_serves_jupyterlab(tmp_path: Path) -> None:
    with _serving(tmp_path, _launch_command):
        pass


def test_lab_serves_the_root_folder(tmp_path: Path) -> None:
    folder = tmp_path / "student"
    folder.mkdir()
    (folder / "00_setup.ipynb").write_text(nbformat.writes(nbformat.v4.new_notebook()))

    def launch(args: list[str]) -> list[str]:
        return [sys.executable, str(ROOT / "tools" / "lab.py"), "--root", str(folder), *args]

    with _serving(tmp_path, launch) as api:
        with urllib.request.urlopen(api % "contents", timeout=5) as resp:
            listing = json.load(resp)
    assert [item["name"] for item in listing["content"]] == ["00_setup.ipynb"]


@pytest.mark.parametrize(
    "args",
    [
        ["--ip", "0.0.0.0"],
        ["--NotebookApp.ip=0.0.0.0"],
        ["--ServerApp.allow_remote_access=True"],
        ["--ServerApp.allow_origin=*"],
        ["--ServerApp.allow_origin_pat", ".*"],
        ["--ServerApp.disable_check_xsrf=True"],
    ],
)
def test_refuses_settings_that_expose_the_server(args: list[str]) -> None:
    with pytest.raises(SystemExit, match="refusing"):
        lab.lab_command(args, uid=1000)


@pytest.mark.parametrize(
    "args",
    [
        ["--ServerApp.token="],
        ["--ServerApp.token", ""],
        ["--NotebookApp.token=''"],
        ["--IdentityProvider.token", '""', "--no-browser"],
        ["--IdentityProvider.token", "--no-browser"],
    ],
)
def test_refuses_every_spelling_of_an_empty_token(args: list[str]) -> None:
    with pytest.raises(SystemExit, match="empty token"):
        lab.lab_command(args, uid=1000)


def test_a_chosen_token_and_port_are_passed_on() -> None:
    cmd = lab.lab_command(["--IdentityProvider.token=abc123", "--ServerApp.port=9999"], uid=1000)
    assert cmd[-2:] == ["--IdentityProvider.token=abc123", "--ServerApp.port=9999"]


def test_lab_does_not_reach_the_internet() -> None:
    # No downloads at run time: JupyterLab's news feed, update check and PyPI listing are off.
    cmd = lab.lab_command([], uid=1000)
    for flag in lab.OFFLINE:
        assert flag in cmd

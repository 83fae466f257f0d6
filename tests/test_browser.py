"""The course as a student sees it: JupyterLab in a real (headless) Chromium.

nbval checks what the kernel computes, not what the browser shows. This test
opens a copy of notebooks/ in JupyterLab (like `make lab`: 127.0.0.1, a token) and checks that
the file browser lists the lessons, that notebook 00 renders its stored outputs
and that its first cell runs in the gpu-labkit kernel without a kernel-picker
dialog. A screenshot of each step lands in the test's tmp_path.

Nothing leaves the machine: the server listens on 127.0.0.1, JupyterLab's news
feed, update check and PyPI extension listing are off, and the test fails if the
page requests anything but the local server. Chromium is the system one
(Playwright with `executable_path`; `playwright install` is never needed).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn
from urllib.parse import urlsplit

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

ROOT = Path(__file__).resolve().parent.parent
KERNEL = "gpu-labkit"
NOTEBOOK = "00_setup_and_devices.ipynb"
# Stored content of notebook 00 that does not depend on the hardware.
HEADING = "Setup and devices"
STORED_TEXT = "a CUDA GPU is usable:"
STDERR = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
SERVER_START_S = 90
PAGE_TIMEOUT_MS = 90_000  # 2 busy cores: JupyterLab's first load can take 30 s
RUN_TIMEOUT_MS = 180_000  # the first cell starts the kernel and imports torch


def _chromium() -> str:
    """The system Chromium: $LABKIT_CHROMIUM, else the usual names on PATH."""
    chosen = os.environ.get("LABKIT_CHROMIUM", "")
    if chosen:
        found = shutil.which(chosen)
        message = f"LABKIT_CHROMIUM={chosen!r} is not an executable; point it at a Chromium"
    else:
        names = ("chromium", "chromium-browser", "google-chrome")
        found = next((p for p in map(shutil.which, names) if p), None)
        message = (
            "no Chromium found (none of chromium, chromium-browser, google-chrome is on "
            "PATH; or set LABKIT_CHROMIUM). Install it with: apt-get install chromium"
        )
    if found:
        return found
    _skip_or_fail(message)


def _skip_or_fail(message: str) -> NoReturn:
    """Skip where the browser is optional; CI sets LABKIT_REQUIRE_BROWSER=1 to fail instead."""
    if os.environ.get("LABKIT_REQUIRE_BROWSER") == "1":
        pytest.fail(f"LABKIT_REQUIRE_BROWSER=1 but {message}", pytrace=False)
    pytest.skip(message)


def _require_loopback() -> None:
    """Fail early, and say why, where 127.0.0.1 is unreachable (a bare `unshare -n`)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        try:
            socket.create_connection(server.getsockname(), timeout=5).close()
        except OSError as exc:
            pytest.fail(
                f"127.0.0.1 is unreachable ({exc}): the loopback interface is down, as in a "
                "fresh `unshare -n` namespace. Bring it up first: "
                "unshare -n sh -c 'ip link set lo up && .venv/bin/python -m pytest ...'",
                pytrace=False,
            )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get_json(url: str) -> object:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no proxy for loopback
    with opener.open(url, timeout=5) as resp:
        return json.load(resp)


def _tail(path: Path, lines: int = 40) -> str:
    text = path.read_text(errors="replace") if path.exists() else "(no log)"
    return "\n".join(text.splitlines()[-lines:])


@dataclass(frozen=True)
class Lab:
    """A running JupyterLab: its base URL, token, served folder and log."""

    url: str
    token: str
    root_dir: Path
    log: Path


def _lab_command(root_dir: Path, port: int, token: str) -> list[str]:
    """`make lab`'s own command line (tools/lab.py: 127.0.0.1, offline flags), on a copy."""
    sys.path.insert(0, str(ROOT / "tools"))
    import lab

    extra = [
        "--no-browser",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
    ]
    return lab.lab_command(extra, root=root_dir)


def _lab_env(tmp_path: Path) -> dict[str, str]:
    """Fresh Jupyter dirs, so no user setting, workspace or kernel spec leaks in.

    The gpu-labkit kernel spec is still found: `make setup` installs it with
    --sys-prefix, and Jupyter always searches {sys.prefix}/share/jupyter.
    """
    dirs = {
        "JUPYTER_CONFIG_DIR": tmp_path / "jupyter" / "config",
        "JUPYTER_DATA_DIR": tmp_path / "jupyter" / "data",
        "JUPYTER_RUNTIME_DIR": tmp_path / "jupyter" / "runtime",
        "IPYTHONDIR": tmp_path / "ipython",
    }
    for d in dirs.values():
        d.mkdir(parents=True)
    # The announcements plugin would otherwise ask (in a toast) to fetch news.
    labconfig = dirs["JUPYTER_CONFIG_DIR"] / "labconfig"
    labconfig.mkdir()
    disabled = {"@jupyterlab/apputils-extension:announcements": True}
    (labconfig / "page_config.json").write_text(json.dumps({"disabledExtensions": disabled}))
    env = {k: v for k, v in os.environ.items() if k not in {"JUPYTER_PATH", "JUPYTER_CONFIG_PATH"}}
    env.update({k: str(v) for k, v in dirs.items()})
    env["LABKIT_PROGRESS"] = "0"
    return env


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (the server then shuts its kernels down), SIGKILL if it hangs."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    """JupyterLab on a copy of notebooks/: running cells and autosave touch only the copy."""
    _require_loopback()
    root_dir = tmp_path / "notebooks"
    shutil.copytree(
        ROOT / "notebooks",
        root_dir,
        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"),
    )
    port, token = _free_port(), secrets.token_hex(16)
    log = tmp_path / "lab.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            _lab_command(root_dir, port, token),
            cwd=tmp_path,
            env=_lab_env(tmp_path),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"JupyterLab exited with {proc.returncode}; log:\n{_tail(log)}")
            try:
                _get_json(f"{url}/api/status?token={token}")
                break
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline:
                    pytest.fail(
                        f"JupyterLab did not answer on {url} within {SERVER_START_S} s; "
                        f"log:\n{_tail(log)}"
                    )
                time.sleep(0.5)
        specs = _get_json(f"{url}/api/kernelspecs?token={token}")
        assert isinstance(specs, dict)
        assert KERNEL in specs["kernelspecs"], (
            f"JupyterLab does not see the {KERNEL!r} kernel spec (it sees "
            f"{sorted(specs['kernelspecs'])}); run `make setup`, which installs it into "
            f"{sys.prefix}/share/jupyter/kernels"
        )
        yield Lab(url=url, token=token, root_dir=root_dir, log=log)
    finally:
        _stop(proc)


@dataclass
class Browsing:
    """A page, and every request it sent off the lab server (there must be none)."""

    page: Page
    external_requests: list[str]


@pytest.fixture
def browser() -> Iterator[Browser]:
    """The system Chromium, headless, through Playwright (skip or fail when absent)."""
    executable = _chromium()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _skip_or_fail("playwright is missing: run `make setup` (it is in the dev extra)")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def browsing(browser: Browser, lab: Lab) -> Browsing:
    """A fresh page that records each request not sent to the lab server."""
    page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    page.set_default_timeout(PAGE_TIMEOUT_MS)
    browsing = Browsing(page=page, external_requests=[])
    lab_host = urlsplit(lab.url).netloc

    def record(url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme in {"http", "https", "ws", "wss"} and parts.netloc != lab_host:
            browsing.external_requests.append(url)

    page.on("request", lambda request: record(request.url))
    page.on("websocket", lambda websocket: record(websocket.url))
    return browsing


@contextmanager
def _step(page: Page, tmp_path: Path, name: str) -> Iterator[Path]:
    """Screenshot the page when a step ends, passed or failed; yields its path."""
    path = tmp_path / f"{name}.png"
    try:
        yield path
    finally:
        try:
            page.screenshot(path=str(path), full_page=True)
            print(f"screenshot: {path}")
        except Exception as exc:  # a crashed browser must not hide the real failure
            print(f"screenshot {path} failed: {exc}")


def _numbered_notebooks() -> list[str]:
    names = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert [n[:2] for n in names] == [f"{i:02d}" for i in range(len(names))], names
    assert len(names) >= 11, f"expected notebooks 00_ .. 10_, found {names}"
    return names


def _cells_with_outputs(path: Path) -> int:
    nb = json.loads(path.read_text())
    return sum(1 for c in nb["cells"] if c["cell_type"] == "code" and c.get("outputs"))


def test_course_opens_renders_and_runs_in_jupyterlab(
    browsing: Browsing, lab: Lab, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    page = browsing.page
    dialog = page.locator(".jp-Dialog")

    def no_dialog(shot: Path) -> None:
        # A kernel picker would mean JupyterLab did not find the notebook's kernel
        # spec: fail and show it, rather than pick a kernel and hide that.
        texts = dialog.all_inner_texts()
        assert not texts, f"unexpected dialog {texts} (see {shot}); log:\n{_tail(lab.log)}"

    with _step(page, tmp_path, "1_file_browser") as shot:
        expected = _numbered_notebooks()
        page.goto(f"{lab.url}/lab?token={lab.token}")
        listing = page.locator(".jp-DirListing-content .jp-DirListing-item")
        for name in expected:
            # expect()'s own default is 5 s, not the page's: a loaded CI runner needs longer
            # for JupyterLab's first listing (the first item waits for the whole app)
            expect(listing.filter(has_text=name)).to_be_visible(timeout=PAGE_TIMEOUT_MS)
        names = listing.locator(".jp-DirListing-itemText").all_inner_texts()
        missing = [n for n in expected if n not in names]
        assert not missing, f"file browser lacks {missing}; it lists {names} (see {shot})"

    with _step(page, tmp_path, "2_notebook_00") as shot:
        listing.filter(has_text=NOTEBOOK).dblclick()
        notebook = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
        expect(notebook.locator(".jp-Notebook .jp-Cell").first).to_be_visible()
        rendered = notebook.locator(".jp-CodeCell:has(.jp-OutputArea-output)")
        expect(rendered).to_have_count(_cells_with_outputs(lab.root_dir / NOTEBOOK))
        expect(notebook.locator(".jp-MarkdownOutput h1").first).to_contain_text(HEADING)
        stored = notebook.locator(".jp-OutputArea-output", has_text=STORED_TEXT).first
        stored.scroll_into_view_if_needed()
        expect(stored).to_be_visible()
        toolbar = notebook.locator(".jp-NotebookPanel-toolbar")
        idle = toolbar.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]')
        expect(idle.or_(dialog).first).to_be_attached(timeout=RUN_TIMEOUT_MS)
        no_dialog(shot)
        expect(toolbar.locator(".jp-KernelName")).to_have_text("Python (gpu-labkit)")

    with _step(page, tmp_path, "3_first_cell_ran") as shot:
        first = notebook.locator(".jp-CodeCell").first
        prompt = first.locator(".jp-InputPrompt")
        prompt.click()
        page.keyboard.press("Shift+Enter")
        ran = prompt.filter(has_text="[1]:")
        expect(ran.or_(dialog).first).to_be_attached(timeout=RUN_TIMEOUT_MS)
        no_dialog(shot)
        expect(prompt).to_have_text("[1]:")
        expect(idle).to_have_count(1, timeout=RUN_TIMEOUT_MS)
        errors = first.locator(STDERR).all_inner_texts()
        assert not errors, f"the first cell failed or wrote to stderr (see {shot}): {errors}"

    external = browsing.external_requests
    assert not external, f"the page requested resources off this machine: {external[:5]}"

"""The suite runs with no network (issue 8), and nothing in labkit or the notebooks reaches for it.

tools/offline.sh runs a command in a network namespace with only the loopback
up (what CI wraps `make test` in), or, where no namespace can be made, under
a guard in every Python process (tools/offline_net.py). These tests check
both do what they claim: a connect to a public address fails at once with
ENETUNREACH, and 127.0.0.1 still works (Jupyter kernels, torchrun, gloo).
The static tests check the sources: no HTTP client, no data set downloader,
no socket beyond the local one labkit.scaling needs.
"""

from __future__ import annotations

import ast
import errno
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
OFFLINE = ROOT / "tools" / "offline.sh"
PUBLIC = ("203.0.113.7", 80)  # TEST-NET-3 (RFC 5737): a public address no one answers at

PROBE = f"""
import errno, json, os, socket
result = {{"method": os.environ.get("LABKIT_OFFLINE_METHOD"), "uid": os.getuid()}}
s = socket.socket()
s.settimeout(10)
try:
    s.connect({PUBLIC!r})
    result["public"] = "connected"
except OSError as exc:
    result["public"] = errno.errorcode.get(exc.errno, repr(exc))
try:
    socket.getaddrinfo("pypi.org", 443)
    result["dns"] = "resolved"
except OSError as exc:
    result["dns"] = type(exc).__name__
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen()
with socket.create_connection(server.getsockname(), timeout=10) as client:
    conn, _ = server.accept()
    client.sendall(b"ping")
    result["loopback"] = conn.recv(4).decode()
print(json.dumps(result))
"""


def _guard() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "offline_net_under_test", ROOT / "tools" / "offline_net.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _offline(*cmd: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(OFFLINE), *cmd],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def _probe(env: dict[str, str] | None = None, *, via_child: bool = False) -> dict:
    code = PROBE
    if via_child:  # the guard must reach grandchildren too (kernels, torchrun workers)
        code = f"import subprocess, sys; sys.exit(subprocess.run([sys.executable, '-c', {PROBE!r}]).returncode)"
    done = _offline(sys.executable, "-c", code, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _namespace_or_skip() -> None:
    done = _offline("true", env={"LABKIT_OFFLINE_MODE": "namespace"})
    if done.returncode == 3:
        pytest.skip(f"no network namespace can be made here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr


# --------------------------------------------------------------------------- the guard, in process


def test_guard_blocks_public_addresses_and_allows_the_loopback() -> None:
    guard = _guard()
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    before = (
        socket.socket.connect,
        socket.socket.connect_ex,
        socket.socket.sendto,
        socket.getaddrinfo,
        socket.gethostbyname,
    )
    guard.install()
    try:
        with socket.socket() as s, pytest.raises(OSError) as blocked:
            s.connect(PUBLIC)
        assert blocked.value.errno == errno.ENETUNREACH
        assert "loopback" in str(blocked.value)
        with socket.socket() as s:
            assert s.connect_ex(PUBLIC) == errno.ENETUNREACH
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u, pytest.raises(OSError):
            u.sendto(b"x", ("8.8.8.8", 53))
        with pytest.raises(socket.gaierror, match="pypi.org"):
            socket.getaddrinfo("pypi.org", 443)
        with pytest.raises(socket.gaierror):
            socket.gethostbyname("example.com")
        assert socket.getaddrinfo("localhost", 80)
        with socket.create_connection(server.getsockname(), timeout=10) as client:
            conn, _ = server.accept()
            client.sendall(b"ping")
            assert conn.recv(4) == b"ping"
            conn.close()
    finally:
        guard.uninstall()
        server.close()
    assert not guard.installed()
    assert before == (
        socket.socket.connect,
        socket.socket.connect_ex,
        socket.socket.sendto,
        socket.getaddrinfo,
        socket.gethostbyname,
    )


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("0.0.0.0", True),
        ("localhost", True),
        ("", True),
        ("10.0.0.1", False),
        ("8.8.8.8", False),
        ("2001:db8::1", False),
        ("pypi.org", False),
    ],
)
def test_guard_allowed_hosts(host: str, allowed: bool) -> None:
    assert _guard().allowed_host(host) is allowed


# --------------------------------------------------------------------------- tools/offline.sh


def test_offline_sh_guard_mode_covers_child_processes() -> None:
    result = _probe({"LABKIT_OFFLINE_MODE": "guard"}, via_child=True)
    assert result["method"] == "guard"
    assert result["public"] == "ENETUNREACH"
    assert result["dns"] == "gaierror"
    assert result["loopback"] == "ping"


def test_offline_sh_guard_keeps_an_existing_sitecustomize(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text("import os\nos.environ['OTHER_SITE'] = 'ran'\n")
    env = {"LABKIT_OFFLINE_MODE": "guard", "PYTHONPATH": str(tmp_path)}
    code = "import os, socket; print(os.environ.get('OTHER_SITE'), socket.getaddrinfo.__module__)"
    done = _offline(sys.executable, "-c", code, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ran", "labkit_offline_guard"]


def test_offline_sh_falls_back_to_the_guard_loudly(tmp_path: Path) -> None:
    for tool in ("unshare", "sudo"):  # as on a machine that permits neither
        fake = tmp_path / tool
        fake.write_text(f"#!/bin/sh\necho '{tool}: Operation not permitted' >&2\nexit 1\n")
        fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}", "LABKIT_OFFLINE_MODE": "auto"}
    done = _offline(sys.executable, "-c", PROBE, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "WARNING" in done.stderr and "Operation not permitted" in done.stderr
    assert "NOT cut off" in done.stderr  # says what the fallback cannot do
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert (result["method"], result["public"], result["loopback"]) == (
        "guard",
        "ENETUNREACH",
        "ping",
    )


@pytest.mark.parametrize("lo", ["ip", "python"])
def test_offline_sh_removes_the_network(lo: str) -> None:
    """In the namespace: public addresses unreachable (for any program), the loopback up."""
    _namespace_or_skip()
    if lo == "ip" and shutil.which("ip") is None:
        pytest.skip("iproute2's `ip` is not installed here (the python route is tested)")
    env = {"LABKIT_OFFLINE_MODE": "namespace", "LABKIT_OFFLINE_LO": lo}
    result = _probe(env)
    assert result["method"] == "namespace"
    assert result["uid"] == os.getuid()  # the command runs as the caller
    assert result["public"] == "ENETUNREACH"
    assert result["dns"] == "gaierror"
    assert result["loopback"] == "ping"  # lo was brought up
    done = _offline("bash", "-c", f"exec 3<>/dev/tcp/{PUBLIC[0]}/{PUBLIC[1]}", env=env)
    assert done.returncode != 0 and "unreachable" in done.stderr.lower(), done.stderr


@pytest.mark.parametrize("mode", ["auto", "guard"])
def test_offline_sh_passes_the_exit_status_on(mode: str) -> None:
    assert _offline("sh", "-c", "exit 7", env={"LABKIT_OFFLINE_MODE": mode}).returncode == 7


def test_offline_sh_rejects_a_bad_mode() -> None:
    done = _offline("true", env={"LABKIT_OFFLINE_MODE": "sometimes"})
    assert done.returncode == 2 and "LABKIT_OFFLINE_MODE" in done.stderr


# --------------------------------------------------------------------------- the sources

#: Modules that reach the network (and their submodules).
NETWORK_CLIENTS = (
    "urllib.request",
    "http.client",
    "requests",
    "httpx",
    "urllib3",
    "ftplib",
    "aiohttp",
    "huggingface_hub",
    "tensorflow_datasets",
    "torchvision.datasets",
)
#: Dotted names that download data sets or weights.
DOWNLOADERS = (
    "keras.datasets",
    "torch.hub",
    "tfds",
    "hf_hub",
    "fetch_openml",
    "load_data",
    "from_pretrained",
    "urlretrieve",
    "sklearn.datasets.fetch_",
)
#: The only socket use allowed: labkit.scaling names the host in its results. torchrun's
#: --standalone rendezvous and gloo (inside torch) stay on this machine.
SOCKET_ALLOWED = {"labkit/scaling/worker.py": {"gethostname"}}


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _sources() -> list[tuple[str, str]]:
    """(where, code) for every labkit module and every notebook code cell."""
    found = [
        (str(p.relative_to(ROOT)), p.read_text()) for p in sorted((ROOT / "labkit").rglob("*.py"))
    ]
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        for index, cell in enumerate(json.loads(path.read_text())["cells"]):
            if cell["cell_type"] == "code":
                found.append((f"{path.name} cell {index}", "".join(cell["source"])))
    assert (
        sum(w.startswith("labkit/") for w, _ in found) > 30
        and sum("cell" in w for w, _ in found) > 100
    )
    return found


def _tree(where: str, code: str) -> ast.AST:
    lines = code.splitlines()
    shell = [ln for ln in lines if ln.lstrip().startswith(("!", "%"))]
    for ln in shell:  # a notebook's shell escapes must not fetch anything either
        assert not any(w in ln for w in ("pip install", "curl", "wget", "git clone")), (where, ln)
    return ast.parse("\n".join("" if ln in shell else ln for ln in lines), where)


def _imports(tree: ast.AST) -> list[str]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    return names


def _under(name: str, modules: tuple[str, ...]) -> bool:
    return any(name == m or name.startswith(m + ".") for m in modules)


def test_no_network_clients_in_labkit_or_notebooks() -> None:
    bad = []
    for where, code in _sources():
        tree = _tree(where, code)
        bad += [(where, n) for n in _imports(tree) if _under(n, NETWORK_CLIENTS)]
        bad += [
            (where, d)
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and _under(d := _dotted(node), NETWORK_CLIENTS)
        ]
    assert not bad, f"these reach the network (tests and notebooks run offline): {bad}"


def test_no_dataset_downloads_in_labkit_or_notebooks() -> None:
    bad = []
    for where, code in _sources():
        tree = _tree(where, code)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                bad += [
                    (where, "download=True")
                    for k in node.keywords
                    if k.arg == "download" and isinstance(k.value, ast.Constant) and k.value.value
                ]
            if isinstance(node, (ast.Attribute, ast.Name)):
                name = _dotted(node)
                bad += [(where, name) for d in DOWNLOADERS if d in name]
        bad += [(where, n) for n in _imports(tree) if any(d in n for d in DOWNLOADERS)]
    assert not bad, f"these download data or weights (use synthetic or shipped data): {bad}"


def test_sockets_only_where_labkit_dist_needs_them() -> None:
    bad = []
    for where, code in _sources():
        tree = _tree(where, code)
        allowed = SOCKET_ALLOWED.get(where)
        uses = [n for n in _imports(tree) if _under(n, ("socket", "asyncio", "ssl", "select"))]
        if allowed is None:
            bad += [(where, n) for n in uses]
            continue
        bad += [(where, n) for n in uses if n != "socket"]
        attrs = {
            node.attr
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and _dotted(node.value) == "socket"
        }
        bad += [(where, f"socket.{a}") for a in attrs - allowed]
    assert not bad, f"sockets beyond {SOCKET_ALLOWED}: {bad}"
    for where, names in SOCKET_ALLOWED.items():  # the allowance still names something real
        assert (ROOT / where).is_file() and names, where


def test_ci_sets_up_online_then_tests_offline() -> None:
    """.ci/run: the network is used for the setup only; the tests and the matrix run without it."""
    lines = [
        ln.strip()
        for ln in (ROOT / ".ci" / "run").read_text().splitlines()
        if ln.strip() and not ln.strip().startswith("#")
    ]
    make = [ln for ln in lines if "make " in ln]
    assert make == [
        "make setup setup-matrix",
        "bash tools/offline.sh make test",
        "python3 tools/constrain.py $condition -- bash tools/offline.sh make test-nbval",
        "exec bash tools/offline.sh make test-matrix",
    ]
    # the three machine shapes of issue 13, each a strict nbval run (docs/reliability.md, 5)
    assert 'for condition in "--memory-limit 8G" "--cpus 0" "--busy-cores 1"; do' in lines


# --------------------------------------------------------------------------- the matrix's checker


def _runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "run_notebooks_under_test", ROOT / "tools" / "run_notebooks.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _executed(*outputs: list[dict]) -> object:
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.v4.new_notebook()
    for outs in outputs:
        cell = nbformat.v4.new_code_cell("...")
        cell.outputs = [nbformat.from_dict(o) for o in outs]
        nb.cells.append(cell)
    return nb


def _stream(text: str, name: str = "stdout") -> dict:
    return {"output_type": "stream", "name": name, "text": text}


def test_matrix_checker_catches_errors_tracebacks_and_silent_skips() -> None:
    runner = _runner()
    gone = runner.Optional(
        "widgetlib", ("labkit_no_such_module",), "pip install widgetlib", ("04",)
    )
    here = runner.Optional("numpy", ("numpy",), "pip install numpy", ("04",))
    said = "Skipped: widgetlib is not installed for X. Install it with: pip install widgetlib\n"
    clean = runner.check_outputs(_executed([_stream(said)]), "04_x.ipynb", (gone, here))
    assert clean.ok and clean.announced == ["widgetlib"]
    silent = runner.check_outputs(_executed([_stream("done\n")]), "04_x.ipynb", (gone,))
    assert not silent.ok and "skipped silently" in silent.problems[0]
    assert runner.check_outputs(_executed([_stream("done\n")]), "05_y.ipynb", (gone,)).ok
    error = {"output_type": "error", "ename": "ValueError", "evalue": "bad", "traceback": []}
    broken = runner.check_outputs(_executed([_stream(said)], [error]), "04_x.ipynb", (gone,))
    assert broken.problems == ["cell 1: error output ValueError: bad"]
    trace = _stream("Traceback (most recent call last):\n", "stderr")
    assert (
        "Traceback"
        in runner.check_outputs(_executed([_stream(said), trace]), "04_x.ipynb", (gone,)).problems[
            0
        ]
    )
    fake = _stream("numpy is not installed. Install it with: pip install numpy\n")
    lying = runner.check_outputs(_executed([fake]), "04_x.ipynb", (here,))
    assert not lying.ok and "but it is installed here" in lying.problems[0]
    wrong_hint = _stream("Skipped: widgetlib is not installed.\n")
    assert (
        "install command"
        in runner.check_outputs(_executed([wrong_hint]), "04_x.ipynb", (gone,)).problems[0]
    )


def test_matrix_table_matches_labkit_wording() -> None:
    pytest.importorskip("nbformat")
    from labkit.core.optional import MissingPackageError

    for package in _runner().optional_packages():
        if (
            package.name != "numba-cuda"
        ):  # the simulator words its own (checked in test_kernels_simulator)
            message = str(MissingPackageError(package.name, "a cell"))
            assert package.says_missing(message) and package.hint in message, package


def test_simulator_available_says_in_one_line_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from labkit.core.optional import is_installed
    from labkit.kernels import simulator

    if is_installed("numba") and is_installed("numba_cuda"):
        assert simulator.available() is True
        assert capsys.readouterr().out == ""
    monkeypatch.setitem(sys.modules, "numba_cuda", None)  # "not installed"
    assert simulator.available() is False
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("Skipped: numba-cuda is not installed")
    assert simulator.INSTALL_HINT in out

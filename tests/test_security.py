"""Nothing in labkit or tools evaluates strings, unpickles, or runs a shell (docs/reliability.md).

The notebooks run on shared JupyterHub nodes and on students' laptops, and
they open files (traces, recordings, caches) that a student may have been
sent. So labkit never turns data into code: no ``eval``/``exec``, no
``pickle`` (or ``torch.load``, ``np.load(allow_pickle=True)``, unsafe YAML),
and every subprocess gets an argument list, never a shell string. This test
reads the source with ``ast`` rather than trusting a grep: a call spelled
across lines or aliased on import is still found.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted([*ROOT.glob("labkit/**/*.py"), *ROOT.glob("tools/*.py")])

_CODE_FROM_STRINGS = {"eval", "exec", "compile", "__import__"}
_UNSAFE_MODULES = {"pickle", "cPickle", "_pickle", "dill", "shelve", "marshal", "cloudpickle"}
_SHELL_CALLS = {
    ("os", "system"),
    ("os", "popen"),
    ("os", "execlp"),
    ("subprocess", "getoutput"),
    ("subprocess", "getstatusoutput"),
}
_SUBPROCESS = {"run", "Popen", "call", "check_call", "check_output"}

#: The only dynamic imports, each of a module name labkit chose, not a user:
#: (file, the module-name expression as written).
_DYNAMIC_IMPORTS = {
    # `labkit bench NAME`: NAME is a row of labkit.cli.bench.registry, a fixed table.
    ("labkit/cli/bench/registry.py", "self.module"),
    # TensorFlow's xplane protobuf module: a fixed tuple of candidate names.
    ("labkit/profiling/tf_profile.py", "name"),
    # try_import("tensorflow"): the calling code names the package, as an import statement would.
    ("labkit/core/optional.py", "name"),
}


def _dotted(node: ast.expr) -> tuple[str, ...]:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return tuple(reversed(parts))


def _problems(path: Path) -> list[str]:
    rel = path.relative_to(ROOT).as_posix()
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
    found = []
    for node in ast.walk(tree):
        where = f"{rel}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
            )
            for name in names:
                if name.split(".")[0] in _UNSAFE_MODULES:
                    found.append(f"{where}: imports {name} (unpickling runs code from the file)")
            continue
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        keywords = {k.arg: k.value for k in node.keywords}
        if len(name) == 1 and name[0] in _CODE_FROM_STRINGS:
            found.append(f"{where}: calls {name[0]}() (evaluates a string as code)")
        if name[-2:] in _SHELL_CALLS:
            found.append(f"{where}: calls {'.'.join(name)} (runs a shell)")
        if name[:1] == ("torch",) and name[-1] == "load":
            found.append(f"{where}: torch.load unpickles")
        if name[-1:] == ("load",) and name[:1] in {("np",), ("numpy",)}:
            allow = keywords.get("allow_pickle")
            if isinstance(allow, ast.Constant) and allow.value is True:
                found.append(f"{where}: np.load(allow_pickle=True) unpickles")
        if name[:1] == ("yaml",) and name[-1] in {"load", "unsafe_load", "full_load"}:
            found.append(f"{where}: yaml.{name[-1]} can build arbitrary objects; use safe_load")
        if name[:1] == ("subprocess",) and name[-1] in _SUBPROCESS:
            shell = keywords.get("shell")
            if not (shell is None or isinstance(shell, ast.Constant) and shell.value is False):
                found.append(f"{where}: subprocess with shell=... (pass an argument list instead)")
            if node.args and isinstance(node.args[0], (ast.Constant, ast.JoinedStr, ast.BinOp)):
                found.append(f"{where}: subprocess given a command string, not an argument list")
        if name[-1:] == ("import_module",) and node.args:
            expr = ast.get_source_segment(path.read_text(encoding="utf-8"), node.args[0])
            if isinstance(node.args[0], ast.Constant):
                continue
            if (rel, expr) not in _DYNAMIC_IMPORTS:
                found.append(f"{where}: imports a module named by {expr} (not in the allowed list)")
    return found


def test_there_is_source_to_scan() -> None:
    assert len(SOURCES) > 50


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_code_from_data(path: Path) -> None:
    assert _problems(path) == []


def test_the_scan_finds_what_it_forbids(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "labkit" / "bad.py"
    bad.parent.mkdir()
    bad.write_text(
        "import pickle\nimport os, subprocess, torch, numpy as np, importlib\n"
        "eval('1')\nos.system('ls')\nsubprocess.run('ls -l', shell=True)\n"
        "torch.load('x.pt')\nnp.load('x.npy', allow_pickle=True)\n"
        "importlib.import_module(user_text)\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    problems = "\n".join(_problems(bad))
    for what in (
        "imports pickle",
        "calls eval",
        "os.system",
        "shell=",
        "command string",
        "torch.load",
        "allow_pickle",
        "user_text",
    ):
        assert what in problems, problems

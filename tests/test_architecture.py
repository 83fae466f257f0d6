"""labkit's layout stays as README.md ("labkit's layout") and CONTRIBUTING.md describe it (issue 14).

The rules are checked on the source with :mod:`ast` (tools/layout_report.py), so
they hold for lazy imports inside functions as well as for the ones at the top.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import layout_report  # noqa: E402

#: The layers, lowest first. A module may import from its own layer and from the
#: layers before it, never from one after it. The lesson packages follow the
#: course order (a lesson builds on the ones before it); ``check`` grades every
#: lesson; ``cli`` is the outermost layer and nothing imports it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("core",),
    ("machine",),
    ("plotting",),
    ("timing",),
    ("parallelism",),
    ("bandwidth",),
    ("roofline",),
    ("accel",),
    ("models",),
    ("kernels",),
    ("batching",),
    ("profiling",),
    ("scaling",),
    ("transformers",),
    ("triton_kernels",),
    ("check", "notebook"),
    ("cli", "__main__"),
)

#: Exceptions to the course order, each with its reason. Keep this short.
ALLOWED_UPWARD: dict[tuple[str, str], str] = {}


@pytest.fixture(scope="module")
def modules() -> dict[str, layout_report.Module]:
    return layout_report.load_modules()


def _layer(module: str) -> int:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "__init__"
    for i, names in enumerate(LAYERS):
        if top in names:
            return i
    raise AssertionError(
        f"{module} is in no layer of tests/test_architecture.py: add its package to LAYERS"
    )


def test_there_are_no_import_cycles(modules) -> None:
    cycles = layout_report.cycles(layout_report.import_graph(modules))
    assert cycles == [], f"import cycles (each line one cycle): {cycles}"


def test_no_module_imports_another_modules_private_names(modules) -> None:
    uses = layout_report.private_uses(modules)
    assert uses == [], "make these public in the module that defines them:\n" + "\n".join(
        f"  {u.module}:{u.line} uses {u.target}.{u.name}" for u in uses
    )


def test_no_module_level_getattr_facades(modules) -> None:
    assert layout_report.getattr_facades(modules) == []


def test_dependencies_run_one_way(modules) -> None:
    graph = layout_report.import_graph(modules)
    upward = []
    for src, targets in graph.items():
        if src == "labkit":  # the notebook API re-exports from the layers below it
            continue
        for dst in targets:
            if dst == "labkit" or dst.startswith(src + "."):
                continue
            if _layer(dst) > _layer(src) and (src, dst) not in ALLOWED_UPWARD:
                upward.append(f"{src} imports {dst}")
    assert upward == [], "imports against the layer order:\n" + "\n".join(sorted(upward))


def test_nothing_imports_the_cli(modules) -> None:
    graph = layout_report.import_graph(modules)
    offenders = sorted(
        f"{src} imports {dst}"
        for src, targets in graph.items()
        for dst in targets
        if dst.startswith("labkit.cli")
        and not src.startswith("labkit.cli")
        and src != "labkit.__main__"
    )
    assert offenders == []


def test_at_most_eight_py_files_at_the_top_level() -> None:
    top = sorted(p.name for p in (ROOT / "labkit").glob("*.py"))
    assert len(top) <= 8, top


def test_no_module_is_longer_than_600_lines(modules) -> None:
    """One concept per module: past 600 lines a module is holding several (issue 14)."""
    long = sorted((m.lines, name) for name, m in modules.items() if m.lines > 600)
    assert long == [], long


def test_every_package_and_module_at_the_top_is_in_a_layer() -> None:
    top = {p.stem for p in (ROOT / "labkit").glob("*.py")} - {"__init__"}
    top |= {p.name for p in (ROOT / "labkit").iterdir() if (p / "__init__.py").exists()}
    layered = {name for names in LAYERS for name in names}
    assert top <= layered, f"add these to LAYERS: {sorted(top - layered)}"


def test_modules_take_only_the_version_from_the_top_package(modules) -> None:
    """``labkit/__init__`` imports the notebook API from the layers, so a module inside them
    that imported it would import upwards; ``__version__`` is the one name they may take."""
    import ast

    found = []
    for name, module in modules.items():
        if name in ("labkit", "labkit.__main__"):
            continue
        for node in ast.walk(module.tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "labkit":
                taken = {alias.name for alias in node.names} - {"__version__"}
                taken -= {m.split(".")[1] for m in modules if m.count(".") == 1}  # submodules
                if taken:
                    found.append(f"{name}:{node.lineno} takes {sorted(taken)} from labkit")
    assert found == []


def test_the_checks_find_a_planted_cycle_and_private_imports(tmp_path: Path) -> None:
    """The walkers above would pass on any tree if they saw no imports: plant each problem once."""
    pkg = tmp_path / "labkit"
    (pkg / "core").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "core" / "__init__.py").write_text("")
    (pkg / "core" / "_hidden.py").write_text("X = 1\n")
    (pkg / "core" / "a.py").write_text("from labkit.core import b\n_secret = 1\n")
    (pkg / "core" / "b.py").write_text(
        "from labkit.core import a\nfrom labkit.core.a import _secret\n"
        "from labkit.core import _hidden\nprint(a._secret)\n"
    )
    planted = layout_report.load_modules(pkg)
    assert layout_report.cycles(layout_report.import_graph(planted)) == [
        ["labkit.core.a", "labkit.core.b"]
    ]
    found = {(u.module, u.name) for u in layout_report.private_uses(planted)}
    assert found == {("labkit.core.b", "_secret"), ("labkit.core.b", "_hidden")}

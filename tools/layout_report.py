"""What labkit's layout looks like, measured from its source (issue 14).

    python3 tools/layout_report.py            # the figures, as text
    python3 tools/layout_report.py --json     # the same, as JSON

It reads every ``labkit/**/*.py`` with :mod:`ast` and imports nothing, so it runs
without torch. tests/test_architecture.py uses the same functions to keep the
layout from sliding back: no import cycles, no module ``__getattr__`` facades, no
imports of another module's private names.

An import counts wherever it is written, at the top of a module or inside a
function: a lazy import still ties two modules together, and a cycle through one
is still a cycle in the design.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "labkit"


@dataclass(frozen=True)
class Module:
    name: str  # dotted: labkit.timing.bench
    path: Path
    is_package: bool
    lines: int
    tree: ast.Module


@dataclass(frozen=True)
class PrivateUse:
    module: str  # where the private name is used
    target: str  # the module it belongs to
    name: str
    line: int


@dataclass
class Layout:
    py_lines: int
    modules: int
    top_level_py_files: int
    largest: list[tuple[str, int]]
    cycles: list[list[str]]
    private_uses: list[PrivateUse] = field(default_factory=list)
    getattr_facades: list[str] = field(default_factory=list)


def load_modules(package: Path = PACKAGE) -> dict[str, Module]:
    modules: dict[str, Module] = {}
    for path in sorted(package.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        rel = path.relative_to(package.parent).with_suffix("")
        parts = list(rel.parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        text = path.read_text(encoding="utf-8")
        modules[".".join(parts)] = Module(
            name=".".join(parts),
            path=path,
            is_package=is_package,
            lines=len(text.splitlines()),
            tree=ast.parse(text, filename=str(path)),
        )
    return modules


def _resolve_from(module: Module, node: ast.ImportFrom) -> str:
    """The absolute module an ``ImportFrom`` names (relative imports resolved)."""
    if node.level == 0:
        return node.module or ""
    base = module.name.split(".")
    if not module.is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(
    module: Module, modules: dict[str, Module]
) -> list[tuple[str | None, str, str | None, int]]:
    """(name bound here or None, labkit module, name taken from it or None, line) per import.

    ``from labkit.a import b`` where ``labkit.a.b`` is a module yields that
    module and no name; ``from labkit.a import f`` yields ``labkit.a`` and "f".
    Imports of anything outside labkit are left out.
    """
    found: list[tuple[str | None, str, str | None, int]] = []
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    found.append((alias.asname, alias.name, None, node.lineno))
        elif isinstance(node, ast.ImportFrom):
            source = _resolve_from(module, node)
            if source not in modules:
                continue
            for alias in node.names:
                local = alias.asname or alias.name
                sub = f"{source}.{alias.name}"
                if sub in modules:
                    found.append((local, sub, None, node.lineno))
                else:
                    found.append((local, source, alias.name, node.lineno))
    return found


def _edges(module: Module, modules: dict[str, Module]) -> list[tuple[str, int]]:
    """(imported labkit module, line) for every import in ``module``."""
    return [
        (target, line) for _, target, _, line in _imports(module, modules) if target != module.name
    ]


def import_graph(modules: dict[str, Module]) -> dict[str, set[str]]:
    return {name: {t for t, _ in _edges(m, modules)} for name, m in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan).

    A package's ``__init__`` importing its own submodules is not a cycle in the
    design (Python loads the package first in any case), so edges from a package
    to the modules inside it are left out.
    """
    pruned = {
        src: {dst for dst in dsts if not dst.startswith(src + ".")} for src, dsts in graph.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(pruned.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    for node in sorted(pruned):
        if node not in index:
            visit(node)
    return sorted(found)


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_uses(modules: dict[str, Module]) -> list[PrivateUse]:
    """Private names one labkit module takes from another.

    Counted: ``from labkit.x import _name``, and ``x._name`` where ``x`` is a
    labkit module bound by an import. A module's own package (``labkit.check``
    using ``labkit.check.result``) counts too: a private module is private to
    the file that defines it, and its helpers should be public where shared.
    """
    uses: list[PrivateUse] = []
    for module in modules.values():
        bound: dict[str, str] = {}
        for local, target, name, line in _imports(module, modules):
            if name is None:  # a module
                if local is not None:
                    bound[local] = target
                leaf = target.rpartition(".")[2]
                if _is_private(leaf) and not target.startswith(module.name + "."):
                    uses.append(PrivateUse(module.name, target, leaf, line))
            elif _is_private(name) and target != module.name:
                uses.append(PrivateUse(module.name, target, name, line))
        for node in ast.walk(module.tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in bound
                and _is_private(node.attr)
            ):
                uses.append(PrivateUse(module.name, bound[node.value.id], node.attr, node.lineno))
    return sorted(uses, key=lambda u: (u.module, u.line, u.name))


def getattr_facades(modules: dict[str, Module]) -> list[str]:
    """Modules that define a module-level ``__getattr__`` (lazy re-exports)."""
    return sorted(
        m.name
        for m in modules.values()
        for node in m.tree.body
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__"
    )


def layout(package: Path = PACKAGE) -> Layout:
    modules = load_modules(package)
    return Layout(
        py_lines=sum(m.lines for m in modules.values()),
        modules=len(modules),
        top_level_py_files=len(list(package.glob("*.py"))),
        largest=sorted(((m.name, m.lines) for m in modules.values()), key=lambda x: -x[1])[:5],
        cycles=cycles(import_graph(modules)),
        private_uses=private_uses(modules),
        getattr_facades=getattr_facades(modules),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    args = parser.parse_args(argv)
    report = layout()
    if args.json:
        data = asdict(report)
        print(json.dumps(data, indent=2, default=str))
        return 0
    print(f"labkit .py lines:         {report.py_lines:,}")
    print(f"modules:                  {report.modules}")
    print(f".py files at top level:   {report.top_level_py_files}")
    print("largest modules:          " + ", ".join(f"{n} ({k:,})" for n, k in report.largest))
    print(f"import cycles:            {len(report.cycles)}")
    for cycle in report.cycles:
        print("  " + " / ".join(cycle))
    print(f"module __getattr__:       {len(report.getattr_facades)} {report.getattr_facades}")
    print(f"private names used across modules: {len(report.private_uses)}")
    for use in report.private_uses:
        print(f"  {use.module}:{use.line} uses {use.target}.{use.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

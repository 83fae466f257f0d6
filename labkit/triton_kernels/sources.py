"""The Triton kernels' source text, read from the file without importing Triton."""

from __future__ import annotations

import ast
from pathlib import Path

KERNELS_FILE = Path(__file__).with_name("kernels.py")


def kernel_names() -> tuple[str, ...]:
    """The ``@triton.jit`` functions of :mod:`labkit.triton_kernels.kernels`, in file order."""
    tree = ast.parse(KERNELS_FILE.read_text(encoding="utf-8"))
    return tuple(node.name for node in tree.body if isinstance(node, ast.FunctionDef))


def kernel_source(name: str, *, docstring: bool = False) -> str:
    """One kernel's source, with its decorator; without its docstring unless asked."""
    text = KERNELS_FILE.read_text(encoding="utf-8")
    tree = ast.parse(text)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            lines = text.splitlines()
            start = node.decorator_list[0].lineno if node.decorator_list else node.lineno
            body = lines[start - 1 : node.end_lineno]
            first = node.body[0]
            if (
                not docstring
                and isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
            ):
                cut = range(first.lineno - start, (first.end_lineno or first.lineno) - start + 1)
                body = [line for i, line in enumerate(body) if i not in cut]
            return "\n".join(body)
    raise ValueError(f"name must be one of {', '.join(kernel_names())}; got {name!r}")

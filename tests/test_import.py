"""`import labkit` must stay fast: it imports no framework."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ["torch", "tensorflow", "keras", "cupy", "numba", "jax", "triton", "matplotlib"]


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(json.loads(out.splitlines()[-1]))


def test_import_labkit_imports_no_framework() -> None:
    loaded = _modules_after("import labkit")
    assert not [m for m in HEAVY if m in loaded]


def test_public_submodules_import_no_framework() -> None:
    code = "import labkit, labkit.check, labkit.cli.main, labkit.machine.reference, labkit.timing.pitfalls"
    loaded = _modules_after(code)
    assert not [m for m in HEAVY if m in loaded]


def test_public_api_is_exported() -> None:
    import labkit

    for name in labkit.__all__:
        assert hasattr(labkit, name), name

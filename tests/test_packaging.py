"""The setup promises: one source of truth for versions, two commands, CI = make test."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
CONSTRAINTS = ROOT / "requirements" / "constraints.txt"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in CONSTRAINTS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        req = Requirement(line)
        spec = list(req.specifier)
        assert len(spec) == 1 and spec[0].operator == "==", f"not an exact pin: {line}"
        assert _norm(req.name) not in pins, f"pinned twice: {req.name}"
        pins[_norm(req.name)] = spec[0].version
    return pins


def test_constraints_pin_exact_versions_once() -> None:
    pins = _pins()
    assert len(pins) > 50  # the whole tested environment, not just the top level
    assert "+" not in pins["torch"], "pin torch without +cpu so GPU machines get the CUDA build"


def test_pyproject_has_ranges_not_pins() -> None:
    project = PYPROJECT["project"]
    reqs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        reqs += extra
    for r in map(Requirement, reqs):
        ops = {s.operator for s in r.specifier}
        assert not ops & {"==", "==="}, f"exact pins belong in {CONSTRAINTS.name}: {r}"


def test_every_default_requirement_is_pinned() -> None:
    pins = _pins()
    project = PYPROJECT["project"]
    default = list(project["dependencies"])
    for extra in ("cpu", "lab", "dev"):
        default += project["optional-dependencies"][extra]
    env = {"sys_platform": "linux", "platform_system": "Linux"}
    for r in map(Requirement, default):
        if r.marker is None or r.marker.evaluate(env):
            assert _norm(r.name) in pins, f"{r.name} has no pin in {CONSTRAINTS.name}"
            assert r.specifier.contains(pins[_norm(r.name)], prereleases=True), r


def test_names_and_extras() -> None:
    project = PYPROJECT["project"]
    assert project["name"] == "gpu-labkit"
    assert project["scripts"]["labkit"] == "labkit.cli.main:main"
    gpu = " ".join(project["optional-dependencies"]["gpu"])
    assert "tensorflow[and-cuda]" in gpu and "cupy-cuda12x" in gpu
    cpu = " ".join(project["optional-dependencies"]["cpu"])
    assert "tensorflow-cpu" in cpu


def test_environment_yml_installs_the_same_pins() -> None:
    yaml = pytest.importorskip("yaml")
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    deps = env["dependencies"]
    pip = next(d["pip"] for d in deps if isinstance(d, dict))
    conda = [d for d in deps if isinstance(d, str)]
    assert "-c requirements/constraints.txt" in pip
    assert any(p.startswith("-e .[") for p in pip)
    # conda provides Python (and pip) only; every version comes from the one pins file
    assert {d.split("=")[0] for d in conda} == {"python", "pip"}
    assert not [p for p in pip if "==" in p]


def test_make_test_is_strict_nbval_plus_ruff() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "--nbval " in makefile and "--nbval-lax" not in makefile
    assert "ruff check" in makefile
    assert "-c $(CONSTRAINTS)" in makefile


def test_readme_shows_the_two_commands_first() -> None:
    readme = (ROOT / "README.md").read_text()
    first_block = readme.split("```", 2)[1]
    assert "make lab" in first_block and "make test" in first_block


def test_makefile_parses_and_keeps_progress_bars_out_of_stored_outputs() -> None:
    import subprocess

    for target in ("test", "lab", "notebooks"):
        dry = subprocess.run(
            ["make", "-n", "-C", str(ROOT), target], capture_output=True, text=True, timeout=60
        )
        assert dry.returncode == 0, dry.stderr
    db = subprocess.run(
        ["make", "-p", "-n", "-C", str(ROOT), "test"], capture_output=True, text=True, timeout=60
    ).stdout
    assert "test: LABKIT_PROGRESS := 0" in db and "notebooks: LABKIT_PROGRESS := 0" in db
    assert "lab: LABKIT_PROGRESS" not in db

"""Results recorded on a real GPU, shipped with labkit for learners who have none.

A CPU-only learner cannot see the lesson "a bare clock times the launch, not
the kernel" happen. What they can see is a measurement that someone made on a
real GPU, labelled with that GPU and the date: ``labkit bench timing --record``
writes one to ``labkit/reference/<name>.json`` and notebooks print it through
:func:`labkit.require_gpu`. A recording is only ever written from an actual
measurement: labkit ships none until a GPU run has made one.

File format (JSON)::

    {"name": "naive_timing", "gpu": "NVIDIA H200", "recorded": "2026-11-30",
     "labkit_version": "0.1.0", "driver": "560.35.03", "cuda": "12.4",
     "torch": "2.13.0", "results": {"summary": ["..."], ...}}

``results["summary"]``, when present, is a list of lines for people to read;
:func:`format_reference` prints it.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labkit.core.optional import import_optional
from labkit.core.results import JsonRecord

#: Set this to a directory to read and write recordings there instead of in the package.
ENV_VAR = "LABKIT_REFERENCE_DIR"

_NAME = re.compile(r"[A-Za-z0-9_-]+")

#: The command that makes a recording, where it differs from ``labkit bench <name> --record``.
RECORD_COMMANDS: dict[str, str] = {
    "naive_timing": "labkit bench timing --record",
    "parallelism": "labkit bench parallel --record",
}


@dataclass(frozen=True)
class Reference(JsonRecord):
    """One recording: where and when it was measured, and what was measured.

    ``to_dict()`` is the JSON object stored on disk (without the path).
    """

    name: str
    gpu: str
    recorded: str
    labkit_version: str
    results: dict[str, Any]
    driver: str | None = None
    cuda: str | None = None
    torch: str | None = None
    path: Path | None = None

    json_skip = ("path",)


def reference_dir(directory: str | os.PathLike[str] | None = None) -> Path:
    """Where recordings live: ``directory``, else ``$LABKIT_REFERENCE_DIR``, else the package's.

    Tests and anyone recording on a shared install point the environment
    variable at a directory of their own, so nothing writes into site-packages.
    """
    if directory is not None:
        return Path(directory)
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[1] / "reference"


def check_name(name: Any) -> str:
    """Return ``name`` if it is a valid recording name, else raise a ValueError that says why."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(
            f"name={name!r} is not a valid recording name: use letters, digits, '_' and '-' "
            "only (no path separators, dots or spaces), e.g. 'naive_timing'"
        )
    return name


def record_command(name: str) -> str:
    """The shell command that makes the recording called ``name`` on a GPU machine."""
    check_name(name)
    return RECORD_COMMANDS.get(name, f"labkit bench {name} --record")


def record(
    name: str,
    results: dict[str, Any],
    *,
    gpu_name: str,
    directory: str | os.PathLike[str] | None = None,
    driver: str | None = None,
    cuda: str | None = None,
    torch: str | None = None,
    recorded: datetime.date | None = None,
) -> Path:
    """Write a recording atomically and return its path.

    The JSON goes to a temporary file in the same directory, which then
    replaces ``<name>.json`` in one ``os.replace``: a crash or a full disk
    leaves the old recording (or none), never half a file.
    """
    from labkit import __version__

    check_name(name)
    if recorded is None:
        recorded = datetime.datetime.now(datetime.timezone.utc).date()
    reference = Reference(
        name=name,
        gpu=gpu_name.strip(),
        recorded=recorded.isoformat()[:10],
        labkit_version=__version__,
        results=results,
        driver=driver,
        cuda=cuda,
        torch=torch,
    )
    try:
        text = json.dumps(reference.to_dict(), indent=2, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"results for {name!r} cannot be stored as JSON ({exc}); use dicts, lists, "
            "strings and finite numbers only"
        ) from exc
    folder = reference_dir(directory)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{name}.json"
    handle, temp_name = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text + "\n")
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temp_name, target)
    except BaseException:
        try:
            os.unlink(temp_name)
        except FileNotFoundError:
            pass
        raise
    return target


def check_writable(directory: str | os.PathLike[str] | None = None) -> Path:
    """The recordings folder, after making sure a recording can be written there.

    ``--record`` checks this before it measures anything: finding out after a
    ten-minute GPU run that site-packages is read-only would waste the run.
    Raises ValueError naming the folder and the fix (``LABKIT_REFERENCE_DIR``).
    """
    folder = reference_dir(directory)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle, temp_name = tempfile.mkstemp(
            dir=folder, prefix=".labkit-write-test.", suffix=".tmp"
        )
        os.close(handle)
        os.unlink(temp_name)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ValueError(
            f"--record cannot write recordings to {folder} ({reason}); set {ENV_VAR} to a "
            "writable directory (e.g. LABKIT_REFERENCE_DIR=$HOME/labkit-reference)"
        ) from exc
    return folder


def load(name: str, directory: str | os.PathLike[str] | None = None) -> Reference | None:
    """The recording called ``name``, or None when none has been made.

    A file that exists but cannot be read as a recording raises ValueError
    naming the file, since silently ignoring it would hide a broken install.
    """
    check_name(name)
    path = reference_dir(directory) / f"{name}.json"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or not isinstance(data.get("results"), dict):
            raise ValueError("expected a JSON object with a 'results' object")
        for key in ("gpu", "recorded", "labkit_version"):
            if not isinstance(data.get(key), str):
                raise ValueError(f"field {key!r} is missing or not a string")
        return Reference(
            name=name,
            gpu=data["gpu"],
            recorded=data["recorded"],
            labkit_version=data["labkit_version"],
            results=data["results"],
            driver=_optional_str(data.get("driver")),
            cuda=_optional_str(data.get("cuda")),
            torch=_optional_str(data.get("torch")),
            path=path,
        )
    except ValueError as exc:
        raise ValueError(
            f"{path} is not a valid labkit recording ({exc}). Delete it, or make it again "
            f"on a GPU machine with: {record_command(name)}"
        ) from exc


def _optional_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def available(directory: str | os.PathLike[str] | None = None) -> list[str]:
    """Names of the recordings present, sorted."""
    folder = reference_dir(directory)
    if not folder.is_dir():
        return []
    return sorted(p.stem for p in folder.glob("*.json") if _NAME.fullmatch(p.stem))


def describe(reference: Reference) -> str:
    """A one-line provenance label: "recorded on NVIDIA H200 on 2026-11-30"."""
    return f"recorded on {reference.gpu} on {reference.recorded}"


def format_reference(reference: Reference) -> str:
    """The recording as text for a notebook: a provenance line, then the summary lines.

    Recordings without ``results["summary"]`` print their top-level results
    as ``key: value`` lines, sorted by key, so the text is the same everywhere.
    """
    head = f"Result {describe(reference)} (labkit {reference.labkit_version}):"
    summary = reference.results.get("summary")
    if isinstance(summary, list) and all(isinstance(line, str) for line in summary):
        body = summary
    else:
        body = [
            f"{key}: {json.dumps(value, sort_keys=True)}"
            for key, value in sorted(reference.results.items())
        ]
    return "\n".join([head, *(f"  {line}" for line in body)])


# --------------------------------------------------------------------------- the GPU a recording came from


def gpu_identity() -> dict[str, Any]:
    """The GPU's name and the driver, CUDA and torch versions, for a recording's label."""
    torch = import_optional("torch", "recording the GPU result")
    identity: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda": None,
        "driver": _driver_version(),
    }
    if torch.cuda.is_available():
        identity["gpu_name"] = torch.cuda.get_device_name(0)
        identity["cuda"] = torch.version.cuda or getattr(torch.version, "hip", None)
    else:
        identity["gpu_name"] = _cupy_device_name(import_optional("cupy", "recording"))
    return identity


def _cupy_device_name(cupy: Any) -> str:
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def _driver_version() -> str | None:
    """The NVIDIA driver version from nvidia-smi, or None when it cannot be read."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    first = out.strip().splitlines()[0].strip() if out.strip() else ""
    return first or None

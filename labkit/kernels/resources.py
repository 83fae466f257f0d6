"""What the CUDA compiler says each kernel needs: registers, shared memory, spills.

Occupancy (how many threads an SM keeps in flight, :mod:`labkit.kernels.occupancy`)
follows from three numbers per kernel that only the compiler knows: the
registers each thread uses, the static shared memory each block uses, and
whether registers spilled to (slow, off-chip) local memory. ``nvcc
--resource-usage`` prints them for every kernel; compiling needs no GPU, so
this lesson works on any machine with a CUDA compiler, and the numbers are
deterministic for a given nvcc version (the tables print it).

:func:`find_compiler` looks for ``nvcc`` on PATH, then under ``$CUDA_HOME``
/ ``$CUDA_PATH`` and /usr/local/cuda, then in the pip wheels. Where there is
none, :class:`CompilerNotFound` says in one message how to get one, so a
notebook can print it instead of a traceback.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labkit.core.validate import check_int, check_real

#: The course's kernel sources (labkit/kernels/<name>.cu), used when
#: labkit.kernels.sources cannot say (it lists them in the notebook's order).
COURSE_SOURCES: tuple[str, ...] = (
    "strided_copy",
    "transpose",
    "transpose_nosync",
    "sgemm",
    "reduce",
)

#: The architectures :func:`resources_table` compiles for by default (A100, H100/H200).
TABLE_ARCHES: tuple[str, ...] = ("sm_80", "sm_90")

#: Where an nvcc from the pip wheels lands, relative to site-packages. The CUDA 13
#: wheels (``pip install "cuda-toolkit[nvcc]"``) put it in nvidia/cu13/bin; the
#: CUDA 12 wheel ``nvidia-cuda-nvcc-cu12`` ships only ptxas, not nvcc.
WHEEL_NVCC: tuple[str, ...] = (
    "nvidia/cu13/bin/nvcc",
    "nvidia/cu12/bin/nvcc",
    "nvidia/cuda_nvcc/bin/nvcc",
)

#: Toolkit folders tried after PATH and $CUDA_HOME / $CUDA_PATH.
TOOLKIT_DIRS: tuple[str, ...] = ("/usr/local/cuda",)

INSTALL_HINT = (
    'pip install "cuda-toolkit[nvcc]" (CUDA 13\'s nvcc, ptxas and headers as wheels, about '
    "320 MB; nvcc also needs a host C++ compiler such as g++), or install NVIDIA's CUDA "
    "toolkit. The wheel nvidia-cuda-nvcc-cu12 alone is not enough: it holds ptxas but no nvcc."
)

_ARCH = re.compile(r"^sm_(\d{2,3})[af]?$")
_IDENT = re.compile(r"^[A-Za-z_]\w*$")
_DEFINE_VALUE = re.compile(r"^[\w.+\-]+$")


class CompilerNotFound(RuntimeError):
    """No nvcc here; ``str()`` of it is one paragraph saying how to get one."""

    def __init__(self) -> None:
        super().__init__(
            "No CUDA compiler (nvcc) found: looked on PATH, in $CUDA_HOME/bin, $CUDA_PATH/bin "
            "and /usr/local/cuda/bin, and for the pip wheels. Install one with: " + INSTALL_HINT
        )


class CompileError(RuntimeError):
    """nvcc rejected the source (or the architecture); the message holds nvcc's own lines."""


@dataclass(frozen=True)
class KernelResources:
    """One kernel's resource use, as ptxas reports it for one architecture.

    ``registers_per_thread`` and ``shared_bytes`` (static ``__shared__`` per
    block) decide occupancy. ``spill_stores_bytes`` / ``spill_loads_bytes``
    are registers that did not fit and went to local memory (per thread),
    ``stack_bytes`` the per-thread stack frame (local arrays, spills).
    ``constant_bytes`` adds up the constant banks ptxas lists for the kernel
    (ptxas for sm_90 lists none). ``barriers`` is None where ptxas does not
    report it. ``name`` is the kernel's name without C++ mangling;
    ``symbol`` is its name in the binary.
    """

    name: str
    symbol: str
    arch: str
    registers_per_thread: int
    shared_bytes: int
    constant_bytes: int
    stack_bytes: int
    spill_stores_bytes: int
    spill_loads_bytes: int
    barriers: int | None
    source: str = "<source>"
    defines: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def spills(self) -> bool:
        return self.spill_stores_bytes > 0 or self.spill_loads_bytes > 0

    def __str__(self) -> str:
        spills = (
            f"spills {self.spill_stores_bytes:,} B stored / {self.spill_loads_bytes:,} B loaded"
            if self.spills
            else "no spills"
        )
        return (
            f"{self.name} ({self.arch}): {self.registers_per_thread} registers/thread, "
            f"{self.shared_bytes:,} B shared memory/block, {spills}"
        )


@dataclass(frozen=True)
class ResourcesTable:
    """The resource use of several kernels on several architectures (``str()`` prints the table)."""

    rows: tuple[KernelResources, ...]
    arches: tuple[str, ...]
    nvcc_version: str
    missing: tuple[str, ...] = ()
    defines: dict[str, str] = field(default_factory=dict)

    def get(self, kernel: str, arch: str) -> KernelResources:
        """The row of ``kernel`` compiled for ``arch``."""
        for row in self.rows:
            if row.name == kernel and row.arch == arch:
                return row
        names = sorted({r.name for r in self.rows})
        raise KeyError(
            f"no row for kernel {kernel!r} at {arch!r}; kernels: {', '.join(names)}; "
            f"arches: {', '.join(self.arches)}"
        )

    @property
    def kernels(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.name for r in self.rows))

    def __str__(self) -> str:
        defs = ", ".join(f"{k}={v}" for k, v in self.defines.items())
        lines = [
            f"Resource use per kernel, from nvcc {self.nvcc_version} --resource-usage"
            + (f" with {defs}" if defs else "")
            + " (per thread: registers, stack, spills; per block: shared memory)",
            f"{'kernel':<24}{'arch':<7}{'registers':>10}{'shared B':>10}{'stack B':>9}"
            f"{'spill st/ld B':>15}{'barriers':>10}",
        ]
        for r in self.rows:
            spills = f"{r.spill_stores_bytes}/{r.spill_loads_bytes}"
            bars = "—" if r.barriers is None else str(r.barriers)
            lines.append(
                f"{r.name:<24}{r.arch:<7}{r.registers_per_thread:>10}{r.shared_bytes:>10,}"
                f"{r.stack_bytes:>9,}{spills:>15}{bars:>10}"
            )
        if self.missing:
            lines.append(f"Not found (not compiled): {', '.join(self.missing)}")
        return "\n".join(lines)


# --------------------------------------------------------------------------- the compiler


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_compiler() -> str | None:
    """The path of an nvcc to use, or None.

    Tried in order: ``nvcc`` on PATH; ``$CUDA_HOME/bin/nvcc`` and
    ``$CUDA_PATH/bin/nvcc``; /usr/local/cuda/bin/nvcc; the nvcc of the pip
    wheels (``nvidia/cu13/bin/nvcc`` in a site-packages folder on sys.path).
    """
    found = shutil.which("nvcc")
    if found:
        return found
    candidates = [
        Path(os.environ[v]) / "bin" / "nvcc"
        for v in ("CUDA_HOME", "CUDA_PATH")
        if os.environ.get(v)
    ]
    candidates += [Path(d) / "bin" / "nvcc" for d in TOOLKIT_DIRS]
    for entry in sys.path:
        if entry and Path(entry).is_dir():
            candidates += [Path(entry) / rel for rel in WHEEL_NVCC]
    return next((str(c) for c in candidates if _executable(c)), None)


def _require_compiler(nvcc: str | None) -> str:
    if nvcc is not None:
        if not _executable(Path(nvcc)):
            raise ValueError(f"nvcc must be the path of an nvcc executable, got {nvcc!r}")
        return nvcc
    found = find_compiler()
    if found is None:
        raise CompilerNotFound()
    return found


@functools.lru_cache(maxsize=8)
def _version_of(nvcc: str) -> str:
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CompileError(f"{nvcc} --version failed: {exc}") from exc
    match = re.search(r"release [\d.]+, V([\d.]+)", out.stdout)
    if match is None:
        raise CompileError(f"could not read the version from {nvcc} --version:\n{out.stdout}")
    return match.group(1)


def compiler_version(nvcc: str | None = None) -> str:
    """The version of ``nvcc`` (found with :func:`find_compiler` when None), e.g. "13.0.88"."""
    return _version_of(_require_compiler(nvcc))


# --------------------------------------------------------------------------- arguments


def check_arch(arch: str) -> str:
    """``arch`` if it names a real-GPU architecture ("sm_80", "sm_90a"), else a clear error."""
    if not _ARCH.match(arch):
        raise ValueError(
            f"arch must look like 'sm_XX' (for example sm_80 for an A100, sm_90 for an H100), "
            f"got {arch!r}"
        )
    return arch


def _check_defines(defines: Mapping[str, int | str] | None) -> dict[str, str]:
    if defines is None:
        return {}
    out: dict[str, str] = {}
    for key, value in defines.items():
        if not _IDENT.match(str(key)):
            raise ValueError(f"defines keys must be C macro names, got {key!r}")
        text = str(value)
        if not _DEFINE_VALUE.match(text):
            raise ValueError(f"defines[{key!r}] must be a number or a plain word, got {value!r}")
        out[key] = text
    return out


def _source(source_or_path: str | Path) -> tuple[str | None, Path | None, str]:
    """(source text, or None) and (path, or None), and a label for the rows."""
    if isinstance(source_or_path, Path):
        if not source_or_path.is_file():
            raise ValueError(f"source_or_path: no such file {str(source_or_path)!r}")
        return None, source_or_path, source_or_path.name
    if not source_or_path.strip():
        raise ValueError("source_or_path is empty: pass CUDA source text or a .cu file's path")
    if "__global__" in source_or_path or "\n" in source_or_path:
        return source_or_path, None, "<source>"
    path = Path(source_or_path)
    if path.is_file():
        return None, path, path.name
    raise ValueError(
        f"source_or_path must be CUDA source text (with a __global__ kernel) or the path of a "
        f".cu file; {source_or_path!r} is neither"
    )


# --------------------------------------------------------------------------- parsing

_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(.*)$")


def _short_name(symbol: str) -> str:
    """A C++-mangled symbol's qualified name without its parameters (extern "C" names unchanged)."""
    if not symbol.startswith("_Z"):
        return symbol
    rest = symbol[2:]
    nested = rest.startswith("N")
    rest = rest[1:] if nested else rest
    parts = []
    while (m := re.match(r"(\d+)", rest)) is not None:
        length = int(m.group(1))
        start = len(m.group(1))
        parts.append(rest[start : start + length])
        rest = rest[start + length :]
        if not nested:
            break
    return "::".join(parts) if parts else symbol


def parse_resource_usage(
    text: str, *, source: str = "<source>", defines: Mapping[str, str] | None = None
) -> list[KernelResources]:
    """The kernels in ptxas's ``--resource-usage`` / ``-Xptxas -v`` output, in the order given.

    Only entry functions (kernels) are returned; device functions compiled
    separately have properties but no "Compiling entry function" line.
    """
    rows: list[KernelResources] = []
    current: dict[str, Any] | None = None
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            current = {"symbol": m.group(1), "arch": m.group(2), "frame": (0, 0, 0)}
            continue
        if current is None:
            continue
        if (m := _PROPS.search(line)) and m.group(1) != current["symbol"]:
            current = None  # properties of a device function, not of this kernel
            continue
        if m := _FRAME.search(line):
            current["frame"] = tuple(int(g) for g in m.groups())
            continue
        if m := _USED.search(line):
            extras = m.group(2)
            smem = re.search(r"(\d+) bytes smem", extras)
            bars = re.search(r"used (\d+) barriers", extras)
            cmem = sum(int(x) for x in re.findall(r"(\d+) bytes cmem\[\d+\]", extras))
            stack, stores, loads = current["frame"]
            rows.append(
                KernelResources(
                    name=_short_name(current["symbol"]),
                    symbol=current["symbol"],
                    arch=current["arch"],
                    registers_per_thread=int(m.group(1)),
                    shared_bytes=int(smem.group(1)) if smem else 0,
                    constant_bytes=cmem,
                    stack_bytes=stack,
                    spill_stores_bytes=stores,
                    spill_loads_bytes=loads,
                    barriers=int(bars.group(1)) if bars else None,
                    source=source,
                    defines=dict(defines or {}),
                )
            )
            current = None
    return rows


def _source_order(rows: list[KernelResources], text: str) -> list[KernelResources]:
    """Rows in the order their kernels are defined in the source (ptxas lists them backwards)."""

    def position(row: KernelResources) -> int:
        m = re.search(rf"\b{re.escape(row.name.split('::')[-1])}\s*\(", text)
        return m.start() if m else len(text)

    return sorted(rows, key=position)


# --------------------------------------------------------------------------- compiling


def compile_resources(
    source_or_path: str | Path,
    *,
    arch: str = "sm_90",
    defines: Mapping[str, int | str] | None = None,
    max_registers: int | None = None,
    timeout_s: float = 120.0,
    nvcc: str | None = None,
) -> list[KernelResources]:
    """Compile CUDA source for ``arch`` and return each kernel's registers, shared memory and spills.

    Runs ``nvcc -cubin -arch=ARCH --resource-usage`` in a temporary folder
    (no GPU needed) and parses what ptxas prints. ``source_or_path`` is CUDA
    source text or the path of a .cu file (a ``str`` with ``__global__`` or a
    newline is taken as source). ``defines`` become ``-DNAME=VALUE`` (the
    course sources read TILE_DIM and friends that way). ``max_registers``
    passes ``-maxrregcount``: cap the registers and watch spills appear.

    Raises :class:`CompilerNotFound` without an nvcc and :class:`CompileError`
    when nvcc rejects the source or the architecture.
    """
    arch = check_arch(arch)
    defs = _check_defines(defines)
    if max_registers is not None:
        max_registers = check_int("max_registers", max_registers, minimum=16, maximum=255)
    timeout_s = check_real("timeout_s", timeout_s, low=0, low_open=True)
    text, path, label = _source(source_or_path)
    compiler = _require_compiler(nvcc)
    with tempfile.TemporaryDirectory(prefix="labkit-nvcc-") as tmp:
        if path is None:
            path = Path(tmp) / "kernels.cu"
            path.write_text(text or "", encoding="utf-8")
        else:
            text = path.read_text(encoding="utf-8", errors="replace")
        cmd = [
            compiler,
            "-cubin",
            f"-arch={arch}",
            "--resource-usage",
            f"-I{path.resolve().parent}",
            *(f"-D{k}={v}" for k, v in defs.items()),
        ]
        if max_registers is not None:
            cmd.append(f"-maxrregcount={int(max_registers)}")
        cmd += ["-o", str(Path(tmp) / "out.cubin"), str(path.resolve())]
        try:
            done = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise CompileError(f"nvcc did not finish within timeout_s={timeout_s:g} s") from exc
    output = done.stdout + done.stderr
    if done.returncode != 0:
        if text is not None and label == "<source>":  # name the text, not the temporary file
            output = output.replace(str(Path(tmp) / "kernels.cu"), label)
        errors = [
            ln for ln in output.splitlines() if "error" in ln.lower() or "fatal" in ln.lower()
        ]
        shown = "\n".join((errors or output.splitlines())[:12])
        raise CompileError(f"nvcc failed on {label} for {arch} (exit {done.returncode}):\n{shown}")
    return _source_order(parse_resource_usage(output, source=label, defines=defs), text or "")


def course_sources() -> tuple[Path, ...]:
    """The course's .cu files in the notebook's order (those that exist may be fewer)."""
    try:
        from labkit.kernels.sources import KERNELS

        stems = tuple(dict.fromkeys(spec.file.removesuffix(".cu") for spec in KERNELS.values()))
    except ImportError:  # pragma: no cover - sources.py ships with labkit
        stems = COURSE_SOURCES
    return tuple(Path(__file__).with_name(f"{stem}.cu") for stem in stems)


def resources_table(
    arches: Sequence[str] = TABLE_ARCHES,
    *,
    sources: Iterable[str | Path] | None = None,
    defines: Mapping[str, int | str] | None = None,
    timeout_s: float = 120.0,
    nvcc: str | None = None,
) -> ResourcesTable:
    """Every course kernel compiled for each of ``arches``: the table notebook 07 prints.

    ``sources`` defaults to the course's .cu files (a missing one is listed
    under "Not found" rather than failing the table); pass paths or source
    text to tabulate others. The nvcc version is part of the table, because
    register counts change between compiler versions.
    """
    if not arches:
        raise ValueError(
            f"arches must be a non-empty list such as ['sm_80', 'sm_90'], got {arches!r}"
        )
    try:
        arch_list = tuple(check_arch(a) for a in arches)
    except ValueError as exc:
        raise ValueError(f"arches: {exc}") from None
    defs = _check_defines(defines)
    compiler = _require_compiler(nvcc)
    missing: list[str] = []
    if sources is None:
        items: list[str | Path] = []
        for path in course_sources():
            (items.append(path) if path.is_file() else missing.append(path.name))
    else:
        items = list(sources)
        if not items:
            raise ValueError("sources must name at least one source, or be None for the course's")
    rows: list[KernelResources] = []
    for item in items:
        per_arch = [
            compile_resources(item, arch=a, defines=defs, timeout_s=timeout_s, nvcc=compiler)
            for a in arch_list
        ]
        for kernel_rows in zip(*per_arch, strict=True):  # kernel by kernel, each on every arch
            rows.extend(kernel_rows)
    return ResourcesTable(tuple(rows), arch_list, _version_of(compiler), tuple(missing), defs)

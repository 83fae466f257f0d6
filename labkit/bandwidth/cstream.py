"""The compiled C reference for ``labkit bench bandwidth``: build ``native/stream.c``, drive it.

A bandwidth probe written in Python (through torch) could be slow for reasons
that have nothing to do with memory: a missing thread, a two-pass kernel, a
temporary. The honest check is a loop compiled for this very machine
(``-O3 -march=native -fopenmp``), on arrays of the same size, measured in the
same run. The C source ships inside the package; it is compiled into a
temporary directory with whatever C compiler is on PATH and run as a
subprocess (its own OpenMP runtime stays out of torch's process). It answers
commands on stdin with JSON lines, so the benchmark can alternate between
labkit's probes and the C loops a few calls at a time.

Without a compiler, or if compiling fails with every flag set, the reference
is skipped with a note that says how to get one; nothing else breaks.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from importlib import resources
from pathlib import Path
from types import TracebackType
from typing import Any

#: Compilers tried, in order (after ``$CC``), and flag sets, best first.
COMPILERS = ("cc", "gcc", "clang")
FLAG_SETS: tuple[tuple[str, ...], ...] = (
    ("-O3", "-march=native", "-fopenmp"),
    ("-O3", "-fopenmp"),
    ("-O3", "-march=native"),
    ("-O3",),
)
#: GCC's switch that keeps a copy loop from being replaced by a ``memcpy`` call
#: (loop distribution into library calls, on by default at -O2 and above): added
#: to each flag set first, dropped where the compiler refuses it.
NO_LOOP_TO_MEMCPY = "-fno-tree-loop-distribute-patterns"
#: What the C program can run, and how many float64 arrays each kernel touches (STREAM).
KERNELS: dict[str, int] = {"copy": 2, "triad": 3, "memcpy": 2}
#: What each C kernel does, for tables.
DESCRIPTIONS: dict[str, str] = {
    "copy": "C loop c[i] = a[i]",
    "triad": "C loop b[i] = a[i] + s*c[i]",
    "memcpy": "C memcpy, one chunk per thread",
}
NO_COMPILER_NOTE = (
    "no C compiler (cc, gcc or clang) on PATH, so there is no C reference; install one "
    "(e.g. apt-get install gcc, or xcode-select --install on macOS) to compare against "
    "compiled code"
)


class CStreamError(RuntimeError):
    """The C reference could not be built or run; the message says why."""


def find_compiler() -> str | None:
    """The first of ``$CC``, cc, gcc, clang found on PATH, or None."""
    names = [os.environ["CC"]] if os.environ.get("CC", "").strip() else []
    for name in [*names, *COMPILERS]:
        path = shutil.which(name)
        if path:
            return path
    return None


def c_source() -> str:
    """The C source shipped inside the package (``labkit/native/stream.c``)."""
    return (resources.files("labkit") / "native" / "stream.c").read_text(encoding="utf-8")


def compile_stream(workdir: Path, compiler: str) -> tuple[Path, tuple[str, ...]]:
    """Compile stream.c in ``workdir`` with the first flag set that works: (executable, flags).

    ``-march=native`` or ``-fopenmp`` are missing on some compilers (Apple's
    clang has no OpenMP), so each fallback drops one. Each set is tried
    first with :data:`NO_LOOP_TO_MEMCPY`, so that GCC keeps the copy loop a
    loop with ordinary stores (a ``memcpy`` may use non-temporal ones); the
    returned flags show whether it was accepted. Raises
    :class:`CStreamError` with the compiler's last message when none works.
    """
    source = Path(workdir) / "stream.c"
    source.write_text(c_source(), encoding="utf-8")
    exe = Path(workdir) / "stream"
    last = "no flag set was tried"
    tries = [f for flags in FLAG_SETS for f in ((*flags, NO_LOOP_TO_MEMCPY), flags)]
    for flags in tries:
        try:
            done = subprocess.run(
                [compiler, *flags, str(source), "-o", str(exe)],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            last = str(exc)
            continue
        if done.returncode == 0 and exe.exists():
            return exe, flags
        output = (done.stderr or done.stdout).strip().splitlines()
        last = output[-1] if output else f"exit code {done.returncode}"
    raise CStreamError(f"{Path(compiler).name} could not compile stream.c: {last}")


class CStream:
    """The running C program: three arrays of ``n_elements`` float64, kernels on request.

    Use as a context manager; leaving it sends ``quit`` and reads whether the
    C program's results were correct (:attr:`valid`).
    """

    def __init__(self, exe: Path, n_elements: int, *, timeout_s: float = 600.0) -> None:
        from labkit.core.validate import check_positive_int, check_real

        n_elements = check_positive_int("n_elements", n_elements)
        self.timeout_s = check_real("timeout_s", timeout_s, low=0, low_open=True)
        self.valid: bool | None = None
        try:
            self._proc = subprocess.Popen(
                [str(exe), str(int(n_elements))],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                bufsize=1,
            )
        except OSError as exc:
            raise CStreamError(f"the C reference could not start: {exc}") from exc
        ready = self._read()
        if not ready.get("ready"):
            self._proc.kill()
            raise CStreamError(f"the C reference did not start: {ready}")
        self.n_elements = int(ready["n_elements"])
        self.threads = int(ready.get("threads") or 1)
        self.openmp = bool(ready.get("openmp"))

    def _read(self) -> dict[str, Any]:
        line = self._proc.stdout.readline() if self._proc.stdout else ""
        if not line:
            self._proc.kill()
            _, err = self._proc.communicate(timeout=self.timeout_s)
            why = (err or "").strip() or f"exit code {self._proc.returncode}"
            raise CStreamError(f"the C reference stopped: {why}")
        try:
            return json.loads(line)
        except ValueError as exc:
            raise CStreamError(f"the C reference printed something unexpected: {line!r}") from exc

    def run(self, kernel: str, reps: int) -> list[float]:
        """Run ``kernel`` ``reps`` times back to back; the time of each run in ms."""
        from labkit.core.validate import check_positive_int

        if not isinstance(kernel, str) or kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {', '.join(KERNELS)}, got {kernel!r}")
        reps = check_positive_int("reps", reps)
        stdin = self._proc.stdin  # opened with stdin=PIPE, so never None
        try:
            if stdin is None:
                raise OSError("the C reference has no stdin")
            stdin.write(f"{kernel} {reps}\n")
            stdin.flush()
        except OSError as exc:  # it has exited: report why
            self._proc.kill()
            _, err = self._proc.communicate(timeout=self.timeout_s)
            why = (err or "").strip() or f"exit code {self._proc.returncode}"
            raise CStreamError(f"the C reference stopped: {why}") from exc
        answer = self._read()
        if answer.get("kernel") != kernel:
            raise CStreamError(f"the C reference answered {answer} to {kernel!r}")
        return [float(ms) for ms in answer["ms"]]

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                stdin = self._proc.stdin
                if stdin is not None:
                    stdin.write("quit\n")
                    stdin.flush()
                self.valid = bool(self._read().get("valid"))
                self._proc.wait(timeout=self.timeout_s)
            except (OSError, CStreamError, ValueError, subprocess.SubprocessError):
                self._proc.kill()
                self._proc.wait()

    def __enter__(self) -> CStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

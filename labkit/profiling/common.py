"""Output folders, the stderr capture and the interval union that the profiling modules share."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any


def output_dir(path: Any, *, name: str, prefix: str) -> Path:
    """The folder a profiler writes to: ``path``, created if needed, or a new temporary folder.

    The default is a fresh ``tempfile.mkdtemp()`` folder, never the working
    directory: a notebook runs inside the course folder, and a profile written
    there would end up in the learner's git status (or in a commit).
    """
    if path is None:
        return Path(tempfile.mkdtemp(prefix=prefix))
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{name}={str(folder)!r} exists and is not a folder")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@contextlib.contextmanager
def captured_output_fds(lines: list[str]) -> Iterator[None]:
    """Send file descriptors 1 and 2 to a temporary file for the block; keep what they got.

    The profilers' C++ layers (Kineto, CUPTI, TensorFlow's tracer) write
    "profiler_start"-style notices straight to the process's stderr, with a
    timestamp in each line. In a notebook those land in the cell output and
    make it differ on every run; on stdout they would also corrupt the JSON
    that ``labkit bench ... --json`` prints. They are kept (appended to
    ``lines``, and from there in each result's ``profiler_messages``) rather
    than thrown away, so a failure such as "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES"
    can still be read. Python exceptions are not affected; Python-level
    writes to ``sys.stdout`` / ``sys.stderr`` in the block are flushed into
    the file too where those streams are the real descriptors (a terminal,
    not Jupyter, whose streams are its own).
    """
    try:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        saved = [os.dup(1), os.dup(2)]
    except (OSError, ValueError, AttributeError):  # no real fds (some embedded interpreters)
        yield
        return
    with tempfile.TemporaryFile() as sink:
        try:
            os.dup2(sink.fileno(), 1)
            os.dup2(sink.fileno(), 2)
            yield
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(OSError, ValueError, AttributeError):
                    stream.flush()
            for fd, copy in zip((1, 2), saved, strict=True):
                os.dup2(copy, fd)
                os.close(copy)
            sink.seek(0)
            text = sink.read().decode("utf-8", errors="replace")
            lines.extend(line for line in text.splitlines() if line.strip())


def union_ms(intervals: Sequence[tuple[float, float]]) -> float:
    """Total length covered by at least one (start, end) interval: their union, not their sum."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total

"""Read a Chrome/Perfetto trace file back: proof that the profiler wrote a real timeline.

``torch.profiler`` exports its timeline in the Chrome trace event format: a
JSON object whose ``traceEvents`` list holds one record per operator, kernel,
copy or annotation (``"ph": "X"`` complete events with a start ``ts`` and a
duration ``dur``, both in microseconds). https://ui.perfetto.dev opens it as
is (so does chrome://tracing, the legacy Catapult viewer that Perfetto replaces). :func:`summarize_trace` reads such a file with
nothing but the standard library and counts what is in it, so a notebook can
show that the file exists, parses and holds the run, before a learner opens it
in a viewer. The same reader feeds :func:`labkit.profiling.find_sync_points`
and the per-phase times of :func:`labkit.profiling.profile_training`.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labkit.core.results import JsonRecord
from labkit.core.units import format_bytes, format_duration
from labkit.core.validate import check_int
from labkit.profiling.common import union_ms

#: Where a learner opens the file (both read the Chrome trace format; Perfetto also reads .gz).
VIEWERS = "https://ui.perfetto.dev"

#: Categories of events that ran on the device (a GPU), as torch's Kineto names them.
DEVICE_CATEGORIES: tuple[str, ...] = ("kernel", "gpu_memcpy", "gpu_memset")

_STEP = re.compile(r"^ProfilerStep#\d+$")


@dataclass(frozen=True)
class TraceEventStat(JsonRecord):
    """All complete events of one name and category: how many, and their summed duration."""

    name: str
    category: str
    count: int
    total_ms: float


@dataclass(frozen=True)
class TraceSummary(JsonRecord):
    """What a Chrome trace file holds: its size, its events by category, the longest events.

    ``categories`` counts every event by its ``cat`` field (``"(none)"`` for
    metadata events without one), sorted by name. ``top_events`` are the
    complete (``"X"``) events with the largest summed duration; their order
    can change from run to run, which is why ``print(summary)`` shows them
    only when ``top`` was above 0. ``steps`` counts the ``ProfilerStep#N``
    ranges, and ``device_events`` the kernels and copies that ran on a GPU
    (0 on a CPU run: there is no device timeline).
    """

    path: str
    size_bytes: int
    n_events: int
    categories: dict[str, int]
    top_events: tuple[TraceEventStat, ...]
    span_ms: float
    steps: int
    device_events: int
    device_busy_ms: float

    def __str__(self) -> str:
        lines = [
            f"Chrome trace {self.path}: {format_bytes(self.size_bytes)}, {self.n_events:,} events, "
            f"{self.steps} profiled steps (valid JSON; open it in {VIEWERS})",
            "  events by category:",
        ]
        width = max([len(c) for c in self.categories] + [8])
        lines += [f"    {cat:<{width}}  {n:>7,}" for cat, n in self.categories.items()]
        if self.device_events:
            lines.append(
                f"  device: {self.device_events:,} kernels and copies, busy "
                f"{format_duration(self.device_busy_ms)} of {format_duration(self.span_ms)}"
            )
        else:
            lines.append("  device: no kernels or copies (a CPU run has no device timeline)")
        if self.top_events:
            name_width = max(len(_short(e.name)) for e in self.top_events)
            lines.append("  longest events (summed duration):")
            for e in self.top_events:
                lines.append(
                    f"    {_short(e.name):<{name_width}}  {e.category:<16}  {e.count:>5} calls  "
                    f"{format_duration(e.total_ms):>9}"
                )
        return "\n".join(lines)


def _short(name: str, limit: int = 60) -> str:
    """Kernel names run to hundreds of characters (templates); tables show the start."""
    return name if len(name) <= limit else name[: limit - 1] + "…"


def read_trace(path: Any) -> dict[str, Any]:
    """The parsed JSON of a Chrome trace file (``.json`` or ``.json.gz``), as a dict.

    A bare JSON array of events (the format's older form) comes back as
    ``{"traceEvents": [...]}``. Raises FileNotFoundError for a missing file
    and ValueError, naming the file, for one that is not a trace.
    """
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"no trace file at {str(file)!r}")
    opener: Any = gzip.open if file.suffix == ".gz" else open
    try:
        with opener(file, "rt", encoding="utf-8") as handle:
            data = json.load(handle)
    except (json.JSONDecodeError, UnicodeDecodeError, OSError, EOFError) as exc:
        raise ValueError(f"{str(file)!r} is not a JSON trace file: {exc}") from exc
    if isinstance(data, list):
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise ValueError(
            f"{str(file)!r} is JSON but not a Chrome trace: it has no 'traceEvents' list"
        )
    return data


def complete_events(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``"ph": "X"`` events (those with a start and a duration), with numeric ts and dur."""
    events = []
    for event in data["traceEvents"]:
        if not isinstance(event, dict) or event.get("ph") != "X":
            continue
        ts, dur = event.get("ts"), event.get("dur")
        if isinstance(ts, (int, float)) and isinstance(dur, (int, float)):
            events.append(event)
    return events


def step_name(name: str) -> str:
    """``ProfilerStep#12`` -> ``ProfilerStep#*``, as torch's own tables group the steps."""
    return "ProfilerStep#*" if _STEP.match(name) else name


def device_intervals_ms(events: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """(start, end) in ms of every kernel, copy and memset that ran on a device."""
    return [
        (e["ts"] / 1e3, (e["ts"] + e["dur"]) / 1e3)
        for e in events
        if e.get("cat") in DEVICE_CATEGORIES
    ]


def summarize_trace(path: Any, top: int = 10) -> TraceSummary:
    """Read a Chrome trace file and count its events by category; ``top`` longest by name.

    Why: a profile is only useful if it can be opened. This checks that the
    file is complete JSON in the Chrome trace format (what Perfetto and
    chrome://tracing read), and says what it holds: how many operator,
    annotation and (on a GPU) kernel events, over how long. ``top=0`` leaves
    out the longest-events table, whose order may change between runs, so
    the printed summary is the same on every run of the same code.
    """
    top = check_int("top", top)
    file = Path(path)
    data = read_trace(file)
    raw = data["traceEvents"]
    categories = Counter(
        str(e.get("cat")) if isinstance(e, dict) and e.get("cat") else "(none)" for e in raw
    )
    events = complete_events(data)
    totals: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0])
    for e in events:
        key = (step_name(str(e.get("name", ""))), str(e.get("cat") or "(none)"))
        totals[key][0] += 1
        totals[key][1] += e["dur"] / 1e3
    ranked = sorted(totals.items(), key=lambda kv: (-kv[1][1], kv[0]))[:top]
    if events:
        span_ms = (max(e["ts"] + e["dur"] for e in events) - min(e["ts"] for e in events)) / 1e3
    else:
        span_ms = 0.0
    device = device_intervals_ms(events)
    return TraceSummary(
        path=str(file),
        size_bytes=file.stat().st_size,
        n_events=len(raw),
        categories=dict(sorted(categories.items())),
        top_events=tuple(
            TraceEventStat(name, cat, int(count), total) for (name, cat), (count, total) in ranked
        ),
        span_ms=span_ms,
        steps=sum(1 for e in events if _STEP.match(str(e.get("name", "")))),
        device_events=len(device),
        device_busy_ms=union_ms(device),
    )

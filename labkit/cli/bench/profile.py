"""``labkit bench profile``: profile the course CNN's training loop, with and without a per-step sync.

Notebook 09's lesson: a profiler shows where a training step's time goes,
and a ``loss.item()`` every step is a sync point that stalls a GPU pipeline.
On the best device this runs :func:`labkit.profiling.profile_training` twice
(loss kept on the device and read once; ``loss.item()`` every step), finds the
sync points in both traces (:func:`labkit.profiling.find_sync_points`), times
both loops without the profiler (:func:`labkit.profiling.time_sync_stall`),
and, where ``nsys`` is on the PATH of a GPU machine, runs
``nsys profile --stats=true`` on the same steps (best effort: a failure is
reported, never fatal).

``--record`` on a GPU machine stores the GPU run as the ``profile`` recording.
``--quick`` runs toy sizes: it checks that the command works (the tests use
it), and its numbers mean little.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from labkit.cli.bench.run import part_failed
from labkit.core.units import format_duration

#: The recording ``--record`` writes.
REFERENCE_NAME = "profile"

#: Sizes: on a GPU, 128 images of 128×128 px make a step of roughly a millisecond, long
#: enough that the host's per-step wait for ``.item()`` is visible, short enough to run fast.
SHAPE = {"steps": 5, "batch": 128, "image_size": 128, "stall_steps": 10}
QUICK_SHAPE = {"steps": 2, "batch": 8, "image_size": 16, "stall_steps": 3}

#: Best-effort ``nsys`` run: steps, and how long it may take before it is abandoned (the
#: whole benchmark must fit tools/gpu_checks.sh's 90 s for this step).
NSYS_STEPS = 20
NSYS_TIMEOUT_S = 45.0

COMMAND = "labkit bench profile"

_QUICK = "(--quick: toy sizes and tiny time budgets; the numbers mean little)"


@dataclass(frozen=True)
class ProfileResults:
    """Both profiles, their sync points, the timed loops and the nsys run (None where skipped)."""

    device: str
    shape: dict[str, int]
    sync_once: Any = None  # TorchProfile
    item_every_step: Any = None  # TorchProfile
    sync_points_once: Any = None  # SyncReport
    sync_points_item: Any = None  # SyncReport
    stall: Any = None  # SyncStallTiming
    nsys: Any = None  # NsysRun
    quick: bool = False
    failed: tuple[tuple[str, str], ...] = ()

    @property
    def on_gpu(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def complete(self) -> bool:
        """Both profiles and the timed loops were measured (what a recording needs)."""
        return None not in (self.sync_once, self.item_every_step, self.stall)

    def _shape_text(self) -> str:
        s = self.shape
        return f"labkit.models.cnn.CNN, batch {s['batch']} of 3×{s['image_size']}×{s['image_size']}"

    def summary(self) -> list[str]:
        dev = self.device
        lines = []
        if self.stall is not None:
            st = self.stall
            lines.append(
                f"{dev}: {st.steps} training steps ({self._shape_text()}): loss read once "
                f"{format_duration(st.ms_per_step_sync_once)} per step, loss.item() every step "
                f"{format_duration(st.ms_per_step_item)} per step ({st.ratio:.2f}× the time)"
            )
        for name, prof in (
            ("sync once", self.sync_once),
            (".item() every step", self.item_every_step),
        ):
            if prof is None:
                continue
            logging = prof.phase("logging")
            lines.append(
                f"{dev}: profile, {name}: host {format_duration(prof.median_step_ms)} per step; "
                f"{prof.totals_line()}; logging phase {format_duration(logging.cpu_ms_per_step)} "
                "of host time per step"
            )
        for name, report in (
            ("sync once", self.sync_points_once),
            (".item() every step", self.sync_points_item),
        ):
            if report is None:
                continue
            if not report:
                lines.append(f"{dev}: sync points, {name}: none")
                continue
            found = "; ".join(
                f"{p.name} in {p.phase} ×{p.calls} ({format_duration(p.host_ms)} on the host)"
                for p in report
            )
            lines.append(f"{dev}: sync points, {name}: {found}")
        if self.sync_once is not None:
            key = "self_device_ms" if self.sync_once.device_timeline else "self_cpu_ms"
            what = "self device time" if key == "self_device_ms" else "self CPU time"
            top = ", ".join(
                f"{_short(o.name)} {format_duration(getattr(o, key))}"
                for o in self.sync_once.top_ops(4, key)
            )
            lines.append(f"{dev}: top operators by {what} (sync once): {top}")
        if self.nsys is not None:
            lines.append(f"{dev}: {self.nsys.summary()[0]}")
        lines += [f"{dev}: {what}: not measured ({why})" for what, why in self.failed]
        if self.quick:
            lines.append(_QUICK)
        return lines

    def to_dict(self) -> dict[str, Any]:
        """The recording's schema, which the notebooks' GPU cells read: a view, not the fields."""

        def opt(value: Any, **kw: Any) -> Any:
            return None if value is None else value.to_dict(**kw)

        return {
            "device": self.device,
            "quick": self.quick,
            "shape": dict(self.shape),
            "profiles": {
                "sync_once": opt(self.sync_once, top=15),
                "item_every_step": opt(self.item_every_step, top=15),
            },
            "sync_points": {
                "sync_once": opt(self.sync_points_once),
                "item_every_step": opt(self.sync_points_item),
            },
            "stall": opt(self.stall),
            "nsys": opt(self.nsys),
            "failed": [{"what": w, "error": e} for w, e in self.failed],
        }

    def __str__(self) -> str:
        parts = []
        if self.stall is not None:
            parts.append(str(self.stall))
        for prof, report in (
            (self.sync_once, self.sync_points_once),
            (self.item_every_step, self.sync_points_item),
        ):
            if prof is not None:
                parts.append(str(prof))
            if report is not None:
                parts.append(str(report))
        if self.nsys is not None:
            parts.append(str(self.nsys))
        tail = [f"{what}: not measured ({why})" for what, why in self.failed]
        if self.quick:
            tail.append(_QUICK)
        if tail:
            parts.append("\n".join(tail))
        return "\n\n".join(parts)


def _short(name: str, limit: int = 50) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"


def measure(quick: bool = False) -> ProfileResults:
    """Profile, scan and time both loops on the best device; each part fails on its own."""
    from labkit.core.optional import import_optional
    from labkit.machine.report import pick_device
    from labkit.profiling import find_sync_points, profile_training, time_sync_stall

    torch = import_optional("torch", "labkit bench profile")
    dev = pick_device("torch")
    device = str(dev)
    shape = dict(QUICK_SHAPE if quick else SHAPE)
    size = {"batch": shape["batch"], "image_size": shape["image_size"], "device": device}
    budget = {"warmup_ms": 0.0, "rep_ms": 1.0, "min_reps": 1} if quick else {}
    parts: dict[str, Any] = {}
    failed: list[tuple[str, str]] = []

    def attempt(name: str, fn: Any, *args: Any, **kwargs: Any) -> None:
        try:
            parts[name] = fn(*args, **kwargs)
        except Exception as exc:  # one failing part must not lose the others
            failed.append((name.replace("_", " "), part_failed(COMMAND, name, exc)))
        if dev.type == "cuda":  # leave no queued work to the next part
            try:
                torch.cuda.synchronize()
            except Exception as exc:
                failed.append((f"{name.replace('_', ' ')} (sync)", part_failed(COMMAND, name, exc)))

    attempt("time_sync_stall", time_sync_stall, shape["stall_steps"], **size, **budget)
    attempt("profile_sync_once", profile_training, shape["steps"], **size)
    attempt(
        "profile_item_every_step", profile_training, shape["steps"], **size, sync_every_step=True
    )
    for key in ("sync_once", "item_every_step"):
        if f"profile_{key}" in parts:
            attempt(f"sync_points_{key}", find_sync_points, parts[f"profile_{key}"])
    nsys = None
    if dev.type == "cuda" and not quick:
        from labkit.profiling import find_nsight, run_nsys

        if find_nsight().nsys is not None:
            attempt(
                "nsys",
                run_nsys,
                steps=NSYS_STEPS,
                batch=shape["batch"],
                image_size=shape["image_size"],
                timeout_s=NSYS_TIMEOUT_S,
            )
            nsys = parts.get("nsys")
    return ProfileResults(
        device=device,
        shape=shape,
        sync_once=parts.get("profile_sync_once"),
        item_every_step=parts.get("profile_item_every_step"),
        sync_points_once=parts.get("sync_points_sync_once"),
        sync_points_item=parts.get("sync_points_item_every_step"),
        stall=parts.get("time_sync_stall"),
        nsys=nsys,
        quick=quick,
        failed=tuple(failed),
    )


def run_profile_benchmark(
    *, as_json: bool = False, record: bool = False, quick: bool = False
) -> int:
    """``labkit bench profile``; returns the exit code (same rules as the other recorders)."""
    from labkit.cli.bench.run import preflight, record_and_report

    early = preflight("labkit bench profile", record=record, quick=quick)
    if early is not None:
        return early
    results = measure(quick=quick)
    can_record = results.on_gpu and results.complete
    if record and not can_record:
        why = (
            f"the run was on {results.device}, not a CUDA GPU"
            if not results.on_gpu
            else "parts of it failed: " + "; ".join(f"{w}: {e}" for w, e in results.failed)
        )
        print(f"labkit bench profile --record: nothing was recorded ({why})", file=sys.stderr)
    return record_and_report(
        "profile", REFERENCE_NAME, results, as_json=as_json, record=record and can_record
    )

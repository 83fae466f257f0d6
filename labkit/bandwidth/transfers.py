"""Moving data to, from and within a GPU, and the copy-in → compute → copy-back pipeline.

The old picture of GPU computing ("copy the data in, compute, copy it back")
hides the numbers that decide whether a GPU helps: its own memory (HBM)
moves several TB/s, while the PCIe bus to the host moves a few tens of GB/s,
a hundred times less. This module measures each piece:

- :func:`device_copy`: a device-to-device copy against the card's
  theoretical peak, and against torch (timed with raw CUDA events) and CuPy;
- :func:`host_device_sweep`: host↔device bandwidth over sizes, from
  pageable and from pinned (page-locked) host memory, both directions;
- :func:`copy_compute_overlap`: N chunks copied and processed, serialized on
  one stream versus copies on a side stream overlapping the compute;
- :func:`labkit.bandwidth.pipeline.pipeline_breakdown`: the seed's pipeline, timed
  piece by piece (it also runs on the CPU).

Everything here needs a CUDA GPU and says so plainly without one. All timing goes through :func:`labkit.bench`, which uses
CUDA events on the GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from labkit.bandwidth.sizes import log_sizes
from labkit.bandwidth.stream import BandwidthResult, check_budget_ms, stream_kernel
from labkit.core.progress import progress
from labkit.core.results import JsonRecord
from labkit.core.units import format_bytes, format_gb_per_s
from labkit.core.validate import check_choice, check_choices, check_int, check_sizes
from labkit.machine import memory as _memory
from labkit.machine.memory import DEFAULT_FRACTION
from labkit.machine.report import CPU_OR_CUDA, resolve_device
from labkit.timing.bench import Timing, bench

DIRECTIONS = ("h2d", "d2h")
HOST_MEMORY = ("pageable", "pinned")


def require_cuda(device: str, what: str) -> str:
    device = resolve_device(device, kinds=CPU_OR_CUDA)
    if device == "cpu":
        raise ValueError(
            f"{what} needs a CUDA GPU, and device='cpu' was given. On a machine without a GPU, "
            "gate the cell with `if labkit.require_gpu(...)` to show the recorded result instead."
        )
    return device


def theoretical_peak_gb_per_s(device: str = "cuda") -> float | None:
    """The GPU memory's datasheet bandwidth: 2 × memory clock × bus width / 8.

    Read from torch's device properties, or from the CUDA driver
    (:mod:`labkit.machine.nvidia`) when torch does not expose the clock; None if
    neither knows it.
    """
    device = require_cuda(device, "theoretical_peak_gb_per_s")
    import torch

    from labkit.machine.nvidia import nvidia_info, theoretical_bandwidth_gb_per_s

    props = torch.cuda.get_device_properties(torch.device(device))
    peak = theoretical_bandwidth_gb_per_s(
        getattr(props, "memory_clock_rate", None), getattr(props, "memory_bus_width", None)
    )
    if peak:
        return peak
    index = int(device.split(":")[1])
    driver = [d for d in nvidia_info().devices if d.index == index]
    return driver[0].bandwidth_gb_per_s if driver else None


# --------------------------------------------------------------------------- device-to-device


@dataclass(frozen=True)
class DeviceCopy(JsonRecord):
    """A device-to-device copy: labkit's probe, independent references, and the datasheet.

    ``labkit`` is :func:`labkit.bandwidth.stream.stream_kernel` ("copy", torch
    ``a.copy_(b)`` timed by ``labkit.bench``). ``references`` are the same
    traffic measured other ways: torch timed with raw CUDA events and no
    labkit, CuPy's ``copyto`` kernel and CuPy's ``cudaMemcpyAsync``. Every
    copy is credited with 2 × the array (read + write), like STREAM and
    like the datasheet peak, which is the total of reads and writes together
    (the memory bus carries one or the other at a time).
    """

    labkit: BandwidthResult
    references: tuple[BandwidthResult, ...]
    peak_gb_per_s: float | None
    notes: tuple[str, ...] = ()

    json_extra = ("ratio_to_best", "fraction_of_peak")

    @property
    def best_reference(self) -> BandwidthResult | None:
        return max(self.references, key=lambda r: r.gb_per_s, default=None)

    @property
    def ratio_to_best(self) -> float | None:
        """labkit's GB/s over the best reference's."""
        best = self.best_reference
        return None if best is None else self.labkit.gb_per_s / best.gb_per_s

    @property
    def fraction_of_peak(self) -> float | None:
        """labkit's GB/s over the datasheet peak (0.8–0.95 is typical for HBM)."""
        return None if not self.peak_gb_per_s else self.labkit.gb_per_s / self.peak_gb_per_s


def _result(
    kernel: str,
    device: str,
    nbytes: int,
    traffic: int,
    timing: Timing,
    implementation: str,
    calls: int = 1,
    dtype: str = "uint8",
) -> BandwidthResult:
    itemsize = 8 if dtype == "float64" else 4 if dtype == "float32" else 1
    return BandwidthResult(
        kernel=kernel,
        device=device,
        dtype=dtype,
        n_elements=max(1, nbytes // itemsize),
        bytes_per_array=nbytes,
        bytes_per_call=traffic,
        calls_per_sample=calls,
        timing=timing,
        implementation=implementation,
    )


def _raw_event_copy(dst: Any, src: Any, reps: int, device: str) -> Timing:
    """torch ``dst.copy_(src)`` timed by hand with CUDA events: checks labkit's own timing."""
    import torch

    stream = torch.cuda.current_stream(torch.device(device))
    pairs = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(reps)
    ]
    for _ in range(3):  # warm-up
        dst.copy_(src)
    torch.cuda.synchronize(torch.device(device))
    for start, end in pairs:
        start.record(stream)
        dst.copy_(src)
        end.record(stream)
    torch.cuda.synchronize(torch.device(device))
    samples = tuple(start.elapsed_time(end) for start, end in pairs)
    return Timing(samples, label="torch copy_ (raw events)", device=device, method="device events")


def device_copy(
    bytes_per_array: int | None = None,
    device: str = "cuda",
    *,
    fraction: float = DEFAULT_FRACTION,
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
    min_reps: int = 5,
) -> DeviceCopy:
    """Device-to-device copy bandwidth by labkit and by references, with the datasheet peak.

    DRAM-sized by default (8 × L2, at least 1 GiB per array, shrunk to fit the
    GPU's free memory). CuPy references are skipped, with a note, when CuPy
    is missing or cannot run; CuPy works on the same buffers through DLPack,
    so it allocates nothing more.
    """
    if bytes_per_array is not None:
        check_int("bytes_per_array", bytes_per_array, minimum=8)
    _memory.check_fraction(fraction)
    check_budget_ms("warmup_ms", warmup_ms)
    check_budget_ms("rep_ms", rep_ms)
    check_int("min_reps", min_reps, minimum=1)
    import torch

    device = require_cuda(device, "device_copy")
    labkit_row = stream_kernel(
        "copy",
        bytes_per_array,
        device,
        fraction=fraction,
        warmup_ms=warmup_ms,
        rep_ms=rep_ms,
        min_reps=min_reps,
    )
    n = labkit_row.n_elements
    nbytes = labkit_row.bytes_per_array
    src = torch.full((n,), 2.0, dtype=torch.float64, device=device)
    dst = torch.zeros_like(src)
    reps = max(min_reps, labkit_row.timing.n)
    refs = [
        _result(
            "copy",
            device,
            nbytes,
            2 * nbytes,
            _raw_event_copy(dst, src, reps, device),
            "torch dst.copy_(src), raw CUDA events",
            dtype="float64",
        )
    ]
    notes: list[str] = []
    try:
        refs += _cupy_copies(dst, src, device, nbytes, warmup_ms, rep_ms, min_reps)
    except Exception as exc:  # CuPy missing or unable to run: the torch reference remains
        notes.append(f"CuPy references skipped: {str(exc).splitlines()[0] if str(exc) else exc!r}")
    return DeviceCopy(
        labkit=labkit_row,
        references=tuple(refs),
        peak_gb_per_s=theoretical_peak_gb_per_s(device),
        notes=tuple(notes),
    )


def _cupy_copies(
    dst: Any, src: Any, device: str, nbytes: int, warmup_ms: float, rep_ms: float, min_reps: int
) -> list[BandwidthResult]:
    import torch

    from labkit.core.optional import import_optional

    cupy = import_optional("cupy", "the CuPy copy references")
    if not cupy.is_available():
        raise RuntimeError("cupy.is_available() is False")
    index = int(device.split(":")[1])
    torch.cuda.synchronize(torch.device(device))  # torch's writes are done before CuPy reads
    rows = []
    with cupy.cuda.Device(index):
        a, b = cupy.from_dlpack(dst), cupy.from_dlpack(src)
        cases = [
            ("cupy.copyto(dst, src)", lambda: cupy.copyto(a, b)),
            (
                "cupy memcpy (cudaMemcpyAsync)",
                lambda: a.data.copy_from_device_async(b.data, nbytes),
            ),
        ]
        for label, fn in cases:
            timing = bench(
                fn,
                warmup_ms=warmup_ms,
                rep_ms=rep_ms,
                min_reps=min_reps,
                device=f"cupy:{index}",
                label=label,
                warn=False,
            )
            rows.append(_result("copy", device, nbytes, 2 * nbytes, timing, label, dtype="float64"))
        cupy.cuda.Device(index).synchronize()
    return rows


# --------------------------------------------------------------------------- host <-> device


@dataclass(frozen=True)
class TransferSweep(JsonRecord):
    """Host↔device bandwidth for each (direction, host memory, size); bytes counted once.

    ``out_of_memory`` is the line the sweep printed when an allocation failed
    and it stopped early ("" when none did); :attr:`largest_bytes` is then
    the largest size that fit.
    """

    rows: tuple[BandwidthResult, ...]
    device: str
    out_of_memory: str = ""

    @property
    def largest_bytes(self) -> int | None:
        """The largest transfer measured (None when nothing was)."""
        return max((r.bytes_per_array for r in self.rows), default=None)

    def rows_for(self, direction: str, host_memory: str) -> tuple[BandwidthResult, ...]:
        check_choice("direction", direction, DIRECTIONS)
        check_choice("host_memory", host_memory, HOST_MEMORY)
        return tuple(r for r in self.rows if r.kernel == f"{direction} {host_memory}")

    def peak(self, direction: str, host_memory: str) -> BandwidthResult:
        return max(self.rows_for(direction, host_memory), key=lambda r: r.gb_per_s)

    def table(self) -> str:
        kinds = sorted({r.kernel for r in self.rows})
        sizes = sorted({r.bytes_per_array for r in self.rows})
        lines = [["size", *kinds]]
        for size in sizes:
            cells = [format_bytes(size)]
            for kind in kinds:
                row = next(
                    (r for r in self.rows if r.kernel == kind and r.bytes_per_array == size), None
                )
                cells.append(format_gb_per_s(row.gb_per_s) if row else "-")
            lines.append(cells)
        widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
        return "\n".join(
            "  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)) for line in lines
        )


def host_device_sweep(
    sizes_bytes: Sequence[int] | None = None,
    device: str = "cuda",
    *,
    directions: Sequence[str] = DIRECTIONS,
    host_memory: Sequence[str] = HOST_MEMORY,
    fraction: float = DEFAULT_FRACTION,
    warmup_ms: float = 10.0,
    rep_ms: float = 40.0,
    show_progress: bool | None = None,
) -> TransferSweep:
    """Host→device ("h2d") and device→host ("d2h") GB/s over sizes, pageable vs pinned.

    Pageable memory is what ``torch.empty`` gives; the driver must first copy
    it into a pinned staging buffer, so it is slower and never asynchronous.
    Pinned memory (``pin_memory=True``) is DMA'd directly and allows
    ``non_blocking=True``. Default sizes: 64 KiB to 1 GiB, log-spaced,
    shrunk to fit both the host's and the GPU's budget.
    """
    directions = check_choices("directions", directions, DIRECTIONS)
    host_memory = check_choices("host_memory", host_memory, HOST_MEMORY)
    warmup_ms, rep_ms = check_budget_ms("warmup_ms", warmup_ms), check_budget_ms("rep_ms", rep_ms)
    if sizes_bytes is not None:
        check_sizes(sizes_bytes, "sizes_bytes")
    _memory.check_fraction(fraction)
    import torch

    device = require_cuda(device, "host_device_sweep")
    sizes = (
        log_sizes(64 * 1024, 1024**3, points_per_decade=3)
        if sizes_bytes is None
        else tuple(sizes_bytes)
    )
    name = None if sizes_bytes is None else "sizes_bytes"
    kept, dropped = _memory.fit_sizes(
        sizes, device="cpu", fraction=fraction, arrays=len(host_memory), name=name
    )
    kept, dropped_gpu = _memory.fit_sizes(
        kept, device=device, fraction=fraction, arrays=1, name=name
    )
    if not kept:
        _memory.require_fits(
            min(sizes),
            device="cpu",
            fraction=fraction,
            arrays=len(host_memory),
            what="host_device_sweep",
        )
        _memory.require_fits(min(sizes), device=device, fraction=fraction, what="host_device_sweep")
    if dropped or dropped_gpu:
        import warnings

        warnings.warn(
            f"host_device_sweep: skipped {len(dropped) + len(dropped_gpu)} size(s) above "
            f"{format_bytes(max(kept))} that do not fit {fraction:.0%} of the free memory.",
            _memory.MemoryBudgetWarning,
            stacklevel=2,
        )

    def allocate(top: int) -> tuple[Any, dict[str, Any]]:
        on_device = torch.empty(top, dtype=torch.uint8, device=device)
        hosts = {
            kind: torch.ones(top, dtype=torch.uint8, pin_memory=(kind == "pinned"))
            for kind in host_memory
        }
        return on_device, hosts

    # Another process can take GPU (or pinned host) memory after the budget was read:
    # an allocation that fails drops that size and the sweep goes on below it.
    (on_device, hosts), kept, failed = _memory.allocate_shrinking(
        kept, allocate, device=device, what="host_device_sweep"
    )
    points = [(size, d, m) for size in kept for d in directions for m in host_memory]
    rows: list[BandwidthResult] = []
    for size, direction, kind in progress(
        points, desc="host<->device sweep", total=len(points), show=show_progress
    ):
        try:
            rows.append(
                _transfer_row(on_device, hosts, size, direction, kind, device, warmup_ms, rep_ms)
            )
        except Exception as exc:
            if not _memory.is_out_of_memory(exc):
                raise
            failed += (size,)
            break
    del on_device, hosts
    note = ""
    if failed:
        _memory.release_memory(device)
        largest = max((r.bytes_per_array for r in rows), default=None)
        note = _memory.out_of_memory_message(
            "host_device_sweep",
            f"a transfer of {format_bytes(min(failed))}",
            None if largest is None else format_bytes(largest),
            device,
        )
        if not rows:
            raise _memory.MemoryBudgetError(note)
        print(note)
    return TransferSweep(rows=tuple(rows), device=device, out_of_memory=note)


def _transfer_row(
    on_device: Any,
    hosts: dict[str, Any],
    size: int,
    direction: str,
    kind: str,
    device: str,
    warmup_ms: float,
    rep_ms: float,
) -> BandwidthResult:
    """Time one (size, direction, host memory) point of :func:`host_device_sweep`."""
    dev, host = on_device[:size], hosts[kind][:size]
    pinned = kind == "pinned"
    fn = _transfer(dev, host, direction, pinned)
    text = (
        f"device.copy_(host, non_blocking={pinned})"
        if direction == "h2d"
        else f"host.copy_(device, non_blocking={pinned})"
    )
    calls = max(1, min(1000, (16 * 1024**2) // size))

    def sample(fn: Callable[[], Any] = fn, calls: int = calls) -> None:
        for _ in range(calls):
            fn()

    timing = bench(
        sample,
        warmup_ms=warmup_ms,
        rep_ms=rep_ms,
        device=device,
        label=f"{direction} {kind}",
        warn=False,
    )
    return _result(f"{direction} {kind}", device, size, size, timing, text, calls)


def _transfer(dev: Any, host: Any, direction: str, pinned: bool) -> Callable[[], Any]:
    if direction == "h2d":
        return lambda: dev.copy_(host, non_blocking=pinned)
    return lambda: host.copy_(dev, non_blocking=pinned)


# --------------------------------------------------------------------------- overlap

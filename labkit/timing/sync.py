"""Synchronizers: wait until a device has finished the work it was given.

GPU work is asynchronous. ``y = x @ x`` on a CUDA tensor returns as soon as
the kernel is *queued*; the GPU runs it later. A host clock read right after
the call measures the launch, not the work. So before :func:`labkit.bench`
reads a clock it calls ``synchronize()`` on every device the work may have
run on, and on CUDA it prefers device events, which the GPU itself stamps
when it reaches them in its queue.

A synchronizer is any object with a ``name`` and a ``synchronize()`` method
(:class:`Synchronizer`). One that can also time with device events has
``create_event()`` and ``elapsed_ms(start, end)`` (:class:`EventSynchronizer`).
Tests pass fake ones that log their calls; the real ones below import their
framework only when they are built, so this module costs nothing at import.

:func:`infer_synchronizers` finds the devices from the values a function was
called with (and the value it returned), by looking at ``type(x).__module__``,
so it never imports a framework that the caller has not imported already.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from labkit.core.optional import import_tensorflow
from labkit.timing.synchronizers import (
    CupySync,
    HostSync,
    TensorFlowSync,
    TorchCudaSync,
    TorchMpsSync,
    TorchXpuSync,
)

#: The device strings ``bench(device=...)`` accepts, for error messages.
ACCEPTED_DEVICES = '"cpu", "cuda", "cuda:N", "mps", "xpu", "xpu:N", "cupy", "cupy:N", "tf"'


@runtime_checkable
class Synchronizer(Protocol):
    """Something that can wait for a device's queued work to finish."""

    name: str

    def synchronize(self) -> None:
        """Block the host until all work queued on the device has finished."""


class DeviceEvent(Protocol):
    """A marker the device stamps with its own clock when it reaches it."""

    def record(self) -> None:
        """Queue the marker on the device's current stream."""


@runtime_checkable
class EventSynchronizer(Synchronizer, Protocol):
    """A synchronizer that can also time work with device events (CUDA)."""

    def create_event(self) -> DeviceEvent:
        """A fresh timing event for this device."""

    def elapsed_ms(self, start: Any, end: Any) -> float:
        """Device time between two recorded events, in ms (after a synchronize)."""


def supports_events(sync: object) -> bool:
    """Whether ``sync`` can time with device events (has create_event and elapsed_ms)."""
    return callable(getattr(sync, "create_event", None)) and callable(
        getattr(sync, "elapsed_ms", None)
    )


def is_host_device(name: str) -> bool:
    """Whether a device name means the CPU, where work is done when the call returns."""
    return name == "cpu" or ":CPU:" in f"{name.upper()}:"


# --------------------------------------------------------------------------- groups


@dataclass(frozen=True)
class SyncGroup:
    """The device the work runs on, plus others that may hold queued work.

    ``primary`` names the timing's device and, when it supports events, does
    the event timing. ``extras`` are only synchronized: frameworks with a live
    GPU context that ``fn`` may use through tensors it closes over.
    """

    primary: Synchronizer
    extras: tuple[Synchronizer, ...] = ()

    @property
    def name(self) -> str:
        if not self.extras:
            return self.primary.name
        return f"{self.primary.name} (+ synced {', '.join(s.name for s in self.extras)})"

    @property
    def event_timer(self) -> EventSynchronizer | None:
        """The primary synchronizer when it can time with events, else None."""
        return self.primary if supports_events(self.primary) else None  # type: ignore[return-value]

    def synchronize(self) -> None:
        self.primary.synchronize()
        for extra in self.extras:
            extra.synchronize()


def merge(found: Sequence[Synchronizer], ambient: Sequence[Synchronizer] = ()) -> SyncGroup:
    """Group synchronizers into the timing's device and the ones only drained.

    The primary is the first GPU found in the data (so events time real GPU
    work), else the first device found, else the CPU. Ambient contexts never
    become primary: when no GPU data was seen, the work may be pure CPU work,
    and events on an idle GPU queue would time nothing.
    """
    gpus = [s for s in found if not is_host_device(s.name)]
    primary: Synchronizer = gpus[0] if gpus else (found[0] if found else HostSync())
    extras: list[Synchronizer] = []
    for sync in [*found, *ambient]:
        if sync.name == "cpu" or sync.name == primary.name:
            continue
        if all(sync.name != seen.name for seen in extras):
            extras.append(sync)
    return SyncGroup(primary, tuple(extras))


def group_for(device: str | Synchronizer | None, values: Iterable[Any]) -> SyncGroup:
    """The synchronizers for ``bench(device=...)`` given the call's argument values.

    An explicit device is used alone. None infers it from ``values`` and adds
    every ambient GPU context (see :func:`ambient_synchronizers`).
    """
    if device is not None:
        return SyncGroup(synchronizer_for(device))
    return merge(infer_synchronizers(values), ambient_synchronizers())


def refine(group: SyncGroup, result: Any) -> SyncGroup:
    """Add what ``fn``'s result reveals, when the arguments showed no GPU.

    ``bench(make_batch)`` has no arguments; the tensor it returns says where
    the work ran.
    """
    if not is_host_device(group.primary.name):
        return group
    more = infer_synchronizers([result])
    if not more:
        return group
    found = [] if group.primary.name == "cpu" else [group.primary]
    return merge([*found, *more], group.extras)


# --------------------------------------------------------------------------- resolution


def synchronizer_for(device: str | Synchronizer) -> Synchronizer:
    """Turn ``bench``'s ``device=`` argument into a synchronizer.

    Strings: "cpu", "cuda", "cuda:N", "mps", "xpu", "xpu:N", "cupy", "cupy:N",
    "tf" (or "tensorflow"). Any object with ``name`` and ``synchronize()`` is
    used as it is (that is how tests pass a fake device).
    """
    if isinstance(device, str):
        text = device.strip().lower()
        kind, _, index_text = text.partition(":")
        index: int | None = None
        if index_text:
            if not index_text.isdigit() or kind not in ("cuda", "xpu", "cupy"):
                raise ValueError(_unknown_device(device))
            index = int(index_text)
        if kind == "cpu" and index is None:
            return HostSync()
        if kind == "cuda":
            return TorchCudaSync(index)
        if kind == "mps" and index is None:
            return TorchMpsSync()
        if kind == "xpu":
            return TorchXpuSync(index)
        if kind == "cupy":
            return CupySync(index)
        if kind in ("tf", "tensorflow") and index is None:
            return TensorFlowSync()
        raise ValueError(_unknown_device(device))
    if isinstance(device, Synchronizer) and isinstance(getattr(device, "name", None), str):
        return device
    raise TypeError(
        f"device must be None, a device string ({ACCEPTED_DEVICES}) or an object with a "
        f"`name` and a `synchronize()` method, got {type(device).__name__} instead"
    )


def _unknown_device(device: str) -> str:
    return (
        f"device={device!r} is not a device labkit knows. Use one of {ACCEPTED_DEVICES}, "
        "or None to infer it from the arguments."
    )


def infer_synchronizers(values: Iterable[Any]) -> list[Synchronizer]:
    """The devices that the given values live on, in the order found.

    Looks at each value and, one level down, the items of tuples, lists and
    dicts. Recognises torch tensors and modules, CuPy arrays and TensorFlow
    tensors by ``type(x).__module__``, so no framework is imported here.
    Anything else (numpy arrays, numbers) counts as CPU data.
    """
    found: list[Synchronizer] = []
    for value in _shallow(values):
        sync = _synchronizer_of_value(value)
        if sync is not None and all(sync.name != seen.name for seen in found):
            found.append(sync)
    return found


def _shallow(values: Iterable[Any]) -> Iterable[Any]:
    for value in values:
        yield value
        if isinstance(value, (tuple, list)):
            yield from value
        elif isinstance(value, dict):
            yield from value.values()


def _synchronizer_of_value(value: Any) -> Synchronizer | None:
    root = type(value).__module__.partition(".")[0]
    if root == "numpy":
        return HostSync()
    if root == "torch":
        return _torch_synchronizer(value)
    if root == "cupy" and hasattr(value, "device"):
        return CupySync(int(value.device.id))
    if root in ("tensorflow", "keras") and isinstance(getattr(value, "device", None), str):
        device = value.device
        return TensorFlowSync(device) if device else None
    return None


def _torch_synchronizer(value: Any) -> Synchronizer | None:
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    device = getattr(value, "device", None)
    if device is None and isinstance(value, torch.nn.Module):
        tensor = next(iter(value.parameters()), None)
        if tensor is None:
            tensor = next(iter(value.buffers()), None)
        device = None if tensor is None else tensor.device
    if not isinstance(device, torch.device):
        return None
    if device.type == "cpu":
        return HostSync()
    if device.type == "cuda":
        return TorchCudaSync(device.index if device.index is not None else None)
    if device.type == "mps":
        return TorchMpsSync()
    if device.type == "xpu":
        return TorchXpuSync(device.index)
    return None


def ambient_synchronizers() -> list[Synchronizer]:
    """Frameworks already imported *and* holding a live GPU context.

    ``fn`` may launch GPU work on tensors it closes over, which the arguments
    do not reveal. Draining these before each clock read keeps that work out
    of the next measurement. Nothing is imported and no context is created:
    a framework counts only if the user's code has already started it.
    """
    found: list[Synchronizer] = []
    torch = sys.modules.get("torch")
    if torch is not None:
        found += _quiet(lambda: _torch_ambient(torch))
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        found += _quiet(lambda: _cupy_ambient(cupy))
    if sys.modules.get("tensorflow") is not None:
        found += _quiet(_tf_ambient)
    return found


def _quiet(probe: Callable[[], list[Synchronizer]]) -> list[Synchronizer]:
    try:
        return probe()
    except Exception:  # a half-installed framework must not break timing
        return []


def _torch_ambient(torch: Any) -> list[Synchronizer]:
    found: list[Synchronizer] = []
    if torch.cuda.is_initialized():
        found.append(TorchCudaSync(torch.cuda.current_device()))
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and getattr(xpu, "is_initialized", lambda: False)():
        found.append(TorchXpuSync(xpu.current_device()))
    mps = getattr(torch, "mps", None)
    if mps is not None and torch.backends.mps.is_available() and mps.current_allocated_memory() > 0:
        found.append(TorchMpsSync())
    return found


def _cupy_ambient(cupy: Any) -> list[Synchronizer]:
    # CuPy has no "is initialized" query; memory in its pool means it has run.
    if cupy.is_available() and cupy.get_default_memory_pool().total_bytes() > 0:
        return [CupySync()]
    return []


def _tf_ambient() -> list[Synchronizer]:
    # sync_devices() would *create* TensorFlow's context (and claim GPU memory),
    # so only count TensorFlow once its context exists (a private flag, guarded).
    from tensorflow.python.eager import context

    if not getattr(context.context(), "_initialized", False):
        return []
    tf = import_tensorflow()
    if tf.config.list_logical_devices("GPU"):
        return [TensorFlowSync()]
    return []

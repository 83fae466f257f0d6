"""labkit.timing.sync: synchronizers, device resolution and inference, ambient GPU contexts.

The CUDA code paths run here against small fake ``torch`` and ``cupy``
modules put into ``sys.modules``, so they are exercised on a machine without
a GPU; what they check is which framework calls are made, in what order.
"""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest

from labkit.core.optional import import_tensorflow, is_installed
from labkit.timing import sync, synchronizers
from labkit.timing.bench import bench


class NamedSync:
    def __init__(self, name: str, log: list[str] | None = None) -> None:
        self.name = name
        self.log = log if log is not None else []

    def synchronize(self) -> None:
        self.log.append(self.name)


class EventSync(NamedSync):
    def create_event(self):
        return SimpleNamespace(record=lambda: None)

    def elapsed_ms(self, start, end) -> float:
        return 0.0


# --------------------------------------------------------------------------- small helpers


@pytest.mark.parametrize(
    ("name", "host"),
    [("cpu", True), ("tf:CPU:0", True), ("cuda:0", False), ("tf", False), ("cupy:1", False)],
)
def test_is_host_device(name, host):
    assert sync.is_host_device(name) is host


def test_supports_events():
    assert sync.supports_events(EventSync("x"))
    assert not sync.supports_events(NamedSync("x"))
    assert not sync.supports_events(synchronizers.HostSync())


def test_protocols_recognise_fakes():
    assert isinstance(NamedSync("x"), sync.Synchronizer)
    assert isinstance(EventSync("x"), sync.EventSynchronizer)
    assert not isinstance(object(), sync.Synchronizer)


# --------------------------------------------------------------------------- synchronizer_for


def test_resolve_cpu_and_fake_devices():
    assert isinstance(sync.synchronizer_for("cpu"), synchronizers.HostSync)
    assert isinstance(sync.synchronizer_for(" CPU "), synchronizers.HostSync)
    fake = NamedSync("fake:0")
    assert sync.synchronizer_for(fake) is fake


@pytest.mark.parametrize(
    "device", ["gpu", "", "tpu", "cpu:0", "mps:1", "tf:0", "cuda:x", "cuda:-1"]
)
def test_unknown_device_strings_are_rejected_with_the_accepted_values(device):
    with pytest.raises(ValueError, match=r"device=.* is not a device labkit knows.*\"cuda:N\""):
        sync.synchronizer_for(device)


def test_non_synchronizer_objects_are_rejected():
    with pytest.raises(TypeError, match="device must be None, a device string"):
        sync.synchronizer_for(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="got object"):
        sync.synchronizer_for(object())  # type: ignore[arg-type]


def test_cuda_without_a_gpu_says_so():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    with pytest.raises(ValueError, match=r"device='cuda'.*is_available\(\) is False"):
        sync.synchronizer_for("cuda")


def test_cupy_without_a_gpu_says_so():
    if not is_installed("cupy"):
        pytest.skip("CuPy is not installed")
    import cupy

    if cupy.is_available():
        pytest.skip("this machine has a GPU for CuPy")
    with pytest.raises(ValueError, match="device='cupy'"):
        sync.synchronizer_for("cupy")


# --------------------------------------------------------------------------- merge and groups


def test_merge_prefers_gpu_data_and_keeps_ambient_as_extras():
    group = sync.merge([synchronizers.HostSync(), NamedSync("cuda:0")], [NamedSync("cupy:0")])
    assert group.primary.name == "cuda:0"
    assert [s.name for s in group.extras] == ["cupy:0"]
    assert group.name == "cuda:0 (+ synced cupy:0)"


def test_ambient_contexts_never_become_primary():
    # No GPU data seen: the work may be CPU work, and events on an idle GPU would time nothing.
    group = sync.merge([], [EventSync("cuda:0")])
    assert group.primary.name == "cpu"
    assert group.event_timer is None
    assert group.name == "cpu (+ synced cuda:0)"


def test_merge_deduplicates_by_name():
    group = sync.merge([NamedSync("cuda:0")], [NamedSync("cuda:0"), NamedSync("tf")])
    assert [s.name for s in group.extras] == ["tf"]


def test_group_synchronizes_everything_and_times_with_the_primary():
    log: list[str] = []
    group = sync.SyncGroup(EventSync("a", log), (NamedSync("b", log),))
    group.synchronize()
    assert log == ["a", "b"]
    assert group.event_timer is group.primary
    assert sync.SyncGroup(NamedSync("a")).event_timer is None


def test_group_for_explicit_device_ignores_data_and_ambient():
    fake = NamedSync("fake:0")
    group = sync.group_for(fake, [object()])
    assert group.primary is fake and group.extras == ()


def test_refine_keeps_a_gpu_primary():
    group = sync.SyncGroup(NamedSync("cuda:0"))
    assert sync.refine(group, [1, 2]) is group


# --------------------------------------------------------------------------- inference


def test_inference_from_plain_values_finds_nothing():
    assert sync.infer_synchronizers([1, "x", None, [2.0], {"k": 3}]) == []
    assert sync.merge([], []).name == "cpu"


def test_inference_from_numpy_is_the_cpu():
    import numpy as np

    found = sync.infer_synchronizers([np.zeros(3)])
    assert [s.name for s in found] == ["cpu"]


def test_inference_from_torch_cpu_tensors_modules_and_containers():
    torch = pytest.importorskip("torch")
    x = torch.zeros(2)
    for values in ([x], [(1, x)], [[x]], [{"a": x}], [torch.nn.Linear(2, 2)]):
        assert [s.name for s in sync.infer_synchronizers(values)] == ["cpu"]
    # Only one level down: deeper nesting is not searched.
    assert sync.infer_synchronizers([[[x]]]) == []
    assert sync.infer_synchronizers([torch.nn.ReLU()]) == []  # no parameters: no device


def test_inference_from_the_first_result():
    torch = pytest.importorskip("torch")
    group = sync.refine(sync.merge([], []), torch.ones(1))
    assert group.primary.name == "cpu"


def test_ambient_is_empty_without_gpu_contexts():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    assert sync.ambient_synchronizers() == []


# --------------------------------------------------------------------------- CPU caches


def test_last_level_cache_is_the_largest_in_sysfs(tmp_path):
    for i, size in enumerate(["32K", "1024K", "32768K", "48K"]):
        (tmp_path / f"index{i}").mkdir()
        (tmp_path / f"index{i}" / "size").write_text(size + "\n")
    assert synchronizers.cpu_last_level_cache_bytes(tmp_path) == 32 * 2**20


def test_last_level_cache_defaults_to_64_mib(tmp_path):
    assert synchronizers.cpu_last_level_cache_bytes(tmp_path / "missing") == 64 * 2**20


def test_host_flusher_writes_twice_the_cache(monkeypatch):
    monkeypatch.setattr(synchronizers, "cpu_last_level_cache_bytes", lambda: 1000)
    flush = synchronizers.HostSync().cache_flusher()
    flush()
    buffer = flush.__closure__[0].cell_contents  # type: ignore[index]
    assert buffer.nbytes == 2000 and not buffer.any()


# --------------------------------------------------------------------------- fake torch (CUDA)


class _Clock:
    def __init__(self) -> None:
        self.now_ms = 0.0


def _fake_torch(log: list, clock: _Clock, *, initialized: bool = True, l2_bytes: int = 1 << 20):
    torch = types.ModuleType("torch")

    class device:
        def __init__(self, name: str) -> None:
            kind, _, index = str(name).partition(":")
            self.type, self.index = kind, int(index) if index else None

        def __str__(self) -> str:
            return self.type if self.index is None else f"{self.type}:{self.index}"

    class Event:
        def __init__(self, enable_timing: bool = False) -> None:
            assert enable_timing, "timing events need enable_timing=True"
            self.at_ms: float | None = None

        def record(self, stream=None) -> None:
            log.append(("record", stream))
            self.at_ms = clock.now_ms

        def elapsed_time(self, end: Event) -> float:
            return end.at_ms - self.at_ms  # type: ignore[operator]

    class Buffer:
        def __init__(self, nbytes: int) -> None:
            self.nbytes = nbytes

        def zero_(self) -> None:
            log.append(("zero", self.nbytes))

    torch.device = device  # type: ignore[attr-defined]
    torch.int8 = "int8"  # type: ignore[attr-defined]
    torch.Tensor = type("Tensor", (), {})  # type: ignore[attr-defined]
    torch.nn = SimpleNamespace(Module=type("Module", (), {}))  # type: ignore[attr-defined]
    torch.empty = lambda n, dtype, device: Buffer(n)  # type: ignore[attr-defined]
    torch.cuda = SimpleNamespace(  # type: ignore[attr-defined]
        is_available=lambda: True,
        is_initialized=lambda: initialized,
        current_device=lambda: 0,
        synchronize=lambda d=None: log.append(("synchronize", str(d))),
        Event=Event,
        current_stream=lambda d=None: f"stream[{d}]",
        get_device_properties=lambda d: SimpleNamespace(L2_cache_size=l2_bytes),
    )
    torch.backends = SimpleNamespace(mps=SimpleNamespace(is_available=lambda: False))  # type: ignore[attr-defined]
    torch.xpu = SimpleNamespace(is_available=lambda: False, is_initialized=lambda: False)  # type: ignore[attr-defined]
    return torch


class _CudaTensor:
    __module__ = "torch"

    def __init__(self, torch, name: str) -> None:
        self.device = torch.device(name)


def test_torch_cuda_sync_events_and_flush_with_a_fake_torch(monkeypatch):
    log: list = []
    clock = _Clock()
    torch = _fake_torch(log, clock, l2_bytes=50 * 2**20)
    monkeypatch.setitem(sys.modules, "torch", torch)

    cuda = sync.synchronizer_for("cuda:1")
    assert cuda.name == "cuda:1"
    cuda.synchronize()
    assert log[-1] == ("synchronize", "cuda:1")
    start, end = cuda.create_event(), cuda.create_event()
    start.record()
    clock.now_ms += 2.5
    end.record()
    assert log[-1] == ("record", "stream[cuda:1]")  # recorded on the device's current stream
    assert cuda.elapsed_ms(start, end) == 2.5
    cuda.cache_flusher()()
    assert log[-1] == ("zero", 100 * 2**20)  # twice the L2


def test_torch_cuda_flush_defaults_to_256_mib_when_l2_unknown(monkeypatch):
    log: list = []
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(log, _Clock(), l2_bytes=0))
    sync.synchronizer_for("cuda").cache_flusher()()
    assert log[-1] == ("zero", 256 * 2**20)


def test_bench_infers_cuda_from_tensors_and_times_with_events(monkeypatch):
    log: list = []
    clock = _Clock()
    torch = _fake_torch(log, clock)
    monkeypatch.setitem(sys.modules, "torch", torch)
    x = _CudaTensor(torch, "cuda:1")

    def kernel(t):
        log.append("call")
        clock.now_ms += 0.5  # the fake GPU's time, seen by events

    def host_clock() -> float:
        log.append("clock")
        return clock.now_ms / 1e3

    t = bench(kernel, x, warmup_ms=1.0, rep_ms=10.0, clock=host_clock)
    assert t.method == "device events"
    assert t.device == "cuda:1 (+ synced cuda:0)"  # cuda:0 is the ambient current device
    assert set(t.samples_ms) == {0.5}
    assert 20 <= t.n <= 21  # 10 ms / 0.5 ms, +1 if the host-clock estimate rounds low
    assert ("synchronize", "cuda:1") in log and ("synchronize", "cuda:0") in log
    sampling = log[log.index(("record", "stream[cuda:1]")) :]
    assert "clock" not in sampling  # events, not the host clock, time the samples


def test_ambient_torch_cuda_context_is_found(monkeypatch):
    log: list = []
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(log, _Clock(), initialized=True))
    assert [s.name for s in sync.ambient_synchronizers()] == ["cuda:0"]
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(log, _Clock(), initialized=False))
    assert sync.ambient_synchronizers() == []


def test_a_broken_framework_does_not_break_ambient_detection(monkeypatch):
    broken = types.ModuleType("torch")
    broken.cuda = SimpleNamespace(is_initialized=lambda: 1 / 0)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", broken)
    assert sync.ambient_synchronizers() == []


# --------------------------------------------------------------------------- fake cupy


def _fake_cupy(log: list, clock: _Clock, *, l2_bytes: int = 40 * 2**20, pool_bytes: int = 0):
    cupy = types.ModuleType("cupy")

    class Device:
        def __init__(self, index: int | None = None) -> None:
            self.id = 0 if index is None else index
            self.attributes = {"L2CacheSize": l2_bytes}

        def synchronize(self) -> None:
            log.append(("synchronize", self.id))

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            return None

    class Event:
        def record(self, stream=None) -> None:
            log.append(("record", stream))
            self.at_ms = clock.now_ms

    class Array:
        def __init__(self, nbytes: int) -> None:
            self.nbytes = nbytes

        def fill(self, value) -> None:
            log.append(("fill", self.nbytes, value))

    cupy.is_available = lambda: True  # type: ignore[attr-defined]
    cupy.int8 = "int8"  # type: ignore[attr-defined]
    cupy.empty = lambda n, dtype: Array(n)  # type: ignore[attr-defined]
    cupy.get_default_memory_pool = lambda: SimpleNamespace(total_bytes=lambda: pool_bytes)  # type: ignore[attr-defined]
    cupy.cuda = SimpleNamespace(  # type: ignore[attr-defined]
        Device=Device,
        Event=Event,
        get_current_stream=lambda: "current-stream",
        get_elapsed_time=lambda start, end: end.at_ms - start.at_ms,
    )
    return cupy


def test_cupy_sync_events_and_flush_with_a_fake_cupy(monkeypatch):
    log: list = []
    clock = _Clock()
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(log, clock))
    device = sync.synchronizer_for("cupy:2")
    assert device.name == "cupy:2"
    device.synchronize()
    assert log[-1] == ("synchronize", 2)
    start, end = device.create_event(), device.create_event()
    start.record()
    clock.now_ms += 1.25
    end.record()
    assert log[-1] == ("record", "current-stream")
    assert device.elapsed_ms(start, end) == 1.25
    device.cache_flusher()()
    assert log[-1] == ("fill", 80 * 2**20, 0)


def test_cupy_arrays_are_inferred_and_ambient_cupy_needs_pool_memory(monkeypatch):
    log: list = []
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(log, _Clock(), pool_bytes=0))
    array = type("ndarray", (), {"__module__": "cupy", "device": SimpleNamespace(id=3)})()
    assert [s.name for s in sync.infer_synchronizers([array])] == ["cupy:3"]
    names = [s.name for s in sync.ambient_synchronizers()]
    assert "cupy:0" not in names
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(log, _Clock(), pool_bytes=4096))
    assert "cupy:0" in [s.name for s in sync.ambient_synchronizers()]


# --------------------------------------------------------------------------- TensorFlow (real)


@pytest.fixture(scope="module")
def tf():
    if not is_installed("tensorflow"):
        pytest.skip("TensorFlow is not installed")
    return import_tensorflow()


def test_tensorflow_sync_and_inference(tf):
    device = sync.synchronizer_for("tf")
    assert device.name == "tf"
    device.synchronize()  # tf.test.experimental.sync_devices() runs without error
    x = tf.ones((4, 4))
    found = sync.infer_synchronizers([x])
    assert [s.name for s in found] == ["tf:CPU:0"]


def test_bench_on_tensorflow_cpu_tensors(tf):
    x = tf.ones((8, 8))
    t = bench(tf.linalg.matmul, x, x, warmup_ms=0.5, rep_ms=2.0, warn=False)
    assert t.device == "tf:CPU:0"
    assert t.n >= 5

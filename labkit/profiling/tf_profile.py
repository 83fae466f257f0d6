"""The TensorFlow profiler's trace of a Keras CNN's training steps, read back offline.

``tf.profiler.experimental.start(logdir)`` / ``stop()`` record everything
TensorFlow ran in between and write it as an XSpace protocol buffer:
``LOGDIR/plugins/profile/RUN/HOST.xplane.pb``. TensorBoard's profile plugin
(now XProf) turns it into an overview page, a trace viewer and op tables.
Neither is needed to *read* it: TensorFlow ships the protobuf schema
(``tensorflow.tsl.profiler.protobuf.xplane_pb2``), and :func:`read_xplane`
uses it to total the TensorFlow ops by type (the "TensorFlow stats" table,
in short) and, on a GPU, the kernels.

To browse the same file interactively::

    pip install xprof
    xprof --logdir LOGDIR --port 8791        # then open http://localhost:8791

or ``pip install tensorboard tensorboard-plugin-profile`` and
``tensorboard --logdir LOGDIR`` (the Profile tab).

TensorFlow is imported through :func:`labkit.core.optional.import_tensorflow`
(quiet, and a one-line install hint when missing); the profiler's own C++
notices are captured off the notebook (``profiler_messages``).
"""

from __future__ import annotations

import importlib
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labkit.core.optional import import_tensorflow
from labkit.core.results import JsonRecord
from labkit.core.units import format_bytes, format_duration
from labkit.core.validate import check_int, check_positive_int, check_seed
from labkit.profiling.common import captured_output_fds, output_dir, union_ms

PURPOSE = "profiling a Keras training step"

#: Where TensorFlow releases have kept the XSpace protobuf module, newest first.
XPLANE_MODULES: tuple[str, ...] = (
    "tensorflow.tsl.profiler.protobuf.xplane_pb2",
    "tsl.profiler.protobuf.xplane_pb2",
    "tensorflow.core.profiler.protobuf.xplane_pb2",
)

#: How to open the logdir in a browser, for the text the functions print.
VIEW_HINT = (
    "pip install xprof, then xprof --logdir {logdir} --port 8791 (or pip install tensorboard "
    "tensorboard-plugin-profile, then tensorboard --logdir {logdir}: the Profile tab)"
)

#: A TensorFlow op event on a host line is named "op_name:OpType".
_OP_EVENT = re.compile(r"^[^\s:]+:([A-Za-z_][\w]*)$")


@dataclass(frozen=True)
class TfOpStat(JsonRecord):
    """All events of one TensorFlow op type (or one GPU kernel): how many, and their total time."""

    name: str
    calls: int
    total_ms: float


@dataclass(frozen=True)
class XPlaneSummary(JsonRecord):
    """What an ``.xplane.pb`` holds: its planes, and the time of its ops and kernels.

    ``host_ops`` totals TensorFlow ops by type on the host planes (on a CPU
    run, where the work is); ``device_kernels`` totals kernels by name on the
    ``/device:GPU:N`` planes (empty without a GPU). Both are sorted by time,
    largest first.
    """

    path: str
    planes: tuple[str, ...]
    n_events: int
    host_ops: tuple[TfOpStat, ...]
    device_kernels: tuple[TfOpStat, ...]
    host_op_ms: float
    device_busy_ms: float


@dataclass(frozen=True)
class TfProfile(JsonRecord):
    """The files one TensorFlow profiler session wrote, and what could be read from them.

    ``files`` are (path, size in bytes) of every ``.xplane.pb`` of this
    session; ``xplane`` is the summary of the first one, or None when no
    protobuf reader was found (``note`` says so and how to open the file).
    ``top`` is how many op types ``print(profile)`` lists (0: none, so the
    text is the same on every run).
    """

    device: str
    steps: int
    batch: int
    image_size: int
    logdir: str
    files: tuple[tuple[str, int], ...]
    xplane: XPlaneSummary | None
    note: str = ""
    top: int = 8
    profiler_messages: tuple[str, ...] = field(default=(), repr=False)

    @property
    def xplane_path(self) -> str | None:
        return self.files[0][0] if self.files else None

    def open_hint(self) -> str:
        return VIEW_HINT.format(logdir=self.logdir)

    def __str__(self) -> str:
        s = self.image_size
        lines = [
            f"TensorFlow profile: Keras CNN training on {self.device}, batch {self.batch} of "
            f"{s}×{s}×3 images, {self.steps} profiled steps"
        ]
        if not self.files:
            lines.append(f"  the profiler wrote no .xplane.pb under {self.logdir}")
        for path, size in self.files:
            lines.append(f"  wrote {path} ({format_bytes(size)})")
        if self.xplane is None:
            lines.append(f"  {self.note}")
        else:
            x = self.xplane
            planes = f"{len(x.planes)} plane{'s' if len(x.planes) != 1 else ''}"
            runs = sum(o.calls for o in x.host_ops)
            lines.append(
                f"  read offline: {planes} ({', '.join(x.planes)}), {runs:,} TensorFlow op runs "
                f"of {len(x.host_ops)} types, {format_duration(x.host_op_ms)} in all on the host"
            )
            if self.top and x.host_ops:
                shown = x.host_ops[: self.top]
                width = max(len(o.name) for o in shown)
                lines.append("  TensorFlow ops by total time:")
                lines.append(f"    {'op type':<{width}}  {'calls':>5}  {'total':>9}")
                lines += [
                    f"    {o.name:<{width}}  {o.calls:>5}  {format_duration(o.total_ms):>9}"
                    for o in shown
                ]
            if self.top and x.device_kernels:
                lines.append("  GPU kernels by total time:")
                lines += [
                    f"    {_short(k.name)}  {k.calls:>5}  {format_duration(k.total_ms):>9}"
                    for k in x.device_kernels[: self.top]
                ]
        lines.append(f"  to browse it: {self.open_hint()}")
        return "\n".join(lines)


def _short(name: str, limit: int = 60) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"


# ---------------------------------------------------------------------------- reading


def xplane_module() -> Any | None:
    """TensorFlow's ``xplane_pb2`` protobuf module, or None where this TensorFlow has none."""
    for name in XPLANE_MODULES:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


def read_xplane(path: Any) -> XPlaneSummary:
    """Total the TensorFlow ops (by type) and GPU kernels (by name) of an ``.xplane.pb`` file.

    Why: to see what the profiler recorded without TensorBoard. Host op
    events are named ``"op_name:OpType"`` (e.g.
    ``"sequential/conv2d/Relu:_MklNativeFusedConv2D"``); device planes hold
    one line per CUDA stream with one event per kernel. Raises
    :class:`MissingPackageError` without TensorFlow and RuntimeError when this
    TensorFlow ships no XSpace reader.
    """
    import_tensorflow("reading a TensorFlow profile")
    module = xplane_module()
    if module is None:
        raise RuntimeError(
            "this TensorFlow has no XSpace protobuf module (tried "
            f"{', '.join(XPLANE_MODULES)}); open the file with: {VIEW_HINT.format(logdir='LOGDIR')}"
        )
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"no .xplane.pb file at {str(file)!r}")
    space = module.XSpace()
    try:
        space.ParseFromString(file.read_bytes())
    except Exception as exc:  # protobuf's DecodeError
        raise ValueError(f"{str(file)!r} is not an XSpace protobuf: {exc}") from exc
    ops: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    kernels: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    busy: list[tuple[float, float]] = []
    n_events = 0
    for plane in space.planes:
        device = plane.name.startswith("/device:")
        for line in plane.lines:
            n_events += len(line.events)
            for event in line.events:
                meta = plane.event_metadata.get(event.metadata_id)
                name = meta.name if meta is not None else ""
                ms = event.duration_ps / 1e9
                if device:
                    kernels[name][0] += 1
                    kernels[name][1] += ms
                    start = (line.timestamp_ns * 1e3 + event.offset_ps) / 1e9
                    busy.append((start, start + ms))
                    continue
                found = _OP_EVENT.match(name)
                if found:
                    op_type = (meta.display_name if meta is not None else "") or found.group(1)
                    ops[op_type][0] += 1
                    ops[op_type][1] += ms

    def ranked(table: dict[str, list[float]]) -> tuple[TfOpStat, ...]:
        rows = sorted(table.items(), key=lambda kv: (-kv[1][1], kv[0]))
        return tuple(TfOpStat(name, int(calls), total) for name, (calls, total) in rows)

    host_ops = ranked(ops)
    return XPlaneSummary(
        path=str(file),
        planes=tuple(p.name for p in space.planes if len(p.lines)),
        n_events=n_events,
        host_ops=host_ops,
        device_kernels=ranked(kernels),
        host_op_ms=sum(o.total_ms for o in host_ops),
        device_busy_ms=union_ms(busy),
    )


# ---------------------------------------------------------------------------- the model and the run


def keras_cnn(num_classes: int = 10, image_size: int = 32) -> Any:
    """The Keras twin of :class:`labkit.models.cnn.CNN` for square RGB images of ``image_size`` px.

    Conv2D(32, 3, same) → ReLU → MaxPooling2D(2) → AveragePooling2D to 4×4
    → Flatten → Dense(num_classes): 6,026 parameters for 10 classes, as in
    torch (``image_size`` must be a multiple of 8, so the average pooling
    gives exactly 4×4, like ``AdaptiveAvgPool2d((4, 4))``).
    """
    num_classes = check_positive_int("num_classes", num_classes)
    image_size = check_int("image_size", image_size, minimum=8)
    if image_size % 8:
        raise ValueError(
            f"image_size must be a multiple of 8 (pooling to 4×4 must be exact), got {image_size}"
        )
    import_tensorflow(PURPOSE)
    import keras

    return keras.Sequential(
        [
            keras.Input((image_size, image_size, 3)),
            keras.layers.Conv2D(32, 3, padding="same"),
            keras.layers.ReLU(),
            keras.layers.MaxPooling2D(2),
            keras.layers.AveragePooling2D(image_size // 8),
            keras.layers.Flatten(),
            keras.layers.Dense(num_classes),
        ],
        name="keras_cnn",
    )


def profile_keras_training(
    steps: int = 5,
    *,
    batch: int = 64,
    image_size: int = 32,
    logdir: Any = None,
    warmup_steps: int = 2,
    top: int = 8,
    seed: int = 0,
) -> TfProfile:
    """Profile ``steps`` training steps of a Keras CNN with TensorFlow's profiler.

    Why: TensorFlow's profiler is the counterpart of ``torch.profiler``; its
    file format differs (an XSpace protobuf, not JSON), and so do its op
    names (``Conv2D``, ``_MklNativeFusedConv2D`` with oneDNN on a CPU). The
    ``warmup_steps`` run first, outside the session, so tracing the
    ``tf.function`` is not profiled; each profiled step is a
    ``tf.profiler.experimental.Trace("train", step_num=i)`` range, which the
    trace viewer shows as steps.

    ``logdir=None`` writes to a new temporary folder (never the course
    folder). ``top`` op types are listed by ``print``; 0 lists none.
    """
    steps = check_positive_int("steps", steps)
    batch = check_positive_int("batch", batch)
    image_size = check_int("image_size", image_size, minimum=8)
    warmup_steps = check_positive_int("warmup_steps", warmup_steps)
    top = check_int("top", top)
    seed = check_seed("seed", seed)
    if image_size % 8:
        raise ValueError(
            f"image_size must be a multiple of 8 (pooling to 4×4 must be exact), got {image_size}"
        )
    from labkit.machine.memory import require_fits

    batch_bytes = batch * 3 * image_size * image_size * 4
    # The arrays live on the host; activations are counted there too (a GPU has more room).
    require_fits(
        batch_bytes * 34, device="cpu", what="profile_keras_training", name="batch or image_size"
    )
    tf = import_tensorflow(PURPOSE)
    import keras
    import numpy as np

    gpus = tf.config.list_physical_devices("GPU")
    folder = output_dir(logdir, name="logdir", prefix="labkit-tfprofile-")
    before = set(folder.glob("plugins/profile/*/*.xplane.pb"))

    keras.utils.set_random_seed(seed)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((4 * batch, image_size, image_size, 3), dtype=np.float32)
    y = rng.integers(0, 10, size=4 * batch)

    def batch_at(i: int) -> tuple[Any, Any]:
        first = (i % 4) * batch
        return x[first : first + batch], y[first : first + batch]

    messages: list[str] = []
    # Building the model creates the devices (where a GPU build logs), so it is captured too.
    with captured_output_fds(messages):
        model = keras_cnn(10, image_size)
        model.compile(
            optimizer=keras.optimizers.SGD(learning_rate=0.01, momentum=0.9),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            jit_compile=False,  # keep TensorFlow's own ops (XLA would fuse them into clusters)
        )
        for i in range(warmup_steps):
            model.train_on_batch(*batch_at(i))
        tf.profiler.experimental.start(str(folder))
        try:
            for i in range(steps):
                with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
                    model.train_on_batch(*batch_at(i))
        finally:
            tf.profiler.experimental.stop()
    written = sorted(set(folder.glob("plugins/profile/*/*.xplane.pb")) - before)
    files = tuple((str(p), p.stat().st_size) for p in written)
    summary, note = None, ""
    if written:
        try:
            summary = read_xplane(written[0])
        except RuntimeError as exc:
            note = str(exc)
    return TfProfile(
        device="/GPU:0" if gpus else "/CPU:0",
        steps=steps,
        batch=batch,
        image_size=image_size,
        logdir=str(folder),
        files=files,
        xplane=summary,
        note=note,
        top=top,
        profiler_messages=tuple(messages),
    )

"""tf.distribute.MirroredStrategy on logical CPU devices: data parallelism inside one process.

Where PyTorch's DDP runs one process per device, TensorFlow's
``MirroredStrategy`` runs one *replica* per device inside one process: each
variable is mirrored on every device, each replica takes its slice of the
global batch, and the gradients are all-reduced across replicas before the
same update is applied everywhere (so the copies stay identical).

Without GPUs, one physical CPU can be split into several *logical* devices
(``tf.config.set_logical_device_configuration``), which is enough to see
the mechanism: replicas in sync, the global batch = per-replica batch ×
replicas, the per-replica copies of each variable equal after training.
The split must happen before TensorFlow initializes its devices, and in a
notebook an earlier cell may already have done that, so :func:`run_mirrored`
runs ``python -m labkit.scaling.mirrored --json`` in a fresh process (with
TensorFlow's C++ log lines kept out of the notebook) and parses its result.

Timing: each training step is timed by a Keras callback between the start
and the end of the batch; reading the batch's loss as a Python float waits
for the step to finish. The first steps (tracing and compiling
``train_function``) are left out. With ``baseline=True`` the same process
also trains a 1-replica copy at the same per-replica batch, so the two step
times compare like weak scaling. Both replicas share the one CPU's thread
pools, so on a CPU this shows the mechanism, not a speedup.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labkit.core.results import JsonRecord
from labkit.core.units import format_duration
from labkit.core.validate import check_positive_int, check_real
from labkit.timing.bench import Timing

#: Leading steps left out of the timing (tracing and compilation).
WARMUP_STEPS = 2


@dataclass(frozen=True)
class MirroredRun(JsonRecord):
    """One ``model.fit`` under MirroredStrategy: replicas, devices, step time, loss, checks."""

    replicas: int
    devices: tuple[str, ...]
    cross_device_ops: str
    batch_per_replica: int
    global_batch: int
    width: int
    parameter_count: int
    step: Timing
    epoch_losses: tuple[float, ...]
    replicas_identical: bool  # every mirrored variable equal on every device after training
    tf_version: str
    baseline_step: Timing | None = None  # 1 replica, same per-replica batch
    wall_s: float = 0.0

    json_extra = ("samples_per_s", "loss_decreased", "efficiency")

    @property
    def samples_per_s(self) -> float:
        return self.global_batch / (self.step.median_ms / 1e3)

    @property
    def loss_decreased(self) -> bool:
        return self.epoch_losses[-1] < self.epoch_losses[0]

    @property
    def baseline_samples_per_s(self) -> float | None:
        if self.baseline_step is None:
            return None
        return self.batch_per_replica / (self.baseline_step.median_ms / 1e3)

    @property
    def efficiency(self) -> float | None:
        """samples/s with N replicas ÷ (N × samples/s with 1), or None without a baseline."""
        base = self.baseline_samples_per_s
        return None if base is None else self.samples_per_s / (self.replicas * base)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, wall_s: float = 0.0) -> MirroredRun:
        main = data["runs"][-1]
        base = data["runs"][0] if len(data["runs"]) > 1 else None
        device = "tf:CPU:0"
        baseline = None
        if base is not None:
            baseline = Timing(tuple(base["step_ms"]), label="1 replica", device=device)
        return cls(
            replicas=int(main["replicas"]),
            devices=tuple(main["devices"]),
            cross_device_ops=str(main["cross_device_ops"]),
            batch_per_replica=int(data["batch_per_replica"]),
            global_batch=int(main["global_batch"]),
            width=int(data["width"]),
            parameter_count=int(main["parameter_count"]),
            step=Timing(
                tuple(main["step_ms"]), label=f"{main['replicas']} replicas", device=device
            ),
            epoch_losses=tuple(float(v) for v in main["epoch_losses"]),
            replicas_identical=bool(main["replicas_identical"]),
            tf_version=str(data["tf_version"]),
            baseline_step=baseline,
            wall_s=wall_s,
        )

    def __str__(self) -> str:
        from labkit.core.units import format_samples_per_s

        short = ", ".join(d.rsplit("/", 1)[-1] for d in self.devices)
        losses = ", ".join(f"loss {v:.4f}" for v in self.epoch_losses)
        lines = [
            f"tf.distribute.MirroredStrategy: {self.replicas} replicas in sync on {short} "
            f"(all-reduce: {self.cross_device_ops})",
            f"  Keras MLP width {self.width} ({self.parameter_count:,} parameters), global batch "
            f"{self.global_batch} = {self.replicas} replicas × {self.batch_per_replica}",
            f"  time per step: median {format_duration(self.step.median_ms)} "
            f"(n={self.step.n}), {format_samples_per_s(self.samples_per_s, round_to_3=True)}",
        ]
        if self.baseline_step is not None and self.efficiency is not None:
            lines.append(
                f"  1 replica, batch {self.batch_per_replica}: median "
                f"{format_duration(self.baseline_step.median_ms)} per step; efficiency "
                f"{self.efficiency:.0%}"
            )
        lines += [
            f"  epoch losses: {losses} ({'decreasing' if self.loss_decreased else 'NOT decreasing'})",
            "  replicas' copies of every variable identical after training: "
            + ("yes" if self.replicas_identical else "NO"),
        ]
        return "\n".join(lines)


# --------------------------------------------------------------------------- in the subprocess


def _fit(
    tf: Any,
    strategy: Any,
    *,
    steps: int,
    epochs: int,
    batch_per_replica: int,
    width: int,
    seed: int,
) -> dict[str, Any]:
    """Build, train and check a Keras MLP under ``strategy``; the step times in ms."""
    import keras
    import numpy as np

    from labkit.scaling.train_ddp import IN_FEATURES, OUT_FEATURES

    replicas = strategy.num_replicas_in_sync
    global_batch = batch_per_replica * replicas
    keras.utils.set_random_seed(seed)
    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input((IN_FEATURES,)),
                keras.layers.Dense(width, activation="relu"),
                keras.layers.Dense(width, activation="relu"),
                keras.layers.Dense(OUT_FEATURES),
            ]
        )
        model.compile(optimizer=keras.optimizers.SGD(0.3), loss="mse")
    rng = np.random.default_rng(seed)
    teacher = rng.standard_normal((IN_FEATURES, OUT_FEATURES)) / IN_FEATURES**0.5
    x = rng.standard_normal((steps * global_batch, IN_FEATURES)).astype("float32")
    y = np.tanh(x @ teacher).astype("float32")
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch).repeat()
    samples: list[float] = []

    class StepTimer(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            self.start = time.perf_counter()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            float((logs or {}).get("loss", 0.0))  # the value exists only when the step is done
            samples.append((time.perf_counter() - self.start) * 1e3)

    history = model.fit(
        data, epochs=epochs, steps_per_epoch=steps, verbose=0, callbacks=[StepTimer()]
    )
    identical = True
    for weight in model.weights:
        copies = [v.numpy() for v in strategy.experimental_local_results(weight.value)]
        identical &= all(np.array_equal(copies[0], c) for c in copies[1:])
    return {
        "replicas": replicas,
        "devices": list(strategy.extended.worker_devices),
        "cross_device_ops": type(strategy.extended._cross_device_ops).__name__,
        "global_batch": global_batch,
        "parameter_count": int(model.count_params()),
        "step_ms": samples[WARMUP_STEPS:] or samples,
        "epoch_losses": [float(v) for v in history.history["loss"]],
        "replicas_identical": bool(identical),
    }


def measure(
    n_logical: int = 2,
    *,
    steps: int = 20,
    epochs: int = 3,
    batch_per_replica: int = 32,
    width: int = 64,
    seed: int = 0,
    baseline: bool = True,
) -> dict[str, Any]:
    """Split the CPU into ``n_logical`` devices and train; call in a fresh process only."""
    from labkit.core.optional import import_tensorflow

    tf = import_tensorflow("tf.distribute.MirroredStrategy")
    cpus = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(n_logical)]
        )
    except RuntimeError as exc:  # devices already initialized: not a fresh process
        raise RuntimeError(
            "TensorFlow's devices were already initialized in this process, so the CPU can no "
            "longer be split into logical devices; use labkit.scaling.mirrored.run_mirrored(), "
            "which runs this in a fresh process"
        ) from exc
    names = [d.name for d in tf.config.list_logical_devices("CPU")][:n_logical]
    opts = {
        "steps": steps,
        "epochs": epochs,
        "batch_per_replica": batch_per_replica,
        "width": width,
        "seed": seed,
    }
    runs = []
    if baseline and n_logical > 1:
        runs.append(_fit(tf, tf.distribute.MirroredStrategy(names[:1]), **opts))
    runs.append(_fit(tf, tf.distribute.MirroredStrategy(names), **opts))
    return {
        "kind": "mirrored",
        "tf_version": tf.__version__,
        "n_logical": n_logical,
        "batch_per_replica": batch_per_replica,
        "width": width,
        "runs": runs,
    }


# --------------------------------------------------------------------------- from a notebook


def run_mirrored(
    n_logical: int = 2,
    *,
    steps: int = 20,
    epochs: int = 3,
    batch_per_replica: int = 32,
    width: int = 64,
    baseline: bool = True,
    timeout_s: float = 180,
    env: Mapping[str, str] | None = None,
) -> MirroredRun:
    """Train a Keras MLP with MirroredStrategy over ``n_logical`` logical CPUs, in a fresh process.

    Raises :class:`labkit.MissingPackageError` (one line with the install
    command) when TensorFlow is missing, and
    :class:`labkit.scaling.launch.DistRunError` with the end of the
    subprocess's output when it fails.
    """
    from labkit.core.optional import TF_QUIET_ENV, MissingPackageError, is_installed
    from labkit.scaling.process import DistRunError, build_worker_env, run_process

    n_logical = check_positive_int("n_logical", n_logical)
    steps = check_positive_int("steps", steps)
    epochs = check_positive_int("epochs", epochs)
    batch_per_replica = check_positive_int("batch_per_replica", batch_per_replica)
    width = check_positive_int("width", width)
    if steps * epochs <= WARMUP_STEPS:
        raise ValueError(
            f"steps × epochs must exceed the {WARMUP_STEPS} warm-up steps, got {steps} × {epochs}"
        )
    check_real("timeout_s", timeout_s, low=0, low_open=True)
    worker_env = build_worker_env(1, env)
    if not is_installed("tensorflow"):
        raise MissingPackageError("tensorflow", "tf.distribute.MirroredStrategy")
    cmd = [
        sys.executable,
        "-m",
        "labkit.scaling.mirrored",
        "--n-logical",
        str(n_logical),
        "--steps",
        str(steps),
        "--epochs",
        str(epochs),
        "--batch-per-replica",
        str(batch_per_replica),
        "--width",
        str(width),
    ]
    if not baseline:
        cmd.append("--no-baseline")
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # leave TensorFlow's threads alone
        worker_env.pop(name, None)
    worker_env.update(TF_QUIET_ENV)
    worker_env.update(env or {})
    with tempfile.TemporaryDirectory(prefix="labkit-mirrored-") as folder:
        out = Path(folder) / "result.json"
        output = run_process(
            [*cmd, "--out", str(out)],
            timeout_s=timeout_s,
            env=worker_env,
            what="the MirroredStrategy run",
        )
        if output.returncode != 0 or not out.exists():
            lines = [ln for ln in output.stderr.splitlines() if ln.strip()][-20:]
            raise DistRunError(
                f"the MirroredStrategy run failed (exit code {output.returncode}). Last lines of "
                "its output:\n" + "\n".join(f"  | {ln}" for ln in lines)
            )
        data = json.loads(out.read_text(encoding="utf-8"))
    return MirroredRun.from_dict(data, wall_s=output.wall_s)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m labkit.scaling.mirrored [--json]``: run in this (fresh) process and report."""
    from labkit.core.optional import MissingPackageError

    parser = argparse.ArgumentParser(
        prog="python -m labkit.scaling.mirrored", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--n-logical", type=int, default=2, help="logical CPU devices (replicas)")
    parser.add_argument("--steps", type=int, default=20, help="steps per epoch")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-per-replica", type=int, default=32)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--no-baseline", action="store_true", help="skip the 1-replica comparison run"
    )
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line")
    parser.add_argument("--out", default=None, help="also write the JSON result to this file")
    args = parser.parse_args(argv)
    for name in ("n_logical", "steps", "epochs", "batch_per_replica", "width"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    try:
        data = measure(
            args.n_logical,
            steps=args.steps,
            epochs=args.epochs,
            batch_per_replica=args.batch_per_replica,
            width=args.width,
            seed=args.seed,
            baseline=not args.no_baseline,
        )
    except MissingPackageError as exc:
        print(f"labkit: {exc}", file=sys.stderr)
        return 1
    if args.out:
        Path(args.out).write_text(json.dumps(data), encoding="utf-8")
    print(json.dumps(data) if args.json else MirroredRun.from_dict(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())

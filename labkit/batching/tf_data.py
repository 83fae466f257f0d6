"""The tf.data half of notebook 08: the same synthetic samples through ``map``, parallel ``map``,
``cache`` and ``prefetch``, measured the way :mod:`labkit.batching.loaders` measures a DataLoader.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from labkit.batching.loaders import (
    LoaderComparison,
    LoaderRun,
    loop_args,
    profile_loop,
    require_batches_fit,
)
from labkit.batching.synthetic import SyntheticImages
from labkit.core.units import format_duration
from labkit.core.validate import check_choice, check_int
from labkit.timing.bench import Timing

#: The tf.data variants :func:`measure_tf_pipeline` builds, in order of adding one idea each.
#: "map+defaults" is "map" with tf.data's default graph optimizations left on (see
#: :func:`build_tf_pipeline`); every other variant turns tf.data's default rewrites off
#: (``apply_default_optimizations = False``), since they would blur what each one adds.
TF_VARIANTS: tuple[str, ...] = (
    "map",
    "parallel",
    "parallel+prefetch",
    "parallel+cache+prefetch",
    "map+defaults",
    "parallel+cache",
)


#: The variants :func:`compare_tf_pipelines` measures by default.
DEFAULT_TF_VARIANTS: tuple[str, ...] = TF_VARIANTS[:5]


def _check_variant(variant: Any) -> tuple[bool, bool, bool, bool]:
    """(parallel, cache, prefetch, tf.data's default optimizations) for a variant's name."""
    parts = check_choice("variant", variant, TF_VARIANTS).split("+")
    return parts[0] == "parallel", "cache" in parts, "prefetch" in parts, "defaults" in parts


def build_tf_pipeline(
    variant: str, dataset: SyntheticImages, batch_size: int, epoch_batches: int
) -> Any:
    """The ``tf.data`` pipeline of ``variant`` over ``dataset``'s samples, repeated forever.

    Decoding and augmenting run as ``tf.numpy_function`` (the same numpy
    code as the DataLoader's). Cached variants decode once and cache the
    decoded images, then augment after the cache, so augmentation stays
    per epoch as it must; the epoch is ``epoch_batches`` batches.

    tf.data rewrites pipelines by default (``tf.data.Options``'
    ``experimental_optimization``): among others ``map_parallelization`` runs a
    stateless map in parallel, ``inject_prefetch`` adds a prefetch at the end,
    and ``map_and_batch_fusion`` fuses the last map with the batch into one
    stage that fills the next batch in a background thread. Each variant but
    "map+defaults" sets ``apply_default_optimizations = False`` (only rewrites
    enabled explicitly run, and this enables none), so that it does exactly
    what its name says; "map+defaults" shows what the defaults buy. Autotuning
    (``tf.data.Options().autotune``) is a separate option and stays on.
    """
    from labkit.core.optional import import_tensorflow

    parallel, cache, prefetch, defaults = _check_variant(variant)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    epoch_batches = check_int("epoch_batches", epoch_batches, minimum=1)
    tf = import_tensorflow("tf.data pipelines")
    calls = tf.data.AUTOTUNE if parallel else None
    px, size = dataset.decode_px, dataset.image_size

    def decode(i: Any) -> tuple[np.ndarray, np.int64]:
        image, label = dataset.decode(int(i))
        return np.ascontiguousarray(image), np.int64(label)

    def augment(image: Any, i: Any) -> np.ndarray:
        return dataset.augment(image, int(i))

    def tf_decode(i: Any) -> Any:
        image, label = tf.numpy_function(decode, [i], [tf.float32, tf.int64], stateful=False)
        image.set_shape((3, px, px))
        label.set_shape(())
        return i, image, label

    def tf_augment(i: Any, image: Any, label: Any) -> Any:
        out = tf.numpy_function(augment, [image, i], tf.float32, stateful=False)
        out.set_shape((3, size, size))
        return out, label

    ds = tf.data.Dataset.range(batch_size * epoch_batches)
    if cache:
        ds = ds.map(tf_decode, num_parallel_calls=calls).cache().repeat()
    else:
        ds = ds.repeat().map(tf_decode, num_parallel_calls=calls)
    ds = ds.map(tf_augment, num_parallel_calls=calls).batch(batch_size, drop_remainder=True)
    if prefetch:
        ds = ds.prefetch(tf.data.AUTOTUNE)
    if not defaults:
        options = tf.data.Options()
        options.experimental_optimization.apply_default_optimizations = False
        ds = ds.with_options(options)
    return ds


def _check_tf_args(
    variant: Any,
    batch_size: Any,
    steps: Any,
    warmup_steps: Any,
    step_ms: Any,
    epoch_batches: Any,
    **_: Any,
) -> tuple[int, int, int, float, int]:
    """:func:`measure_tf_pipeline`'s arguments (all of them: ``**bound.arguments``), checked
    before TensorFlow is imported."""
    _check_variant(variant)
    batch_size, steps, warmup_steps, step_value = loop_args(
        batch_size, steps, warmup_steps, step_ms
    )
    if step_value is None:
        raise ValueError(
            "step_ms must be a number of milliseconds for tf.data: the step is a fixed wait"
        )
    epoch_batches = check_int("epoch_batches", epoch_batches, minimum=1)
    return batch_size, steps, warmup_steps, step_value, epoch_batches


def measure_tf_pipeline(
    variant: str = "map",
    *,
    batch_size: int = 32,
    steps: int = 20,
    warmup_steps: int = 2,
    step_ms: float = 20.0,
    dataset: SyntheticImages | None = None,
    epoch_batches: int = 4,
) -> LoaderRun:
    """Feed a fixed step from a ``tf.data`` pipeline (see :data:`TF_VARIANTS`) and measure the wait.

    - "map": ``map(prepare)``, one sample at a time while the loop waits;
    - "parallel": ``map(prepare, num_parallel_calls=tf.data.AUTOTUNE)``,
      samples prepared by a thread pool. The numpy work runs under
      ``tf.numpy_function``, which holds Python's GIL except where numpy
      releases it, so threads speed it up by less than the core count
      (a simulated I/O wait, which releases the GIL, parallelises fully);
    - "+prefetch": ``prefetch(tf.data.AUTOTUNE)`` prepares the next batches
      while the step runs;
    - "+cache": ``cache()`` after decoding: the first epoch decodes, later
      ones read decoded images from memory. Cached variants are measured
      from the second epoch on;
    - "map+defaults": "map" with tf.data's default rewrites on, which
      parallelise a stateless map and inject a final prefetch by themselves
      (the other variants turn them off to show one idea at a time).

    TensorFlow missing: ``MissingPackageError`` naming the install command.
    """
    from labkit.core.optional import import_tensorflow

    batch_size, steps, warmup_steps, step_value, epoch_batches = _check_tf_args(
        variant, batch_size, steps, warmup_steps, step_ms, epoch_batches
    )
    dataset = SyntheticImages() if dataset is None else dataset
    # in the step, next, prefetched, and (cached variants) a whole epoch of decoded images
    require_batches_fit(
        dataset,
        batch_size,
        4 + (epoch_batches if "cache" in variant else 0),
        f"measure_tf_pipeline({variant!r})",
    )
    import_tensorflow("tf.data pipelines")
    ds = build_tf_pipeline(variant, dataset, batch_size, epoch_batches)
    warmup = max(warmup_steps, epoch_batches) if "cache" in variant else warmup_steps

    def step(x: Any, y: Any) -> None:
        time.sleep(step_value / 1e3)

    startup_ms, waits, computes = profile_loop(ds, step, lambda: None, warmup, steps)
    notes = (
        ("cached: measured from the second epoch on, once the first has filled the cache",)
        if "cache" in variant
        else ()
    )
    return LoaderRun(
        label=f"tf.data {variant}",
        framework="tf.data",
        batch_size=batch_size,
        steps=steps,
        step=f"a fixed {format_duration(step_value)} step (host idle, like a GPU computing)",
        device="cpu",
        dataset=dataset.describe(),
        wait=Timing(tuple(waits), label="waiting for the next batch", device="cpu"),
        compute=Timing(tuple(computes), label="the step", device="cpu"),
        startup_ms=startup_ms,
        notes=notes,
        settings={"variant": variant, "epoch_batches": epoch_batches},
    )


def compare_tf_pipelines(
    variants: Sequence[str] = DEFAULT_TF_VARIANTS, **common: Any
) -> LoaderComparison:
    """:func:`measure_tf_pipeline` for each variant, same samples and step."""
    variants = (variants,) if isinstance(variants, str) else variants  # one name: not its letters
    if not variants:
        raise ValueError(f"variants must name at least one of {TF_VARIANTS}")
    for v in variants:
        check_choice("variants", v, TF_VARIANTS)
    signature = inspect.signature(measure_tf_pipeline)
    for v in variants:  # every run's arguments are checked before the first one starts
        bound = signature.bind(v, **common)
        bound.apply_defaults()
        _check_tf_args(**bound.arguments)
    if "dataset" not in common:
        common["dataset"] = SyntheticImages()
    return LoaderComparison(tuple(measure_tf_pipeline(v, **common) for v in variants))

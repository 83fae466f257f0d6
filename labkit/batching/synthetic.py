"""Synthetic images whose loading costs what a real decoder's does: a DCT per 8x8 block, file I/O as sleep, Python work that holds the GIL.

The data every loader lesson of notebook 08 reads, with no download: :class:`SyntheticImages`
and what one sample costs (:func:`sample_cost`, :func:`thread_scaling`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from labkit.core.results import JsonRecord
from labkit.core.units import format_duration
from labkit.core.validate import check_int, check_ms, check_seed
from labkit.timing.bench import Timing

_k = np.arange(8)


_LOOPS_PER_MS: list[float] = []


#: The 8×8 DCT-II basis (a JPEG decoder's inverse transform multiplies by it on both sides).
_DCT = np.cos((2 * _k[:, None] + 1) * _k[None, :] * np.pi / 16).astype(np.float32)


#: Smaller high-frequency coefficients, as in a real compressed image.
_FALLOFF = (1.0 / (1 + _k[:, None] + _k[None, :])).astype(np.float32)


def decode_sample(
    index: int,
    *,
    decode_px: int = 96,
    io_ms: float = 0.0,
    python_ms: float = 0.0,
    num_classes: int = 10,
    seed: int = 0,
) -> tuple[np.ndarray, int]:
    """Read and decode sample ``index``: a 3×decode_px×decode_px float32 image and its label.

    The encoded image is a grid of 8×8 blocks of DCT coefficients drawn from
    a generator seeded by ``(seed, index)``, so a sample is the same every
    time it is read. Decoding is the inverse DCT of every block, in numpy
    (einsum, which runs no BLAS thread pool and releases the GIL in its
    loops). ``io_ms`` sleeps first: the latency of reading the file from
    disk or network, time a worker spends waiting rather than computing.
    ``python_ms`` adds that much pure-Python work (a bytecode loop), which
    holds the GIL throughout, like a decoder written in Python.
    """
    index = check_int("index", index, minimum=0)
    if check_int("decode_px", decode_px, minimum=8) % 8:
        raise ValueError(f"decode_px must be a multiple of 8 (8×8 blocks), got {decode_px!r}")
    io_ms = check_ms("io_ms", io_ms, allow_zero=True)
    python_ms = check_ms("python_ms", python_ms, allow_zero=True)
    num_classes = check_int("num_classes", num_classes, minimum=1)
    seed = check_seed("seed", seed)
    if io_ms > 0:
        time.sleep(io_ms / 1e3)
    if python_ms > 0:
        _python_work(python_ms)
    rng = np.random.default_rng((seed, index))
    blocks = decode_px // 8
    coeffs = rng.standard_normal((3 * blocks * blocks, 8, 8), dtype=np.float32)
    coeffs *= _FALLOFF
    rows = np.einsum("nij,kj->nik", coeffs, _DCT)
    pixels = np.einsum("ki,nij->nkj", _DCT, rows)
    image = pixels.reshape(3, blocks, blocks, 8, 8).transpose(0, 1, 3, 2, 4)
    return image.reshape(3, decode_px, decode_px), int(rng.integers(num_classes))


def _python_work(ms: float) -> int:
    """Run about ``ms`` milliseconds of Python bytecode (the GIL stays held); returns the count.

    A fixed amount of work, not a deadline: the loop count per ms is
    calibrated once per process, so two threads sharing the GIL take twice
    as long, as real Python code would.
    """

    def loops(n: int) -> int:
        count = 0
        for _ in range(n):
            count += 1
        return count

    if not _LOOPS_PER_MS:
        start = time.perf_counter()
        loops(200_000)
        _LOOPS_PER_MS.append(200_000 / max((time.perf_counter() - start) * 1e3, 1e-6))
    return loops(max(1, round(ms * _LOOPS_PER_MS[0])))


def augment_sample(
    image: np.ndarray, index: int, *, image_size: int = 32, seed: int = 0
) -> np.ndarray:
    """Random crop (7/8 of the side), horizontal flip, downscale, brightness jitter, normalise.

    Seeded by ``(seed, index, 1)``: deterministic here so runs repeat; a real
    pipeline draws new crops every epoch.
    """
    index = check_int("index", index, minimum=0)
    side = image.shape[-1]
    if check_int("image_size", image_size, minimum=1) > side:
        raise ValueError(f"image_size must be at most the image's side ({side}), got {image_size}")
    seed = check_seed("seed", seed)
    rng = np.random.default_rng((seed, index, 1))
    crop = max(image_size, side * 7 // 8)
    y0, x0 = (int(v) for v in rng.integers(0, side - crop + 1, size=2))
    out = image[:, y0 : y0 + crop, x0 : x0 + crop]
    if rng.random() < 0.5:
        out = out[:, :, ::-1]
    f = crop // image_size
    out = out[:, : f * image_size, : f * image_size]
    if f > 1:
        out = out.reshape(3, image_size, f, image_size, f).mean(axis=(2, 4))
    out = out * rng.uniform(0.8, 1.2, size=(3, 1, 1)).astype(np.float32)
    mean = out.mean(axis=(1, 2), keepdims=True)
    std = out.std(axis=(1, 2), keepdims=True) + 1e-5
    return np.ascontiguousarray((out - mean) / std, dtype=np.float32)


class SyntheticImages:
    """A map-style dataset of ``n`` images that cost real work to prepare (:func:`decode_sample`).

    ``dataset[i]`` returns ``(image, label)``: a float32 numpy array
    3×image_size×image_size and an int. It needs no torch: the DataLoader
    accepts any object with ``__len__`` and ``__getitem__``, and its workers
    import this class from ``labkit.batching.synthetic`` (a class defined in a
    notebook cell could not be found by a worker started with spawn or
    forkserver).

    The cost of a sample: ``decode_px`` sets the numpy decode work (96 px:
    about 1 ms, with augmentation, on the reference 2-core machine; it grows with the square),
    ``io_ms`` adds a simulated storage latency (a sleep), ``python_ms``
    pure-Python work that holds the GIL.
    """

    def __init__(
        self,
        n: int = 1024,
        *,
        image_size: int = 32,
        decode_px: int = 96,
        io_ms: float = 0.0,
        python_ms: float = 0.0,
        num_classes: int = 10,
        seed: int = 0,
    ) -> None:
        self.n = check_int("n", n, minimum=1)
        self.image_size = check_int("image_size", image_size, minimum=2)
        self.decode_px = check_int("decode_px", decode_px, minimum=8)
        if self.decode_px % 8:
            raise ValueError(
                "decode_px must be a multiple of 8 (the decoder works on 8×8 blocks), "
                f"got {decode_px!r}"
            )
        if self.decode_px < self.image_size:
            raise ValueError(f"decode_px ({decode_px}) must be at least image_size ({image_size})")
        self.io_ms = check_ms("io_ms", io_ms, allow_zero=True)
        self.python_ms = check_ms("python_ms", python_ms, allow_zero=True)
        self.num_classes = check_int("num_classes", num_classes, minimum=2)
        self.seed = check_seed("seed", seed)

    def __len__(self) -> int:
        return self.n

    def decode(self, index: int) -> tuple[np.ndarray, int]:
        return decode_sample(
            index,
            decode_px=self.decode_px,
            io_ms=self.io_ms,
            python_ms=self.python_ms,
            num_classes=self.num_classes,
            seed=self.seed,
        )

    def augment(self, image: np.ndarray, index: int) -> np.ndarray:
        return augment_sample(image, index, image_size=self.image_size, seed=self.seed)

    def __getitem__(self, index: int) -> tuple[np.ndarray, int]:
        if not -self.n <= index < self.n:
            raise IndexError(f"index {index} is out of range for {self.n} samples")
        index = int(index) % self.n
        image, label = self.decode(index)
        return self.augment(image, index), label

    def with_length(self, n: int) -> SyntheticImages:
        return SyntheticImages(
            n,
            image_size=self.image_size,
            decode_px=self.decode_px,
            io_ms=self.io_ms,
            python_ms=self.python_ms,
            num_classes=self.num_classes,
            seed=self.seed,
        )

    def describe(self) -> str:
        extra = ""
        if self.python_ms:
            extra += f" + {format_duration(self.python_ms)} of Python (holds the GIL)"
        if self.io_ms:
            extra += f" + {format_duration(self.io_ms)} simulated I/O"
        return (
            f"{self.image_size}×{self.image_size} images decoded from "
            f"{self.decode_px}×{self.decode_px}{extra} per sample"
        )

    def __repr__(self) -> str:
        return (
            f"SyntheticImages(n={self.n}, image_size={self.image_size}, "
            f"decode_px={self.decode_px}, io_ms={self.io_ms}, python_ms={self.python_ms}, "
            f"num_classes={self.num_classes}, seed={self.seed})"
        )


def sample_cost(
    dataset: SyntheticImages | None = None, *, warmup_ms: float = 5.0, rep_ms: float = 50.0
) -> Timing:
    """How long one sample takes to prepare in this process (:func:`labkit.timing.bench.bench`).

    Multiply by the batch size to get the time one worker needs per batch:
    if that exceeds the step, one worker cannot keep up.
    """
    from labkit.timing.bench import bench

    dataset = SyntheticImages() if dataset is None else dataset
    counter = iter(range(10**9))

    def one_sample() -> None:
        dataset[next(counter) % len(dataset)]

    return bench(
        one_sample, warmup_ms=warmup_ms, rep_ms=rep_ms, device="cpu", label="one sample", warn=False
    )


@dataclass(frozen=True)
class ThreadScaling(JsonRecord):
    """The same samples prepared by one thread and by ``threads`` threads of one process.

    A thread pool (tf.data's parallel map, or ``concurrent.futures``) can
    only speed up the parts of the preparation that release Python's GIL:
    numpy's loops and waiting on I/O do, Python bytecode does not.
    """

    json_extra = ("speedup",)

    threads: int
    samples: int
    serial: Timing = field(repr=False)
    threaded: Timing = field(repr=False)
    dataset: str = ""

    @property
    def speedup(self) -> float:
        return self.serial.median_ms / self.threaded.median_ms

    def __str__(self) -> str:
        from labkit.accel.common import times

        return (
            f"{self.samples} samples ({self.dataset}): 1 thread "
            f"{format_duration(self.serial.median_ms)}, {self.threads} threads "
            f"{format_duration(self.threaded.median_ms)}: {times(self.speedup)} the speed of one"
        )


def thread_scaling(
    dataset: SyntheticImages | None = None,
    *,
    threads: int = 2,
    samples: int = 32,
    warmup_ms: float = 0.0,
    rep_ms: float = 200.0,
) -> ThreadScaling:
    """Prepare ``samples`` samples in one thread, then in ``threads``; both timed by ``bench``.

    The ratio is the most any thread pool can gain on this preparation (a
    parallel map in tf.data runs it under ``tf.numpy_function``, in threads).
    """
    from concurrent.futures import ThreadPoolExecutor

    from labkit.timing.bench import bench

    dataset = SyntheticImages() if dataset is None else dataset
    threads = check_int("threads", threads, minimum=2)
    samples = check_int("samples", samples, minimum=1)
    indices = [i % len(dataset) for i in range(samples)]

    def serial() -> None:
        for i in indices:
            dataset[i]

    opts: dict[str, Any] = {
        "warmup_ms": warmup_ms,
        "rep_ms": rep_ms,
        "min_reps": 3,
        "device": "cpu",
        "warn": False,
    }
    with ThreadPoolExecutor(threads) as pool:

        def threaded() -> None:
            list(pool.map(dataset.__getitem__, indices))

        one = bench(serial, label="1 thread", **opts)
        many = bench(threaded, label=f"{threads} threads", **opts)
    return ThreadScaling(threads, samples, one, many, dataset.describe())

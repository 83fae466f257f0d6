"""``scaled_dot_product_attention``'s backends against sequence length: time and peak memory.

PyTorch picks a backend for ``F.scaled_dot_product_attention`` per call;
``torch.nn.attention.sdpa_kernel`` restricts the choice. The *math* backend
writes the batch × heads × N × N score matrix (and its softmax) to memory;
the fused ones (FlashAttention, memory-efficient attention, cuDNN) keep
tiles of it on chip and never store it, so their extra memory grows with N,
not N². PyTorch has a fused flash-attention kernel for CPUs too
(``aten::_scaled_dot_product_flash_attention_for_cpu``).

Time: the backends run round-robin at each length (:func:`labkit.interleave`).
Peak memory: one more call per backend and length, measured on a GPU with
``torch.cuda.max_memory_allocated`` and on a CPU with the profiler's memory
timeline (``torch.profiler.profile(profile_memory=True).export_memory_timeline``):
the most bytes the call had allocated at once, beyond q, k and v (the CPU's
timeline counts them too; they are subtracted).
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from labkit.core.optional import import_optional
from labkit.core.units import align_columns, format_bytes, format_duration
from labkit.core.validate import (
    check_choice,
    check_choices,
    check_ms,
    check_positive_int,
    check_sizes,
    check_torch_device,
)
from labkit.roofline.model import dtype_bytes

#: labkit's names for the backends → torch.nn.attention.SDPBackend's members.
BACKENDS = {
    "math": "MATH",
    "flash": "FLASH_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
    "cudnn": "CUDNN_ATTENTION",
}
DTYPES = ("float32", "bfloat16", "float16")
#: Backends PyTorch implements for CUDA devices only; on a CPU their probe fails with its
#: generic "No viable backend" message, which names no reason.
CPU_LESS = ("efficient", "cudnn")
#: The math backend's peak, in float32 score matrices: the scores, their softmax and a
#: temporary (measured on a CPU: 3.0× the float32 scores; it computes 16-bit inputs in float32).
MATH_PEAK_SCORE_COPIES = 3


def math_peak_bytes(seq_len: int, *, batch: int, heads: int) -> int:
    """An upper estimate of the math backend's extra memory at ``seq_len``, any dtype."""
    return MATH_PEAK_SCORE_COPIES * batch * heads * seq_len * seq_len * 4


@dataclass(frozen=True)
class SdpaRun:
    """One backend at one sequence length."""

    backend: str
    seq_len: int
    median_ms: float
    ratio: float
    ratio_low: float
    ratio_high: float
    peak_bytes: int


@dataclass(frozen=True)
class SdpaSweep:
    """Every backend that runs here, at every length; ``missing`` says why the others do not."""

    device: str
    dtype: str
    batch: int
    heads: int
    head_dim: int
    runs: tuple[SdpaRun, ...]
    missing: dict[str, str] = field(default_factory=dict)

    def score_bytes(self, seq_len: int) -> int:
        """Bytes of one N × N score matrix for every head: what the math backend stores."""
        size = dtype_bytes(self.dtype)
        return self.batch * self.heads * seq_len * seq_len * size

    def run(self, backend: str, seq_len: int) -> SdpaRun:
        for r in self.runs:
            if (r.backend, r.seq_len) == (backend, seq_len):
                return r
        raise KeyError(f"no run of {backend!r} at N = {seq_len}")

    def __str__(self) -> str:
        head = (
            f"causal attention on {self.device}, {self.dtype}, batch {self.batch}, "
            f"{self.heads} heads of {self.head_dim}; peak = most bytes allocated at once "
            "during the call, beyond q, k and v"
        )
        base = self.runs[0].backend if self.runs else "math"
        rows = [
            [
                "backend",
                "N",
                "median",
                f"speed vs {base}: median (range) per round",
                "peak memory",
                "N×N scores",
            ]
        ]
        for r in self.runs:
            span = (
                f"{r.ratio:.2f}× ({r.ratio_low:.2f}× to {r.ratio_high:.2f}×)"
                if r.backend != base
                else ""
            )
            rows.append(
                [
                    r.backend,
                    f"{r.seq_len:,}",
                    format_duration(r.median_ms),
                    span,
                    format_bytes(r.peak_bytes),
                    format_bytes(self.score_bytes(r.seq_len)),
                ]
            )
        lines = [head, *align_columns(rows)]
        lines += [f"{name}: not available here ({why})" for name, why in self.missing.items()]
        return "\n".join(lines)


def _inputs(torch: Any, batch: int, heads: int, n: int, head_dim: int, dtype: Any, dev: Any) -> Any:
    gen = torch.Generator().manual_seed(0)
    return [
        torch.randn(batch, heads, n, head_dim, generator=gen).to(device=dev, dtype=dtype)
        for _ in range(3)
    ]


def backend_problem(
    backend: str, device: Any = "cpu", dtype: str = "float32", head_dim: int = 64
) -> str | None:
    """None if ``backend`` runs here for ``dtype`` and ``head_dim``, else why not (the error's
    first line): which fused kernels exist depends on the device, dtype, head size and build."""
    torch = import_optional("torch", "scaled_dot_product_attention")
    from torch.nn.attention import SDPBackend, sdpa_kernel

    name = check_choice("backend", backend, tuple(BACKENDS))
    member = getattr(SDPBackend, BACKENDS[name], None)
    if member is None:
        return f"this torch ({torch.__version__}) has no SDPBackend.{BACKENDS[name]}"
    q, k, v = _inputs(torch, 1, 1, 16, head_dim, getattr(torch, dtype), torch.device(device))
    try:
        with sdpa_kernel(member):
            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    except RuntimeError as exc:
        if q.device.type == "cpu" and name in CPU_LESS:  # torch's message names no reason
            return (
                "PyTorch has no CPU kernel for it: on a CPU it chooses between flash and math "
                "only (sdp_utils_cpp.cpp, select_sdp_backend_cpp)"
            )
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return first[:200]
    return None


def peak_bytes(call: Any, device: Any, *, input_bytes: int = 0) -> int:
    """The most bytes ``call()`` had allocated at once, beyond what was allocated before it.

    On a GPU the allocator's peak over what was allocated before the call. On a
    CPU the profiler's memory timeline, which also counts the tensors the call
    reads (they exist while it runs: a call that only reads q, k and v peaks at
    their size), so the caller passes their bytes as ``input_bytes`` and they
    are subtracted.
    """
    torch = import_optional("torch", "measuring peak memory")
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        before = torch.cuda.memory_allocated(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        call()
        torch.cuda.synchronize(dev)
        return max(0, torch.cuda.max_memory_allocated(dev) - before)
    from torch.profiler import ProfilerActivity, profile

    from labkit.profiling.common import captured_output_fds

    notices: list[str] = []  # Kineto's timestamped "profiler_start" lines, kept off the output
    with (
        captured_output_fds(notices),
        profile(
            activities=[ProfilerActivity.CPU],
            profile_memory=True,
            record_shapes=True,
            with_stack=True,
        ) as prof,
    ):
        call()
    fd, path = tempfile.mkstemp(suffix=".json", prefix="labkit-memory-")
    os.close(fd)
    try:
        with warnings.catch_warnings():  # deprecated in favour of a CUDA-only API; still the CPU's
            warnings.simplefilter("ignore", FutureWarning)
            prof.export_memory_timeline(path, device="cpu")
        with open(path, encoding="utf-8") as f:
            _times, sizes = json.load(f)
    finally:
        os.unlink(path)
    return max(0, max((sum(s) for s in sizes), default=0) - input_bytes)


def sdpa_sweep(
    seq_lens: Sequence[int] = (256, 512, 1024, 2048),
    *,
    batch: int = 1,
    heads: int = 4,
    head_dim: int = 64,
    dtype: str = "float32",
    device: Any = "cpu",
    backends: Sequence[str] = ("math", "flash", "efficient", "cudnn"),
    rounds: int = 3,
    warmup_ms: float = 10.0,
    rep_ms: float = 40.0,
) -> SdpaSweep:
    """Time causal attention with each backend that runs here, and measure its peak memory.

    Backends that cannot run on ``device`` for ``dtype`` are listed in the
    result's ``missing`` with PyTorch's reason, not raised: which fused
    kernels exist depends on the device, the dtype and the torch build.
    """
    lens = check_sizes(seq_lens, "seq_lens")
    batch = check_positive_int("batch", batch)
    heads = check_positive_int("heads", heads)
    head_dim = check_positive_int("head_dim", head_dim)
    dtype = check_choice("dtype", dtype, DTYPES)
    names = check_choices("backends", backends, tuple(BACKENDS))
    rounds = check_positive_int("rounds", rounds)
    warmup_ms = check_ms("warmup_ms", warmup_ms)
    rep_ms = check_ms("rep_ms", rep_ms)
    check_torch_device(device, allow_none=False)
    torch = import_optional("torch", "scaled_dot_product_attention")
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from labkit.machine.memory import require_memory_fits
    from labkit.timing.interleave import interleave

    dev = torch.device(device)
    if "math" in names:  # the math path holds the scores and their softmax at once
        n = max(lens)
        require_memory_fits(
            math_peak_bytes(n, batch=batch, heads=heads),
            dev,
            arrays=1,
            what=f"sdpa_sweep's math backend at N = {n:,}",
        )
    missing = {}
    usable = []
    for name in names:
        problem = backend_problem(name, dev, dtype, head_dim)
        if problem is None:
            usable.append(name)
        else:
            missing[name] = problem
    if not usable:
        raise RuntimeError(f"no attention backend runs on {dev} for {dtype}: {missing}")
    runs = []
    for n in lens:
        q, k, v = _inputs(torch, batch, heads, n, head_dim, getattr(torch, dtype), dev)

        def call(name: str, q: Any = q, k: Any = k, v: Any = v) -> Any:
            with sdpa_kernel(getattr(SDPBackend, BACKENDS[name])):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

        timed = interleave(
            {name: functools.partial(call, name) for name in usable},
            rounds=max(rounds, 2),
            rep_ms=rep_ms,
            warmup_ms=warmup_ms,
            baseline="math" if "math" in usable else None,
            device=str(dev),
        )
        for name in usable:
            runs.append(
                SdpaRun(
                    backend=name,
                    seq_len=n,
                    median_ms=timed[name].median_ms,
                    ratio=timed[name].ratio,
                    ratio_low=timed[name].ratio_low,
                    ratio_high=timed[name].ratio_high,
                    peak_bytes=peak_bytes(
                        functools.partial(call, name),
                        dev,
                        input_bytes=sum(t.numel() * t.element_size() for t in (q, k, v)),
                    ),
                )
            )
    return SdpaSweep(str(dev), dtype, batch, heads, head_dim, tuple(runs), missing)

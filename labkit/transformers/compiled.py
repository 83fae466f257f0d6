"""``torch.compile`` of one transformer block: the cold and warm first call, then steady state.

A block's eager forward pass launches one kernel per op, and each elementwise
op (layer norm, GELU, the residual adds) reads and writes its whole tensor.
Inductor fuses those into fewer kernels; the matrix products stay library
calls. :func:`labkit.accel.compilers.torch_compile_benchmark` does the
timing (compile caches emptied for the cold call, eager without page
faults, round-robin steady state); this module only builds the block.
"""

from __future__ import annotations

from typing import Any

from labkit.core.optional import import_optional
from labkit.core.validate import check_positive_int, check_torch_device
from labkit.transformers.config import GPTConfig

#: The block compiled in notebook 11: big enough that its elementwise ops move megabytes.
COMPILE_CONFIG = GPTConfig(vocab=256, context=256, layers=1, heads=4, d_model=256)


def compile_block_benchmark(
    config: GPTConfig = COMPILE_CONFIG,
    *,
    batch: int = 4,
    seq_len: int = 128,
    device: Any = "cpu",
    rounds: int = 2,
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
) -> Any:
    """Eager against ``torch.compile`` for one block's forward pass (no gradients).

    Returns :class:`labkit.accel.compilers.CompileResult`.
    """
    batch = check_positive_int("batch", batch)
    seq_len = check_positive_int("seq_len", seq_len)
    if seq_len > config.context:
        raise ValueError(
            f"seq_len ({seq_len}) exceeds the config's context ({config.context}); lower "
            "seq_len or raise GPTConfig(context=...)"
        )
    check_torch_device(device, allow_none=False)
    torch = import_optional("torch", "torch.compile of a block")
    from labkit.accel.compilers import torch_compile_benchmark
    from labkit.transformers.model import Block

    dev = torch.device(device)
    torch.manual_seed(0)
    block = Block(config).to(dev).train(False)
    x = torch.randn(batch, seq_len, config.d_model, device=dev)

    def forward(x: Any) -> Any:
        return block(x)[0]

    with torch.no_grad():
        return torch_compile_benchmark(
            forward, x, device=dev, rounds=rounds, warmup_ms=warmup_ms, rep_ms=rep_ms
        )

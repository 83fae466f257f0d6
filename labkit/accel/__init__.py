"""Framework acceleration in PyTorch and TensorFlow (notebook 04).

One small module per lesson; every function imports its framework lazily, so
``import labkit.accel`` costs nothing:

- :mod:`~labkit.accel.placement`: where TensorFlow really put an op (soft placement).
- :mod:`~labkit.accel.sync_points`: ``.item()`` per step vs one sync at the end.
- :mod:`~labkit.accel.precision`: float32-precision settings, oneDNN bf16 matmuls, autocast / Keras mixed precision.
- :mod:`~labkit.accel.compilers`: ``torch.compile`` and XLA, first call vs steady state.
- :mod:`~labkit.accel.side_by_side`: the same MLP step in torch and Keras/TF.
- :mod:`~labkit.accel.tf_memory`: what TensorFlow will do with GPU memory.
"""

from __future__ import annotations

from labkit.accel.compilers import (
    CompileResult,
    XlaResult,
    elementwise_chain,
    tf_xla_benchmark,
    torch_compile_benchmark,
)
from labkit.accel.placement import PlacementDemo, tf_device_log, tf_soft_placement_demo
from labkit.accel.precision import (
    MixedPrecisionResult,
    mixed_precision_keras,
    mixed_precision_torch,
)
from labkit.accel.side_by_side import VARIANTS, SideBySide, mlp_side_by_side
from labkit.accel.sync_points import (
    AsyncLaunchResult,
    SyncPointsResult,
    async_launch_demo,
    sync_points_benchmark,
)
from labkit.accel.tf32 import Fp32MatmulResult, fp32_matmul_in_bf16, tf32_defaults
from labkit.accel.tf_memory import TfMemoryStatus, tf_memory_growth_status

__all__ = [
    "VARIANTS",
    "AsyncLaunchResult",
    "CompileResult",
    "XlaResult",
    "elementwise_chain",
    "Fp32MatmulResult",
    "fp32_matmul_in_bf16",
    "MixedPrecisionResult",
    "PlacementDemo",
    "SideBySide",
    "SyncPointsResult",
    "TfMemoryStatus",
    "async_launch_demo",
    "mixed_precision_keras",
    "mixed_precision_torch",
    "mlp_side_by_side",
    "sync_points_benchmark",
    "tf32_defaults",
    "tf_device_log",
    "tf_memory_growth_status",
    "tf_soft_placement_demo",
    "tf_xla_benchmark",
    "torch_compile_benchmark",
]

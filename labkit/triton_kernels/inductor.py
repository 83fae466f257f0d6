"""What ``torch.compile`` writes for a small fused op: Triton on a GPU, C++ with OpenMP on a CPU.

Why show it: TorchInductor, torch.compile's default backend, generates
Triton kernels for NVIDIA GPUs, so most Triton code that runs today was
written by it; on a CPU it writes C++ instead (its C++/OpenMP backend, with
explicit vectorization). The op here, ``softmax(2x + 1)`` over rows, is the
softmax kernel of notebook 12 with a scale and a shift fused in front.
:func:`torch._inductor.utils.run_and_get_code` compiles it and returns the
source Inductor wrote; it calls ``torch._dynamo.reset()`` first, which
drops every compiled function of the process.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class GeneratedCode:
    """The module Inductor wrote for one compiled function, and what is in it."""

    device: str
    language: str  # "Triton" or "C++"
    kernels: tuple[str, ...]  # the generated kernels' names
    source: str  # the whole generated module (Python, with the kernels inside)
    openmp: bool  # C++: "#pragma omp" (threads over rows)
    vectorized: bool  # C++: at::vec::Vectorized (SIMD); Triton: always (blocks)

    def kernel_source(self, max_lines: int = 40) -> str:
        """The first kernel's own source (the Triton function, or the C++ function)."""
        if self.language == "Triton":
            match = re.search(r"(@triton\.jit\ndef .*?)'''", self.source, re.S)
        else:
            match = re.search(r"r'''\n(.*?)'''", self.source, re.S)
        text = match.group(1).rstrip() if match else self.source
        lines = text.splitlines()
        if len(lines) > max_lines:
            lines = lines[:max_lines] + [f"... ({len(lines) - max_lines} more lines)"]
        return "\n".join(lines)

    def __str__(self) -> str:
        parts = [
            f"{self.device}: Inductor wrote {len(self.kernels)} {self.language} kernel"
            f"{'s' if len(self.kernels) != 1 else ''}: {', '.join(self.kernels)}"
        ]
        if self.language == "C++":
            parts.append(
                f"OpenMP threads: {'yes' if self.openmp else 'no'}; "
                f"SIMD vectors (at::vec::Vectorized): {'yes' if self.vectorized else 'no'}"
            )
        return "\n".join(parts)


def scaled_softmax(x: Any) -> Any:
    """softmax(2x + 1) over the last dimension: three ops that Inductor fuses into one kernel."""
    import torch

    return torch.softmax(x * 2 + 1, dim=-1)


def generated_code(device: str = "cpu", *, rows: int = 64, cols: int = 1000) -> GeneratedCode:
    """Compile :func:`scaled_softmax` on ``device`` and return what Inductor generated."""
    import torch
    from torch._inductor.utils import run_and_get_code

    x = torch.randn(rows, cols, device=device)
    compiled = torch.compile(scaled_softmax)
    result, codes = run_and_get_code(compiled, x)
    expected = scaled_softmax(x)
    if not torch.allclose(result, expected, rtol=1e-5, atol=1e-6):
        raise RuntimeError("the compiled function's output differs from eager torch's")
    source = "\n".join(codes)
    triton = "@triton.jit" in source
    names = (
        re.findall(r"def (triton_\w+)\(", source)
        if triton
        else re.findall(r"^(cpp_fused\w+) = async_compile", source, re.M)
    )
    return GeneratedCode(
        device=device,
        language="Triton" if triton else "C++",
        kernels=tuple(dict.fromkeys(names)),
        source=source,
        openmp="#pragma omp" in source,
        vectorized=triton or "at::vec::Vectorized" in source,
    )

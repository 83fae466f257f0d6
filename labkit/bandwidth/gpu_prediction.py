"""Notebook 02's GPU cells without a GPU: a named GPU's bandwidths, predicted and published.

Three models, one per cell:

- **device copy**: a copy reads and writes each byte once, so at best it runs at
  the spec sheet's memory bandwidth (counting read + write, as STREAM and
  ``bandwidthTest`` do); published copies and STREAM kernels say how close
  real ones come;
- **strided read**: the CUDA Best Practices Guide's 32-byte sector rule: a warp
  reading float32 values s apart uses 4 of every 32 bytes it fetches from
  stride 8 on, so the useful bandwidth is at best 1/min(s, 8) of the peak;
- **transfers**: a pinned copy runs at best at the host link's rate; a pageable
  one adds a staging copy on the host (section 4), so it is slower still.
"""

from __future__ import annotations

from labkit.machine.prediction import (
    GpuPrediction,
    by_id,
    choose_figures,
    spec_values,
    spec_verdicts,
)
from labkit.machine.published import GpuSpec, PublishedFigure

REFERENCE_NAME = "bandwidth"

#: The strides notebook 02's strided read uses on a GPU.
STRIDES = (1, 2, 4, 8, 16, 32)

#: Published host transfers: the DGX A100's pinned and pageable copies, a PCIe A100's, and a GH200's.
TRANSFER_FIGURES = (
    "dgx-a100-sxm4-80gb-h2d-pinned",
    "dgx-a100-sxm4-80gb-h2d-pageable",
    "dell-a100-80gb-pcie-h2d-pinned",
    "dell-a100-80gb-pcie-h2d-pageable",
    "gh200-h2d-pinned-1gib",
    "gh200-h2d-pageable-1gib",
)


def _is_device_copy(figure: PublishedFigure) -> bool:
    return figure.spec_field == "memory_gb_per_s"


def predict_device_copy(gpu: GpuSpec) -> GpuPrediction:
    """The copy bandwidth ``gpu``'s sheet allows, beside published copies and STREAM kernels."""
    found, missing = spec_values(gpu, "memory_gb_per_s")
    model = []
    if found:
        b = found["memory_gb_per_s"]
        model.append(
            f"a device-to-device copy reads and writes every byte: at best {b:,.0f} GB/s "
            "(read + write counted), the memory's peak"
        )
    figures = choose_figures(REFERENCE_NAME, gpu, _is_device_copy, limit=8)
    verdicts = spec_verdicts(figures)
    verdicts.append(
        "the kernels of one GPU reach different fractions (compare the rows of one source): "
        "what a kernel reaches depends on the kernel (its mix of reads and writes, how many "
        "threads it keeps in flight), which a spec sheet cannot say"
    )
    return GpuPrediction(
        REFERENCE_NAME, gpu, tuple(model), figures, tuple(verdicts), tuple(found), missing
    )


def sector_fraction(stride: int) -> float:
    """The share of fetched bytes a warp uses when it reads float32 values ``stride`` apart."""
    return 1 / min(stride, 8)


def predict_strided(gpu: GpuSpec) -> GpuPrediction:
    """Useful bandwidth of a strided float32 read on ``gpu`` by the 32-byte sector rule."""
    found, missing = spec_values(gpu, "memory_gb_per_s")
    model = [
        "a warp's float32 reads s apart use 4 of every 32 bytes fetched from s = 8 on "
        "(the Best Practices Guide's 32-byte sectors): useful bandwidth ≤ peak / min(s, 8)"
    ]
    if found:
        b = found["memory_gb_per_s"]
        model.append(
            "  " + ", ".join(f"stride {s}: ≤ {b * sector_fraction(s):,.0f} GB/s" for s in STRIDES)
        )
    figures = choose_figures(REFERENCE_NAME, gpu, _is_device_copy, limit=2)
    verdicts = [
        "no published strided-read measurement is in the table: the sector model stays a "
        "prediction until a GPU run (labkit bench bandwidth) tests it; the stride-1 rate to "
        "compare with is the device copy's, above"
    ]
    return GpuPrediction(
        REFERENCE_NAME, gpu, tuple(model), figures, tuple(verdicts), tuple(found), missing
    )


def predict_transfers(gpu: GpuSpec) -> GpuPrediction:
    """Pinned and pageable host transfers: the host link's rate, and what was measured."""
    found, missing = spec_values(gpu, "host_link_gb_per_s")
    model = []
    if found:
        link = found["host_link_gb_per_s"]
        model.append(
            f"a pinned copy runs at most at the host link's {link:g} GB/s ({gpu.host_link}); "
            "a pageable one also copies through a pinned staging buffer on the host, so it is "
            "slower still"
        )
    figures = by_id(TRANSFER_FIGURES)
    verdicts = spec_verdicts(figures)
    pairs = [(figures[i], figures[i + 1]) for i in range(0, len(figures), 2)]
    for pinned, pageable in pairs:
        verdicts.append(
            f"{pinned.gpu}: pageable {pageable.amount} against pinned {pinned.amount}: "
            f"{pinned.value / pageable.value:.3g}× faster pinned"
        )
    return GpuPrediction(
        REFERENCE_NAME, gpu, tuple(model), figures, tuple(verdicts), tuple(found), missing
    )

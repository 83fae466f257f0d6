"""Notebook 11's plots: where a block's FLOPs and bytes go, attention's backends, decoding."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from labkit.plotting import bytes_ticks, plain_log_ticks, pyplot, style_axes
from labkit.transformers.config import GPTConfig
from labkit.transformers.costs import block_costs

if TYPE_CHECKING:
    from labkit.transformers.decode import DecodeSweep
    from labkit.transformers.sdpa import SdpaSweep

#: The block's steps in four groups, in the order the stacked bars draw them.
GROUPS: dict[str, tuple[str, ...]] = {
    "attention over N² scores (q·kᵀ, softmax, × v)": ("scores q·kᵀ", "softmax", "scores × v"),
    "projections (qkv, output)": ("qkv projection", "output projection"),
    "MLP (up, down)": ("mlp up", "mlp down"),
    "elementwise (norms, GELU, residuals)": (
        "layer norm 1",
        "layer norm 2",
        "gelu",
        "residual add 1",
        "residual add 2",
    ),
}


def group_shares(
    config: GPTConfig, seq_lens: Sequence[int], *, batch: int = 1, bytes_per_element: int = 4
) -> dict[str, dict[str, list[float]]]:
    """``{"flops" | "bytes": {group: [share at each length]}}`` of one block's prefill."""
    out: dict[str, dict[str, list[float]]] = {"flops": {}, "bytes": {}}
    costs = [block_costs(config, batch, n, bytes_per_element=bytes_per_element) for n in seq_lens]
    for group, names in GROUPS.items():
        out["flops"][group] = [sum(c.step(s).flops for s in names) / c.flops for c in costs]
        out["bytes"][group] = [sum(c.step(s).bytes for s in names) / c.bytes for c in costs]
    return out


def plot_block_shares(
    config: GPTConfig, seq_lens: Sequence[int], *, batch: int = 1, bytes_per_element: int = 4
) -> Any:
    """Two stacked-bar panels: each group's share of the block's FLOPs and of its bytes."""
    plt = pyplot()
    shares = group_shares(config, seq_lens, batch=batch, bytes_per_element=bytes_per_element)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    labels = [f"{n:,}" for n in seq_lens]
    for ax, kind, title in zip(
        axes,
        ("flops", "bytes"),
        ("FLOPs", "bytes moved (unfused)"),
        strict=True,
    ):
        bottom = [0.0] * len(seq_lens)
        for group, values in shares[kind].items():
            ax.bar(labels, values, bottom=bottom, label=group)
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
        style_axes(
            ax,
            xlabel="sequence length N (tokens)",
            ylabel="share of one block's forward pass",
            title=f"share of the {title}",
        )
        ax.set_ylim(0, 1)
    fig.suptitle(
        f"One block, d_model {config.d_model}, {config.heads} heads, batch {batch}, "
        f"{bytes_per_element}-byte values"
    )
    axes[1].legend(loc="upper left", bbox_to_anchor=(1.02, 1), fontsize="small")
    fig.tight_layout()
    return axes


def plot_step_intensity(
    config: GPTConfig,
    seq_lens: Sequence[int],
    ridges: dict[str, float],
    *,
    batch: int = 1,
    bytes_per_element: int = 4,
    ax: Any = None,
) -> Any:
    """FLOP/byte of each step (log scale) at each length, with ridge points as horizontal lines.

    A step below a ridge is memory-bound on that machine: its bytes, not its
    FLOPs, set its time.
    """
    plt = pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 4.4))
    first = block_costs(config, batch, seq_lens[0], bytes_per_element=bytes_per_element)
    names = [s.name for s in first.steps]
    width = 0.8 / len(seq_lens)
    for i, n in enumerate(seq_lens):
        costs = block_costs(config, batch, n, bytes_per_element=bytes_per_element)
        xs = [j + (i - (len(seq_lens) - 1) / 2) * width for j in range(len(names))]
        ax.bar(xs, [s.flop_per_byte for s in costs.steps], width=width, label=f"N = {n:,}")
    for k, (label, ridge) in enumerate(ridges.items()):
        ax.axhline(ridge, color=f"C{len(seq_lens) + k}", linestyle="--", label=label)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=40, ha="right")
    style_axes(
        ax,
        xlabel="",
        ylabel="arithmetic intensity (FLOP/byte)",
        title=f"Each step of one block, batch {batch}, {bytes_per_element}-byte values, unfused",
        logy=True,
    )
    plain_log_ticks(ax.yaxis)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    return ax


def plot_sdpa(sweep: SdpaSweep) -> Any:
    """Time and peak memory against N for each backend (log-log), with the N×N scores' bytes."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    backends = list(dict.fromkeys(r.backend for r in sweep.runs))
    lens = sorted({r.seq_len for r in sweep.runs})
    for name in backends:
        runs = [sweep.run(name, n) for n in lens]
        left.plot(lens, [r.median_ms for r in runs], "o-", label=name)
        right.plot(lens, [max(r.peak_bytes, 1) for r in runs], "o-", label=name)
    right.plot(lens, [sweep.score_bytes(n) for n in lens], "k--", label="one N×N score matrix")
    style_axes(
        left,
        xlabel="sequence length N (tokens)",
        ylabel="median time per call (ms)",
        title="causal attention: time",
        device=sweep.device,
        logx=True,
        logy=True,
    )
    style_axes(
        right,
        xlabel="sequence length N (tokens)",
        ylabel="peak memory during the call",
        title="causal attention: extra memory",
        device=sweep.device,
        logx=True,
        logy=True,
    )
    for ax in (left, right):
        ax.set_xticks(lens)
        ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _p: f"{v:,.0f}"))
        ax.xaxis.set_minor_formatter(plt.NullFormatter())
        ax.legend(fontsize="small")
    plain_log_ticks(left.yaxis)
    peaks = [max(r.peak_bytes, 1) for r in sweep.runs] + [sweep.score_bytes(n) for n in lens]
    bytes_ticks(right.yaxis, min(peaks), max(peaks))
    fig.tight_layout()
    return left, right


def plot_decode(sweep: DecodeSweep, *, ax: Any = None) -> Any:
    """Tokens/s against batch size (log-log), with the bandwidth ceiling where it was given."""
    plt = pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4.2))
    batches = [p.batch for p in sweep.points]
    ax.plot(batches, [p.tokens_per_s for p in sweep.points], "o-", label="measured")
    ceilings = [sweep.ceiling_tokens_per_s(p) for p in sweep.points]
    if all(c is not None for c in ceilings):
        ax.plot(
            batches,
            ceilings,
            "k--",
            label=f"ceiling: {sweep.bandwidth_gb_per_s:.3g} GB/s ÷ bytes read per step",
        )
    style_axes(
        ax,
        xlabel="batch (sequences decoded together)",
        ylabel="tokens per second",
        title=f"decoding, {sweep.dtype}, one token per sequence per step",
        device=sweep.device,
        logx=True,
        logy=True,
    )
    ax.set_xticks(batches)
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _p: f"{v:g}"))
    ax.xaxis.set_minor_formatter(plt.NullFormatter())
    plain_log_ticks(ax.yaxis)
    ax.legend(fontsize="small")
    return ax

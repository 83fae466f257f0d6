"""Follow a tensor's shape through a model, layer by layer, even when the forward fails.

The seed CNN's bug is a shape bug, and shape bugs are easiest to see as a
table: each layer's input and output shapes and its parameters.
:func:`trace_shapes` records them with forward hooks on every leaf module.
When the forward pass raises (SeedCNN at 224 px), the trace so far is kept
and the error is a field of the result, not swallowed: the last row shows
where the data was right before it went wrong.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from labkit.core.optional import import_optional

Shape = tuple[int, ...]
#: A layer's output: one shape, or one per tensor for layers that return tuples (nn.RNN).
OutputShape = Shape | tuple[Shape, ...]


@dataclass(frozen=True)
class LayerShape:
    """One leaf layer's call: its name in the model, type, shapes and own parameter count."""

    name: str
    type: str
    input_shape: Shape
    output_shape: OutputShape
    params: int


@dataclass(frozen=True)
class ShapeTrace:
    """Every layer call of one forward pass, in order, and how the pass ended.

    Behaves as a sequence of :class:`LayerShape` (``len``, iteration,
    indexing). ``error`` is ``None`` when the forward pass finished, else
    ``"RuntimeError: shape '[-1, 32768]' is invalid ..."``; ``failed_in`` then
    names the layer that raised, or says the error came from code between
    layers (a ``view`` in ``forward``).
    """

    layers: tuple[LayerShape, ...]
    input_shape: Shape
    output_shape: OutputShape | None
    error: str | None = None
    failed_in: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def total_params(self) -> int:
        """Parameters of the layers that ran (each layer counted once)."""
        seen: dict[str, int] = {}
        for layer in self.layers:
            seen[layer.name] = layer.params
        return sum(seen.values())

    def __len__(self) -> int:
        return len(self.layers)

    def __iter__(self) -> Iterator[LayerShape]:
        return iter(self.layers)

    def __getitem__(self, index: int) -> LayerShape:
        return self.layers[index]

    def __str__(self) -> str:
        return format_trace(self)


def _shape_of(value: Any) -> OutputShape:
    shape = getattr(value, "shape", None)
    if shape is not None:
        return tuple(int(d) for d in shape)
    if isinstance(value, (tuple, list)):
        return tuple(_shape_of(v) for v in value if hasattr(v, "shape"))  # type: ignore[misc,return-value]
    return ()


def _own_params(module: Any) -> int:
    total = 0
    for p in module.parameters(recurse=False):
        try:
            total += p.numel()
        except (RuntimeError, ValueError):  # an uninitialised LazyLinear parameter
            pass
    return total


def trace_shapes(model: Any, x: Any) -> ShapeTrace:
    """Run ``model(x)`` once (no gradients) and record each leaf layer's shapes.

    Never raises because the forward pass raised: the error message goes in
    ``ShapeTrace.error``, with the layers that ran before it. Hooks are
    removed afterwards, whatever happened.
    """
    torch = import_optional("torch", "trace_shapes")

    rows: list[LayerShape] = []
    running: list[str] = []
    handles = []

    def make_hooks(name: str) -> tuple[Any, Any]:
        def pre(module: Any, inputs: tuple[Any, ...]) -> None:
            running.append(name)

        def post(module: Any, inputs: tuple[Any, ...], output: Any) -> None:
            if running and running[-1] == name:
                running.pop()
            first = inputs[0] if inputs else None
            rows.append(
                LayerShape(
                    name=name,
                    type=type(module).__name__,
                    input_shape=_shape_of(first) if first is not None else (),  # type: ignore[arg-type]
                    output_shape=_shape_of(output),
                    params=_own_params(module),
                )
            )

        return pre, post

    leaves = [(n, m) for n, m in model.named_modules() if n and not any(m.children())]
    if not leaves:  # the model is itself one layer (nn.Linear(...), nn.RNN(...))
        leaves = [(type(model).__name__, model)]
    for name, module in leaves:
        pre, post = make_hooks(name)
        handles.append(module.register_forward_pre_hook(pre))
        handles.append(module.register_forward_hook(post))

    error = failed_in = None
    output_shape: OutputShape | None = None
    try:
        with torch.no_grad():
            output_shape = _shape_of(model(x))
    except Exception as exc:  # the point is to report it, not to hide it
        error = f"{type(exc).__name__}: {exc}"
        if running:
            failed_in = running[-1]
        else:
            after = f" after {rows[-1].name!r}" if rows else ""
            failed_in = f"forward() code between layers{after}"
    finally:
        for handle in handles:
            handle.remove()
    return ShapeTrace(
        layers=tuple(rows),
        input_shape=tuple(int(d) for d in x.shape),
        output_shape=output_shape,
        error=error,
        failed_in=failed_in,
    )


def _fmt_shape(shape: Any) -> str:
    if shape and isinstance(shape[0], tuple):
        return ", ".join(_fmt_shape(s) for s in shape)
    return "(" + ", ".join(str(d) for d in shape) + ")"


def format_trace(trace: ShapeTrace) -> str:
    """The trace as a plain-text table, with a last line saying how the forward pass ended."""
    header = ("layer", "type", "input", "output", "params")
    rows = [
        (r.name, r.type, _fmt_shape(r.input_shape), _fmt_shape(r.output_shape), f"{r.params:,}")
        for r in trace.layers
    ]
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]

    def line(row: tuple[str, ...]) -> str:
        cells = [c.ljust(w) for c, w in zip(row[:-1], widths[:-1], strict=True)]
        return "  ".join([*cells, row[-1].rjust(widths[-1])]).rstrip()

    out = [f"input {_fmt_shape(trace.input_shape)}", line(header)]
    out += [line(r) for r in rows]
    if trace.ok:
        out.append(f"output {_fmt_shape(trace.output_shape)}, {trace.total_params:,} params")
    else:
        out.append(f"FAILED in {trace.failed_in}: {trace.error}")
    return "\n".join(out)

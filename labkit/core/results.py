"""Results as JSON: what ``--json`` prints and what a recording stores.

Every result in labkit is a dataclass, so its JSON is its fields
(:func:`dataclasses.fields`, recursively, as :func:`dataclasses.asdict`
walks them), plus the few derived values a reader of the JSON needs and
that are properties rather than fields (a rate computed from a time, say).
A result class lists those in ``json_extra`` and the fields that are not
data (a callable, a framework object) in ``json_skip``; :class:`JsonRecord`
gives it the ``to_dict`` the CLI and the recordings call. One walker
instead of 49 hand-written ``to_dict`` methods means a new field reaches
the JSON without anyone remembering to add it.

``dataclasses.asdict`` itself is not called: it would drop the properties of
nested results (a ``Timing``'s ``noisy`` inside a bandwidth point).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any, ClassVar


def to_json(value: Any) -> Any:
    """``value`` as JSON-native data: results as dicts, tuples as lists, paths as text.

    A value with its own ``to_dict`` (every :class:`JsonRecord`, and the few
    results whose JSON is a different view) is asked for it; any other
    dataclass gives :func:`dataclass_json`. Non-finite floats are kept (a
    ratio can be infinite); :func:`json_safe` replaces them when the text
    is written.
    """
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict) and not isinstance(value, type):
        return to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclass_json(value)
    if isinstance(value, Mapping):  # dicts and the read-only views results hold
        return {str(key): to_json(item) for key, item in value.items()}
    if isinstance(value, (set, frozenset)):
        return [to_json(item) for item in sorted(value, key=repr)]
    if isinstance(value, (list, tuple)):
        return [to_json(item) for item in value]
    if isinstance(value, PurePath):
        return str(value)
    module = type(value).__module__.partition(".")[0]
    if module == "numpy" and hasattr(value, "item"):  # a numpy scalar (np.float32, np.int64)
        return value.item()
    if module == "torch" and type(value).__name__ == "dtype":
        return str(value).removeprefix("torch.")
    return value


def dataclass_json(value: Any) -> dict[str, Any]:
    """A dataclass's fields (less ``json_skip``) and then its ``json_extra`` properties, as JSON."""
    skip = getattr(value, "json_skip", ())
    out = {
        f.name: to_json(getattr(value, f.name))
        for f in dataclasses.fields(value)
        if f.name not in skip
    }
    for name in getattr(value, "json_extra", ()):
        out[name] = to_json(getattr(value, name))
    return out


class JsonRecord:
    """Mixin for a result dataclass: ``to_dict()`` is :func:`to_json` of it.

    ``json_extra`` names properties to add after the fields; ``json_skip``
    names fields to leave out. A class whose JSON needs one more key
    overrides ``to_dict`` as ``{**dataclass_json(self), "key": ...}``.
    """

    json_extra: ClassVar[tuple[str, ...]] = ()
    json_skip: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-native values (see :func:`dataclass_json`)."""
        return dataclass_json(self)


def json_safe(value: Any) -> Any:
    """``value`` with non-finite floats (an infinite ratio, say) replaced by None, for strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


def error_line(exc: BaseException) -> str:
    """``"TypeName: first line of the message"``: how a result records a part that failed."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__

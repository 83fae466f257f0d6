"""Hypothesis strategies for bad arguments, and the assertion every rejection must pass.

Shared by the bad-input tests (tests/test_bad_input_*.py). A public labkit
function given a bad argument must fail *before* it does any work, with a
TypeError or ValueError (labkit's own errors subclass one of them) whose
message names the argument, so the student knows what to fix.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import strategies as st

#: Things that are not numbers (bool is an int in Python, but never a size).
not_numbers = st.one_of(
    st.none(),
    st.booleans(),
    st.text(max_size=8),
    st.binary(max_size=4),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.just(object()),
)

#: Integers a size, a count or a repeat count can never be.
non_positive_ints = st.integers(max_value=0)

#: Floats no measurement parameter accepts.
non_finite = st.sampled_from([math.nan, math.inf, -math.inf])

#: Byte counts far beyond any machine's memory (1 PiB to 4 EiB).
impossible_bytes = st.integers(min_value=2**50, max_value=2**62)

#: Values passed where a function to time is expected.
not_callables = st.one_of(
    st.none(), st.integers(), st.floats(), st.text(max_size=8), st.lists(st.integers(), max_size=2)
)

#: Device names no framework has, and well-formed names of devices that do not exist.
unknown_devices = st.one_of(
    st.sampled_from(["gpu", "tpu", "cuda:-1", "cuda:x", "metal", "", " ", "cpu:0:1", "CUDA 0"]),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz:0123456789", min_size=1, max_size=8).filter(
        lambda s: (
            s.strip().lower() not in {"cpu", "cuda", "mps", "xpu", "meta"}
            and not s.startswith(("cpu:", "cuda", "mps", "xpu"))
        )
    ),
)

#: Dtype names no labkit measurement supports.
unsupported_dtypes = st.sampled_from(
    ["float8", "int4", "float128", "complex256", "bfloat17", "half-ish", "", "str", "object"]
)


def assert_rejects(
    call: Callable[[], Any],
    argument: str,
    errors: type[BaseException] | tuple[type[BaseException], ...] = (TypeError, ValueError),
) -> BaseException:
    """``call()`` must raise one of ``errors`` with ``argument`` named in the message."""
    with pytest.raises(errors) as info:
        call()
    message = str(info.value)
    assert argument in message, (
        f"the error does not name the argument {argument!r}: {type(info.value).__name__}: {message}"
    )
    return info.value

"""``labkit doctor``: the device report as an aligned text table, or as JSON.

The text is what a learner pastes into a help request, so it is plain,
aligned and complete; colour (plain ANSI codes, no dependency) is added only
on a terminal and never when NO_COLOR is set (https://no-color.org).
"""

from __future__ import annotations

import json
import os
import sys

from labkit.core.validate import check_bool, check_optional_bool
from labkit.machine.report import device_report, format_report, use_color


def run_doctor(as_json: bool = False, color: bool | None = None) -> int:
    """Print the device report; exit code 0 whenever the report could be built.

    TensorFlow's import-time C++ banner is kept off stderr by
    :func:`labkit.core.optional.import_tensorflow`, so the output stays clean
    without changing TensorFlow's defaults (oneDNN stays on).
    """
    check_bool("as_json", as_json)
    check_optional_bool("color", color)
    try:
        report = device_report()
    except Exception as exc:  # a bug in labkit, not in the learner's setup
        print(
            f"labkit doctor: could not build the report: {type(exc).__name__}: {exc}",
            file=sys.stderr,
        )
        return 1
    if as_json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(format_report(report, color=use_color(color, sys.stdout, os.environ)))
    return 0

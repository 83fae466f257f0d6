"""``labkit doctor``: the device report as an aligned text table, or as JSON.

The text is what a learner pastes into a help request, so it is plain,
aligned and complete; colour (plain ANSI codes, no dependency) is added only
on a terminal and never when NO_COLOR is set (https://no-color.org).
"""

from __future__ import annotations

import json
import os
import sys

from labkit.machine.report import device_report, format_report, use_color


def run_doctor(as_json: bool = False, color: bool | None = None) -> int:
    """Print the device report and return 0.

    Every probe catches what a broken setup raises and turns it into a finding,
    so an exception that reaches here is a bug in labkit: it propagates, with its
    traceback, to ``labkit.cli.main`` (issue 14).

    TensorFlow's import-time C++ banner is kept off stderr by
    :func:`labkit.core.optional.import_tensorflow`, so the output stays clean
    without changing TensorFlow's defaults (oneDNN stays on).
    """
    report = device_report()  # a probe that fails is a finding; an exception here is a bug
    if as_json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(format_report(report, color=use_color(color, sys.stdout, os.environ)))
    return 0

"""``python -m labkit``: the same commands as the ``labkit`` console script."""

from labkit.cli import main

raise SystemExit(main())

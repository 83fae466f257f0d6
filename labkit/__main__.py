"""``python -m labkit``: the same commands as the ``labkit`` console script."""

from labkit.cli.main import main

raise SystemExit(main())

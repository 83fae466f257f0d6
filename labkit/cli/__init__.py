"""The ``labkit`` command line, the outermost layer: nothing else in labkit imports it.

- :mod:`labkit.cli.main`: ``labkit doctor`` and ``labkit bench ...``;
- :mod:`labkit.cli.bench`: one module per benchmark, and what every benchmark checks first.
"""

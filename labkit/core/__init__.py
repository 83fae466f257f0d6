"""The leaf layer: formatters, argument checks, optional imports, progress bars.

Nothing here imports any other part of labkit, so every other package can use it.

- :mod:`labkit.core.units`: numbers as text (durations, bytes, rates, counts);
- :mod:`labkit.core.validate`: the checks for values a person types, with errors that name the argument;
- :mod:`labkit.core.optional`: optional frameworks, found without importing them;
- :mod:`labkit.core.progress`: progress bars for sweeps that take seconds.
"""

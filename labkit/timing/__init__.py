"""Notebook 00: timing done right.

- :mod:`labkit.timing.sync`: wait until a device has finished (host, CUDA, CuPy, TensorFlow);
- :mod:`labkit.timing.bench`: :func:`bench` and the :class:`Timing` it returns;
- :mod:`labkit.timing.compare`: several timings side by side;
- :mod:`labkit.timing.interleave`: variants run round-robin, noise within a run and drift between runs;
- :mod:`labkit.timing.pitfalls`: the naive-timing pitfall, measured.
"""

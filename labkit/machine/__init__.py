"""What this computer is: CPU, NVIDIA driver, frameworks, memory, and what is wrong with the setup.

Notebook 00 and ``labkit doctor``:

- :mod:`labkit.machine.cpu`, :mod:`~labkit.machine.nvidia`, :mod:`~labkit.machine.frameworks`,
  :mod:`~labkit.machine.container`: facts, probed;
- :mod:`labkit.machine.memory`: buffers sized from the memory that is free;
- :mod:`labkit.machine.report`: :func:`device_report` and :func:`pick_device`;
- :mod:`labkit.machine.diagnose`: findings from the facts; :mod:`~labkit.machine.report` prints them;
- :mod:`labkit.machine.gpu`: :func:`has_gpu` and :func:`require_gpu` for GPU cells;
- :mod:`labkit.machine.reference`: recordings from real GPUs, shipped for learners who have none;
- :mod:`labkit.machine.profile`: the reference profile the committed outputs assume.
"""

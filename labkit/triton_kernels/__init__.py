"""Notebook 12: kernels written in Triton, run by its interpreter on the CPU or compiled on a GPU.

``import labkit.triton_kernels`` imports neither torch nor Triton; the kernels
themselves load through :func:`labkit.triton_kernels.setup.load_kernels`,
which first decides between the interpreter and the GPU compiler.
"""

"""Benchmarks, the soak and the resync wrapper: run from the repository root (``python -m scripts.NAME``).

Not installed: the wheel holds only the ``memsync`` package.
"""

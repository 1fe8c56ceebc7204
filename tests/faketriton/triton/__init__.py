"""A stand-in for Triton's package layout (tests/test_autotune_window.py): importing triton loads
triton.runtime.autotuner, whose Autotuner benchmarks configs by launching them, as Triton's does."""
from triton.runtime import autotuner  # noqa: F401
from triton.runtime.autotuner import Autotuner, Config  # noqa: F401

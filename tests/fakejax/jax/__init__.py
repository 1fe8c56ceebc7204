"""A stand-in for JAX's package layout (tests/test_xla_compile_window.py): importing jax loads
jax._src.compiler, whose compile function launches kernels, as XLA's autotuner does."""
from jax._src import compiler  # noqa: F401

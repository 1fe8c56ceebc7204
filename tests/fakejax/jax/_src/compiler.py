"""JAX's compile entry points, by name (neutrino/runtime/frameworks.py COMPILE_FUNCTIONS).
FAKEJAX_LAYOUT=old: only `backend_compile` (jax 0.4.x); =none: neither."""
import os

LAYOUT = os.environ.get("FAKEJAX_LAYOUT", "new")


def _compile(autotune, candidates):
    autotune(candidates)  # XLA times its candidate kernels while it compiles
    return "executable"


if LAYOUT == "new":
    def backend_compile_and_load(autotune, candidates):
        return _compile(autotune, candidates)
elif LAYOUT == "old":
    def backend_compile(autotune, candidates):
        return _compile(autotune, candidates)


def compile_or_get_cached(autotune, candidates):
    """As JAX does: the compile function looked up in this module's globals when called."""
    compile_fn = globals().get("backend_compile_and_load") or globals().get("backend_compile") or _compile
    return compile_fn(autotune, candidates)

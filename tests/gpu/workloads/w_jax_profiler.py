"""A JAX program that profiles itself with jax.profiler (tests/gpu/test_gpu_profilers.py).

usage: w_jax_profiler.py LOGDIR OUT.json

2 jitted training steps, then 5 under jax.profiler.start_trace(LOGDIR)/stop_trace(), then 2 more.
OUT.json: the steps, and what the program's own profile holds: the number of events on the GPU
planes' stream lines (its kernels and copies), read from the .xplane.pb with jax's ProfileData.
"""
import glob
import json
import os
import sys


def profile_counts(logdir: str) -> dict:
    paths = sorted(glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True))
    out = {"xplane_files": len(paths)}
    if not paths:
        return out
    try:
        from jax.profiler import ProfileData
    except ImportError:
        from jax._src.profiler import ProfileData
    data = ProfileData.from_file(paths[-1])
    gpu_lines = {}
    for plane in data.planes:
        if plane.name.startswith("/device:GPU"):
            for line in plane.lines:
                gpu_lines[f"{plane.name}:{line.name}"] = sum(1 for _ in line.events)
    out["gpu_lines"] = gpu_lines
    out["gpu_stream_events"] = sum(n for name, n in gpu_lines.items() if "Stream" in name)
    return out


def main(logdir: str, out: str) -> None:
    import jax
    import jax.numpy as jnp

    key = jax.random.PRNGKey(0)
    w = jax.random.normal(key, (512, 512), jnp.float32) * 0.05
    x = jax.random.normal(key, (256, 512), jnp.float32)

    @jax.jit
    def step(w):
        grad = jax.grad(lambda w: jnp.mean(jnp.tanh(x @ w) ** 2))(w)
        return w - 0.01 * grad

    for _ in range(2):
        w = step(w)
    w.block_until_ready()
    profiling = not os.environ.get("W_JAX_NO_PROFILER")  # the same steps without the profiler (diagnosis)
    if profiling:
        jax.profiler.start_trace(logdir)
    for _ in range(5):
        w = step(w)
    w.block_until_ready()
    if profiling:
        jax.profiler.stop_trace()
    for _ in range(2):
        w = step(w)
    w.block_until_ready()
    result = {"steps_total": 9, "steps_profiled": 5, **profile_counts(logdir)}
    with open(out, "w") as fh:
        json.dump(result, fh)
    print("jax profiler workload done", json.dumps(result)[:400])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

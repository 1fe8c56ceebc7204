"""JAX workloads for tests/gpu/test_gpu_jax.py; each saves its outputs (raw bytes) to argv[2].

usage: w_jax.py train|elementwise|pallas OUT.npz

train        a jitted MLP training step (forward, grad, SGD update), 3 steps
elementwise  one jitted elementwise function, called once: out = x * 2 + y over N_ELEMENTWISE f32
pallas       a Pallas (Triton on JAX) kernel adding two vectors, named PALLAS_NAME
"""
import sys

import numpy as np

N_ELEMENTWISE = (1 << 20) + 7  # not a multiple of any vector width: the tail is masked
PALLAS_NAME = "neutrino_pallas_add"
PALLAS_N, PALLAS_BLOCK = 1 << 16, 1024


def train():
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    sizes = [(256, 512), (512, 512), (512, 10)]
    params = [(jnp.asarray(rng.standard_normal(s, dtype=np.float32) * 0.05), jnp.zeros(s[1], jnp.float32))
              for s in sizes]
    x = jnp.asarray(rng.standard_normal((128, 256), dtype=np.float32))
    y = jnp.asarray(rng.integers(0, 10, 128))

    def loss(params, x, y):
        h = x
        for w, b in params[:-1]:
            h = jax.nn.gelu(h @ w + b)
        w, b = params[-1]
        logits = h @ w + b
        return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(y.shape[0]), y])

    @jax.jit
    def step(params, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        return [(w - 0.1 * gw, b - 0.1 * gb) for (w, b), (gw, gb) in zip(params, grads)], value

    losses = []
    for _ in range(3):
        params, value = step(params, x, y)
        losses.append(value)
    out = {"loss": np.asarray(jnp.stack(losses))}
    for i, (w, b) in enumerate(params):
        out[f"w{i}"], out[f"b{i}"] = np.asarray(w), np.asarray(b)
    return out


def elementwise():
    import jax

    x = jax.device_put(np.arange(N_ELEMENTWISE, dtype=np.float32))
    y = jax.device_put(np.full(N_ELEMENTWISE, 0.5, dtype=np.float32))
    out = jax.jit(lambda a, b: a * 2 + b)(x, y)
    return {"out": np.asarray(out)}


def pallas():
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    def add_kernel(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] + y_ref[...]

    call = pl.pallas_call(add_kernel, out_shape=jax.ShapeDtypeStruct((PALLAS_N,), jnp.float32),
                          grid=(PALLAS_N // PALLAS_BLOCK,),
                          in_specs=[pl.BlockSpec((PALLAS_BLOCK,), lambda i: (i,))] * 2,
                          out_specs=pl.BlockSpec((PALLAS_BLOCK,), lambda i: (i,)), name=PALLAS_NAME)
    x = jnp.arange(PALLAS_N, dtype=jnp.float32)
    out = jax.jit(call)(x, x * 3)
    return {"out": np.asarray(out)}


def main(mode, path):
    out = {"train": train, "elementwise": elementwise, "pallas": pallas}[mode]()
    np.savez(path, **{k: np.ascontiguousarray(v).view(np.uint8) for k, v in out.items()})
    print(f"jax {mode} done")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

"""JAX programs whose kernels XLA autotunes while compiling (tests/gpu/test_gpu_jax.py, issue 22).
Each prints `result NAME SUM SHA256` lines: the output's sum (float64, on the host) and the hash of its
bytes, so plain and probed runs compare bit for bit; and `jax_sum NAME SUM`, the sum as the issue's program
printed it (`float(x.sum())`, a reduction XLA compiles on its own: two plain runs on an H200
host printed different values for one array, so the tests only report it).

usage: w_xla_numerics.py f32|bf16conv

f32       the issue's program: a batched f32 dot (einsum) and 3 jitted f32 training steps
bf16conv  a bf16 matmul + gelu and an f32 NHWC convolution with its gradient (cuDNN's algorithm picker)
"""
import hashlib
import sys

import numpy as np


def result(name, array) -> None:
    host = np.asarray(array)
    print(f"result {name} {float(host.astype(np.float64).sum())!r} {hashlib.sha256(host.tobytes()).hexdigest()}")
    print(f"jax_sum {name} {float(array.sum())!r}")


def f32() -> None:
    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.PRNGKey(0), (256, 4, 128), jnp.float32)
    b = jax.random.normal(jax.random.PRNGKey(1), (4, 128, 512), jnp.float32)
    f = jax.jit(lambda a, b: jnp.einsum("mbk,bkn->bmn", a, b))
    for _ in range(3):
        r = f(a, b)
    result("batched_dot", r)
    w = jax.random.normal(jax.random.PRNGKey(2), (512, 512), jnp.float32) * 0.05
    x = jnp.ones((256, 512), jnp.float32)

    def loss(w):
        return jnp.mean(jax.nn.relu(x @ w) ** 2)

    step = jax.jit(lambda w: w - 0.1 * jax.grad(loss)(w))
    for _ in range(3):
        w = step(w)
    result("train", w)


def bf16conv() -> None:
    import jax
    import jax.numpy as jnp

    x = jax.random.normal(jax.random.PRNGKey(3), (384, 768), jnp.bfloat16)
    w = jax.random.normal(jax.random.PRNGKey(4), (768, 1536), jnp.bfloat16) * 0.03
    mm = jax.jit(lambda x, w: jax.nn.gelu(x @ w))
    for _ in range(2):
        y = mm(x, w)
    result("bf16_matmul_gelu", y.astype(jnp.float32))
    images = jax.random.normal(jax.random.PRNGKey(5), (16, 32, 32, 24), jnp.float32)
    kernel = jax.random.normal(jax.random.PRNGKey(6), (3, 3, 24, 48), jnp.float32) * 0.1

    def conv_loss(k):
        out = jax.lax.conv_general_dilated(images, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jnp.sum(jnp.tanh(out) ** 2)

    grad = jax.jit(jax.grad(conv_loss))
    for _ in range(2):
        g = grad(kernel)
    result("conv_grad", g)


if __name__ == "__main__":
    {"f32": f32, "bf16conv": bf16conv}[sys.argv[1]]()

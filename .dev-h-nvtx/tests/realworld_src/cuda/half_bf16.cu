// cuda_fp16.h / cuda_bf16.h arithmetic, conversions and atomics; the headers
// implement these with inline asm using `{ .reg .b16 ...; }` scopes.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

__global__ void half_arith_kernel(const __half *a, const __half *b, __half *out, __half2 *acc2, __half *acc, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __half x = a[i], y = b[i];
    __half r = __hfma(x, y, __float2half(1.0f));
    r = __hadd(r, hsqrt(__habs(x)));
    if (__hgt(r, y)) r = __hneg(r);
    r = hexp(r) + hlog(__hadd(__habs(r), __float2half(1.f)));
    out[i] = r;
    __half2 v = __halves2half2(x, y);
    v = __hmul2(v, __float2half2_rn(0.5f));
    atomicAdd(acc2 + (i & 7), v);
    atomicAdd(acc + (i & 7), r);
}

__global__ void bf16_arith_kernel(const __nv_bfloat16 *a, const float *f, __nv_bfloat16 *out, __nv_bfloat162 *acc2, __nv_bfloat16 *acc, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __nv_bfloat16 x = a[i];
    __nv_bfloat16 y = __float2bfloat16_rn(f[i]);
    __nv_bfloat16 r = __hfma(x, y, __float2bfloat16(2.0f));
    r = __hmax(r, __hmin(x, y));
    r = r * x - y;
    out[i] = hrsqrt(__habs(r) + __float2bfloat16(1.f));
    __nv_bfloat162 v = __floats2bfloat162_rn(__bfloat162float(x), f[i]);
    v = __hfma2(v, v, __bfloat162bfloat162(y));
    atomicAdd(acc2 + (i & 3), v);
    atomicAdd(acc + (i & 3), r);
}

__global__ void convert_kernel(const float *in, __half *h, __nv_bfloat16 *b, int *q, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = in[i];
    h[i] = __float2half_rz(v);
    b[i] = __float2bfloat16_rd(v);
    q[i] = __half2int_rn(h[i]) + __bfloat162int_rz(b[i]) + __half_as_short(h[i]);
}

#include <cstdio>
#include <cuda_fp16.h>

__device__ __noinline__ float scale(float x, float s) { return x * s + 1.0f; }

__device__ __forceinline__ float inl(float x) { return x * x; }

__device__ __forceinline__ unsigned elect_pred(unsigned v) {
  unsigned r;
  asm volatile("{\n\t.reg .pred p;\n\t.reg .b32 tmp;\n\tsetp.ne.u32 p, %1, 0;\n\tselp.u32 tmp, 1, 0, p;\n\tmov.u32 %0, tmp;\n\t}" : "=r"(r) : "r"(v));
  return r;
}

__device__ __forceinline__ unsigned shfl_pair(unsigned v) {
  unsigned r, ok;
  asm volatile("{\n\t.reg .pred P1;\n\tshfl.sync.up.b32 %0|P1, %2, 1, 0, 0xffffffff;\n\tselp.u32 %1, 1, 0, P1;\n\t@!P1 mov.u32 %0, 0;\n\t}" : "=r"(r), "=r"(ok) : "r"(v));
  return r + ok;
}

__global__ void calls(float *out, const float *in, __half *h, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = scale(in[i], 2.0f) + inl(in[i]);
  if (i == 0) printf("v=%f n=%d\n", v, n);
  unsigned e = elect_pred((unsigned)i) + shfl_pair((unsigned)i);
  __half a = __float2half(v);
  h[i] = __hadd(a, __hmul(a, a));
  atomicAdd(&h[(i + 1) % n], a);
  out[i] = v + (float)e;
}

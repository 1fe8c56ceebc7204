// Kernels whose calls have side effects, for the counting variant's tests
// (tests/test_counting_side_effects.py). Built with:
//   nvcc -ptx -rdc=true -arch=sm_90 side_effects.cu -o side_effects.sm_90.rdc.ptx
#include <cassert>
#include <cstdio>

__device__ unsigned counter;
__device__ unsigned arrived;

__device__ __noinline__ void leaf(unsigned *out, int i) { out[i] = i * 3; }

// An atomic, a store (through leaf) and printf, two calls deep; the old value goes back to the caller.
__device__ __noinline__ unsigned bump(unsigned *out, int i) {
  unsigned old = atomicAdd(&counter, 1u);
  leaf(out, i);
  if (i == 0) printf("bump from %d\n", i);
  return old;
}

__global__ void calls(unsigned *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) bump(out, i);
}

// Recursion: a copy calling itself (twice, so that it stays a call).
__device__ __noinline__ unsigned depth(unsigned *out, int i, int left) {
  atomicAdd(&out[0], 1u);
  return left > 1 ? depth(out, i, left - 1) + depth(out, i, left - 2) : 1;
}

__global__ void recursive(unsigned *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i + 1] = depth(out, i, i & 3);
}

// An indirect call through a function pointer: no counting variant.
typedef int (*op_t)(int);
__device__ __noinline__ int twice(int x) { atomicAdd(&counter, 1u); return 2 * x; }
__device__ op_t table[1] = {twice};

__global__ void indirect(int *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = table[0](i);
}

// The last block to arrive does the rest: an atomic's result decides a branch.
__global__ void last_block(unsigned *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i;
  if (threadIdx.x == 0 && atomicAdd(&arrived, 1u) == gridDim.x - 1) out[0] = n;
}

// The same decision one call away: the old value comes back from bump.
__global__ void decided_by_callee(unsigned *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && bump(out, i) == 7u) out[i] = 0;
}

// assert: __assertfail never returns.
__global__ void asserting(int *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  assert(i < n);
  out[i] = i;
}

// printf's result decides a branch: the call cannot go.
__global__ void printf_result(int *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && printf("%d\n", i) > 2) out[i] = i;
}

// A trap the counting copy must not reach as a trap.
__global__ void trapping(int *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) __trap();
  out[i] = i;
}

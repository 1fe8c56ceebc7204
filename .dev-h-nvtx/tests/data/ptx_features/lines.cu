__device__ __constant__ int table[4] = {1, 2, 3, 4};
__device__ int counter[2];
__device__ __forceinline__ int twice(int x) { return x * table[x & 3]; }
__device__ __noinline__ int thrice(int x) { return twice(x) * 3; }
__global__ void first(int *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = twice(i) + thrice(i);
  if (i == 0) atomicAdd(&counter[0], 1);
}
__global__ void second(int *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = twice(out[i]);
}
// A table of function pointers: pruning to `third` must keep the functions its initializer names.
typedef int (*op_t)(int);
__device__ __noinline__ int inc(int x) { return x + 1; }
__device__ __noinline__ int dec(int x) { return x - 1; }
__device__ op_t ops[2] = {inc, dec};
__global__ void third(int *out, int n) {
  int i = threadIdx.x;
  if (i < n) out[i] = ops[i & 1](out[i]);
}

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

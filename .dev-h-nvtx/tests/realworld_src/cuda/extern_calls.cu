// Separate compilation (-rdc=true): calls to device functions defined in
// another translation unit become `.extern .func` declarations.
extern __device__ float external_transform(float x, int lane);
extern __device__ void external_accumulate(float *acc, float v);
__device__ int external_counter;

__device__ __noinline__ float local_helper(float x) { return x * x + 1.0f; }

__global__ void extern_call_kernel(const float *in, float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = external_transform(local_helper(in[i]), threadIdx.x & 31);
        external_accumulate(out + blockIdx.x, v);
        atomicAdd(&external_counter, 1);
    }
}

// Relocatable device code: the kernel calls a device function defined in another translation unit.
extern __device__ int scale(int x);

__global__ void apply_scale(int *data, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        data[i] = scale(data[i]);
}

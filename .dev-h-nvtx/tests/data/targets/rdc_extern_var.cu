// Relocatable device code: the kernel reads a device array defined in another translation unit.
extern __device__ int lookup_table[];

__global__ void apply_table(int *data, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        data[i] = lookup_table[data[i] & 255];
}

// A kernel that calls a non-inlined device function and printf, built with PTX only
// (compute_90), so the driver JITs it and Neutrino sees the PTX (issue 10's call sequences:
// `.reg .b32 temp_param_reg;`, vprintf). Writes its output array to argv[1].
#include <cstdio>
#include <cuda_runtime.h>

__device__ __noinline__ float blend(float a, float b, int i) { return a * 0.75f + b * (float)(i & 7); }

__global__ void calls_printf(const float *x, const float *y, float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = blend(x[i], y[i], i);
    if (i == 0) printf("calls_printf: n=%d first=%f\n", n, out[0]);
}

int main(int argc, char **argv) {
    const int n = 1 << 16;
    float *x, *y, *out;
    cudaMalloc(&x, n * sizeof(float));
    cudaMalloc(&y, n * sizeof(float));
    cudaMalloc(&out, n * sizeof(float));
    float *h = new float[n];
    for (int i = 0; i < n; i++) h[i] = (float)((i * 2654435761u) % 1000) / 7.0f;
    cudaMemcpy(x, h, n * sizeof(float), cudaMemcpyHostToDevice);
    for (int i = 0; i < n; i++) h[i] = (float)((i * 40503u) % 977) / 3.0f;
    cudaMemcpy(y, h, n * sizeof(float), cudaMemcpyHostToDevice);
    for (int rep = 0; rep < 3; rep++) calls_printf<<<n / 256, 256>>>(x, y, out, n);
    cudaMemcpy(h, out, n * sizeof(float), cudaMemcpyDeviceToHost);
    cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) { fprintf(stderr, "%s\n", cudaGetErrorString(err)); return 1; }
    FILE *f = fopen(argv[1], "wb");
    fwrite(h, sizeof(float), n, f);
    fclose(f);
    return 0;
}

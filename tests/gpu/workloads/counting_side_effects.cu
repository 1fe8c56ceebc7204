// Issue 30, section 1: a kernel calling a non-inlined device function that does an atomicAdd on a
// global counter, a global read-modify-write and printf, launched three times. Under a tool with a
// cap = "count" map (dmat, program_progress) a counting variant of the kernel runs before each launch;
// it must repeat none of these. Built PTX-only (compute_90) so that the driver JITs it and Neutrino
// sees the PTX. Writes the counter (u64) and then both arrays (u32 each) to argv[1]; prints one line
// per launch and the counter.
#include <cstdio>
#include <cuda_runtime.h>

__device__ unsigned long long counter;

__device__ __noinline__ void record(unsigned *out, int i, int launch) {
    atomicAdd(&counter, 1ull);
    out[i] = out[i] * 3u + (unsigned)(i ^ launch);  // read-modify-write: a second run would change it
    if (i == 0) printf("record: launch %d\n", launch);
}

__global__ void side_effects(unsigned *out, unsigned *seen, int n, int launch) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        record(out, i, launch);
        seen[i] += 1u;  // the kernel's own read-modify-write: one global load and one store per thread
    }
}

static int check(cudaError_t err, const char *what) {
    if (err != cudaSuccess) fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
    return err != cudaSuccess;
}

int main(int argc, char **argv) {
    const int n = 1 << 16;
    unsigned *out, *seen;
    if (check(cudaMalloc(&out, n * sizeof(unsigned)), "cudaMalloc") || check(cudaMalloc(&seen, n * sizeof(unsigned)), "cudaMalloc"))
        return 1;
    cudaMemset(out, 0, n * sizeof(unsigned));
    cudaMemset(seen, 0, n * sizeof(unsigned));
    unsigned long long count = 0;
    cudaMemcpyToSymbol(counter, &count, sizeof count);
    for (int launch = 0; launch < 3; launch++) side_effects<<<n / 256, 256>>>(out, seen, n, launch);
    if (check(cudaDeviceSynchronize(), "kernels")) return 1;
    unsigned *host = new unsigned[2 * n];
    cudaMemcpyFromSymbol(&count, counter, sizeof count);
    cudaMemcpy(host, out, n * sizeof(unsigned), cudaMemcpyDeviceToHost);
    cudaMemcpy(host + n, seen, n * sizeof(unsigned), cudaMemcpyDeviceToHost);
    if (check(cudaGetLastError(), "copies")) return 1;
    printf("counter=%llu\n", count);
    FILE *f = fopen(argv[1], "wb");
    if (!f) return 1;
    fwrite(&count, sizeof count, 1, f);
    fwrite(host, sizeof(unsigned), 2 * n, f);
    fclose(f);
    return 0;
}

// Kernels whose global traffic is known exactly (tests/gpu/test_gpu_gmem_exact.py):
// a wmma GEMM (fragments loaded from and stored to global memory) and a
// double-buffered cp.async pipeline whose tail loads are masked with src-size.
// Built with: nvcc -arch=sm_80 -ptx -o gmem_exact.sm80.ptx src/gmem_exact.cu
#include <mma.h>
#include <cuda_fp16.h>
using namespace nvcuda;

// C[M x N] (f32, row-major) = A[M x K] (f16, row-major) x B[K x N] (f16, col-major).
// One warp per 16x16 tile of C; blockDim.x = 32.
extern "C" __global__ void wmma_gemm(const half* a, const half* b, float* c, int m, int n, int k) {
    int tile_m = blockIdx.y, tile_n = blockIdx.x;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int kk = 0; kk < k; kk += 16) {
        wmma::load_matrix_sync(fa, a + (size_t)tile_m * 16 * k + kk, k);
        wmma::load_matrix_sync(fb, b + (size_t)tile_n * 16 * k + kk, k);
        wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(c + (size_t)tile_m * 16 * n + tile_n * 16, acc, n, wmma::mem_row_major);
}

__device__ __forceinline__ void copy16(float* smem, const float* src, unsigned src_size) {
    unsigned dst = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(src), "r"(src_size) : "memory");
}

// y[i] = 2 * x[i] for i < n, in stages of blockDim.x * 4 floats, two stages in flight.
// Each thread copies 16 bytes per stage; past the end of x the copy reads src-size = 0..12
// bytes (the rest of the 16 is zero-filled) from a clamped address.
extern "C" __global__ void pipelined_scale(const float* x, float* y, int n, int stages) {
    __shared__ __align__(16) float buf[2][256 * 4];
    int per_stage = blockDim.x * 4;
    int base = blockIdx.x * stages * per_stage;
    for (int s = 0; s < stages + 1; ++s) {
        if (s < stages) {
            int i = base + s * per_stage + threadIdx.x * 4;
            int left = n - i;
            unsigned bytes = left >= 4 ? 16u : (left > 0 ? 4u * left : 0u);
            copy16(&buf[s & 1][threadIdx.x * 4], x + (left > 0 ? i : 0), bytes);
        }
        asm volatile("cp.async.commit_group;\n" ::: "memory");
        if (s == 0) continue;
        asm volatile("cp.async.wait_group 1;\n" ::: "memory");
        int t = s - 1;
        int i = base + t * per_stage + threadIdx.x * 4;
        const float* v = &buf[t & 1][threadIdx.x * 4];
        for (int j = 0; j < 4; ++j)
            if (i + j < n) y[i + j] = 2.0f * v[j];
    }
}

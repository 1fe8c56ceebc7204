// A 16x16x16 half-precision tile product per warp with the WMMA API: the tensorop test's kernel.
#include <mma.h>
using namespace nvcuda;

extern "C" __global__ void wmma_gemm(const half *a, const half *b, float *c, int tiles) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    wmma::fill_fragment(fc, 0.0f);
    for (int t = 0; t < tiles; ++t) {
        wmma::load_matrix_sync(fa, a + t * 256, 16);
        wmma::load_matrix_sync(fb, b + t * 256, 16);
        wmma::mma_sync(fc, fa, fb, fc);
    }
    wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
}

// Tensor cores: wmma (f16, bf16, tf32), and the hand-written inline asm
// idioms from GEMM libraries: ldmatrix, mma.sync, cp.async with a zero-fill
// source size, movmatrix-free register shuffles.
#include <mma.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
using namespace nvcuda;

__global__ void wmma_f16_kernel(const half *a, const half *b, float *c, int lda, int ldb, int ldc) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    wmma::fill_fragment(fc, 0.0f);
    for (int k = 0; k < lda; k += 16) {
        wmma::load_matrix_sync(fa, a + k, lda);
        wmma::load_matrix_sync(fb, b + k, ldb);
        wmma::mma_sync(fc, fa, fb, fc);
    }
    wmma::store_matrix_sync(c, fc, ldc, wmma::mem_row_major);
}

__global__ void wmma_tf32_bf16_kernel(const float *a, const float *b, const __nv_bfloat16 *x, const __nv_bfloat16 *y, float *c, float *d) {
    wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> fc;
    wmma::load_matrix_sync(fa, a, 8);
    wmma::load_matrix_sync(fb, b, 16);
    for (int t = 0; t < fa.num_elements; t++) fa.x[t] = wmma::__float_to_tf32(fa.x[t]);
    wmma::fill_fragment(fc, 0.0f);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(c, fc, 16, wmma::mem_col_major);
    __shared__ float sm[16 * 16];
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> ga;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> gb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> gc;
    wmma::load_matrix_sync(ga, x, 16);
    wmma::load_matrix_sync(gb, y, 16);
    wmma::fill_fragment(gc, 1.0f);
    wmma::mma_sync(gc, ga, gb, gc);
    wmma::store_matrix_sync(sm, gc, 16, wmma::mem_row_major);
    __syncthreads();
    d[threadIdx.x] = sm[threadIdx.x] + sm[255 - threadIdx.x];
}

__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool pred) {
    unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    int src_size = pred ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src_size));
}

__global__ void mma_asm_kernel(const half *A, const half *B, float *C, int k_tiles, int rows) {
    __shared__ alignas(128) half sa[2][16 * 16];
    __shared__ alignas(128) half sb[2][16 * 8];
    int lane = threadIdx.x;
    float acc[4] = {0, 0, 0, 0};
    for (int kt = 0; kt < k_tiles; ++kt) {
        int st = kt & 1;
        cp_async16(&sa[st][lane * 8], A + kt * 256 + lane * 8, lane * 8 / 16 < rows);
        if (lane < 16) cp_async16(&sb[st][lane * 8], B + kt * 128 + lane * 8, true);
        asm volatile("cp.async.commit_group;\n" ::);
        asm volatile("cp.async.wait_group 0;\n" ::);
        __syncthreads();
        unsigned a0, a1, a2, a3, b0, b1;
        unsigned addr_a = static_cast<unsigned>(__cvta_generic_to_shared(&sa[st][(lane % 16) * 16 + (lane / 16) * 8]));
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(a0), "=r"(a1), "=r"(a2), "=r"(a3) : "r"(addr_a));
        unsigned addr_b = static_cast<unsigned>(__cvta_generic_to_shared(&sb[st][(lane % 16) * 8]));
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                     : "=r"(b0), "=r"(b1) : "r"(addr_b));
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
        __syncthreads();
    }
    asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %1, 0;\n\t@p st.global.v4.f32 [%0], {%2, %3, %4, %5};\n}\n"
                 :: "l"(C + lane * 4), "r"(rows), "f"(acc[0]), "f"(acc[1]), "f"(acc[2]), "f"(acc[3]));
}

__global__ void int8_mma_kernel(const int *a, const int *b, int *c) {
    int lane = threadIdx.x;
    int d0 = 0, d1 = 0, d2 = 0, d3 = 0;
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+r"(d0), "+r"(d1), "+r"(d2), "+r"(d3)
                 : "r"(a[lane * 4]), "r"(a[lane * 4 + 1]), "r"(a[lane * 4 + 2]), "r"(a[lane * 4 + 3]), "r"(b[lane * 2]), "r"(b[lane * 2 + 1]));
    reinterpret_cast<int4 *>(c)[lane] = make_int4(d0, d1, d2, d3);
}

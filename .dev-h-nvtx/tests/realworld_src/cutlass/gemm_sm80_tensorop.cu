// A classic CUTLASS 2.x GEMM for Ampere: multistage cp.async mainloop,
// ldmatrix + mma.sync m16n8k16 warp tiles, linear-combination epilogue.
// Only the device code matters: the host function instantiates the kernel.
#include "cutlass/cutlass.h"
#include "cutlass/gemm/device/gemm.h"

using Gemm = cutlass::gemm::device::Gemm<
    cutlass::half_t, cutlass::layout::RowMajor,
    cutlass::half_t, cutlass::layout::ColumnMajor,
    float, cutlass::layout::RowMajor,
    float,
    cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
    cutlass::gemm::GemmShape<128, 128, 32>,
    cutlass::gemm::GemmShape<64, 64, 32>,
    cutlass::gemm::GemmShape<16, 8, 16>,
    cutlass::epilogue::thread::LinearCombination<float, 4, float, float>,
    cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<>,
    3>;

cutlass::Status run_gemm(int m, int n, int k, cutlass::half_t const *a, cutlass::half_t const *b, float *c, float alpha, float beta) {
    Gemm op;
    Gemm::Arguments args({m, n, k}, {a, k}, {b, k}, {c, n}, {c, n}, {alpha, beta});
    return op(args);
}

// A CUTLASS 3.x Hopper GEMM built with the collective builders: TMA loads,
// wgmma, a warp-specialized cooperative persistent kernel with a TMA
// epilogue, thread-block clusters of 2. Modelled on CUTLASS example 48/49.
#include "cutlass/cutlass.h"
#include "cute/tensor.hpp"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"

using namespace cute;

using ElementA = cutlass::half_t;
using LayoutA = cutlass::layout::RowMajor;
using ElementB = cutlass::half_t;
using LayoutB = cutlass::layout::ColumnMajor;
using ElementC = float;
using LayoutC = cutlass::layout::ColumnMajor;
constexpr int AlignmentA = 8, AlignmentB = 8, AlignmentC = 4;
using TileShape = Shape<_128, _128, _64>;
using ClusterShape = Shape<_2, _1, _1>;

using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float,
    ElementC, LayoutC, AlignmentC, ElementC, LayoutC, AlignmentC,
    cutlass::epilogue::TmaWarpSpecializedCooperative>::CollectiveOp;

using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    ElementA, LayoutA, AlignmentA, ElementB, LayoutB, AlignmentB, float,
    TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
    cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;

using GemmKernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int>, CollectiveMainloop, CollectiveEpilogue>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

cutlass::Status run_gemm(int m, int n, int k, ElementA const *a, ElementB const *b, ElementC *c, void *workspace) {
    auto sa = cutlass::make_cute_packed_stride(typename GemmKernel::StrideA{}, {m, k, 1});
    auto sb = cutlass::make_cute_packed_stride(typename GemmKernel::StrideB{}, {n, k, 1});
    auto sc = cutlass::make_cute_packed_stride(typename GemmKernel::StrideC{}, {m, n, 1});
    auto sd = cutlass::make_cute_packed_stride(typename GemmKernel::StrideD{}, {m, n, 1});
    typename Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm, {m, n, k}, {a, sa, b, sb}, {{1.f, 0.f}, c, sc, c, sd}};
    Gemm gemm;
    auto status = gemm.can_implement(args);
    if (status != cutlass::Status::kSuccess) return status;
    status = gemm.initialize(args, workspace);
    if (status != cutlass::Status::kSuccess) return status;
    return gemm.run();
}

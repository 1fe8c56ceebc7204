// More sm_90a features real kernels use: programmatic dependent launch
// (griddepcontrol), asynchronous remote stores into a cluster peer's shared
// memory completing on its mbarrier (st.async), multimem reductions over
// NVLink-shared memory (inline asm), FP8 conversions, register and occupancy
// hints (.maxnreg, .minnctapersm), 64-bit vector unpacking.
#include <cooperative_groups.h>
#include <cuda/ptx>
#include <cuda_fp8.h>
#include <cstdint>
namespace cg = cooperative_groups;
namespace ptx = cuda::ptx;

__global__ void __launch_bounds__(256, 2) pdl_fp8_kernel(const float *in, __nv_fp8_e4m3 *out8, __nv_fp8x2_e5m2 *out82, float *back, int n) {
    cudaGridDependencySynchronize();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = in[i];
        __nv_fp8_e4m3 q(v);
        out8[i] = q;
        out82[i / 2] = __nv_fp8x2_e5m2(make_float2(v, -v));
        back[i] = float(q) + float(__nv_fp8_e5m2(v * 0.5f));
    }
    cudaTriggerProgrammaticLaunchCompletion();
}

__global__ void __maxnreg__(64) __cluster_dims__(2, 1, 1) st_async_kernel(const int *in, int *out) {
    __shared__ alignas(16) int recv[256];
    __shared__ alignas(8) uint64_t bar;
    cg::cluster_group cluster = cg::this_cluster();
    unsigned rank = cluster.block_rank();
    if (threadIdx.x == 0) {
        ptx::mbarrier_init(&bar, 1);
        ptx::fence_mbarrier_init(ptx::sem_release, ptx::scope_cluster);
    }
    cluster.sync();
    if (threadIdx.x == 0) ptx::mbarrier_arrive_expect_tx(ptx::sem_release, ptx::scope_cluster, ptx::space_shared, &bar, sizeof(recv));
    cluster.sync();
    int *peer_recv = cluster.map_shared_rank(recv, rank ^ 1);
    uint64_t *peer_bar = cluster.map_shared_rank(&bar, rank ^ 1);
    ptx::st_async(peer_recv + threadIdx.x, in[blockIdx.x * 256 + threadIdx.x], peer_bar);
    while (!ptx::mbarrier_try_wait_parity(&bar, 0)) {
    }
    out[blockIdx.x * 256 + threadIdx.x] = recv[255 - threadIdx.x];
    cluster.sync();
}

__global__ void multimem_kernel(float *mc_ptr, float *out, unsigned long long packed) {
    float sum;
    asm volatile("multimem.ld_reduce.relaxed.sys.global.add.f32 %0, [%1];" : "=f"(sum) : "l"(mc_ptr + threadIdx.x) : "memory");
    asm volatile("multimem.st.relaxed.sys.global.f32 [%0], %1;" ::"l"(mc_ptr + threadIdx.x), "f"(sum * 2.0f) : "memory");
    asm volatile("multimem.red.relaxed.sys.global.add.f32 [%0], %1;" ::"l"(mc_ptr + 128 + threadIdx.x), "f"(sum) : "memory");
    unsigned lo, hi;
    asm("mov.b64 {%0, %1}, %2;" : "=r"(lo), "=r"(hi) : "l"(packed));
    out[threadIdx.x] = sum + lo + hi;
}

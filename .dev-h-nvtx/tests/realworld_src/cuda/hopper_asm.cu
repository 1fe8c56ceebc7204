// Hopper (sm_90a) idioms as GEMM libraries write them by hand: TMA tensor
// loads into shared memory completing on an mbarrier, wgmma with smem
// descriptors, setmaxnreg for producer/consumer warpgroups, elect.sync,
// stmatrix, fence.proxy.async, named barriers.
#include <cuda.h>
#include <cuda/ptx>
#include <cuda_fp16.h>
#include <cstdint>
namespace ptx = cuda::ptx;

__device__ __forceinline__ uint64_t make_desc(const void *smem) {
    uint64_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
    return ((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(64) << 32) | (uint64_t(1) << 62);
}

__device__ __forceinline__ void mbar_wait(uint64_t *bar, int phase) {
    uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
    asm volatile(
        "{\n"
        ".reg .pred                P1;\n"
        "LAB_WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
        "@P1                       bra.uni DONE;\n"
        "bra.uni                   LAB_WAIT;\n"
        "DONE:\n"
        "}\n" ::"r"(addr), "r"(phase));
}

__global__ void __launch_bounds__(384) wgmma_tma_kernel(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b, float *out) {
    __shared__ alignas(1024) half sa[64 * 64];
    __shared__ alignas(1024) half sb[64 * 64];
    __shared__ alignas(8) uint64_t full_bar;
    int warpgroup = threadIdx.x / 128;
    if (threadIdx.x == 0) {
        ptx::mbarrier_init(&full_bar, 1);
        ptx::fence_proxy_async(ptx::space_shared);
    }
    __syncthreads();
    if (warpgroup == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        uint32_t is_leader;
        asm volatile("{\n.reg .pred p;\nelect.sync _|p, 0xffffffff;\nselp.u32 %0, 1, 0, p;\n}\n" : "=r"(is_leader));
        if (threadIdx.x < 32 && is_leader) {
            int32_t coords[2] = {0, (int32_t)blockIdx.x * 64};
            ptx::cp_async_bulk_tensor(ptx::space_shared, ptx::space_global, sa, &tmap_a, coords, &full_bar);
            ptx::cp_async_bulk_tensor(ptx::space_shared, ptx::space_global, sb, &tmap_b, coords, &full_bar);
            ptx::mbarrier_arrive_expect_tx(ptx::sem_release, ptx::scope_cta, ptx::space_shared, &full_bar, sizeof(sa) + sizeof(sb));
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
        mbar_wait(&full_bar, 0);
        float d[4] = {0, 0, 0, 0};
        uint64_t da = make_desc(sa), db = make_desc(sb);
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
        asm volatile(
            "{\n"
            ".reg .pred p;\n"
            "setp.ne.b32 p, %6, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n"
            "}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "l"(da), "l"(db), "r"(1));
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        asm volatile("bar.sync 1, 256;\n");
        __half2 h0 = __floats2half2_rn(d[0], d[1]);
        __half2 h1 = __floats2half2_rn(d[2], d[3]);
        uint32_t saddr = static_cast<uint32_t>(__cvta_generic_to_shared(&sa[(threadIdx.x % 128) * 8]));
        asm volatile("stmatrix.sync.aligned.x2.m8n8.shared.b16 [%0], {%1, %2};\n" ::"r"(saddr),
                     "r"(*reinterpret_cast<uint32_t *>(&h0)), "r"(*reinterpret_cast<uint32_t *>(&h1)));
        asm volatile("fence.proxy.async.shared::cta;\n");
        asm volatile("bar.sync 1, 256;\n");
        out[blockIdx.x * 256 + threadIdx.x - 128] = d[0] + d[1] + d[2] + d[3];
    }
}

__global__ void tma_store_reduce_kernel(const __grid_constant__ CUtensorMap tmap, const float *in) {
    __shared__ alignas(128) float tile[32 * 32];
    for (int i = threadIdx.x; i < 1024; i += blockDim.x) tile[i] = in[blockIdx.x * 1024 + i];
    ptx::fence_proxy_async(ptx::space_shared);
    __syncthreads();
    if (threadIdx.x == 0) {
        int32_t coords[2] = {0, (int32_t)blockIdx.x * 32};
        asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%1, %2}], [%3];\n"
                     ::"l"(&tmap), "r"(coords[0]), "r"(coords[1]), "r"(static_cast<uint32_t>(__cvta_generic_to_shared(tile))) : "memory");
        ptx::cp_async_bulk_commit_group();
        ptx::cp_async_bulk_wait_group_read(ptx::n32_t<0>());
    }
}

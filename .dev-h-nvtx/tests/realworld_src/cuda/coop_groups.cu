// Cooperative groups: grid sync, tiled partitions, cg::reduce/inclusive_scan,
// coalesced groups, cluster groups and cg::memcpy_async.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cooperative_groups/scan.h>
#include <cooperative_groups/memcpy_async.h>
namespace cg = cooperative_groups;

__global__ void grid_sync_kernel(float *data, float *partial, int n) {
    cg::grid_group grid = cg::this_grid();
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    float sum = 0.f;
    for (int i = grid.thread_rank(); i < n; i += grid.size()) sum += data[i];
    sum = cg::reduce(warp, sum, cg::plus<float>());
    if (warp.thread_rank() == 0) atomicAdd(&partial[blockIdx.x], sum);
    grid.sync();
    if (grid.thread_rank() == 0) {
        float total = 0.f;
        for (int b = 0; b < gridDim.x; ++b) total += partial[b];
        partial[0] = total;
    }
    grid.sync();
    for (int i = grid.thread_rank(); i < n; i += grid.size()) data[i] /= partial[0];
}

__global__ void tile_kernel(const int *in, int *out, int n) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<16> tile = cg::tiled_partition<16>(block);
    int i = block.group_index().x * block.size() + block.thread_rank();
    int v = i < n ? in[i] : 0;
    int scanned = cg::inclusive_scan(tile, v);
    int mx = cg::reduce(tile, v, cg::greater<int>());
    tile.sync();
    int left = tile.shfl_up(scanned, 1);
    unsigned ballot = tile.ballot(v > 0);
    if (tile.any(v < 0)) scanned = -scanned;
    if (i < n) out[i] = scanned + mx + left + __popc(ballot);
    if (v & 1) {
        cg::coalesced_group active = cg::coalesced_threads();
        int r = active.thread_rank();
        active.sync();
        if (i < n) atomicAdd(&out[0], r);
    }
}

__global__ void memcpy_async_kernel(const float *in, float *out, int n) {
    extern __shared__ float smem[];
    cg::thread_block block = cg::this_thread_block();
    int base = blockIdx.x * blockDim.x;
    cg::memcpy_async(block, smem, in + base, sizeof(float) * blockDim.x);
    cg::wait(block);
    float v = smem[(threadIdx.x + 1) % blockDim.x];
    if (base + threadIdx.x < n) out[base + threadIdx.x] = v;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__global__ void __cluster_dims__(2, 1, 1) cluster_kernel(int *out) {
    __shared__ int local[64];
    cg::cluster_group cluster = cg::this_cluster();
    unsigned rank = cluster.block_rank();
    local[threadIdx.x % 64] = rank * 100 + threadIdx.x;
    cluster.sync();
    int *peer = cluster.map_shared_rank(local, (rank + 1) % cluster.num_blocks());
    out[blockIdx.x * blockDim.x + threadIdx.x] = peer[threadIdx.x % 64];
    cluster.sync();
}
#endif

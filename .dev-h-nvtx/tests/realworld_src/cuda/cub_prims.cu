// CCCL cub block and warp primitives: heavy on inline asm with named
// predicate registers (`.reg .pred p;`), shuffles, and shared memory unions.
#include <cub/cub.cuh>

template <int THREADS, int ITEMS>
__global__ void block_reduce_scan(const int *in, int *sums, int *scanned) {
    using Load = cub::BlockLoad<int, THREADS, ITEMS, cub::BLOCK_LOAD_WARP_TRANSPOSE>;
    using Reduce = cub::BlockReduce<int, THREADS>;
    using Scan = cub::BlockScan<int, THREADS>;
    using Store = cub::BlockStore<int, THREADS, ITEMS, cub::BLOCK_STORE_WARP_TRANSPOSE>;
    __shared__ union {
        typename Load::TempStorage load;
        typename Reduce::TempStorage reduce;
        typename Scan::TempStorage scan;
        typename Store::TempStorage store;
    } tmp;
    int items[ITEMS];
    int offset = blockIdx.x * THREADS * ITEMS;
    Load(tmp.load).Load(in + offset, items);
    __syncthreads();
    int total = Reduce(tmp.reduce).Sum(items);
    if (threadIdx.x == 0) sums[blockIdx.x] = total;
    __syncthreads();
    Scan(tmp.scan).ExclusiveSum(items, items);
    __syncthreads();
    Store(tmp.store).Store(scanned + offset, items);
}
template __global__ void block_reduce_scan<128, 4>(const int *, int *, int *);

__global__ void warp_reduce_kernel(const float *in, float *out) {
    using WarpReduce = cub::WarpReduce<float>;
    __shared__ typename WarpReduce::TempStorage tmp[4];
    int warp = threadIdx.x / 32;
    float v = in[blockIdx.x * blockDim.x + threadIdx.x];
    float s = WarpReduce(tmp[warp]).Sum(v);
    float m = WarpReduce(tmp[warp]).Reduce(v, cuda::maximum<>());
    if (threadIdx.x % 32 == 0) out[blockIdx.x * 4 + warp] = s + m;
}

__global__ void radix_sort_kernel(unsigned *keys, float *values) {
    using Sort = cub::BlockRadixSort<unsigned, 128, 4, float>;
    __shared__ typename Sort::TempStorage tmp;
    unsigned k[4];
    float v[4];
    int base = blockIdx.x * 512 + threadIdx.x * 4;
    for (int i = 0; i < 4; ++i) { k[i] = keys[base + i]; v[i] = values[base + i]; }
    Sort(tmp).Sort(k, v);
    for (int i = 0; i < 4; ++i) { keys[base + i] = k[i]; values[base + i] = v[i]; }
}

__global__ void histogram_kernel(const unsigned char *in, unsigned *bins) {
    using Hist = cub::BlockHistogram<unsigned char, 128, 4, 256>;
    __shared__ typename Hist::TempStorage tmp;
    __shared__ unsigned smem_bins[256];
    unsigned char items[4];
    cub::LoadDirectStriped<128>(threadIdx.x, in + blockIdx.x * 512, items);
    Hist(tmp).Histogram(items, smem_bins);
    __syncthreads();
    for (int b = threadIdx.x; b < 256; b += 128) atomicAdd(&bins[b], smem_bins[b]);
}

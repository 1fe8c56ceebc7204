// libcu++ synchronization: cuda::barrier (mbarrier), cuda::pipeline with
// cuda::memcpy_async (cp.async), and on sm_90 the TMA bulk copy path.
#include <cuda/barrier>
#include <cuda/pipeline>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
using barrier_t = cuda::barrier<cuda::thread_scope_block>;

__global__ void barrier_kernel(const float *in, float *out, int n) {
    __shared__ float tile[256];
    __shared__ barrier_t bar;
    auto block = cg::this_thread_block();
    if (block.thread_rank() == 0) init(&bar, block.size());
    block.sync();
    int base = blockIdx.x * 256;
    cuda::memcpy_async(block, tile, in + base, sizeof(float) * 256, bar);
    bar.arrive_and_wait();
    float v = tile[255 - threadIdx.x % 256] * 2.0f;
    barrier_t::arrival_token t = bar.arrive();
    bar.wait(std::move(t));
    if (base + threadIdx.x < n) out[base + threadIdx.x] = v;
}

template <int STAGES>
__global__ void pipeline_kernel(const float4 *in, float4 *out, int tiles) {
    __shared__ float4 buf[STAGES][128];
    __shared__ cuda::pipeline_shared_state<cuda::thread_scope_block, STAGES> state;
    auto block = cg::this_thread_block();
    auto pipe = cuda::make_pipeline(block, &state);
    float4 acc = make_float4(0, 0, 0, 0);
    int fetch = 0;
    for (int t = 0; t < tiles; ++t) {
        for (; fetch < tiles && fetch < t + STAGES; ++fetch) {
            pipe.producer_acquire();
            cuda::memcpy_async(block, buf[fetch % STAGES], in + fetch * 128, cuda::aligned_size_t<16>(sizeof(float4) * 128), pipe);
            pipe.producer_commit();
        }
        pipe.consumer_wait();
        float4 v = buf[t % STAGES][threadIdx.x];
        acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
        pipe.consumer_release();
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
template __global__ void pipeline_kernel<3>(const float4 *, float4 *, int);

__global__ void pipeline_primitive_kernel(const int *in, int *out) {
    __shared__ int s[128];
    cuda::pipeline<cuda::thread_scope_thread> pipe = cuda::make_pipeline();
    pipe.producer_acquire();
    cuda::memcpy_async(&s[threadIdx.x], &in[blockIdx.x * 128 + threadIdx.x], sizeof(int), pipe);
    pipe.producer_commit();
    cuda::pipeline_consumer_wait_prior<0>(pipe);
    __syncthreads();
    out[blockIdx.x * 128 + threadIdx.x] = s[127 - threadIdx.x];
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#include <cuda/ptx>
__global__ void bulk_copy_kernel(const int *in, int *out) {
    __shared__ alignas(128) int s[1024];
    __shared__ barrier_t bar;
    if (threadIdx.x == 0) {
        init(&bar, blockDim.x);
        cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);
    }
    __syncthreads();
    barrier_t::arrival_token token;
    if (threadIdx.x == 0) {
        cuda::memcpy_async(s, in + blockIdx.x * 1024, cuda::aligned_size_t<16>(sizeof(s)), bar);
        token = bar.arrive();
    } else {
        token = bar.arrive();
    }
    bar.wait(std::move(token));
    for (int i = threadIdx.x; i < 1024; i += blockDim.x) out[blockIdx.x * 1024 + i] = s[i] + 1;
}
#endif

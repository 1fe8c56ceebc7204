// Host time per launch of an empty kernel (cudart, PTX-only so Neutrino can probe it).
// usage: bench_launch N REPS  -> prints "ns_per_launch <median>"
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
extern "C" __global__ void empty_kernel(int* p) { if (p && threadIdx.x == 1024) *p = 0; }
int main(int argc, char** argv) {
    int n = argc > 1 ? atoi(argv[1]) : 20000, reps = argc > 2 ? atoi(argv[2]) : 7;
    for (int i = 0; i < 100; i++) empty_kernel<<<1, 32>>>(nullptr);
    cudaDeviceSynchronize();
    std::vector<double> per;
    for (int r = 0; r < reps; r++) {
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < n; i++) {
            empty_kernel<<<1, 32>>>(nullptr);
            if ((i & 511) == 511) cudaStreamSynchronize(0);  // keep the queue short: time the host path
        }
        cudaDeviceSynchronize();
        per.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / n);
    }
    std::sort(per.begin(), per.end());
    printf("ns_per_launch %.1f\n", per[per.size() / 2]);
    return 0;
}

// Device calls the way nvcc emits them: printf (vprintf call sequences with
// temp_param_reg), non-inlined device functions with scalar, struct and
// pointer parameters, an indirect call through a function pointer, recursion.
#include <cstdio>

struct Pair { float a; int b; double c; };

__device__ __noinline__ float scale_add(float x, float y, int k) { return x * k + y; }

__device__ __noinline__ Pair make_pair(const float *p, int i) {
    Pair r; r.a = p[i]; r.b = i * 3; r.c = (double)p[i] * 0.5; return r;
}

__device__ __noinline__ double consume_pair(Pair p) { return p.a + p.b + p.c; }

__device__ __noinline__ unsigned long long fib(unsigned n) {
    return n < 2 ? n : fib(n - 1) + fib(n - 2);
}

__device__ __noinline__ float op_add(float a, float b) { return a + b; }
__device__ __noinline__ float op_mul(float a, float b) { return a * b; }
typedef float (*binop)(float, float);
__device__ binop ops[2] = {op_add, op_mul};

__global__ void printf_kernel(const float *in, float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = scale_add(in[i], 1.0f, i);
        out[i] = v;
        if (i % 64 == 0)
            printf("block %d thread %d value %f (%s) %lld\n", blockIdx.x, threadIdx.x, v, "tag", (long long)i * 7);
    }
}

__global__ void struct_call_kernel(const float *in, double *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = consume_pair(make_pair(in, i));
}

__global__ void indirect_call_kernel(const float *a, const float *b, float *out, int which, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    binop f = ops[which & 1];
    if (i < n) out[i] = f(a[i], b[i]);
}

__global__ void recursive_kernel(unsigned long long *out, unsigned n) {
    out[threadIdx.x] = fib(n + threadIdx.x % 4);
    if (threadIdx.x == 0) printf("fib done\n");
}

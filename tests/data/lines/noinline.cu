__device__ __noinline__ float mix(float a, int k) {
  float r = a * 1.5f + k;
  if (r > 100.f) r = r * 0.5f;
  return r;
}
__device__ __noinline__ int lin(int a, int b) {
  int r = a * 3 + b;
  return r ^ b;
}
extern "C" __global__ void callk(float* y, int* z, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float acc = 0.f;
  int s = 0;
  for (int k = 0; k < n; ++k) {
    acc = mix(acc, k);
    s = lin(s, k);
  }
  y[i] = acc;
  z[i] = s;
}

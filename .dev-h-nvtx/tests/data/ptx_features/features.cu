// Inline asm in the shapes CUTLASS/CCCL headers write: spacing-free tokens,
// registers without '%', symbol+offset operands, vector registers, data in bodies.
extern "C" __device__ unsigned mt[4];

__global__ void features(unsigned *out, const unsigned *in) {
  unsigned a, b, c;
  unsigned long long addr;
  float f;
  asm volatile("ld.global.v2.b32{%0, %1}, [%2];" : "=r"(a), "=r"(b) : "l"(in));
  asm volatile("{\n\t.reg.u64 t<2>;\n\tmov.u64 t0, mt+4;\n\tmov.u64 t1, t0;\n\tmov.u64 %0, t1;\n\t}" : "=l"(addr));
  asm volatile("{\n\t.reg .v2 .f32 mx;\n\tmov.f32 mx.x, 0f3F800000;\n\tmov.f32 mx.y, 0f40000000;\n\tadd.f32 %0, mx.x, mx.y;\n\t}" : "=f"(f));
  asm volatile("{\n\t.reg .b32 __$1;\n\t.reg .pred P1;\n\tmov.b32 __$1, %1;\n\tsetp.eq.u32 P1, __$1, 0;\n\t@P1 mov.b32 __$1, 7;\n\t@!P1 add.u32 __$1, __$1, 1;\n\tmov.b32 %0, __$1;\n\t}" : "=r"(c) : "r"(a));
  asm volatile("{\n\t.reg .b32 r0;\n\t.reg .pred p;\n\tshfl.sync.idx.b32 r0|p, %1, 0, 31, 0xffffffff;\n\t@p add.u32 r0, r0, 1;\n\tmov.b32 %0, r0;\n\t}" : "=r"(b) : "r"(b));
  unsigned d;
  asm volatile("{\n\t.global .align 4 .u32 inner[2] = {5, 6};\n\t.shared .align 4 .u32 scratch[2];\n\t.reg .u64 q;\n\tmov.u64 q, inner + 4;\n\tld.global.u32 %0, [q];\n\tadd.u32 %0, %0, %1 + 4;\n\t}" : "=r"(d) : "r"(a));
  out[threadIdx.x] = d + a + b + c + (unsigned)f + (unsigned)addr + mt[threadIdx.x & 3];
}

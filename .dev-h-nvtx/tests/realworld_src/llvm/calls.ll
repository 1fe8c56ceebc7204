; Calls to non-inlined device functions: scalar, vector, aggregate and
; pointer arguments and returns, recursion, an indirect call, and printf
; through vprintf with a local-memory argument buffer.
target triple = "nvptx64-nvidia-cuda"

%pair = type { float, i32 }
@fmt = private unnamed_addr addrspace(4) constant [22 x i8] c"tid %d sum %f n %lld\0A\00", align 1
@table = internal addrspace(4) constant [4 x float] [float 1.0, float 0.5, float 0.25, float 0.125], align 4
@counter = addrspace(1) global i32 0, align 4

declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare i32 @vprintf(ptr, ptr)

define internal float @scale(float %x, i32 %k) noinline {
  %kf = sitofp i32 %k to float
  %ki = and i32 %k, 3
  %pt = getelementptr inbounds [4 x float], ptr addrspace(4) @table, i32 0, i32 %ki
  %t = load float, ptr addrspace(4) %pt, align 4
  %a = fmul float %x, %kf
  %r = fadd float %a, %t
  ret float %r
}

define internal %pair @make_pair(float %x, i32 %k) noinline {
  %s = call float @scale(float %x, i32 %k)
  %p0 = insertvalue %pair undef, float %s, 0
  %p1 = insertvalue %pair %p0, i32 %k, 1
  ret %pair %p1
}

define internal <2 x double> @vec2(<2 x double> %v, ptr addrspace(1) %out) noinline {
  %w = fmul <2 x double> %v, %v
  store <2 x double> %w, ptr addrspace(1) %out, align 16
  ret <2 x double> %w
}

define internal i64 @fact(i64 %n) noinline {
entry:
  %c = icmp ule i64 %n, 1
  br i1 %c, label %base, label %rec
base:
  ret i64 1
rec:
  %m = sub i64 %n, 1
  %r = call i64 @fact(i64 %m)
  %p = mul i64 %n, %r
  ret i64 %p
}

define internal i32 @add1(i32 %x) noinline {
  %r = add i32 %x, 1
  ret i32 %r
}
define internal i32 @dbl(i32 %x) noinline {
  %r = shl i32 %x, 1
  ret i32 %r
}

define ptx_kernel void @call_kernel(ptr addrspace(1) %out, ptr addrspace(1) %dout, float %x, i32 %sel) {
entry:
  %tx = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %pr = call %pair @make_pair(float %x, i32 %tx)
  %f = extractvalue %pair %pr, 0
  %k = extractvalue %pair %pr, 1
  %t64 = zext i32 %tx to i64
  %po = getelementptr inbounds float, ptr addrspace(1) %out, i64 %t64
  store float %f, ptr addrspace(1) %po, align 4
  %d = fpext float %f to double
  %v0 = insertelement <2 x double> undef, double %d, i32 0
  %v1 = insertelement <2 x double> %v0, double 2.0, i32 1
  %pd = getelementptr inbounds <2 x double>, ptr addrspace(1) %dout, i64 %t64
  %w = call <2 x double> @vec2(<2 x double> %v1, ptr addrspace(1) %pd)
  %n = zext i32 %k to i64
  %fa = call i64 @fact(i64 %n)
  %odd = and i32 %sel, 1
  %isodd = icmp ne i32 %odd, 0
  %fn = select i1 %isodd, ptr @add1, ptr @dbl
  %ind = call i32 %fn(i32 %k)
  %cnt = atomicrmw add ptr addrspace(1) @counter, i32 %ind monotonic
  %buf = alloca { i32, double, i64 }, align 8
  %b0 = getelementptr inbounds { i32, double, i64 }, ptr %buf, i32 0, i32 0
  store i32 %tx, ptr %b0, align 8
  %b1 = getelementptr inbounds { i32, double, i64 }, ptr %buf, i32 0, i32 1
  %w0 = extractelement <2 x double> %w, i32 0
  store double %w0, ptr %b1, align 8
  %b2 = getelementptr inbounds { i32, double, i64 }, ptr %buf, i32 0, i32 2
  store i64 %fa, ptr %b2, align 8
  %fmtg = addrspacecast ptr addrspace(4) @fmt to ptr
  %pc = call i32 @vprintf(ptr %fmtg, ptr %buf)
  ret void
}

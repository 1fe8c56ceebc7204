; Everything else a front end may hand the backend: a switch lowered to
; branches, half/bfloat arithmetic, i128 arithmetic, select chains, 16-bit
; and 8-bit loads, global arrays with initializers, local arrays.
target triple = "nvptx64-nvidia-cuda"

@lut = addrspace(1) global [8 x i16] [i16 1, i16 2, i16 3, i16 5, i16 8, i16 13, i16 21, i16 34], align 2
@coeffs = addrspace(4) constant [3 x double] [double 1.5, double -2.25, double 0.125], align 8

declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.laneid()
declare i64 @llvm.nvvm.read.ptx.sreg.globaltimer()
declare i32 @llvm.ctpop.i32(i32)
declare i32 @llvm.ctlz.i32(i32, i1)
declare float @llvm.sqrt.f32(float)

define ptx_kernel void @switch_kernel(ptr addrspace(1) %out, i32 %mode) {
entry:
  %tx = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  switch i32 %mode, label %def [ i32 0, label %a
                                 i32 1, label %b
                                 i32 2, label %c
                                 i32 7, label %d ]
a:
  %ra = add i32 %tx, 10
  br label %join
b:
  %rb = call i32 @llvm.ctpop.i32(i32 %tx)
  br label %join
c:
  %rc = call i32 @llvm.ctlz.i32(i32 %tx, i1 false)
  br label %join
d:
  %ti = and i32 %tx, 7
  %pl = getelementptr inbounds [8 x i16], ptr addrspace(1) @lut, i32 0, i32 %ti
  %l = load i16, ptr addrspace(1) %pl, align 2
  %rd = zext i16 %l to i32
  br label %join
def:
  %lane = call i32 @llvm.nvvm.read.ptx.sreg.laneid()
  br label %join
join:
  %r = phi i32 [ %ra, %a ], [ %rb, %b ], [ %rc, %c ], [ %rd, %d ], [ %lane, %def ]
  %t64 = zext i32 %tx to i64
  %po = getelementptr inbounds i32, ptr addrspace(1) %out, i64 %t64
  store i32 %r, ptr addrspace(1) %po, align 4
  ret void
}

define ptx_kernel void @half_bf16_math(ptr addrspace(1) %h, ptr addrspace(1) %b, ptr addrspace(1) %f) {
entry:
  %tx = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %t64 = zext i32 %tx to i64
  %ph = getelementptr inbounds <2 x half>, ptr addrspace(1) %h, i64 %t64
  %vh = load <2 x half>, ptr addrspace(1) %ph, align 4
  %mh = fmul <2 x half> %vh, %vh
  %ah = fadd <2 x half> %mh, <half 1.0, half 2.0>
  store <2 x half> %ah, ptr addrspace(1) %ph, align 4
  %pb = getelementptr inbounds bfloat, ptr addrspace(1) %b, i64 %t64
  %vb = load bfloat, ptr addrspace(1) %pb, align 2
  %mb = fmul bfloat %vb, 0xR4000
  %fb = fpext bfloat %mb to float
  %sq = call float @llvm.sqrt.f32(float %fb)
  %pf = getelementptr inbounds float, ptr addrspace(1) %f, i64 %t64
  store float %sq, ptr addrspace(1) %pf, align 4
  %tb = fptrunc float %sq to bfloat
  store bfloat %tb, ptr addrspace(1) %pb, align 2
  ret void
}

define ptx_kernel void @wide_int_local(ptr addrspace(1) %out, i64 %a, i64 %b, i32 %k) {
entry:
  %tx = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %arr = alloca [16 x i32], align 4
  br label %fill
fill:
  %i = phi i32 [ 0, %entry ], [ %i1, %fill ]
  %pi = getelementptr inbounds [16 x i32], ptr %arr, i32 0, i32 %i
  %v = mul i32 %i, %tx
  store volatile i32 %v, ptr %pi, align 4
  %i1 = add i32 %i, 1
  %c = icmp ult i32 %i1, 16
  br i1 %c, label %fill, label %use
use:
  %ki = and i32 %k, 15
  %pk = getelementptr inbounds [16 x i32], ptr %arr, i32 0, i32 %ki
  %e = load volatile i32, ptr %pk, align 4
  %wa = zext i64 %a to i128
  %wb = zext i64 %b to i128
  %wm = mul i128 %wa, %wb
  %hi = lshr i128 %wm, 64
  %hi64 = trunc i128 %hi to i64
  %e64 = sext i32 %e to i64
  %t = call i64 @llvm.nvvm.read.ptx.sreg.globaltimer()
  %s0 = add i64 %hi64, %e64
  %s = xor i64 %s0, %t
  %pc = getelementptr inbounds [3 x double], ptr addrspace(4) @coeffs, i32 0, i32 1
  %cd = load double, ptr addrspace(4) %pc, align 8
  %cdi = fptosi double %cd to i64
  %neg = icmp slt i64 %s, 0
  %sel = select i1 %neg, i64 %cdi, i64 %s
  %t64 = zext i32 %tx to i64
  %po = getelementptr inbounds i64, ptr addrspace(1) %out, i64 %t64
  store i64 %sel, ptr addrspace(1) %po, align 8
  ret void
}

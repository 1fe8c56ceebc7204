; Atomics on global and shared memory: integer and float read-modify-write,
; compare-and-swap loops, scoped (block/system) atomics, a shared histogram.
target triple = "nvptx64-nvidia-cuda"

@hist = internal addrspace(3) global [256 x i32] undef, align 4

declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare void @llvm.nvvm.barrier0()

define ptx_kernel void @histogram(ptr addrspace(1) %in, ptr addrspace(1) %bins, i32 %n) {
entry:
  %tx = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %ps0 = getelementptr inbounds [256 x i32], ptr addrspace(3) @hist, i32 0, i32 %tx
  store i32 0, ptr addrspace(3) %ps0, align 4
  call void @llvm.nvvm.barrier0()
  %c0 = icmp ult i32 %tx, %n
  br i1 %c0, label %loop, label %flush
loop:
  %i = phi i32 [ %tx, %entry ], [ %i1, %loop ]
  %i64 = zext i32 %i to i64
  %p = getelementptr inbounds i8, ptr addrspace(1) %in, i64 %i64
  %b = load i8, ptr addrspace(1) %p, align 1
  %b32 = zext i8 %b to i32
  %ps = getelementptr inbounds [256 x i32], ptr addrspace(3) @hist, i32 0, i32 %b32
  %old = atomicrmw add ptr addrspace(3) %ps, i32 1 syncscope("block") monotonic
  %i1 = add i32 %i, 256
  %c = icmp ult i32 %i1, %n
  br i1 %c, label %loop, label %flush
flush:
  call void @llvm.nvvm.barrier0()
  %h = load i32, ptr addrspace(3) %ps0, align 4
  %t64 = zext i32 %tx to i64
  %pb = getelementptr inbounds i32, ptr addrspace(1) %bins, i64 %t64
  %o = atomicrmw add ptr addrspace(1) %pb, i32 %h monotonic
  ret void
}

define ptx_kernel void @float_atomics(ptr addrspace(1) %acc, ptr addrspace(1) %dacc, ptr addrspace(1) %vals) {
entry:
  %tx = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %t64 = zext i32 %tx to i64
  %pv = getelementptr inbounds float, ptr addrspace(1) %vals, i64 %t64
  %v = load float, ptr addrspace(1) %pv, align 4
  %o1 = atomicrmw fadd ptr addrspace(1) %acc, float %v monotonic
  %d = fpext float %v to double
  %o2 = atomicrmw fadd ptr addrspace(1) %dacc, double %d monotonic
  %pm = getelementptr inbounds float, ptr addrspace(1) %acc, i64 1
  %o3 = atomicrmw fmax ptr addrspace(1) %pm, float %v monotonic
  %h = fptrunc float %v to half
  %ph = getelementptr inbounds half, ptr addrspace(1) %acc, i64 4
  %o4 = atomicrmw fadd ptr addrspace(1) %ph, half %h monotonic
  ret void
}

define ptx_kernel void @int_atomics(ptr addrspace(1) %p, ptr addrspace(1) %q, i64 %x) {
entry:
  %tx = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %a = atomicrmw max ptr addrspace(1) %p, i32 %tx seq_cst
  %p1 = getelementptr inbounds i32, ptr addrspace(1) %p, i64 1
  %b = atomicrmw umin ptr addrspace(1) %p1, i32 %a acquire
  %p2 = getelementptr inbounds i32, ptr addrspace(1) %p, i64 2
  %c = atomicrmw xchg ptr addrspace(1) %p2, i32 %b release
  %p3 = getelementptr inbounds i32, ptr addrspace(1) %p, i64 3
  %d = atomicrmw and ptr addrspace(1) %p3, i32 %c syncscope("block") acq_rel
  %e = atomicrmw or ptr addrspace(1) %q, i64 %x monotonic
  %f = atomicrmw xor ptr addrspace(1) %q, i64 %e monotonic
  %pair = cmpxchg ptr addrspace(1) %q, i64 %f, i64 %x seq_cst seq_cst
  %g = extractvalue { i64, i1 } %pair, 0
  %q1 = getelementptr inbounds i64, ptr addrspace(1) %q, i64 1
  %h = atomicrmw uinc_wrap ptr addrspace(1) %p3, i32 100 monotonic
  %h64 = zext i32 %h to i64
  %s = add i64 %g, %h64
  store atomic i64 %s, ptr addrspace(1) %q1 release, align 8
  %l = load atomic i32, ptr addrspace(1) %p acquire, align 4
  %p4 = getelementptr inbounds i32, ptr addrspace(1) %p, i64 4
  store volatile i32 %l, ptr addrspace(1) %p4, align 4
  ret void
}

define ptx_kernel void @cas_loop_max_float(ptr addrspace(1) %p, float %v) {
entry:
  %init = load i32, ptr addrspace(1) %p, align 4
  br label %loop
loop:
  %cur = phi i32 [ %init, %entry ], [ %seen, %loop ]
  %curf = bitcast i32 %cur to float
  %m = call float @llvm.maxnum.f32(float %curf, float %v)
  %mi = bitcast float %m to i32
  %pair = cmpxchg ptr addrspace(1) %p, i32 %cur, i32 %mi monotonic monotonic
  %seen = extractvalue { i32, i1 } %pair, 0
  %ok = extractvalue { i32, i1 } %pair, 1
  br i1 %ok, label %done, label %loop
done:
  ret void
}
declare float @llvm.maxnum.f32(float, float)

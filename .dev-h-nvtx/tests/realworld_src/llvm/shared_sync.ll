; Shared memory: a static tile transposed through shared memory with a CTA
; barrier, dynamic (extern) shared memory, warp shuffles and votes.
target triple = "nvptx64-nvidia-cuda"

@tile = internal addrspace(3) global [32 x [33 x float]] undef, align 4
@dyn = external addrspace(3) global [0 x i32], align 4

declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.tid.y()
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.y()
declare void @llvm.nvvm.barrier0()
declare i32 @llvm.nvvm.shfl.sync.down.i32(i32, i32, i32, i32)
declare float @llvm.nvvm.shfl.sync.bfly.f32(i32, float, i32, i32)
declare i32 @llvm.nvvm.vote.ballot.sync(i32, i1)

define ptx_kernel void @transpose32(ptr addrspace(1) noalias %in, ptr addrspace(1) noalias %out, i32 %width) {
entry:
  %tx = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %ty = call i32 @llvm.nvvm.read.ptx.sreg.tid.y()
  %bx = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %by = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.y()
  %x0 = shl i32 %bx, 5
  %x = add i32 %x0, %tx
  %y0 = shl i32 %by, 5
  %y = add i32 %y0, %ty
  %row = mul i32 %y, %width
  %gi = add i32 %row, %x
  %gi64 = sext i32 %gi to i64
  %pin = getelementptr inbounds float, ptr addrspace(1) %in, i64 %gi64
  %v = load float, ptr addrspace(1) %pin, align 4
  %ps = getelementptr inbounds [32 x [33 x float]], ptr addrspace(3) @tile, i32 0, i32 %ty, i32 %tx
  store float %v, ptr addrspace(3) %ps, align 4
  call void @llvm.nvvm.barrier0()
  %pt = getelementptr inbounds [32 x [33 x float]], ptr addrspace(3) @tile, i32 0, i32 %tx, i32 %ty
  %w = load float, ptr addrspace(3) %pt, align 4
  %ox = add i32 %y0, %tx
  %oy = add i32 %x0, %ty
  %orow = mul i32 %oy, %width
  %oi = add i32 %orow, %ox
  %oi64 = sext i32 %oi to i64
  %pout = getelementptr inbounds float, ptr addrspace(1) %out, i64 %oi64
  store float %w, ptr addrspace(1) %pout, align 4
  ret void
}

define ptx_kernel void @warp_sum_dynamic_shared(ptr addrspace(1) %in, ptr addrspace(1) %out) {
entry:
  %tx = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %t64 = zext i32 %tx to i64
  %p = getelementptr inbounds i32, ptr addrspace(1) %in, i64 %t64
  %v = load i32, ptr addrspace(1) %p, align 4
  %s1 = call i32 @llvm.nvvm.shfl.sync.down.i32(i32 -1, i32 %v, i32 16, i32 31)
  %a1 = add i32 %v, %s1
  %s2 = call i32 @llvm.nvvm.shfl.sync.down.i32(i32 -1, i32 %a1, i32 8, i32 31)
  %a2 = add i32 %a1, %s2
  %s3 = call i32 @llvm.nvvm.shfl.sync.down.i32(i32 -1, i32 %a2, i32 4, i32 31)
  %a3 = add i32 %a2, %s3
  %f = sitofp i32 %a3 to float
  %fb = call float @llvm.nvvm.shfl.sync.bfly.f32(i32 -1, float %f, i32 1, i32 31)
  %pos = icmp sgt i32 %v, 0
  %ballot = call i32 @llvm.nvvm.vote.ballot.sync(i32 -1, i1 %pos)
  %ps = getelementptr inbounds [0 x i32], ptr addrspace(3) @dyn, i32 0, i32 %tx
  store i32 %a3, ptr addrspace(3) %ps, align 4
  call void @llvm.nvvm.barrier0()
  %nx = xor i32 %tx, 1
  %pn = getelementptr inbounds [0 x i32], ptr addrspace(3) @dyn, i32 0, i32 %nx
  %n = load i32, ptr addrspace(3) %pn, align 4
  %fi = fptosi float %fb to i32
  %r0 = add i32 %n, %fi
  %r = add i32 %r0, %ballot
  %po = getelementptr inbounds i32, ptr addrspace(1) %out, i64 %t64
  store i32 %r, ptr addrspace(1) %po, align 4
  ret void
}

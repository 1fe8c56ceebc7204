; Loops over global memory: a grid-stride saxpy, a nested-loop matrix-vector
; product with a phi-carried reduction, and a loop the optimiser unrolls.
target triple = "nvptx64-nvidia-cuda"

declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.nctaid.x()
declare float @llvm.fma.f32(float, float, float)

define ptx_kernel void @saxpy_grid_stride(float %a, ptr addrspace(1) noalias %x, ptr addrspace(1) noalias %y, i32 %n) {
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %ntid = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %ctaid = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %nctaid = call i32 @llvm.nvvm.read.ptx.sreg.nctaid.x()
  %base = mul i32 %ctaid, %ntid
  %start = add i32 %base, %tid
  %stride = mul i32 %ntid, %nctaid
  %cond0 = icmp slt i32 %start, %n
  br i1 %cond0, label %loop, label %exit
loop:
  %i = phi i32 [ %start, %entry ], [ %next, %loop ]
  %idx = sext i32 %i to i64
  %px = getelementptr inbounds float, ptr addrspace(1) %x, i64 %idx
  %py = getelementptr inbounds float, ptr addrspace(1) %y, i64 %idx
  %vx = load float, ptr addrspace(1) %px, align 4
  %vy = load float, ptr addrspace(1) %py, align 4
  %r = call float @llvm.fma.f32(float %a, float %vx, float %vy)
  store float %r, ptr addrspace(1) %py, align 4
  %next = add i32 %i, %stride
  %cond = icmp slt i32 %next, %n
  br i1 %cond, label %loop, label %exit
exit:
  ret void
}

define ptx_kernel void @matvec(ptr addrspace(1) noalias %m, ptr addrspace(1) noalias %v, ptr addrspace(1) noalias %out, i32 %rows, i32 %cols) {
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %ctaid = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %ntid = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %row0 = mul i32 %ctaid, %ntid
  %row = add i32 %row0, %tid
  %inrange = icmp slt i32 %row, %rows
  br i1 %inrange, label %outer, label %done
outer:
  %rowoff = mul i32 %row, %cols
  br label %inner
inner:
  %j = phi i32 [ 0, %outer ], [ %j1, %inner ]
  %acc = phi double [ 0.0, %outer ], [ %acc1, %inner ]
  %mi = add i32 %rowoff, %j
  %mi64 = zext i32 %mi to i64
  %pm = getelementptr inbounds float, ptr addrspace(1) %m, i64 %mi64
  %j64 = zext i32 %j to i64
  %pv = getelementptr inbounds float, ptr addrspace(1) %v, i64 %j64
  %em = load float, ptr addrspace(1) %pm, align 4
  %ev = load float, ptr addrspace(1) %pv, align 4
  %prod = fmul float %em, %ev
  %prodd = fpext float %prod to double
  %acc1 = fadd double %acc, %prodd
  %j1 = add nuw i32 %j, 1
  %more = icmp ult i32 %j1, %cols
  br i1 %more, label %inner, label %store
store:
  %row64 = sext i32 %row to i64
  %po = getelementptr inbounds double, ptr addrspace(1) %out, i64 %row64
  store double %acc1, ptr addrspace(1) %po, align 8
  br label %done
done:
  ret void
}

define ptx_kernel void @unrolled_poly(ptr addrspace(1) %data) {
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %t64 = zext i32 %tid to i64
  %p = getelementptr inbounds <4 x float>, ptr addrspace(1) %data, i64 %t64
  %v = load <4 x float>, ptr addrspace(1) %p, align 16
  br label %loop
loop:
  %k = phi i32 [ 0, %entry ], [ %k1, %loop ]
  %acc = phi <4 x float> [ %v, %entry ], [ %acc1, %loop ]
  %sq = fmul <4 x float> %acc, %acc
  %acc1 = fadd <4 x float> %sq, <float 1.0, float 2.0, float 3.0, float 4.0>
  %k1 = add i32 %k, 1
  %c = icmp ult i32 %k1, 8
  br i1 %c, label %loop, label %out
out:
  store <4 x float> %acc1, ptr addrspace(1) %p, align 16
  ret void
}

; One 32x32x8 f16 MFMA tile per wave, accumulators in AGPRs, loaded and stored through global memory.
target triple = "amdgcn-amd-amdhsa"

define amdgpu_kernel void @mfma_tile(ptr addrspace(1) %a, ptr addrspace(1) %b, ptr addrspace(1) %c, i32 %k) {
entry:
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %t64 = zext i32 %tid to i64
  %pc = getelementptr <16 x float>, ptr addrspace(1) %c, i64 %t64
  %acc0 = load <16 x float>, ptr addrspace(1) %pc
  br label %loop
loop:
  %i = phi i32 [ 0, %entry ], [ %i1, %loop ]
  %acc = phi <16 x float> [ %acc0, %entry ], [ %acc1, %loop ]
  %off = mul i32 %i, 64
  %ix = add i32 %off, %tid
  %ix64 = zext i32 %ix to i64
  %pa = getelementptr <4 x half>, ptr addrspace(1) %a, i64 %ix64
  %pb = getelementptr <4 x half>, ptr addrspace(1) %b, i64 %ix64
  %va = load <4 x half>, ptr addrspace(1) %pa
  %vb = load <4 x half>, ptr addrspace(1) %pb
  %acc1 = call <16 x float> @llvm.amdgcn.mfma.f32.32x32x8f16(<4 x half> %va, <4 x half> %vb, <16 x float> %acc, i32 0, i32 0, i32 0)
  %i1 = add i32 %i, 1
  %more = icmp slt i32 %i1, %k
  br i1 %more, label %loop, label %exit
exit:
  %d = call <4 x float> @llvm.amdgcn.mfma.f32.16x16x16f16(<4 x half> %va, <4 x half> %vb, <4 x float> zeroinitializer, i32 0, i32 0, i32 0)
  store <16 x float> %acc1, ptr addrspace(1) %pc
  %pd = getelementptr <4 x float>, ptr addrspace(1) %a, i64 %t64
  store <4 x float> %d, ptr addrspace(1) %pd
  ret void
}

declare i32 @llvm.amdgcn.workitem.id.x()
declare <16 x float> @llvm.amdgcn.mfma.f32.32x32x8f16(<4 x half>, <4 x half>, <16 x float>, i32, i32, i32)
declare <4 x float> @llvm.amdgcn.mfma.f32.16x16x16f16(<4 x half>, <4 x half>, <4 x float>, i32, i32, i32)

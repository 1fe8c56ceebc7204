; One 16x16x16 f16 WMMA per wave (RDNA3's matrix instruction), accumulated over a loop of k tiles.
target triple = "amdgcn-amd-amdhsa"

define amdgpu_kernel void @wmma(ptr addrspace(1) %a, ptr addrspace(1) %b, ptr addrspace(1) %c, i32 %tiles) {
entry:
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %lane = and i32 %tid, 15
  %l64 = zext i32 %lane to i64
  %pc = getelementptr <8 x float>, ptr addrspace(1) %c, i64 %l64
  br label %loop
loop:
  %k = phi i32 [ 0, %entry ], [ %k1, %loop ]
  %acc = phi <8 x float> [ zeroinitializer, %entry ], [ %d, %loop ]
  %off = mul i32 %k, 16
  %idx = add i32 %off, %lane
  %i64 = zext i32 %idx to i64
  %pa = getelementptr <16 x half>, ptr addrspace(1) %a, i64 %i64
  %pb = getelementptr <16 x half>, ptr addrspace(1) %b, i64 %i64
  %va = load <16 x half>, ptr addrspace(1) %pa
  %vb = load <16 x half>, ptr addrspace(1) %pb
  %d = call <8 x float> @llvm.amdgcn.wmma.f32.16x16x16.f16(<16 x half> %va, <16 x half> %vb, <8 x float> %acc)
  %k1 = add i32 %k, 1
  %more = icmp slt i32 %k1, %tiles
  br i1 %more, label %loop, label %done
done:
  store <8 x float> %d, ptr addrspace(1) %pc
  ret void
}

declare i32 @llvm.amdgcn.workitem.id.x()
declare <8 x float> @llvm.amdgcn.wmma.f32.16x16x16.f16(<16 x half>, <16 x half>, <8 x float>)

; Workgroup reduction through LDS (ds_ instructions, s_barrier), 2D workgroup ids.
target triple = "amdgcn-amd-amdhsa"

@tile = internal addrspace(3) global [256 x i32] undef, align 4

define amdgpu_kernel void @lds_reduce(ptr addrspace(1) %in, ptr addrspace(1) %out) {
entry:
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %wx = call i32 @llvm.amdgcn.workgroup.id.x()
  %wy = call i32 @llvm.amdgcn.workgroup.id.y()
  %row = mul i32 %wy, 65536
  %b = mul i32 %wx, 256
  %base = add i32 %row, %b
  %g = add i32 %base, %tid
  %g64 = zext i32 %g to i64
  %p = getelementptr i32, ptr addrspace(1) %in, i64 %g64
  %v = load i32, ptr addrspace(1) %p
  %slot = getelementptr [256 x i32], ptr addrspace(3) @tile, i32 0, i32 %tid
  store i32 %v, ptr addrspace(3) %slot
  br label %step
step:
  %s = phi i32 [ 128, %entry ], [ %s1, %next ]
  call void @llvm.amdgcn.s.barrier()
  %act = icmp ult i32 %tid, %s
  br i1 %act, label %add, label %next
add:
  %o = add i32 %tid, %s
  %po = getelementptr [256 x i32], ptr addrspace(3) @tile, i32 0, i32 %o
  %x = load i32, ptr addrspace(3) %po
  %y = load i32, ptr addrspace(3) %slot
  %z = add i32 %x, %y
  store i32 %z, ptr addrspace(3) %slot
  br label %next
next:
  %s1 = lshr i32 %s, 1
  %more = icmp ugt i32 %s, 1
  br i1 %more, label %step, label %fin
fin:
  %first = icmp eq i32 %tid, 0
  br i1 %first, label %write, label %end
write:
  %r = load i32, ptr addrspace(3) @tile
  %wg = add i32 %row, %wx
  %w64 = zext i32 %wg to i64
  %q = getelementptr i32, ptr addrspace(1) %out, i64 %w64
  store i32 %r, ptr addrspace(1) %q
  br label %end
end:
  ret void
}

declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
declare i32 @llvm.amdgcn.workgroup.id.y()
declare void @llvm.amdgcn.s.barrier()

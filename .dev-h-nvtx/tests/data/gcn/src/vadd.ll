; c[i] = a[i] + b[i]: global loads and a store, one thread per element.
target triple = "amdgcn-amd-amdhsa"

define amdgpu_kernel void @vadd(ptr addrspace(1) %a, ptr addrspace(1) %b, ptr addrspace(1) %c, i32 %n) {
entry:
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %wg = call i32 @llvm.amdgcn.workgroup.id.x()
  %base = mul i32 %wg, 256
  %i = add i32 %base, %tid
  %in = icmp slt i32 %i, %n
  br i1 %in, label %body, label %done
body:
  %idx = sext i32 %i to i64
  %pa = getelementptr float, ptr addrspace(1) %a, i64 %idx
  %pb = getelementptr float, ptr addrspace(1) %b, i64 %idx
  %pc = getelementptr float, ptr addrspace(1) %c, i64 %idx
  %va = load float, ptr addrspace(1) %pa
  %vb = load float, ptr addrspace(1) %pb
  %s = fadd float %va, %vb
  store float %s, ptr addrspace(1) %pc
  br label %done
done:
  ret void
}

declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()

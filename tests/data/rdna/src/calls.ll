; A kernel that calls a non-inlined device function (s_swappc_b64, a stack, the callee's own s_setpc_b64).
target triple = "amdgcn-amd-amdhsa"

define internal i32 @scale(ptr addrspace(1) %p, i32 %x) #0 {
  %v = load i32, ptr addrspace(1) %p
  %m = mul i32 %v, %x
  %r = add i32 %m, 7
  ret i32 %r
}

define amdgpu_kernel void @calls(ptr addrspace(1) %in, ptr addrspace(1) %out, i32 %k) {
entry:
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %wg = call i32 @llvm.amdgcn.workgroup.id.x()
  %base = mul i32 %wg, 128
  %i = add i32 %base, %tid
  %i64 = zext i32 %i to i64
  %pi = getelementptr i32, ptr addrspace(1) %in, i64 %i64
  %r = call i32 @scale(ptr addrspace(1) %pi, i32 %k)
  %po = getelementptr i32, ptr addrspace(1) %out, i64 %i64
  store i32 %r, ptr addrspace(1) %po
  ret void
}

declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
attributes #0 = { noinline }

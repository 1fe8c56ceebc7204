; Histogram with global atomics (returning and not), an LDS atomic, and a buffer load
; through a raw buffer resource.
target triple = "amdgcn-amd-amdhsa"

@local_count = internal addrspace(3) global i32 undef, align 4

define amdgpu_kernel void @atomics(ptr addrspace(1) %keys, ptr addrspace(1) %hist, ptr addrspace(1) %old, <4 x i32> %rsrc, i32 %n) {
entry:
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %wg = call i32 @llvm.amdgcn.workgroup.id.x()
  %base = mul i32 %wg, 64
  %i = add i32 %base, %tid
  %i64 = zext i32 %i to i64
  %pk = getelementptr i32, ptr addrspace(1) %keys, i64 %i64
  %key = load i32, ptr addrspace(1) %pk
  %bucket = and i32 %key, 255
  %b64 = zext i32 %bucket to i64
  %ph = getelementptr i32, ptr addrspace(1) %hist, i64 %b64
  %prev = atomicrmw add ptr addrspace(1) %ph, i32 1 syncscope("agent") monotonic
  %po = getelementptr i32, ptr addrspace(1) %old, i64 %i64
  store i32 %prev, ptr addrspace(1) %po
  %mx = atomicrmw umax ptr addrspace(1) %hist, i32 %key syncscope("agent") monotonic
  %l = atomicrmw add ptr addrspace(3) @local_count, i32 1 syncscope("workgroup") monotonic
  %voff = shl i32 %i, 2
  %bv = call i32 @llvm.amdgcn.raw.buffer.load.i32(<4 x i32> %rsrc, i32 %voff, i32 0, i32 0)
  %sum = add i32 %bv, %l
  %p2 = getelementptr i32, ptr addrspace(1) %old, i64 %b64
  %cas = cmpxchg ptr addrspace(1) %p2, i32 %sum, i32 %mx syncscope("agent") monotonic monotonic
  %cv = extractvalue { i32, i1 } %cas, 0
  call void @llvm.amdgcn.raw.buffer.store.i32(i32 %cv, <4 x i32> %rsrc, i32 %voff, i32 0, i32 0)
  ret void
}

declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
declare i32 @llvm.amdgcn.raw.buffer.load.i32(<4 x i32>, i32, i32, i32)
declare void @llvm.amdgcn.raw.buffer.store.i32(i32, <4 x i32>, i32, i32, i32)

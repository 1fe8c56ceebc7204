; Each thread sums a strided column with 64-bit loads in a loop, and uses a
; generic (flat) pointer for its result.
target triple = "amdgcn-amd-amdhsa"

define amdgpu_kernel void @loop_sum(ptr addrspace(1) %x, ptr %out, i32 %rows, i32 %stride) {
entry:
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %go = icmp sgt i32 %rows, 0
  br i1 %go, label %loop, label %exit
loop:
  %r = phi i32 [ 0, %entry ], [ %r1, %loop ]
  %acc = phi double [ 0.0, %entry ], [ %acc1, %loop ]
  %row = mul i32 %r, %stride
  %j = add i32 %row, %tid
  %jj = zext i32 %j to i64
  %p = getelementptr double, ptr addrspace(1) %x, i64 %jj
  %v = load double, ptr addrspace(1) %p
  %acc1 = fadd double %acc, %v
  %r1 = add i32 %r, 1
  %more = icmp slt i32 %r1, %rows
  br i1 %more, label %loop, label %exit
exit:
  %res = phi double [ 0.0, %entry ], [ %acc1, %loop ]
  %t64 = zext i32 %tid to i64
  %q = getelementptr double, ptr %out, i64 %t64
  store double %res, ptr %q
  ret void
}

declare i32 @llvm.amdgcn.workitem.id.x()

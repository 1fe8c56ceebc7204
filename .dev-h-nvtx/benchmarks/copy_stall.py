"""Does a second thread's cuMemcpyDtoHAsync + cuStreamSynchronize on a non-blocking stream stall
while the main thread enqueues far ahead (graph replays, a full launch queue)?

    python benchmarks/copy_stall.py     (GPU machine; torch, triton)

Why it matters: the shim's thread copies graph rings out this way (spec/runtime.md, "CUDA
graphs"). H100, 2026-11-24: one call blocked 2.7 ms while 3,000 replays were enqueued without a
sync (median 8.5 µs); so a kernel must never spin waiting for such a copy (`--when-full=wait`
keeps its rings in host memory).
"""
import ctypes as C
import statistics
import threading
import time

import torch
import triton
import triton.language as tl

cu = C.CDLL("libcuda.so.1")

@triton.jit
def k(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2.0 + tl.load(y_ptr + offs, mask=m), mask=m)

n = 1 << 20
x = torch.rand(n, device="cuda"); y = torch.rand(n, device="cuda"); out = torch.empty_like(x)
grid = (triton.cdiv(n, 1024),)
k[grid](x, y, out, n, BLOCK=1024); torch.cuda.synchronize()
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    for _ in range(4):
        k[grid](x, y, out, n, BLOCK=1024)
ctx = C.c_void_p(); cu.cuCtxGetCurrent(C.byref(ctx))
dev = torch.empty(1 << 16, dtype=torch.uint8, device="cuda")
stop = False
rows = []

def poller():
    cu.cuCtxSetCurrent(ctx)
    mode = C.c_int(2); cu.cuThreadExchangeStreamCaptureMode(C.byref(mode))
    s = C.c_void_p(); assert cu.cuStreamCreate(C.byref(s), 1) == 0
    host = C.c_void_p(); assert cu.cuMemHostAlloc(C.byref(host), 1 << 16, 0) == 0
    while not stop:
        t0 = time.perf_counter()
        rc1 = cu.cuMemcpyDtoHAsync_v2(host, C.c_uint64(dev.data_ptr()), C.c_size_t(1 << 16), s)
        t1 = time.perf_counter()
        rc2 = cu.cuStreamSynchronize(s)
        t2 = time.perf_counter()
        rows.append((t0, (t1 - t0) * 1e6, (t2 - t1) * 1e6, rc1, rc2))
        time.sleep(0.0001)

for mode in ("replays", "replays+sync each 10"):
    rows.clear(); stop = False
    th = threading.Thread(target=poller); th.start(); time.sleep(0.05)
    t0 = time.perf_counter()
    for i in range(3000):
        g.replay()
        if mode.endswith("10") and i % 10 == 9:
            torch.cuda.synchronize()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    stop = True; th.join()
    during = [r for r in rows if t0 <= r[0] <= t2]
    issue = [r[1] for r in during]; sync = [r[2] for r in during]
    print(f"{mode}: enqueue {1e3*(t1-t0):.1f} ms, drain {1e3*(t2-t1):.1f} ms; polls {len(during)}; "
          f"issue med/max {statistics.median(issue):.1f}/{max(issue):.1f} us; sync med/max {statistics.median(sync):.1f}/{max(sync):.1f} us; rc {set((r[3], r[4]) for r in during)}")
    big = sorted(during, key=lambda r: -(r[1] + r[2]))[:5]
    print("  worst:", [(round(1e3*(r[0]-t0), 2), round(r[1], 1), round(r[2], 1)) for r in big])

"""A program with its own CUPTI client, like torch.profiler's Kineto: it reaches libcupti by dlsym,
registers buffer callbacks, enables kernel records around some launches, disables, flushes, and
counts the kernel records its buffers got. With `subscribe` it also takes CUPTI's one callback
subscriber for its window (as jax.profiler's XLA tracer does) and counts the cuLaunchKernel entries
its callback saw. With `timestamp` it registers its own clock for CUPTI's records (as Kineto does).
usage: app_profiler.py PTX KERNEL BEFORE INSIDE AFTER OUT [subscribe] [timestamp]"""
import ctypes as C
import json
import sys
import time

REQUESTED = C.CFUNCTYPE(None, C.POINTER(C.c_void_p), C.POINTER(C.c_size_t), C.POINTER(C.c_size_t))
COMPLETED = C.CFUNCTYPE(None, C.c_void_p, C.c_uint32, C.c_void_p, C.c_size_t, C.c_size_t)
CALLBACK = C.CFUNCTYPE(None, C.c_void_p, C.c_int, C.c_uint32, C.c_void_p)
CONCURRENT_KERNEL = 10
STAMP = None  # the program's clock callback, alive until exit
DRIVER_DOMAIN, LAUNCH_CBID = 1, 307


def main(ptx_path, kernel, before, inside, after, out, options=()):
    cu = C.CDLL("libcuda.so.1")
    mod, fn = C.c_void_p(), C.c_void_p()
    assert cu.cuModuleLoadData(C.byref(mod), C.c_char_p(open(ptx_path, "rb").read() + b"\0")) == 0
    assert cu.cuModuleGetFunction(C.byref(fn), mod, kernel.encode()) == 0
    vals = [C.c_uint64(i) for i in range(4)]
    params = (C.c_void_p * 4)(*[C.addressof(v) for v in vals])
    cu.cuLaunchKernel.argtypes = [C.c_void_p] + [C.c_uint] * 7 + [C.c_void_p] * 3

    def launch(n):
        for _ in range(n):
            assert cu.cuLaunchKernel(fn, 4, 1, 1, 64, 1, 1, 0, None, params, None) == 0

    launch(before)
    cupti = C.CDLL("libcupti.so.13", mode=C.RTLD_GLOBAL)  # the one the shim loaded (same soname)
    buffers, names = {}, []
    next_record = cupti.cuptiActivityGetNextRecord
    next_record.argtypes = [C.c_void_p, C.c_size_t, C.POINTER(C.c_void_p)]

    def requested(buf, size, max_records):
        b = C.create_string_buffer(1 << 16)
        buffers[C.addressof(b)] = b
        buf[0], size[0], max_records[0] = C.addressof(b), len(b), 0

    def completed(ctx, stream, buf, size, valid):
        rec = C.c_void_p(0)
        while next_record(buf, valid, C.byref(rec)) == 0:
            if C.c_uint32.from_address(rec.value).value == CONCURRENT_KERNEL:
                name = C.c_char_p.from_address(rec.value + 104).value  # K_NAME
                names.append(name.decode())
        buffers.pop(buf, None)

    entries = []

    def on_call(userdata, domain, cbid, data):
        if C.c_uint32.from_address(data).value == 0:  # CUPTI_API_ENTER
            entries.append(cbid)

    keep = (REQUESTED(requested), COMPLETED(completed), CALLBACK(on_call))
    sub = C.c_void_p()
    if "timestamp" in options:  # as Kineto: CUPTI stamps records with the program's clock (here 2 x monotonic)
        global STAMP
        STAMP = C.CFUNCTYPE(C.c_uint64)(lambda: 2 * time.monotonic_ns() + 12345)
        assert cupti.cuptiActivityRegisterTimestampCallback(STAMP) == 0
    if "subscribe" in options:
        assert cupti.cuptiSubscribe(C.byref(sub), keep[2], None) == 0
        cupti.cuptiEnableCallback.argtypes = [C.c_uint32, C.c_void_p, C.c_int, C.c_uint32]
        assert cupti.cuptiEnableCallback(1, sub, DRIVER_DOMAIN, LAUNCH_CBID) == 0
    assert cupti.cuptiActivityRegisterCallbacks(*keep[:2]) == 0
    assert cupti.cuptiActivityEnable(CONCURRENT_KERNEL) == 0
    launch(inside)
    assert cupti.cuptiActivityDisable(CONCURRENT_KERNEL) == 0
    assert cupti.cuptiActivityFlushAll(1) == 0
    if "subscribe" in options:
        assert cupti.cuptiUnsubscribe(sub) == 0
    launch(after)
    json.dump({"kernels": names, "open_buffers": len(buffers), "launch_entries": len(entries)}, open(out, "w"))
    print("profiler app done")


if __name__ == "__main__":
    a = sys.argv
    main(a[1], a[2], int(a[3]), int(a[4]), int(a[5]), a[6], a[7:])

"""Reaches the (fake) driver like PyTorch/Triton do: dlopen + dlsym (ctypes). usage: app.py PTXFILE KERNEL LAUNCHES

FAKEAPP_PEER=1: a peer-to-peer copy (cuMemcpyPeerAsync, 256 bytes) after each launch, from its device to the next,
on its stream; FAKEAPP_PROFILER=1: cuProfilerStop and cuProfilerStart before the launches, cuProfilerStop after."""
import ctypes as C
import os
import sys


class Config(C.Structure):  # CUlaunchConfig
    _fields_ = [("g", C.c_uint * 3), ("b", C.c_uint * 3), ("shared", C.c_uint), ("stream", C.c_void_p),
                ("attrs", C.c_void_p), ("n_attrs", C.c_uint)]


def launch_all(ptx_path, kernel, n):
    cu = C.CDLL("libcuda.so.1")
    mod, fn = C.c_void_p(), C.c_void_p()
    ptx = open(ptx_path, "rb").read() + b"\0"
    assert cu.cuModuleLoadData(C.byref(mod), C.c_char_p(ptx)) == 0
    assert cu.cuModuleGetFunction(C.byref(fn), mod, kernel.encode()) == 0
    vals = [C.c_uint64(i) for i in range(4)]
    params = (C.c_void_p * 4)(*[C.addressof(v) for v in vals])
    cu.cuLaunchKernel.argtypes = [C.c_void_p] + [C.c_uint] * 7 + [C.c_void_p] * 3
    cu.cuLaunchKernelEx.argtypes = [C.c_void_p] * 4
    cu.cuLaunchKernel_ptsz.argtypes = cu.cuLaunchKernel.argtypes
    # FAKEAPP_PTSZ=1: the launches go through the per-thread default stream's entry point (nvcc
    # --default-stream per-thread): the NULL stream is then each thread's own
    launch = cu.cuLaunchKernel_ptsz if os.environ.get("FAKEAPP_PTSZ") else cu.cuLaunchKernel
    config = Config((4, 1, 1), (64, 1, 1), 0, None, None, 0)
    devices = int(os.environ.get("FAKEAPP_DEVICES", "1"))  # launch on the devices in turn (contexts of fakecuda.c)
    counter = iter(range(1 << 62))
    grids = [int(g) for g in os.environ.get("FAKEAPP_GRIDS", "4").split(",")]  # launch i: grids[i % len]
    streams = [None]  # FAKEAPP_STREAMS=S: launch i on stream i % S (stream 0: the NULL stream)
    for _ in range(int(os.environ.get("FAKEAPP_STREAMS", "1")) - 1):
        st = C.c_void_p()
        assert cu.cuStreamCreate(C.byref(st), 1) == 0
        streams.append(st)

    peer_src, peer_dst = (C.c_char * 256)(), (C.c_char * 256)()
    if os.environ.get("FAKEAPP_PROFILER"):  # the program marks its region of interest, as nsys users do
        assert cu.cuProfilerStop() == 0 and cu.cuProfilerStart() == 0
    cycle = int(os.environ.get("FAKEAPP_ARGS_CYCLE", "0"))  # launch i passes i % cycle as its first argument
    ranged = _ranges()  # FAKEAPP_NVTX=libfakenvtx.so: launch i inside annotate("annot{i%2}") and NVTX "nvtx{i}"

    def launches(count):
        for _ in range(count):
            i = next(counter)
            if cycle:
                vals[0].value = i % cycle
            if devices > 1:
                assert cu.cuCtxSetCurrent(C.c_void_p(0xC0 + 0x100 * (i % devices))) == 0
            g, stream = grids[i % len(grids)], streams[i % len(streams)]
            if i == int(os.environ.get("FAKEAPP_RESET_AT", "-1")):  # the primary context reset before launch i
                assert cu.cuDevicePrimaryCtxReset_v2(0) == 0
            if os.environ.get("FAKEAPP_REMAKE_STREAM"):  # a stream of its own, destroyed after the launch
                stream = C.c_void_p()
                assert cu.cuStreamCreate(C.byref(stream), 1) == 0
            with ranged(i):
                if os.environ.get("FAKEAPP_EX"):  # as Triton launches
                    config.g[0] = g
                    config.stream = stream
                    assert cu.cuLaunchKernelEx(C.byref(config), fn, params, None) == 0
                else:
                    assert launch(fn, g, 1, 1, 64, 1, 1, 0, stream, params, None) == 0
            if os.environ.get("FAKEAPP_PEER"):  # a peer copy to the next device, on the launch's stream
                dev = i % devices
                cu.cuMemcpyPeerAsync.argtypes = [C.c_uint64, C.c_void_p, C.c_uint64, C.c_void_p, C.c_size_t, C.c_void_p]
                assert cu.cuMemcpyPeerAsync(C.addressof(peer_dst), 0xC0 + 0x100 * ((dev + 1) % devices),
                                            C.addressof(peer_src), 0xC0 + 0x100 * dev, 256, stream) == 0
            if os.environ.get("FAKEAPP_BAD_LAUNCH"):  # a launch the driver refuses (grid 0): no record
                assert cu.cuLaunchKernel(fn, 0, 1, 1, 64, 1, 1, 0, stream, params, None) != 0
            if os.environ.get("FAKEAPP_REMAKE_STREAM"):
                assert cu.cuStreamDestroy_v2(stream) == 0

    threads = int(os.environ.get("FAKEAPP_THREADS", "0"))
    if not threads:
        launches(n)
        if os.environ.get("FAKEAPP_PROFILER"):
            assert cu.cuProfilerStop() == 0
        return
    # FAKEAPP_THREADS=T: one launch, then T threads launching n each at once (ctypes drops the GIL)
    import threading
    launches(1)
    workers = [threading.Thread(target=launches, args=(n,)) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if os.environ.get("FAKEAPP_PROFILER"):
        assert cu.cuProfilerStop() == 0


def _ranges():
    import contextlib

    path = os.environ.get("FAKEAPP_NVTX")
    if not path:
        return lambda i: contextlib.nullcontext()
    import neutrino

    nvtx = C.CDLL(path)
    nvtx.fake_nvtx_push.argtypes = [C.c_char_p]

    @contextlib.contextmanager
    def ranged(i):
        with neutrino.annotate(f"annot{i % 2}"):
            nvtx.fake_nvtx_push(f"nvtx{i}".encode())
            try:
                yield
            finally:
                nvtx.fake_nvtx_pop()

    return ranged


if __name__ == "__main__":
    launch_all(sys.argv[1], sys.argv[2], int(sys.argv[3]))
    print("app done")

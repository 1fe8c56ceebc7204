"""Two threads release the primary context at once, after two retains (cudart's and a library's), under the shim
(LD_PRELOAD) and the fake driver. The teardown callback (registered here, as the runtime does) prints whether
the shim says the release keeps the context, and sleeps so that the two releases overlap. usage: the script
[v1]: with v1, one after the other, the first through the entry point before CUDA 11 (cuDevicePrimaryCtxRelease,
by dlsym), the second through cuDevicePrimaryCtxRelease_v2."""
import ctypes as C
import sys
import threading
import time

P = C.c_void_p
cu = C.CDLL("libcuda.so.1")
shim = C.CDLL(None)  # the preloaded shim's exports
keeps = []


@C.CFUNCTYPE(None)
def teardown():
    keeps.append(shim.neutrino_teardown_keeps_context())
    time.sleep(0.3)


none = C.cast(None, C.CFUNCTYPE(None))
shim.neutrino_register_callbacks(none, none, none, none, none, teardown)
cu.cuDevicePrimaryCtxRetain.argtypes = [C.POINTER(P), C.c_int]
for _ in range(2):
    assert cu.cuDevicePrimaryCtxRetain(C.byref(P()), 0) == 0
if sys.argv[1:] == ["v1"]:
    assert cu.cuDevicePrimaryCtxRelease(0) == 0 and cu.cuDevicePrimaryCtxRelease_v2(0) == 0
    print("keeps", keeps)
    sys.exit(0)
threads = [threading.Thread(target=cu.cuDevicePrimaryCtxRelease_v2, args=(0,)) for _ in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("keeps", sorted(keeps))

"""A HIP program, as a ROCm Python library reaches HIP: libamdhip64 loaded globally, calls resolved
in the global scope (where an LD_PRELOADed hook comes first).

usage: app.py CODE_OBJECT KERNEL LAUNCHES   (FAKEAPP_EXTRA=1: pass the arguments as an `extra` buffer)
"""
import ctypes as C
import os
import sys

C.CDLL("libamdhip64.so", mode=C.RTLD_GLOBAL)
hip = C.CDLL(None)


def main(path, kernel, launches):
    image = open(path, "rb").read()
    module, function = C.c_void_p(), C.c_void_p()
    assert hip.hipModuleLoadData(C.byref(module), C.c_char_p(image)) == 0
    assert hip.hipModuleGetFunction(C.byref(function), module, kernel.encode()) == 0
    args = [C.c_uint64(1000 + i) for i in range(4)]
    hip.hipModuleLaunchKernel.argtypes = [C.c_void_p] + [C.c_uint] * 7 + [C.c_void_p] * 3
    for _ in range(launches):
        if os.environ.get("FAKEAPP_EXTRA"):
            blob = b"".join(a.value.to_bytes(8, "little") for a in args)
            buffer, size = C.create_string_buffer(blob, len(blob)), C.c_size_t(len(blob))
            extra = (C.c_void_p * 5)(1, C.addressof(buffer), 2, C.addressof(size), 3)
            assert hip.hipModuleLaunchKernel(function, 3, 1, 1, 128, 1, 1, 0, None, None, extra) == 0
        else:
            params = (C.c_void_p * 4)(*[C.addressof(a) for a in args])
            assert hip.hipModuleLaunchKernel(function, 3, 1, 1, 128, 1, 1, 0, None, params, None) == 0
    print("app done")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))

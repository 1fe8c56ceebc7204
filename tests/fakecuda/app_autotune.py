"""A program whose kernels are autotuned, on the fake driver: Triton's `@triton.autotune`
(tests/faketriton), TorchInductor's CachingAutotuner and max-autotune's choice benchmarking
(tests/faketorch). Candidates launch with grid 2, the program's own launches with grid 4.
usage: app_autotune.py PTXFILE KERNEL"""
import ctypes as C
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "faketriton"), os.path.join(HERE, "..", "faketorch")]


def driver(ptx_path, kernel):
    cu = C.CDLL("libcuda.so.1")
    mod, fn = C.c_void_p(), C.c_void_p()
    ptx = open(ptx_path, "rb").read() + b"\0"
    assert cu.cuModuleLoadData(C.byref(mod), C.c_char_p(ptx)) == 0
    assert cu.cuModuleGetFunction(C.byref(fn), mod, kernel.encode()) == 0
    vals = [C.c_uint64(i) for i in range(4)]
    params = (C.c_void_p * 4)(*[C.addressof(v) for v in vals])
    cu.cuLaunchKernel.argtypes = [C.c_void_p] + [C.c_uint] * 7 + [C.c_void_p] * 3

    def launch(candidate: bool):
        assert cu.cuLaunchKernel(fn, 2 if candidate else 4, 1, 1, 64, 1, 1, 0, None, params, None) == 0

    return launch


class JitKernel:
    """What @triton.jit gives: `run` launches it with the config's meta-parameters."""

    def __init__(self, launch):
        self.launch = launch
        self.__name__ = "matmul_kernel"

    def run(self, *args, candidate, **meta):
        self.launch(candidate)


def main(ptx_path, kernel):
    launch = driver(ptx_path, kernel)
    import triton

    tuner = triton.Autotuner(JitKernel(launch), [triton.Config({"BLOCK_K": 32}, 2.0),
                                                 triton.Config({"BLOCK_K": 64}, 1.0)], key=["n"])
    tuner.run(n=128)  # tunes (2 configs x 2 launches), then launches BLOCK_K 64
    tuner.run(n=128)  # cached: the program's launch only
    tuner.run(n=256)  # another key: tuned again, though the kernel is probed (and planned) by now

    from torch._inductor.runtime import triton_heuristics as th

    tuned = th.CachingAutotuner([th.Launcher(launch, "XBLOCK: 64", 2.0), th.Launcher(launch, "XBLOCK: 128", 1.0)],
                                "triton_poi_fused_add_0")
    tuned.run()

    from torch._inductor import select_algorithm as sa

    sa.AlgorithmSelectorCache.benchmark_in_current_process([sa.Choice("extern_mm", launch, 2.0),
                                                            sa.Choice("triton_mm_1", launch, 1.0)])
    print("app done")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

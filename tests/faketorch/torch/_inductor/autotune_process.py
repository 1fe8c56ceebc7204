"""TorchInductor's benchmark requests, by their names (neutrino/runtime/autotune.py
INDUCTOR_SUBPROCESS): `BenchmarkRequest.benchmark` times one choice; subclasses inherit it."""


class BenchmarkRequest:
    def __init__(self, kernel_name, launch):
        self.kernel_name, self.launch = kernel_name, launch

    def benchmark(self, *input_tensors, out=None):
        self.launch(True)
        return 1.0


class TritonGPUBenchmarkRequest(BenchmarkRequest):
    pass

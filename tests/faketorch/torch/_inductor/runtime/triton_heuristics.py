"""TorchInductor's CachingAutotuner, by its names (neutrino/runtime/autotune.py INDUCTOR): `run`
autotunes to one launcher (benchmarking each) on its first call, then launches it."""


class Launcher:
    def __init__(self, launch, config, cost):
        self.launch, self.config, self.cost = launch, config, cost

    def __call__(self, *args, candidate=False, **kwargs):
        self.launch(candidate)


class CachingAutotuner:
    def __init__(self, launchers, kernel_name):
        self.launchers = launchers
        self.inductor_meta = {"kernel_name": kernel_name}

    def bench(self, launcher, *args, **kwargs):
        launcher(*args, candidate=True, **kwargs)
        return launcher.cost

    def benchmark_all_configs(self, *args, **kwargs):
        return {launcher: self.bench(launcher, *args, **kwargs) for launcher in self.launchers}

    def autotune_to_one_config(self, *args, **kwargs):
        timings = self.benchmark_all_configs(*args, **kwargs)
        self.launchers = [min(timings, key=timings.get)]

    def run(self, *args, **kwargs):
        if len(self.launchers) > 1:
            self.autotune_to_one_config(*args, **kwargs)
        (launcher,) = self.launchers
        return launcher(*args, **kwargs)

"""Triton's Autotuner, by its names (neutrino/runtime/autotune.py TRITON): `run` benchmarks every
config with `_bench` on the first call per key, keeps the fastest, then launches it.
FAKETRITON_LAYOUT=none: the benchmark function has another name (a Triton we do not know)."""
import os

BENCH = "_time_one_config" if os.environ.get("FAKETRITON_LAYOUT") == "none" else "_bench"


class Config:
    def __init__(self, kwargs, cost):
        self.kwargs = kwargs
        self.cost = cost  # what the fake benchmark measures

    def __str__(self):
        return ", ".join(f"{k}: {v}" for k, v in self.kwargs.items())


class Autotuner:
    def __init__(self, fn, configs, key):
        self.fn, self.base_fn, self.configs, self.keys = fn, fn, configs, key
        self.cache = {}
        self.best_config = None

    def bench_one(self, *args, config, **meta):
        for _ in range(2):  # do_bench: a warm-up launch, then the timed one
            self.fn.run(*args, candidate=True, **meta, **config.kwargs)
        return config.cost

    def run(self, *args, **kwargs):
        key = tuple(kwargs[k] for k in self.keys)
        if key not in self.cache:
            bench = getattr(self, BENCH)
            timings = {config: bench(*args, config=config, **kwargs) for config in self.configs}
            self.cache[key] = min(timings, key=timings.get)
        self.best_config = self.cache[key]
        return self.fn.run(*args, candidate=False, **kwargs, **self.best_config.kwargs)


setattr(Autotuner, BENCH, Autotuner.bench_one)
del Autotuner.bench_one

"""TorchInductor's max-autotune choice benchmarking, by its names (neutrino/runtime/autotune.py
INDUCTOR_SELECT): classmethods that time each choice in this process."""


class Choice:
    def __init__(self, name, launch, cost):
        self.name, self.launch, self.cost = name, launch, cost

    def benchmark(self):
        self.launch(True)
        return self.cost


class AlgorithmSelectorCache:
    @classmethod
    def benchmark_choices(cls, choices, autotune_args=None):
        return {choice: choice.benchmark() for choice in choices}

    @classmethod
    def benchmark_in_current_process(cls, choices, input_nodes=None, layout=None):
        return cls.benchmark_choices(choices, None)

"""Host cost of naming a probed launch's tensors (neutrino/runtime/tensors.py), before and after
the registration hooks (spec/runtime.md, "Ranges and tensor trace").

    python benchmarks/tensor_resolution_cost.py [--torch] [--before OLD_TENSORS_PY] [--objects N]
                                               [--layers L] [--resolves R]

The process holds N extra garbage-collected objects (a large program's heap: a torch + Triton
process holds several hundred thousand) and a model of L blocks (with --torch: L
`nn.TransformerEncoderLayer(256, 4, 1024)` on the GPU, 12 parameters each; without: the test
suite's stand-in torch, tests/test_tensor_resolution.py, 3 modules and 4 tensors a block). Then R
argument sets are resolved, each of 4 pointers: two parameters' starts, one address inside a
parameter, one address that no tensor holds (so every set misses and may rebuild).

Configurations:
  before        OLD_TENSORS_PY (e.g. `git show 00d43f5:neutrino/runtime/tensors.py`): a walk of
                the garbage collector's objects, at most every 2 s, and every parameter's span
                recomputed at each resolution
  hooks         the hooks installed before the model is built (the runtime's path: torch is
                imported after neutrino starts)
  torch_first   the model built before the resolver exists: one walk seeds the registry

Printed per configuration: builds (walks) and the ms of each (median, max), µs per resolution
(median and mean over R, builds included), and the µs per module of building the model (hooks
off in `before`, which runs first; on after it). The garbage collector is off while timing: its
pauses come from the program's allocation rate, not from us.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))


def load_before(path: str):
    spec = importlib.util.spec_from_file_location("tensors_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_model(torch, layers: int, real: bool):
    if real:
        return torch.nn.Sequential(*[torch.nn.TransformerEncoderLayer(256, 4, 1024) for _ in range(layers)]).cuda()
    from test_tensor_resolution import _Module, _Tensor

    base = 0x7F0000000000
    blocks = {}
    for i in range(layers):
        at = base + i * 0x100000
        blocks[str(i)] = _Module(attn=_Module(weight=_Tensor(at, (256, 256)), bias=_Tensor(at + 0x40000, (256,))),
                                 mlp=_Module(weight=_Tensor(at + 0x50000, (256, 64)),
                                             bias=_Tensor(at + 0x60000, (64,))))
    return _Module(**blocks)


def pointer_sets(model, count: int) -> list[list[int]]:
    params = [t for _, t in model.named_parameters()]
    sets = []
    for k in range(count):
        a, b, c = params[k % len(params)], params[(7 * k + 3) % len(params)], params[(13 * k + 5) % len(params)]
        sets.append([a.data_ptr(), b.data_ptr(), c.data_ptr() + 4 * (k % 8), 0x10000000000 + 4096 * k])
    return sets


def run(config: str, module, torch, args, real: bool) -> dict:
    builds = []

    def on_walk(seconds, modules, source="gc"):
        builds.append(seconds)
    resolver = None
    if config != "torch_first":
        resolver = module.TensorResolver(on_walk=on_walk)
        if config == "hooks":
            resolver._torch_imported(torch)
    gc.collect()
    gc.disable()  # a collection's pause is the program's allocation rate, not ours: kept out of every timing
    t0 = time.perf_counter()
    model = build_model(torch, args.layers, real)
    build_us = (time.perf_counter() - t0) * 1e6 / (sum(1 for _ in model.modules()) if real else 3 * args.layers + 1)
    if resolver is None:
        resolver = module.TensorResolver(on_walk=on_walk)
    times, named = [], 0
    for pointers in pointer_sets(model, args.resolves):
        t0 = time.perf_counter()
        found = resolver.resolve(pointers)
        times.append((time.perf_counter() - t0) * 1e6)
        named += sum(1 for v in found.values() if v["name"])
    gc.enable()
    return {"config": config, "builds": len(builds), "build_ms_median": 1e3 * statistics.median(builds) if builds else 0,
            "build_ms_max": 1e3 * max(builds, default=0), "resolve_us_median": statistics.median(times),
            "resolve_us_mean": statistics.fmean(times), "named": named, "model_build_us_per_module": build_us}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--torch", action="store_true", help="real torch, the model on the GPU")
    ap.add_argument("--before", help="the tensors.py to compare with (before the hooks)")
    ap.add_argument("--objects", type=int, default=500_000)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--resolves", type=int, default=2000)
    args = ap.parse_args()
    from neutrino.runtime import tensors

    if args.torch:
        import torch
    else:
        from test_tensor_resolution import _fake_torch

        torch = _fake_torch()
        sys.modules["torch"] = torch
    heap = [[] for _ in range(args.objects)]  # noqa: F841 - garbage-collected objects a walk must visit
    print(f"gc objects: {len(gc.get_objects())}; layers {args.layers}; resolutions {args.resolves}; "
          f"torch: {'real ' + torch.__version__ if args.torch else 'stand-in'}; python {sys.version.split()[0]}")
    configs = [("before", load_before(args.before))] if args.before else []
    configs += [("hooks", tensors), ("torch_first", tensors)]
    print(f"{'config':12s} {'builds':>6s} {'build ms med':>12s} {'max':>8s} {'resolve us med':>14s} {'mean':>9s} "
          f"{'named':>6s} {'model us/module':>15s}")
    for name, module in configs:
        r = run(name, module, torch, args, args.torch)
        print(f"{name:12s} {r['builds']:6d} {r['build_ms_median']:12.3f} {r['build_ms_max']:8.3f} "
              f"{r['resolve_us_median']:14.2f} {r['resolve_us_mean']:9.2f} {r['named']:6d} "
              f"{r['model_build_us_per_module']:15.2f}")


if __name__ == "__main__":
    main()

"""Triton's and TorchInductor's autotuners time their candidates unprobed (issue 22).

`@triton.autotune` benchmarks every config on the first call per key and keeps the fastest;
TorchInductor does the same for its generated kernels (CachingAutotuner, multi-kernels), for its
fusion decisions and, under max-autotune, for its GEMM choices (select_algorithm). Probed, a candidate runs slower and another can win; a
winner that reduces in another order (another BLOCK_K, split-K) changes the program's results in
the last bits. So their benchmarking runs inside the suspend window XLA's compiles use
(autotune_window.SuspendWindow): candidates run the original kernel, and each tuning writes one
`autotune` event. The chosen config's later launches are the program's, and are probed.

The hooks go in when the program first imports the module that holds them (a sys.meta_path
entry; nothing runs for a program that never imports triton or torch._inductor). Functions are
found by name; a hook none of whose benchmarking functions is found says so once
(`autotune_hook`) and the autotuner runs probed, as before.
"""

from __future__ import annotations

import sys
from typing import Callable, NamedTuple

from neutrino.runtime.modules.autotune_window import WRAPPED, SuspendWindow
from neutrino.runtime.modules.import_hooks import AfterImport

EVENT = "autotune"


class Target(NamedTuple):
    """A function an autotuner benchmarks in: `owner.attribute` of `module` (owner "": the module)."""
    module: str
    owner: str
    attribute: str
    tally: bool = False  # it also launches the chosen config: a tally of the windows inside it, no window
    before: Callable | None = None  # (args, kwargs) -> the event's fields
    after: Callable | None = None  # (args, kwargs, result) -> the event's fields


class Hook(NamedTuple):
    framework: str
    watch: str  # the module whose first import installs the hook
    targets: tuple[Target, ...]


# ---------------------------------------------------------------- what each event says


def _triton_kernel(tuner) -> dict:
    fn = getattr(tuner, "base_fn", None) or getattr(tuner, "fn", None)
    return {"kernel": getattr(fn, "__name__", str(fn)), "configs": len(getattr(tuner, "configs", ()) or ())}


def _triton_chosen(args, kwargs, result) -> dict:
    chosen = getattr(args[0], "best_config", None)
    return {} if chosen is None else {"chosen": str(chosen)}


def _inductor_kernel(tuner) -> dict:
    meta = getattr(tuner, "inductor_meta", None) or {}
    name = meta.get("kernel_name") or getattr(getattr(tuner, "fn", None), "__name__", None)
    return {"kernel": str(name), "configs": len(getattr(tuner, "launchers", ()) or ())}


def _inductor_chosen(args, kwargs, result) -> dict:
    launchers = getattr(args[0], "launchers", None) or []
    return {"chosen": str(launchers[0].config)} if len(launchers) == 1 else {}


def _choices(args, kwargs) -> dict:
    choices = list(args[1] if len(args) > 1 else kwargs.get("choices", ()))
    return {"kernel": "select_algorithm", "configs": len(choices)}


def _best_choice(args, kwargs, result) -> dict:
    if not isinstance(result, dict) or not result:
        return {}
    best = min(result, key=result.get)
    return {"chosen": str(getattr(best, "name", best))}


TRITON = Hook("triton", "triton", (
    # Autotuner.run benchmarks the configs (first call per key), then launches the winner: a tally.
    Target("triton.runtime.autotuner", "Autotuner", "run", tally=True,
           before=lambda args, kwargs: _triton_kernel(args[0]), after=_triton_chosen),
    Target("triton.runtime.autotuner", "Autotuner", "_bench",
           before=lambda args, kwargs: {"config": str(kwargs.get("config"))}),
))
INDUCTOR = Hook("inductor", "torch._inductor.runtime.triton_heuristics", (
    Target("torch._inductor.runtime.triton_heuristics", "CachingAutotuner", "autotune_to_one_config",
           before=lambda args, kwargs: _inductor_kernel(args[0]), after=_inductor_chosen),
    Target("torch._inductor.runtime.triton_heuristics", "CachingAutotuner", "coordinate_descent_tuning",
           before=lambda args, kwargs: _inductor_kernel(args[0]),
           after=lambda args, kwargs, result: {"chosen": str(getattr(result, "config", None))}),
    Target("torch._inductor.runtime.triton_heuristics", "CachingAutotuner", "benchmark_all_configs",
           before=lambda args, kwargs: _inductor_kernel(args[0])),
))
INDUCTOR_SELECT = Hook("inductor max-autotune", "torch._inductor.select_algorithm", (
    Target("torch._inductor.select_algorithm", "AlgorithmSelectorCache", "benchmark_in_current_process",
           before=_choices, after=_best_choice),
    Target("torch._inductor.select_algorithm", "AlgorithmSelectorCache", "benchmark_choices",
           before=_choices, after=_best_choice),
))
# max-autotune's subprocess path (autotune_in_subproc): each choice is benchmarked in a tuning
# process, a profiled process of its own; the in-process path reaches it too, nested (no event).
INDUCTOR_SUBPROCESS = Hook("inductor max-autotune (tuning process)", "torch._inductor.autotune_process", (
    Target("torch._inductor.autotune_process", "BenchmarkRequest", "benchmark",
           before=lambda args, kwargs: {"kernel": str(getattr(args[0], "kernel_name", None)), "configs": 1}),
))
# Compile-time fusion decisions (benchmark_fusion, benchmark_epilogue_fusion, benchmark_combo_kernel):
# which nodes share a kernel changes what each kernel computes, and so can change the results.
INDUCTOR_FUSION = Hook("inductor fusion", "torch._inductor.scheduler", tuple(
    Target("torch._inductor.scheduler", "Scheduler", name, before=lambda args, kwargs: {"kernel": "fusion"})
    for name in ("benchmark_fused_nodes", "benchmark_codegened_module", "benchmark_combo_kernel")))


def _sub_kernel_chosen(args, kwargs, result) -> dict:
    timings = list(result or ())
    return {"chosen": f"sub-kernel {timings.index(min(timings))}"} if timings else {}


# A multi-kernel (triton.multi_kernel) times its sub-kernels on its first call and keeps the fastest.
INDUCTOR_MULTI_KERNEL = Hook("inductor multi-kernel", "torch._inductor.codegen.multi_kernel", (
    Target("torch._inductor.codegen.multi_kernel", "MultiKernelCall", "benchmark_sub_kernels",
           before=lambda args, kwargs: {"kernel": str(getattr(args[0], "multi_kernel_name", None)),
                                        "configs": len(getattr(args[0], "kernels", ()) or ())},
           after=_sub_kernel_chosen),
))
HOOKS = (TRITON, INDUCTOR, INDUCTOR_SELECT, INDUCTOR_SUBPROCESS, INDUCTOR_FUSION, INDUCTOR_MULTI_KERNEL)


# ---------------------------------------------------------------- installing


def install(hook: Hook, window: SuspendWindow, modules=None) -> list[str]:
    """Wrap the hook's functions (modules from `modules`, default sys.modules, importing the ones
    not loaded yet); the names wrapped. No benchmarking function found: one `autotune_hook` event."""
    import importlib

    found = sys.modules if modules is None else modules
    wrapped = []
    for target in hook.targets:
        module = found.get(target.module)
        if module is None and modules is None:
            try:
                module = importlib.import_module(target.module)
            except Exception:  # noqa: BLE001 - another layout: the next name
                continue
        name = wrap_target(target, module, window)
        if name is not None:
            wrapped.append((name, target.tally))
    if not [name for name, tally in wrapped if not tally] and window.event is not None:
        window.event("autotune_hook", framework=hook.framework, found=False,
                     tried=[".".join(p for p in t[:3] if p) for t in hook.targets],
                     why=f"none of {hook.framework}'s benchmarking functions was found by name: its autotuner "
                         "times probed candidates, and can pick another config than it would without us")
    return [name for name, _ in wrapped]


def wrap_target(target: Target, module, window: SuspendWindow) -> str | None:
    """Replace target's function by its wrapper (a classmethod or staticmethod stays one); its name,
    or None when it is not there."""
    owner = getattr(module, target.owner, None) if target.owner else module
    if owner is None:
        return None
    raw = _static_attribute(owner, target.attribute)
    descriptor = type(raw) if isinstance(raw, (classmethod, staticmethod)) else None
    function = raw.__func__ if descriptor is not None else raw
    if not callable(function):
        return None
    name = ".".join(p for p in (getattr(module, "__name__", target.module), target.owner, target.attribute) if p)
    if not getattr(function, WRAPPED, False):
        wrapper = window.wrap(function, EVENT, name, target.before, target.after, tally=target.tally)
        setattr(owner, target.attribute, descriptor(wrapper) if descriptor is not None else wrapper)
    return name


def _static_attribute(owner, attribute: str):
    """The attribute as stored (a classmethod object, not the bound method), through a class's MRO."""
    for klass in getattr(owner, "__mro__", ()):
        if attribute in vars(klass):
            return vars(klass)[attribute]
    return getattr(owner, attribute, None)


def watch_for_autotuners(window: SuspendWindow, event=None, hooks=HOOKS) -> AfterImport | None:
    """Install each hook now if its module is loaded, else when the program first imports it."""
    if event is not None:
        window.event = event
    actions = {}
    for hook in hooks:
        def action(hook=hook):
            install(hook, window)

        if hook.watch in sys.modules:
            action()
        else:
            actions[hook.watch] = action
    if not actions:
        return None
    watch = AfterImport({name: (lambda module, action=action: action()) for name, action in actions.items()})
    sys.meta_path.insert(0, watch)
    return watch

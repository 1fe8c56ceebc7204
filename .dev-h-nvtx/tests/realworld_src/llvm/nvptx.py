"""LLVM IR text → PTX through llvmlite's NVPTX backend (shared by build_llvm.py and the tests)."""

from __future__ import annotations

import llvmlite.binding as llvm

_initialised = False


def _init() -> None:
    global _initialised
    if not _initialised:
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        _initialised = True


def compile_ir(ir_text: str, cpu: str = "sm_80", ptx_version: str = "ptx75", opt: int = 2) -> str:
    """Optimise `ir_text` at level `opt` (0-3) and emit PTX for `cpu`."""
    _init()
    target = llvm.Target.from_triple("nvptx64-nvidia-cuda")
    machine = target.create_target_machine(cpu=cpu, features=f"+{ptx_version}", opt=opt)
    module = llvm.parse_assembly(ir_text)
    module.verify()
    if opt:
        tuning = llvm.create_pipeline_tuning_options(speed_level=opt)
        builder = llvm.create_pass_builder(machine, tuning)
        builder.getModulePassManager().run(module, builder)
    return machine.emit_assembly(module)

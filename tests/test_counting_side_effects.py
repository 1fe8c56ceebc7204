"""The counting variant never repeats the program's side effects (issue 30, section 1).

Input: nvcc's output for tests/data/counting/side_effects.cu (`-rdc=true`): a
kernel calling a `__noinline__` function that does an atomicAdd, a store
through another function and printf; recursion; an indirect call; an atomic's
result deciding a branch (directly and through a callee's return value);
assert; printf's result read; a trap. Each kernel is instrumented alone (the
runtime's path) with the two built-in tools that have a `cap = "count"` map.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest

from neutrino.engine import instrument_module
from neutrino.errors import InstrumentError
from neutrino.isa.ptx import ir, parse_module, print_module
from neutrino.isa.ptx.semantics import access_spaces, lookup
from neutrino.passes.counting import COUNT_SUFFIX, EXTERN_CALLS, call_parts, is_call
from neutrino.toolbox import load_probes

from helpers import DATA, HAVE_PTXAS

SOURCE = DATA / "counting" / "side_effects.sm_90.rdc.ptx"
COUNTING_TOOLS = ("dmat", "program_progress")
ACCEPTED = ["_Z5callsPji", "_Z9recursivePji", "_Z9assertingPii", "_Z8trappingPii"]
REFUSED = {
    "_Z8indirectPii": "an indirect call through %rd3 (a function pointer) cannot be followed",
    "_Z10last_blockPji": "a value an atomic would return decides control flow at 'bra'",
    "_Z17decided_by_calleePji": "a value an atomic would return decides control flow at 'bra'",
    "_Z13printf_resultPii": "the result of vprintf is read, and the call must go",
}
# Where the program's memory is: writes there must not happen twice. Local, shared and param
# memory belong to the counting launch itself.
PROGRAM_SPACES = ("global", None)


def probed(tool: str, kernel: str) -> ir.Module:
    module = parse_module(SOURCE.read_text(), str(SOURCE))
    instrument_module(module, load_probes(tool), kernel)
    return module


def reached(module: ir.Module, entry: str) -> list[ir.Function]:
    """`entry` and every function it calls, transitively (every call must be direct)."""
    defined = {f.name: f for f in module.functions() if f.body is not None}
    out, seen, work = [], {entry}, [defined[entry]]
    while work:
        function = work.pop()
        out.append(function)
        for insn in ir.instructions(function.body):
            if not is_call(insn):
                continue
            target = call_parts(insn).target
            assert isinstance(target, ir.Symbol), f"{function.name}: indirect call {insn.opcode} {target}"
            if target.name in defined and target.name not in seen:
                seen.add(target.name)
                work.append(defined[target.name])
            elif target.name not in defined:
                out.append(ir.Function("func", target.name))  # body-less: a call that stayed
    return out


def program_writes(function: ir.Function) -> list[ir.Instruction]:
    """Instructions the program wrote (not probe code) that store to or update the program's memory."""
    return [
        insn for insn in ir.instructions(function.body or [])
        if not (insn.origin or "").startswith(("probe ", "save-lowering", "buffer"))
        and any(access in ("store", "atomic") and space in PROGRAM_SPACES for _, access, space in access_spaces(insn.opcode))
    ]


def assemble(ptx: str) -> None:
    """ptxas -c (relocatable: vprintf stays unresolved until the driver links)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        proc = subprocess.run(["ptxas", "-c", "-arch=sm_90", str(src), "-o", str(Path(tmp) / "k.o")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("tool", COUNTING_TOOLS)
@pytest.mark.parametrize("kernel", ACCEPTED)
def test_counting_variant_reaches_no_side_effect(tool, kernel):
    module = probed(tool, kernel)
    closure = reached(module, kernel + COUNT_SUFFIX)
    for function in closure:
        assert function.body is not None, f"the counting variant still calls {function.name}"
        assert not program_writes(function), (function.name, [str(i.opcode) for i in program_writes(function)])
        assert all(lookup(i.opcode).control != "trap" for i in ir.instructions(function.body))
        if function.name != kernel + COUNT_SUFFIX:  # a copy of a called function: no probe code at all
            assert function.name.endswith(COUNT_SUFFIX) and not function.linkage
    if HAVE_PTXAS:
        assemble(print_module(module))


@pytest.mark.parametrize("tool", COUNTING_TOOLS)
def test_the_real_kernel_keeps_its_calls_and_effects(tool):
    module = probed(tool, "_Z5callsPji")
    names = [f.name for f in reached(module, "_Z5callsPji")]
    assert names == ["_Z5callsPji", "_Z4bumpPji", "vprintf", "_Z4leafPji$8"]
    bump = module.function("_Z4bumpPji")
    assert [str(i.opcode) for i in program_writes(bump)] == ["atom.global.add.u32"]
    assert [str(i.opcode) for i in program_writes(module.function("_Z4leafPji$8"))] == ["st.global.u32"]
    copies = [f.name for f in reached(module, "_Z5callsPji" + COUNT_SUFFIX)]
    assert copies == ["_Z5callsPji__nt_count", "_Z4bumpPji__nt_count", "_Z4leafPji$8__nt_count"]


def test_the_atomic_becomes_a_load_and_printf_goes():
    module = probed("dmat", "_Z5callsPji")
    bump = module.function("_Z4bumpPji__nt_count")
    opcodes = [str(i.opcode) for i in ir.instructions(bump.body)]
    assert "ld.global.u32" in opcodes and not any(o.startswith("atom") for o in opcodes)
    assert all(call_parts(i).target.name != "vprintf" for i in ir.instructions(bump.body) if is_call(i))
    # the copy is declared before the counting kernel calls it
    items = [i.name for i in module.items if isinstance(i, ir.Function)]
    assert items.index("_Z4bumpPji__nt_count") < items.index("_Z5callsPji__nt_count")


def test_recursion_calls_its_own_copy():
    module = probed("dmat", "_Z9recursivePji")
    depth = module.function("_Z5depthPjii$7__nt_count")
    targets = {call_parts(i).target.name for i in ir.instructions(depth.body) if is_call(i)}
    assert targets == {"_Z5depthPjii$7__nt_count"}


def test_kernel_body_writes_are_dropped_only_in_the_copy():
    """The kernel's own `out[i] = i` (section 2 of the issue): gone from the counting copy, kept in the kernel."""
    module = probed("dmat", "_Z9assertingPii")
    assert [str(i.opcode) for i in program_writes(module.function("_Z9assertingPii"))] == ["st.global.u32"]
    assert program_writes(module.function("_Z9assertingPii__nt_count")) == []


@pytest.mark.parametrize("kernel", ["_Z9assertingPii", "_Z8trappingPii"])
def test_assert_and_trap_end_the_thread(kernel):
    """__assertfail never returns and trap stops the program: the copy's thread exits there instead."""
    module = probed("dmat", kernel)
    copy = module.function(kernel + COUNT_SUFFIX)
    insns = ir.instructions(copy.body)
    assert not any(is_call(i) for i in insns)
    assert any(lookup(i.opcode).control == "exit" and i.origin == "counting-variant" for i in insns)
    real = ir.instructions(module.function(kernel).body)
    assert any(is_call(i) or lookup(i.opcode).control == "trap" for i in real)


@pytest.mark.parametrize("tool", COUNTING_TOOLS)
@pytest.mark.parametrize("kernel", sorted(REFUSED))
def test_refused_kernels_get_a_located_error(tool, kernel):
    with pytest.raises(InstrumentError) as err:
        probed(tool, kernel)
    message = str(err.value)
    assert message.startswith(f"{SOURCE}:") and ": error: kernel " + kernel in message
    assert REFUSED[kernel] in message
    line = int(message.split(":")[1])
    assert line > 0 and kernel in "".join(SOURCE.read_text().splitlines()[:line])  # a line inside the file


def test_known_externs_are_the_ones_dropped():
    assert EXTERN_CALLS == {"vprintf": "drop", "malloc": "drop", "free": "drop", "__assertfail": "stop"}


def test_cli_reports_the_refusal(tmp_path, capsys):
    from neutrino.cli import main

    rc = main(["instrument", "-p", "dmat", "-k", "=_Z8indirectPii", str(SOURCE), "-o", str(tmp_path / "out.ptx")])
    err = capsys.readouterr().err
    assert rc != 0 and f"{SOURCE}:" in err and "indirect call" in err and "Traceback" not in err
    assert not (tmp_path / "out.ptx").exists()


def test_runtime_falls_back_with_one_event(tmp_path):
    """A refused kernel runs unprobed: one `fallback` line of stage `instrument`, the launch not taken."""
    from test_runtime_core import events, finish, make_runtime, original_params
    from neutrino.runtime.core import NOT_HANDLED, LaunchRequest
    from neutrino.runtime.driver import LAUNCH_KERNEL
    import ctypes as C

    probe = (DATA / "probes" / "mem_count.toml").read_text()
    rt, drv, shim = make_runtime(tmp_path, probe=probe)
    rt.on_module("cuModuleLoadData", 0x100, SOURCE.read_bytes())
    assert rt.on_function("module_function", 0x100, "_Z8indirectPii", 0x200)
    params = original_params(2)
    request = LaunchRequest(LAUNCH_KERNEL, 0x200, (4, 1, 1), (64, 1, 1), 0, 0x5, C.addressof(params), index=0)
    assert rt.on_launch(request) == NOT_HANDLED
    assert not drv.launches
    finish(rt)
    (fallback,) = events(rt, "fallback")
    assert fallback["stage"] == "instrument" and fallback["permanent"]
    assert "indirect call" in fallback["reason"] and "\n" not in fallback["reason"]


REGIONS_PTX = """.version 8.0
.target sm_90
.address_size 64
.global .align 4 .u32 counter;
.shared .align 4 .u32 slot;

.func keep_old()
{
	.local .align 4 .b8 frame_a[4];
	.reg .b32 %r<2>;
	.reg .b64 %rd<3>;
	mov.u64 %rd1, counter;
	atom.global.add.u32 %r1, [%rd1], 1;
	mov.u64 %rd2, frame_a;
	st.local.u32 [%rd2], %r1;
	ret;
}

.func decide_on_own_frame()
{
	.local .align 4 .b8 frame_b[4];
	.reg .pred %p<2>;
	.reg .b32 %r<2>;
	.reg .b64 %rd<3>;
	mov.u64 %rd1, frame_b;
	st.local.u32 [%rd1], 5;
	ld.local.u32 %r1, [%rd1];
	setp.eq.u32 %p1, %r1, 5;
	@%p1 bra $L_done;
	mov.u64 %rd2, counter;
	ld.global.u32 %r1, [%rd2];
$L_done:
	ret;
}

.visible .entry frames(.param .u64 p)
{
	.reg .b32 %r<2>;
	.reg .b64 %rd<2>;
	call.uni keep_old;
	call.uni decide_on_own_frame;
	ld.param.u64 %rd1, [p];
	ld.global.u32 %r1, [%rd1];
	ret;
}

.visible .entry through_shared(.param .u64 p)
{
	.reg .pred %p<2>;
	.reg .b32 %r<3>;
	.reg .b64 %rd<3>;
	ld.param.u64 %rd1, [p];
	mov.u64 %rd2, counter;
	atom.global.add.u32 %r1, [%rd2], 1;
	st.shared.u32 [slot], %r1;
	bar.sync 0;
	ld.shared.u32 %r2, [slot];
	setp.eq.u32 %p1, %r2, 0;
	@%p1 bra $L_done;
	ld.global.u32 %r1, [%rd1];
$L_done:
	ret;
}
"""


def test_a_stand_in_in_one_frame_does_not_taint_another():
    """keep_old stores an atomic's stand-in in its own frame; decide_on_own_frame branches on its own: accepted."""
    module = parse_module(REGIONS_PTX, "regions.ptx")
    instrument_module(module, load_probes(str(DATA / "probes" / "mem_count.toml")), "frames")
    assert not program_writes(module.function("keep_old__nt_count"))
    if HAVE_PTXAS:
        assemble(print_module(module))


def test_a_stand_in_through_shared_memory_deciding_a_branch_is_refused():
    module = parse_module(REGIONS_PTX, "regions.ptx")
    line = REGIONS_PTX.splitlines().index("\t@%p1 bra $L_done;", REGIONS_PTX.splitlines().index(".visible .entry through_shared(.param .u64 p)")) + 1
    with pytest.raises(InstrumentError, match=rf"regions\.ptx:{line}: error: kernel through_shared: .*decides control flow at 'bra'"):
        instrument_module(module, load_probes(str(DATA / "probes" / "mem_count.toml")), "through_shared")

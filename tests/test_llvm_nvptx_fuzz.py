"""Random LLVM IR kernels → PTX through llvmlite's NVPTX backend → every tool → ptxas.

A hypothesis strategy writes well-formed LLVM IR kernels from a small grammar
(integer and float arithmetic, global loads/stores, atomics, shared memory
with barriers, counted loops, branches merging through phis, calls to
non-inlined device functions); LLVM compiles them at -O0 or -O2 for sm_80 or
sm_90. The engine must parse what LLVM wrote, print it back byte for byte, and
instrument it with every tool into PTX that ptxas accepts.
"""

from __future__ import annotations

import importlib.util

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neutrino.engine import instrument
from neutrino.isa.ptx import parse_module, print_module

from helpers import DATA, HAVE_PTXAS, assert_keeps_original, ptxas

pytest.importorskip("llvmlite")


def _load_nvptx():
    path = DATA.parent / "realworld_src" / "llvm" / "nvptx.py"
    spec = importlib.util.spec_from_file_location("realworld_nvptx", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


nvptx = _load_nvptx()

HEADER = """target triple = "nvptx64-nvidia-cuda"

@smem = internal addrspace(3) global [256 x float] undef, align 4
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
declare void @llvm.nvvm.barrier0()
declare float @llvm.fma.f32(float, float, float)
"""

INT_OPS = ["add", "sub", "mul", "and", "or", "xor"]
FLOAT_OPS = ["fadd", "fsub", "fmul"]


@attrs.define
class KernelWriter:
    """Writes one kernel's IR in SSA form, tracking live values and the current block."""

    draw: object
    lines: list[str] = attrs.field(factory=list)
    helpers: list[str] = attrs.field(factory=list)
    ints: list[str] = attrs.field(factory=lambda: ["%tid", "%n"])
    floats: list[str] = attrs.field(factory=lambda: ["%a"])
    block: str = "entry"
    counter: int = 0

    def fresh(self, stem: str) -> str:
        self.counter += 1
        return f"%{stem}{self.counter}"

    def emit(self, line: str) -> None:
        self.lines.append("  " + line)

    def int_operand(self) -> str:
        return self.draw(st.sampled_from(self.ints + ["1", "7", "-3", "255"]))

    def float_operand(self) -> str:
        return self.draw(st.sampled_from(self.floats + ["1.0", "0.5", "-2.0"]))

    def index(self) -> str:
        """An i64 index into a 1024-element buffer."""
        masked, wide = self.fresh("m"), self.fresh("ix")
        self.emit(f"{masked} = and i32 {self.int_operand()}, 1023")
        self.emit(f"{wide} = zext i32 {masked} to i64")
        return wide

    def pointer(self, buffer: str, elem: str) -> str:
        idx, ptr = self.index(), self.fresh("p")
        self.emit(f"{ptr} = getelementptr inbounds {elem}, ptr addrspace(1) %{buffer}, i64 {idx}")
        return ptr

    # --- statements -----------------------------------------------------
    def int_op(self) -> None:
        v = self.fresh("i")
        self.emit(f"{v} = {self.draw(st.sampled_from(INT_OPS))} i32 {self.int_operand()}, {self.int_operand()}")
        self.ints.append(v)

    def float_op(self) -> None:
        v = self.fresh("f")
        if self.draw(st.booleans()):
            self.emit(f"{v} = {self.draw(st.sampled_from(FLOAT_OPS))} float {self.float_operand()}, {self.float_operand()}")
        else:
            self.emit(f"{v} = call float @llvm.fma.f32(float {self.float_operand()}, float {self.float_operand()}, float {self.float_operand()})")
        self.floats.append(v)

    def convert(self) -> None:
        if self.draw(st.booleans()):
            v = self.fresh("f")
            self.emit(f"{v} = sitofp i32 {self.int_operand()} to float")
            self.floats.append(v)
        else:
            v = self.fresh("i")
            self.emit(f"{v} = fptosi float {self.float_operand()} to i32")
            self.ints.append(v)

    def load(self) -> None:
        if self.draw(st.booleans()):
            v = self.fresh("f")
            self.emit(f"{v} = load float, ptr addrspace(1) {self.pointer('x', 'float')}, align 4")
            self.floats.append(v)
        else:
            v = self.fresh("i")
            self.emit(f"{v} = load i32, ptr addrspace(1) {self.pointer('k', 'i32')}, align 4")
            self.ints.append(v)

    def store(self) -> None:
        if self.draw(st.booleans()):
            self.emit(f"store float {self.float_operand()}, ptr addrspace(1) {self.pointer('y', 'float')}, align 4")
        else:
            self.emit(f"store i32 {self.int_operand()}, ptr addrspace(1) {self.pointer('k', 'i32')}, align 4")

    def atomic(self) -> None:
        v = self.fresh("i")
        if self.draw(st.booleans()):
            op = self.draw(st.sampled_from(["add", "max", "umin", "xchg", "or"]))
            self.emit(f"{v} = atomicrmw {op} ptr addrspace(1) {self.pointer('k', 'i32')}, i32 {self.int_operand()} monotonic")
            self.ints.append(v)
        else:
            self.emit(f"{v} = atomicrmw fadd ptr addrspace(1) {self.pointer('y', 'float')}, float {self.float_operand()} monotonic")
            self.floats.append(v)

    def shared(self) -> None:
        slot, peer, mine, theirs, v = (self.fresh(s) for s in ("s", "q", "sp", "sq", "f"))
        self.emit(f"{slot} = and i32 %tid, 255")
        self.emit(f"{mine} = getelementptr inbounds [256 x float], ptr addrspace(3) @smem, i32 0, i32 {slot}")
        self.emit(f"store float {self.float_operand()}, ptr addrspace(3) {mine}, align 4")
        self.emit("call void @llvm.nvvm.barrier0()")
        self.emit(f"{peer} = xor i32 {slot}, 1")
        self.emit(f"{theirs} = getelementptr inbounds [256 x float], ptr addrspace(3) @smem, i32 0, i32 {peer}")
        self.emit(f"{v} = load float, ptr addrspace(3) {theirs}, align 4")
        self.floats.append(v)

    def call(self) -> None:
        name = f"@helper{len(self.helpers)}"
        op = self.draw(st.sampled_from(FLOAT_OPS))
        self.helpers.append(
            f"define internal float {name}(float %x, i32 %k) noinline {{\n"
            f"  %kf = sitofp i32 %k to float\n  %r = {op} float %x, %kf\n  ret float %r\n}}\n"
        )
        v = self.fresh("f")
        self.emit(f"{v} = call float {name}(float {self.float_operand()}, i32 {self.int_operand()})")
        self.floats.append(v)

    def loop(self) -> None:
        head, after = self.fresh("loop")[1:], self.fresh("after")[1:]
        trip, i, i1, acc, acc1, more = (self.fresh(s) for s in ("trip", "li", "lj", "acc", "acc", "more"))
        init, step, bound = self.float_operand(), self.float_operand(), self.int_operand()
        self.emit(f"{trip} = and i32 {bound}, 15")
        self.emit(f"br label %{head}")
        self.lines.append(f"{head}:")
        self.emit(f"{i} = phi i32 [ 0, %{self.block} ], [ {i1}, %{head} ]")
        self.emit(f"{acc} = phi float [ {init}, %{self.block} ], [ {acc1}, %{head} ]")
        self.emit(f"{acc1} = fadd float {acc}, {step}")
        self.emit(f"{i1} = add i32 {i}, 1")
        self.emit(f"{more} = icmp slt i32 {i1}, {trip}")
        self.emit(f"br i1 {more}, label %{head}, label %{after}")
        self.lines.append(f"{after}:")
        self.block = after
        self.floats.append(acc1)

    def branch(self) -> None:
        then, join = self.fresh("then")[1:], self.fresh("join")[1:]
        cond, v, merged = self.fresh("c"), self.fresh("i"), self.fresh("i")
        before, default = self.block, self.int_operand()
        self.emit(f"{cond} = icmp {self.draw(st.sampled_from(['slt', 'eq', 'ugt']))} i32 {self.int_operand()}, {self.int_operand()}")
        self.emit(f"br i1 {cond}, label %{then}, label %{join}")
        self.lines.append(f"{then}:")
        self.block = then
        operand = self.int_operand()
        self.emit(f"{v} = mul i32 {operand}, 3")
        if self.draw(st.booleans()):
            self.emit(f"store i32 {v}, ptr addrspace(1) %k, align 4")
        self.emit(f"br label %{join}")
        self.lines.append(f"{join}:")
        self.emit(f"{merged} = phi i32 [ {v}, %{then} ], [ {default}, %{before} ]")
        self.block = join
        # values defined inside `then` do not dominate the join
        self.ints = [i for i in self.ints if i != v] + [merged]

    STATEMENTS = ["int_op", "float_op", "convert", "load", "store", "atomic", "shared", "call", "loop", "branch"]

    def finish(self) -> str:
        self.emit(f"store float {self.floats[-1]}, ptr addrspace(1) %y, align 4")
        self.emit(f"store i32 {self.ints[-1]}, ptr addrspace(1) %k, align 4")
        self.emit("ret void")
        body = "\n".join(self.lines)
        kernel = (
            "define ptx_kernel void @fuzz_kernel(ptr addrspace(1) %x, ptr addrspace(1) %y, ptr addrspace(1) %k, float %a, i32 %n) {\n"
            "entry:\n  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n" + body + "\n}\n"
        )
        return HEADER + "\n".join(self.helpers) + "\n" + kernel


@st.composite
def llvm_kernels(draw) -> str:
    """LLVM IR text of one kernel from 1-14 random statements."""
    writer = KernelWriter(draw)
    for statement in draw(st.lists(st.sampled_from(KernelWriter.STATEMENTS), min_size=1, max_size=14)):
        getattr(writer, statement)()
    return writer.finish()


@st.composite
def nvptx_modules(draw) -> tuple[str, str]:
    """(IR, PTX) for a random kernel, compiled at -O0 or -O2 for sm_80 or sm_90."""
    ir_text = draw(llvm_kernels())
    cpu, ptx_version = draw(st.sampled_from([("sm_80", "ptx75"), ("sm_90", "ptx80")]))
    return ir_text, nvptx.compile_ir(ir_text, cpu, ptx_version, draw(st.sampled_from([0, 2])))


FUZZ = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
TOOLS = ["block_sched", "gmem_bytes", "dmat", "tensorop", "program_progress", str(DATA / "realworld" / "probes" / "rw_mem_access.toml"), str(DATA / "realworld" / "probes" / "rw_operands.toml")]


@FUZZ
@given(nvptx_modules())
def test_llvm_kernels_parse_and_print_back(module):
    _, ptx = module
    parsed = parse_module(ptx)
    assert [f.name for f in parsed.entries()] == ["fuzz_kernel"]
    assert print_module(parsed) == ptx  # byte for byte


@pytest.mark.skipif(not HAVE_PTXAS, reason="ptxas not on PATH")
@FUZZ
@given(nvptx_modules(), st.sampled_from(TOOLS))
def test_llvm_kernels_instrument_into_valid_ptx(module, tool):
    from neutrino.toolbox import load_probes

    from neutrino.errors import InstrumentError

    _, ptx = module
    try:
        result = instrument(ptx, load_probes(tool))
    except InstrumentError as e:
        # A count-sized map's counting copy is refused where an atomic's result decides control flow
        # (spec/pipeline.md, "The counting variant"): the generator makes such kernels on purpose.
        assert "no counting variant" in str(e) and "an atomic would return decides control flow" in str(e), e
        assert "atom." in ptx
        return
    assert_keeps_original(ptx, result.ptx, ["fuzz_kernel"])
    ptxas(result.ptx)

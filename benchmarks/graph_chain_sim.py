"""A model of the GPU for benchmarks/graph_chain.py's offline dry run (`--simulate`): no CUDA needed.

Device memory is host memory (ctypes buffers; a device pointer is the buffer's address, as in
tests/fakecuda). A graph replay runs its nodes in order, each as thread 0 of block 0 would: the chain
kernel's own lines (between its `// chain: begin` and `// chain: end` markers: the head load and the
advance) are interpreted from the PTX the benchmark generated (`Interp`, the few instructions they
use), the probe's stores modelled (every warp's count 1 and record filled, when the probe is on). So the
dry run checks the generated advance, the host's side (sink's last advance, drainer, checks) and the
plumbing; not the timing (events read 1 µs), not the probe's own PTX, not the memory model.
"""

from __future__ import annotations

import ctypes as C
import re

MASK64 = (1 << 64) - 1


class Interp:
    """One thread running straight-line PTX with branches: registers by name, memory by address."""

    def __init__(self, lines: list[str], regs: dict):
        self.lines = [ln.split("//")[0].strip() for ln in lines]
        self.labels = {ln[:-1]: i for i, ln in enumerate(self.lines) if ln.endswith(":")}
        self.r = regs

    def val(self, tok: str) -> int:
        tok = tok.strip()
        if tok.startswith("%"):
            return self.r.get(tok, 0)
        return int(tok, 0) & MASK64

    def addr(self, tok: str) -> int:
        m = re.fullmatch(r"\[(%?[\w]+)(?:\+(-?\d+))?\]", tok.replace(" ", ""))
        return (self.r.get(m.group(1), 0) + int(m.group(2) or 0)) & MASK64

    def run(self) -> None:
        pc = 0
        while pc < len(self.lines):
            ln = self.lines[pc].rstrip(";")
            pc += 1
            if not ln or ln.endswith(":"):
                continue
            m = re.match(r"@(!?)(%\w+)\s+(.*)", ln)
            if m:
                if bool(self.r.get(m.group(2), 0)) == (m.group(1) == "!"):
                    continue
                ln = m.group(3)
            op, _, rest = ln.partition(" ")
            ops = _operands(rest)
            if op.startswith("cp.async.wait"):
                continue
            if op.startswith("bra"):
                pc = self.labels[ops[0]]
                continue
            self.step(op, ops)

    def step(self, op: str, ops: list[str]) -> None:
        parts = op.split(".")
        name, r = parts[0], self.r
        if name in ("ld", "st"):
            width = 2 if "v2" in parts else 1
            if name == "ld":
                a = self.addr(ops[1])
                dst = ops[0].strip("{}").split(",") if width == 2 else [ops[0]]
                for i, d in enumerate(dst):
                    r[d.strip()] = C.c_uint64.from_address(a + 8 * i).value
            else:
                a = self.addr(ops[0])
                src = ops[1].strip("{}").split(",") if width == 2 else [ops[1]]
                for i, v in enumerate(src):
                    C.c_uint64.from_address(a + 8 * i).value = self.val(v)
        elif name == "cp":  # cp.async.cg.shared.global [dst], [src], 16 (done at once: the wait is a no-op)
            C.memmove(self.addr(ops[0]), self.addr(ops[1]), int(ops[2]))
        elif name == "fence":
            pass
        elif name == "mov":
            r[ops[0]] = self.val(ops[1])
        elif name == "not":
            r[ops[0]] = int(not r.get(ops[1], 0))
        elif name == "setp":
            a, b = self.val(ops[1]), self.val(ops[2])
            res = {"ne": a != b, "eq": a == b, "ge": a >= b, "lt": a < b}[parts[1]]
            if parts[2] == "and":
                res = res and bool(r.get(ops[3], 0))
            r[ops[0]] = int(res)
        else:
            a, b = self.val(ops[1]), self.val(ops[2]) if len(ops) > 2 else 0
            bits = 32 if parts[-1].endswith("32") and name != "cvt" and "wide" not in parts else 64
            res = {"add": lambda: a + b, "sub": lambda: a - b, "and": lambda: a & b, "or": lambda: a | b,
                   "shr": lambda: a >> b, "mul": lambda: (a & 0xFFFFFFFF) * (b & 0xFFFFFFFF),
                   "cvt": lambda: a & (0xFFFFFFFF if parts[1].endswith("32") else MASK64)}[name]()
            r[ops[0]] = res & ((1 << bits) - 1)


def _operands(rest: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in rest:
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return [*out, cur.strip()] if cur.strip() else out


def chain_sections(ptx: str) -> list[list[str]]:
    """The chain kernel's own sections of lines, in order."""
    return [sec.splitlines() for sec in re.findall(r"// chain: begin\n(.*?)// chain: end", ptx, re.S)]


class SimCuda:
    """The driver calls graph_chain.Bench makes, on host memory; replays run the model above."""

    name = "model (graph_chain_sim)"

    def __init__(self, warps: int, fault: str = ""):
        self.warps = warps
        # a fault the checks must catch: "no-tag" (the advance's tag store dropped), "no-full" (a full ring
        # not noticed: the next launch given a slot the host has not drained)
        self.fault = fault
        self.keep: list = []
        self.funcs: list = []
        self.stream = C.c_void_p(0)

    # memory
    def alloc(self, size: int) -> int:
        buf = (C.c_ubyte * (size + 256))()
        self.keep.append(buf)
        return (C.addressof(buf) + 255) // 256 * 256

    def read(self, ptr: int, size: int) -> bytes:
        return C.string_at(ptr, size)

    def write(self, ptr: int, data: bytes) -> None:
        C.memmove(ptr, data, len(data))

    def check(self, fn: str, *args) -> None:
        if fn == "cuMemHostAlloc":
            args[0]._obj.value = self.alloc(args[1].value)
        elif fn == "cuMemHostGetDevicePointer_v2":
            args[0]._obj.value = args[1].value
        elif fn in ("cuMemsetD8_v2", "cuMemsetD8Async"):
            C.memset(args[0].value, args[1].value, args[2].value)
        elif fn == "cuGraphExecKernelNodeSetParams_v2":
            exe, node, p = args[0], args[1], args[2]._obj
            exe[node] = (exe[node][0], _param_values(p.kernelParams, 7))
        elif fn in ("cuCtxSynchronize", "cuStreamSynchronize", "cuStreamCreate", "cuCtxGetCurrent",
                    "cuCtxSetCurrent"):
            pass
        else:
            raise RuntimeError(f"graph_chain_sim: no model of {fn}")

    # kernels and graphs
    def function(self, ptx: str, name: str) -> int:
        self.funcs.append(ptx)
        return len(self.funcs) - 1

    def new_graph(self) -> list:
        return []

    def add(self, graph: list, deps: list, func, grid, block, params) -> int:
        graph.append((func, _param_values(params, 7)))
        return len(graph) - 1

    def instantiate(self, graph: list) -> list:
        return list(graph)

    def replay(self, exe: list) -> None:
        for func, values in exe:
            self._run(self.funcs[func], values[6])

    def _run(self, ptx: str, param: int) -> None:
        """Block 0's threads that may advance (0, or 0..7 with a table of advanced heads), one after another;
        the probe's stores once."""
        sections = chain_sections(ptx)
        threads = 8 if "%ch_adv, [%ch_off+" in ptx else 1
        for tid in range(threads):
            smem = (C.c_ubyte * 64)()  # the block's shared copy of the head (exit-smem)
            regs = {"%nt_buf_block_sched": param & ~1, "%nt_gated": param & 1, "%nt_blin": 0, "%nt_tlin": tid,
                    "%nt_on": 1, "ch_smem": C.addressof(smem)}
            early = [sec for sec in sections[1:] if "// chain: before the probe" in "".join(sec)]
            for sec in sections[:1] + early:  # (the engine's late_head: the pointers moved to the slot at the exit)
                Interp(sec, regs).run()
            buf = regs["%nt_buf_block_sched"]
            if tid == 0 and regs["%nt_on"] and buf:
                self._probe(buf)
            for sec in [sec for sec in sections[1:] if sec not in early]:
                if self.fault == "no-tag":
                    sec = [ln for ln in sec if "%ch_tag;" not in ln]
                elif self.fault == "no-full":
                    sec = [ln for ln in sec if "@%ch_full mov" not in ln]
                Interp(sec, regs).run()

    def _probe(self, buf: int) -> None:
        """block_sched's stores: every warp's count 1, its record (start, elapsed, SM) filled."""
        warps = self.warps
        C.memmove(buf, (1).to_bytes(4, "little") * warps, 4 * warps)
        rec = (7).to_bytes(8, "little") + (5).to_bytes(4, "little") + (3).to_bytes(4, "little")
        C.memmove(buf + (4 * warps + 15) // 16 * 16, rec * warps, 16 * warps)

    # timing (no time here)
    def launch(self, f, grid, block, params) -> None:
        pass

    def event(self) -> None:
        return None

    def record(self, e) -> None:
        pass

    def elapsed_us(self, a, b) -> float:
        return 1.0

    def sync(self) -> None:
        pass


def _param_values(params, n: int) -> list[int]:
    """The values behind a kernel's parameter array (u64 each; the u32 count read as its low half)."""
    arr = C.cast(params, C.POINTER(C.c_void_p))
    return [C.c_uint64.from_address(arr[i]).value if i != 3 else C.c_uint32.from_address(arr[i]).value
            for i in range(n)]

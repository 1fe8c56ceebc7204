"""Where a chain node's warps first wait for the head's load (issue 24), on the CPU: ptxas + nvdisasm, no GPU.

    python benchmarks/chain_head_sass.py [--tool block_sched,gmem_bytes] [PTX ...]

Each PTX file (default: Triton's vadd and the corpus kernels tests/test_graph_chain_engine.py compiles) is
instrumented as the chain variant (`instrument(..., graph_chain=True)`) and with the `late_head` option, compiled
by `ptxas` for its target (sm_90a for the corpus) and disassembled. Per kernel and variant it prints:

* registers (ptxas -v) and SASS instructions (NOPs and the final self-branch left out);
* `head`: the SASS address of the head's load (the first LDG of the kernel: the prologue's, at entry);
* `first use`: the first instruction that reads a register the head's load wrote, on the path of every warp:
  instructions between a conditional branch and its target that only thread 0 of block 0 takes (the late form's
  loads of the advanced head) are left out, as are uses after the register was written again;
* `body LDG`: the first global load that is neither the head's nor the advanced head's (`.STRONG.GPU`): the
  body's own. `first use` before `body LDG` means every warp of a probed replay waits one round trip for the head
  before it loads its data (docs/overhead.md, "Session 11: block_sched's exit path").
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from graph_probe_sass import VADD, disassembler  # noqa: E402
from neutrino.engine import instrument  # noqa: E402
from neutrino.toolbox import load_probe_argument  # noqa: E402

CORPUS = Path("/work/shared/corpus/ptx")
KERNELS = ["triton/layernorm.sm90a.ptx", "triton/matmul.sm90a.ptx", "triton/softmax.sm90a.ptx", "nvcc/gemm.sm90.ptx",
           "nvcc/reduce.sm90.ptx", "nvcc/stencil.sm90.ptx", "inductor/triton_per_fused_native_layer_norm_0.sm90a.ptx"]
_INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);")
_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_STORES = ("STG", "RED", "ATOMG", "ST", "ATOM")


def sass_lines(ptx: str, tmp: Path, name: str) -> tuple[int, list]:
    """(registers, [(address, opcode, operands) or ('label', name)]) of `ptx` compiled for its target."""
    arch = re.search(r"\.target\s+(sm_\w+)", ptx).group(1)
    arch = "sm_90a" if arch == "sm_90" else arch
    src, cubin = tmp / f"{name}.ptx", tmp / f"{name}.cubin"
    src.write_text(ptx)
    done = subprocess.run(["ptxas", f"-arch={arch}", "-v", str(src), "-o", str(cubin)], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"chain_head_sass: ptxas {name}: {done.stderr.strip()[-400:]}")
    regs = max(int(n) for n in re.findall(r"Used (\d+) registers", done.stderr))
    out = []
    for line in subprocess.run([*disassembler(), str(cubin)], capture_output=True, text=True, check=True).stdout.splitlines():
        m, lab = _INSN.search(line), _LABEL.match(line)
        if lab:
            out.append(("label", lab.group(1)))
        elif m and m.group(3) != "NOP":
            out.append((int(m.group(1), 16), m.group(3), m.group(4), bool(m.group(2))))
    while out and out[-1][1] == "BRA":  # the self-branch after the last EXIT
        out.pop()
    return regs, out


def _regs_in(text: str) -> set[str]:
    return set(re.findall(r"\bR\d+\b", text))


PARAM_BASE = 0x210  # sm_90: a kernel's parameters in constant bank 0 from here


def buffer_param_offset(ptx: str, entry: str | None = None) -> int:
    """Bank-0 offset of the first map's buffer parameter (`..__nt_buf_..`, the tagged head pointer)."""
    m = re.search(r"\.entry\s+(\w+)\s*\((.*?)\)", ptx, re.S) if entry is None else \
        re.search(rf"\.entry\s+{entry}\s*\((.*?)\)", ptx, re.S)
    offset = 0
    for param in m.group(m.lastindex).split(","):
        a = re.search(r"\.align\s+(\d+)\s+\.b8\s+[\w$]+\[(\d+)\]", param)
        size, align = (int(a.group(2)), int(a.group(1))) if a else (int(re.search(r"\.[usbf](\d+)", param).group(1)) // 8,) * 2
        offset = -(-offset // align) * align
        if "__nt_buf_" in param:
            return PARAM_BASE + offset
        offset += size
    raise SystemExit("chain_head_sass: no __nt_buf_ parameter")


def _head_load(insns: list, param: int):
    """The LDG whose address comes from the buffer parameter (moved, masked, made uniform on the way)."""
    words = {f"c[0x0][0x{param:x}]", f"c[0x0][0x{param + 4:x}]"}
    tainted: set[str] = set()
    for x in insns:
        _, op, operands, _ = x
        parts = [p.strip() for p in operands.split(",")]
        srcs = " ".join(parts[1:])
        if op.startswith("LDG") and _regs_in(parts[1].split("][")[-1]) & tainted:
            return x
        if parts and (any(w in srcs for w in words) or (_regs_in(srcs) | _uregs_in(srcs)) & tainted):
            tainted |= _regs_in(parts[0]) | _uregs_in(parts[0])
            tainted |= {f"R{int(r[1:]) + 1}" for r in _regs_in(parts[0])} | \
                {f"UR{int(r[2:]) + 1}" for r in _uregs_in(parts[0])}  # (64-bit pairs)
    return None


def _uregs_in(text: str) -> set[str]:
    return set(re.findall(r"\bUR\d+\b", text))


def head_wait(lines: list, param: int) -> dict:
    """`head`, `first use`, `body LDG` (SASS addresses, None where absent) of one kernel's SASS."""
    insns = [x for x in lines if x[0] != "label"]
    head = _head_load(insns, param)
    if head is None:
        return {"head": None, "use": None, "body": None, "count": len(insns)}
    base = int(re.match(r"R(\d+)", head[2]).group(1))
    width = {"128": 4, "64": 2}.get(next((w for w in ("128", "64") if f".{w}" in head[1]), ""), 1)
    live = {f"R{base + k}" for k in range(width)}
    use = skip_to = None
    body = next((x[0] for x in insns if x[1].startswith("LDG") and ".STRONG.GPU" not in x[1] and x is not head), None)
    started = False
    for x in lines:
        if x[0] == "label":
            if skip_to == x[1]:
                skip_to = None
            continue
        if x is head:
            started = True
            continue
        if not started:
            continue
        addr, op, operands, guarded = x
        if skip_to is not None or use is not None:
            continue
        if op == "BRA" and guarded and (body is None or addr < body):  # a forward branch before the body: the late form's skip of
            target = re.search(r"`\((\.L_x_\d+)\)", operands)  # the advanced head's loads (thread 0 of block 0)
            rest = lines[lines.index(x):]
            if target and any(y[0] == "label" and y[1] == target.group(1) for y in rest):
                skip_to = target.group(1)
                continue
        parts = [p.strip() for p in operands.split(",")]
        reads = parts if op.startswith(_STORES) or op in ("BRA", "EXIT") else parts[1:]
        if any(_regs_in(p) & live for p in reads):
            use = addr
            continue
        if parts and not op.startswith(_STORES):
            live -= _regs_in(parts[0].split(".")[0])  # written again: no longer the head's word
    return {"head": head[0], "use": use, "body": body, "count": len(insns)}


def measure(path: Path, tool: str) -> list[tuple]:
    plain = path.read_text()
    probes = load_probe_argument(tool, None)
    rows = []
    with tempfile.TemporaryDirectory() as td:
        for variant, late in (("chain", False), ("chain + late_head", True)):
            ptx = instrument(plain, probes, graph_chain=True, late_head=late).ptx
            regs, lines = sass_lines(ptx, Path(td), f"{path.stem}_{late}")
            rows.append((variant, regs, head_wait(lines, buffer_param_offset(ptx))))
    return rows


def cell(v) -> str:
    return "-" if v is None else f"0x{v:04x}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("ptx", nargs="*", type=Path)
    ap.add_argument("--tool", default="block_sched,gmem_bytes")
    args = ap.parse_args()
    paths = args.ptx or [VADD] + [CORPUS / k for k in KERNELS if (CORPUS / k).exists()]
    print("| kernel | tool | variant | registers | SASS | head | first use | body LDG | waits first |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for path in paths:
        for tool in args.tool.split(","):
            for variant, regs, w in measure(path, tool):
                waits = "-" if w["use"] is None or w["body"] is None else ("yes" if w["use"] < w["body"] else "no")
                print(f"| {path.name} | {tool} | {variant} | {regs} | {w['count']} | {cell(w['head'])} | "
                      f"{cell(w['use'])} | {cell(w['body'])} | {waits} |")


if __name__ == "__main__":
    main()

"""What block_sched adds to a tiny kernel's machine code (issue 24: the graph of 8 tiny kernels), on the CPU.

    python benchmarks/graph_probe_sass.py [--tool block_sched] [PTX ...]

Each PTX file (default: Triton's vadd, tests/data/corpus/triton/vadd.sm90a.ptx, the graph8 kernel's shape: 4
warps a block) is compiled as it is and instrumented with the tool, both by `ptxas` (whole program, as the
runtime compiles probed code), and disassembled (`nvdisasm`, or `cuobjdump -sass`, from PATH or the
nvidia-cuda-nvdisasm wheel). Prints per kernel: registers (ptxas -v), SASS instructions (NOPs and the final
self-branch left out) and, per class, how many the probe added: special-register reads (S2R/CS2R: ids and
clocks), constant loads (LDC/ULDC: launch dimensions, parameters), integer arithmetic, global loads and
stores, branches and the rest. Every warp runs each of them once (block_sched has no loop), so the added
count is the instructions added per warp.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from neutrino.engine import instrument  # noqa: E402
from neutrino.toolbox import load_probe_argument  # noqa: E402

VADD = REPO / "tests" / "data" / "corpus" / "triton" / "vadd.sm90a.ptx"
CLASSES = ("special", "constant", "integer", "global load", "global store", "branch", "other")
_SASS_LINE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")


def sass_class(opcode: str) -> str:
    op = opcode.split(".")[0]
    if op in ("S2R", "CS2R", "S2UR"):
        return "special"
    if op in ("LDC", "ULDC"):
        return "constant"
    if op in ("LDG",):
        return "global load"
    if op in ("STG", "RED", "ATOMG"):
        return "global store"
    if op in ("BRA", "EXIT", "BSYNC", "BSSY", "RET", "WARPSYNC"):
        return "branch"
    if op in ("IMAD", "IADD3", "LOP3", "ISETP", "SHF", "LEA", "MOV", "SEL", "UIMAD", "UIADD3", "ULOP3", "UMOV",
              "IABS", "FLO", "POPC", "ULEA", "USHF", "UISETP", "USEL", "PLOP3", "P2R", "R2P", "IMNMX", "VIADD"):
        return "integer"
    return "other"


def disassembler() -> list[str]:
    for name in ("nvdisasm", "cuobjdump"):
        path = shutil.which(name)
        if path:
            return [path] if name == "nvdisasm" else [path, "-sass"]
    try:
        import nvidia.cu13  # the nvidia-cuda-nvdisasm wheel  # noqa: PLC0415

        for base in nvidia.cu13.__path__:
            cand = Path(base) / "bin" / "nvdisasm"
            if cand.exists():
                return [str(cand)]
    except ImportError:
        pass
    raise SystemExit("graph_probe_sass: no nvdisasm or cuobjdump (PATH, or pip install nvidia-cuda-nvdisasm)")


def compile_ptx(ptx: str, arch: str, tmp: Path, name: str) -> tuple[int, Counter]:
    """(registers, SASS opcodes counted) of `ptx` compiled for `arch`."""
    src, cubin = tmp / f"{name}.ptx", tmp / f"{name}.cubin"
    src.write_text(ptx)
    r = subprocess.run(["ptxas", f"-arch={arch}", "-v", str(src), "-o", str(cubin)], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"graph_probe_sass: ptxas {src}: {r.stderr.strip()[-400:]}")
    regs = int(re.search(r"Used (\d+) registers", r.stderr).group(1))
    sass = subprocess.run([*disassembler(), str(cubin)], capture_output=True, text=True, check=True).stdout
    ops = [m.group(1) for m in map(_SASS_LINE.search, sass.splitlines()) if m]
    while ops and ops[-1] in ("NOP", "BRA"):  # the padding and the self-branch after EXIT
        ops.pop()
    return regs, Counter(o for o in ops if o != "NOP")


def measure(path: Path, tool: str) -> dict:
    plain = path.read_text()
    arch = re.search(r"\.target\s+(sm_\w+)", plain).group(1)
    probed = instrument(plain, load_probe_argument(tool, None)).ptx
    with tempfile.TemporaryDirectory() as td:
        (r0, ops0), (r1, ops1) = (compile_ptx(t, arch, Path(td), n) for t, n in ((plain, "plain"), (probed, "probed")))
    by_class = {c: 0 for c in CLASSES}
    for op, n in (ops1 - ops0).items():
        by_class[sass_class(op)] += n
    for op, n in (ops0 - ops1).items():
        by_class[sass_class(op)] -= n
    return {"kernel": path.name, "regs": (r0, r1), "sass": (sum(ops0.values()), sum(ops1.values())), "added": by_class}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("ptx", nargs="*", type=Path, default=[VADD])
    ap.add_argument("--tool", default="block_sched")
    args = ap.parse_args()
    head = " | ".join(CLASSES)
    print(f"| kernel | registers | SASS instructions | added per warp | {head} |")
    print("| --- | --- | --- | ---: |" + " ---: |" * len(CLASSES))
    for path in args.ptx:
        m = measure(path, args.tool)
        added = m["sass"][1] - m["sass"][0]
        cells = " | ".join(str(m["added"][c]) for c in CLASSES)
        print(f"| {m['kernel']} ({args.tool}) | {m['regs'][0]} → {m['regs'][1]} | {m['sass'][0]} → {m['sass'][1]} | "
              f"{added} | {cells} |")


if __name__ == "__main__":
    main()

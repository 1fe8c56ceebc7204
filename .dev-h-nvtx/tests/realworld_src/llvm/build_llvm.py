"""Compile every .ll here with llvmlite's NVPTX backend, at -O0 and -O3, for sm_80 and sm_90.

    python tests/realworld_src/llvm/build_llvm.py OUT_DIR
"""

import sys
from pathlib import Path

from nvptx import compile_ir

HERE = Path(__file__).parent
VARIANTS = [("sm_80", "ptx75", 3), ("sm_90", "ptx80", 0)]

if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for source in sorted(HERE.glob("*.ll")):
        for cpu, ptx_version, opt in VARIANTS:
            ptx = compile_ir(source.read_text(), cpu, ptx_version, opt)
            target = out / f"{source.stem}.{cpu}.O{opt}.ptx"
            target.write_text(ptx)
            print("llvm", target.name)

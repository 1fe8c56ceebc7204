"""The engine's graph_chain variant (neutrino/passes/graph_chain.py) through ptxas for every corpus kernel under every
probe given (offline; the sweep behind docs/overhead.md "Session 10: the chain in the engine").

    python benchmarks/graph_chain_ptxas.py [TOOL_OR_PROBE ...]   # default: every built-in tool and tests/data/probes

Each kernel is compiled for its own `.target` (sm_75 for older ones). Prints one line per refusal or ptxas failure, then the counts; exit 1
when ptxas refused any.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from neutrino.engine import instrument  # noqa: E402
from neutrino.errors import NeutrinoError  # noqa: E402
from neutrino.toolbox import load_probe_argument, tool_names  # noqa: E402

CORPUS = [Path("/work/shared/corpus/ptx"), REPO / "tests"]


def kernels() -> list[Path]:
    return sorted(p for root in CORPUS if root.is_dir() for p in root.rglob("*.ptx"))


def arch(text: str) -> str:
    """The kernel's own target, or sm_75 for an older one (CUDA 13's ptxas compiles nothing older; the driver JITs
    such PTX for the GPU it runs on, sm_75 or newer)."""
    m = re.search(r"^\s*\.target\s+sm_(\d+)(\w*)", text, re.M)
    return f"sm_{m.group(1)}{m.group(2)}" if m and int(m.group(1)) >= 75 else "sm_75"


def main() -> int:
    if shutil.which("ptxas") is None:
        print("graph_chain_ptxas.py: ptxas is not on PATH")
        return 2
    probes = sys.argv[1:] or [*tool_names(), *map(str, sorted((REPO / "tests" / "data" / "probes").glob("*.toml")))]
    ok = failed = refused = 0
    with tempfile.TemporaryDirectory() as tmp:
        ptx, cubin = Path(tmp) / "k.ptx", Path(tmp) / "k.cubin"
        for path in kernels():
            for probe in probes:
                try:
                    text = instrument(path.read_text(), load_probe_argument(probe, None), graph_chain=True).ptx
                except NeutrinoError as e:  # (what the ordinary variant refuses too, or a .func with an exit)
                    refused += 1
                    print(f"refused: {path.name} {Path(probe).name}: {str(e)[:160]}")
                    continue
                ptx.write_text(text)
                done = subprocess.run(["ptxas", f"-arch={arch(text)}", str(ptx), "-o", str(cubin)],
                                      capture_output=True, text=True)
                if done.returncode:
                    failed += 1
                    print(f"PTXAS FAILED: {path.name} {Path(probe).name}: {done.stderr.strip()[:300]}")
                else:
                    ok += 1
    print(f"graph_chain variant: {ok} compiled, {failed} refused by ptxas, {refused} refused by the engine")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Writes the instrumented output of every corpus kernel under every built-in tool and test probe, one file each.

    python benchmarks/instrumented_outputs.py OUT_DIR
    diff -r BEFORE_DIR AFTER_DIR
    python benchmarks/instrumented_outputs.py --digests tests/data/instrumented_digests.json

The last form records a SHA-256 prefix per output, which tests/test_instrumented_outputs.py
compares with what the engine produces now: rerun it when a change of the
output is intended (and say why in the commit).

For refactorings of the passes that must not change what they produce: run
it on the old checkout and on the new one and compare the two folders. PTX:
tests/data/corpus and /work/shared/corpus/ptx (when present) under the
built-in tools and tests/data/probes; GCN and RDNA: their corpora under
their TOML and DSL tools. A case that is refused writes its error message
instead, so a change of refusal shows up too.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from neutrino.engine import instrument
from neutrino.errors import NeutrinoError
from neutrino.isa.gcn.target import GCN
from neutrino.isa.ptx.target import PTX
from neutrino.isa.rdna.target import RDNA
from neutrino.toolbox import load_probes

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
SHARED = Path("/work/shared/corpus/ptx")
PTX_TOOLS = ["block_sched", "gmem_bytes", "gmem_bytes_thread", "tensorop", "tensorop_thread"]
AMD_TOOLS = ["block_sched", "gmem_bytes", "neutrino/tools/block_sched/probe.py", "neutrino/tools/gmem_bytes/probe.py"]


def cases():
    """(name, text, probe, isa) for every kernel file and probe."""
    ptx_files = sorted(DATA.glob("corpus/*/*.ptx")) + (sorted(SHARED.glob("*/*.ptx")) if SHARED.is_dir() else [])
    ptx_probes = PTX_TOOLS + [str(p) for p in sorted((DATA / "probes").glob("*.toml"))]
    for path in ptx_files:
        for probe in ptx_probes:
            yield path, probe, PTX
    for isa, folder in ((GCN, "gcn"), (RDNA, "rdna")):
        for path in sorted((DATA / folder).glob("*.s")):
            for probe in AMD_TOOLS:
                yield path, probe, isa


def outputs(shared: bool = True):
    """(case name, instrumented text or the refusal) for every case; `shared`: with /work/shared/corpus too."""
    probes: dict[tuple[str, str], object] = {}
    for path, probe, isa in cases():
        if not shared and SHARED in path.parents:
            continue
        name = f"{path.parent.name}__{path.name}__{Path(probe).parent.name if '/' in probe else probe}__{Path(probe).stem}"
        try:
            loaded = probes.setdefault((probe, isa.name), load_probes(probe, isa=isa.name))
            yield name, instrument(path.read_text(), loaded, source=path.name, isa=isa).ptx
        except NeutrinoError as e:
            yield name, f"refused: {e}\n"


def digests() -> dict[str, str]:
    """SHA-256 of each output of the repository's own corpora (tests/data), by case name."""
    return {name: hashlib.sha256(text.encode()).hexdigest()[:16] for name, text in outputs(shared=False)}


def main(args: list[str]) -> int:
    if args[0] == "--digests":
        Path(args[1]).write_text(json.dumps(digests(), indent=0, sort_keys=True) + "\n")
        print(f"digests in {args[1]}")
        return 0
    out = Path(args[0])
    out.mkdir(parents=True, exist_ok=True)
    count = 0
    for name, text in outputs():
        (out / name).write_text(text)
        count += 1
    print(f"{count} outputs in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""SHA-256 of every instrumented output and kernel description: the guard for refactorings of the passes.

    python benchmarks/instrumented_digest.py OUT.json              write the digests
    python benchmarks/instrumented_digest.py --compare A.json B.json   list the cases that differ (exit 1 if any)

Cases: every PTX file of the tests (tests/**/*.ptx) and of /work/shared/corpus/ptx (when present) under every
built-in tool (`neutrino list`) and every probe of tests/data/probes; the GCN and RDNA corpora under their
tools (benchmarks/instrumented_outputs.py `AMD_TOOLS`). Per case: the digest of the instrumented text and the
digest of the kernel descriptions (spec/kernel-json.md, sorted keys), or of the refusal's message. A refactoring
that must not change what the engine produces leaves every digest as it was.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from neutrino.engine import instrument
from neutrino.errors import NeutrinoError
from neutrino.isa.ptx.target import PTX
from neutrino.toolbox import load_probes, tool_names

sys.path.insert(0, str(Path(__file__).resolve().parent))
from instrumented_outputs import AMD_TOOLS, DATA, SHARED  # noqa: E402

from neutrino.isa.gcn.target import GCN  # noqa: E402
from neutrino.isa.rdna.target import RDNA  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def cases():
    """(case name, kernel path, probe, isa) of every case."""
    ptx_files = sorted((ROOT / "tests").rglob("*.ptx")) + (sorted(SHARED.rglob("*.ptx")) if SHARED.is_dir() else [])
    probes = tool_names() + [str(p) for p in sorted((DATA / "probes").glob("*.toml"))]
    for path in ptx_files:
        for probe in probes:
            yield f"{path}::{Path(probe).name}", path, probe, PTX
    for isa, folder in ((GCN, "gcn"), (RDNA, "rdna")):
        for path in sorted((DATA / folder).glob("*.s")):
            for probe in AMD_TOOLS:
                yield f"{path}::{probe}", path, probe, isa


def digests() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    loaded: dict[tuple[str, str], object] = {}
    for name, path, probe, isa in cases():
        name = name.replace(str(ROOT) + "/", "")
        try:
            text = path.read_text()
            probes = loaded.get((probe, isa.name))
            if probes is None:
                probes = loaded[(probe, isa.name)] = load_probes(probe, isa=isa.name)
            result = instrument(text, probes, source=path.name, isa=isa)
            out[name] = [_sha(result.ptx), _sha(json.dumps(result.kernels, sort_keys=True))]
        except (NeutrinoError, UnicodeDecodeError) as e:
            out[name] = [_sha(f"refused: {e}"), ""]
    return out


def compare(a: str, b: str) -> int:
    old, new = json.loads(Path(a).read_text()), json.loads(Path(b).read_text())
    differ = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    for k in differ:
        print(f"differs: {k}  {old.get(k)} -> {new.get(k)}")
    print(f"{len(old)} vs {len(new)} cases, {len(differ)} differ")
    return 1 if differ else 0


def main(args: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="SHA-256 of every instrumented output (module docstring)")
    ap.add_argument("out", nargs="?", help="where the digests are written (JSON)")
    ap.add_argument("--compare", nargs=2, metavar=("A.json", "B.json"), help="list the cases that differ")
    opt = ap.parse_args(args)
    if opt.compare:
        return compare(*opt.compare)
    if opt.out is None:
        ap.error("give OUT.json, or --compare A.json B.json")
    result = digests()
    Path(opt.out).write_text(json.dumps(result, indent=0, sort_keys=True) + "\n")
    refused = sum(1 for v in result.values() if not v[1])
    print(f"{len(result)} cases ({refused} refused) in {opt.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Static cost of the `lines` tools' probes, per site and per kernel: instructions, not time (no GPU).

    python benchmarks/uniform_saves.py [--target sm_90] [--against DIR]

For tests/data/lines/loop.ptx and every corpus kernel with `.loc` (/work/shared/corpus/ptx),
under `lines_light` and `lines`, with their maps staged per block (`lines`' default) and unstaged
(`@global`, lines_light's default; as benchmarks/lines_cost.py builds them):

* `site PTX`: PTX instructions the engine puts before the first own instruction of loop.ptx's
  loop block (lines_light: the count_block site; lines: count_block, close_region and open_region);
* `loop SASS` and `corpus SASS`: machine instructions of the assembled kernels (ptxas -O3 for the
  target; the `.text` sections' bytes / 16, the instruction size from sm_70 on, ptxas's end padding
  included), minus the same for the unprobed kernels: what the probes add, after ptxas removed
  what is dead (the SAVE's unused value moves among it). ptxas unrolls loop.ptx's loop 4 times or
  not depending on the probe, so these totals move with the unrolling too;
* `SASS/trip` (where `nvdisasm` is on PATH or in $NVDISASM; pip package nvidia-cuda-nvdisasm): the
  machine instructions of loop.ptx's main loop, divided by the trips one pass of it makes (4 when
  ptxas unrolled it), the kernel's own 5 included: what one trip executes.

`--against DIR` prints the same for the engine of another checkout (run with PYTHONPATH=DIR), so
the two can be compared: before / after a change of the lowering.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOOP = ROOT / "tests" / "data" / "lines" / "loop.ptx"
CORPUS = Path("/work/shared/corpus/ptx")
TOOLS = ("lines_light", "lines")


def text_bytes(cubin: bytes) -> int:
    """Bytes of the ELF's `.text.*` sections (the kernels' machine code)."""
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", cubin, shoff + k * shentsize) for k in range(shnum)]
    names_at = headers[shstrndx][4]
    total = 0
    for name, _type, _flags, _addr, _offset, size in headers:
        end = cubin.index(b"\0", names_at + name)
        if cubin[names_at + name:end].startswith(b".text."):
            total += size
    return total


def sass_count(ptx: str, target: str) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "k.ptx", Path(tmp) / "k.cubin"
        src.write_text(ptx)
        subprocess.run(["ptxas", f"-arch={target}", str(src), "-o", str(out)], check=True, capture_output=True)
        return text_bytes(out.read_bytes()) // 16


def retarget(ptx: str, target: str) -> str:
    return re.sub(r"^\.target \S+", f".target {target}", ptx, count=1, flags=re.M)


def nvdisasm() -> str | None:
    import shutil

    return os.environ.get("NVDISASM") or shutil.which("nvdisasm")


def sass_per_trip(ptx: str, target: str, tool: str) -> float | None:
    """Instructions of the kernel's longest backward-branch loop / trips per pass (its loop counter's step)."""
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "k.ptx", Path(tmp) / "k.cubin"
        src.write_text(ptx)
        subprocess.run(["ptxas", f"-arch={target}", str(src), "-o", str(out)], check=True, capture_output=True)
        text = subprocess.run([tool, "-c", str(out)], check=True, capture_output=True, text=True).stdout
    labels, insns, best = {}, [], (0, 1)
    for line in text.splitlines():
        label = re.match(r"^\s*(\.L_x_\d+):", line)
        if label:
            labels[label.group(1)] = len(insns)
        elif re.match(r"^\s*/\*[0-9a-f]+\*/", line):
            insns.append(line)
    for k, line in enumerate(insns):
        target_label = re.search(r"BRA `\((\.L_x_\d+)\)", line)
        if target_label and labels.get(target_label.group(1), k + 1) <= k:
            body = insns[labels[target_label.group(1)]:k + 1]
            steps = [int(m) for b in body for m in re.findall(r"(?:UIADD3|IADD3|VIADD)\s+U?R\d+, U?R\d+, 0x([1-9])\b", b)]
            if len(body) > best[0]:
                best = (len(body), max(steps, default=1))
    return round(best[0] / best[1], 2) if best[0] else None


def site_instructions(ptx: str) -> int:
    """PTX instructions between loop.ptx's loop label and its block's first own instruction."""
    body = ptx[ptx.index("$L__BB0_1:"):ptx.index("add.s32 \t%r3, %r3, %r2;")]
    return sum(1 for line in body.splitlines()[1:] if line.strip() and not line.strip().startswith((".", "//", "$", "%nt_L")))


def staged(probes):
    """Every map staged per block (lines_light's is not, by default: docs/lines.md "Light mode")."""
    import attrs

    out = copy.copy(probes)
    out.maps = {name: attrs.evolve(spec, stage="block") for name, spec in probes.maps.items()}
    return out


def unstaged(probes):
    import attrs

    out = copy.copy(probes)
    out.maps = {name: attrs.evolve(spec, stage=None) for name, spec in probes.maps.items()}
    return out


def measure(target: str) -> dict:
    from neutrino.engine import instrument
    from neutrino.toolbox import load_probes

    corpus = sorted(p for p in CORPUS.glob("*/*.ptx") if ".loc" in p.read_text()) if CORPUS.is_dir() else []
    out: dict = {"target": target, "corpus kernels": len(corpus)}
    loop = retarget(LOOP.read_text(), target)
    plain_loop = sass_count(loop, target)
    plain_corpus = {p: sass_count(retarget(p.read_text(), max(target, _own(p))), max(target, _own(p))) for p in corpus}
    for tool in TOOLS:
        for variant, probes in (("staged", staged(load_probes(tool))), ("@global", unstaged(load_probes(tool)))):
            probed = instrument(loop, probes, source="loop.ptx").ptx
            row = {"site PTX": site_instructions(probed), "loop SASS": sass_count(probed, target) - plain_loop}
            if nvdisasm():
                row["SASS/trip"] = sass_per_trip(probed, target, nvdisasm())
            total = 0
            for path in corpus:
                own = max(target, _own(path))
                done = instrument(retarget(path.read_text(), own), probes, source=str(path)).ptx
                total += sass_count(done, own) - plain_corpus[path]
            row["corpus SASS"] = total
            out[f"{tool} {variant}"] = row
    return out


def _own(path: Path) -> str:
    """The kernel's own target where it needs a newer one than asked (sm_90a's wgmma)."""
    return re.search(r"^\.target (\S+)", path.read_text(), re.M).group(1)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="sm_90")
    parser.add_argument("--against", help="another checkout: print its figures too")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON (used by --against)")
    args = parser.parse_args(argv)
    figures = {"this": measure(args.target)}
    if args.against:
        env = dict(os.environ, PYTHONPATH=str(Path(args.against).resolve()))
        proc = subprocess.run([sys.executable, __file__, "--target", args.target, "--json"], env=env,
                              capture_output=True, text=True, check=True)
        figures["against"] = json.loads(proc.stdout)["this"]
    if args.json:
        print(json.dumps(figures))
        return 0
    for who, data in figures.items():
        print(f"{who}: target {data['target']}, {data['corpus kernels']} corpus kernels with .loc")
        for key, row in data.items():
            if isinstance(row, dict):
                print(f"  {key:22s} " + "  ".join(f"{k} {v}" for k, v in row.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Census of old-target PTX (sm_1x/sm_2x): do the tools instrument it into PTX that ptxas accepts?

    PYTHONPATH=. python tests/realworld_src/old_targets.py DIR [TOOL,TOOL,...] [-v] [--machine-code]

DIR holds `.ptx` files (one level); the distinct ones whose `.target` is sm_1x
or sm_2x are instrumented with each tool (default: gmem_bytes, tensorop,
block_sched, dmat) and the output assembled with `ptxas -arch=sm_75`. Each
case is `ok`, `refused` (a located NeutrinoError), `ptxas-fail` (we printed
what ptxas refuses: a bug) or `baseline-fail` (ptxas refuses the original too:
32-bit PTX, syntax of other assemblers). `--machine-code` also checks, for
every file, that raising its target alone (sm_20/30/50, no probes) leaves the
machine code ptxas emits unchanged (the fit-target rule, spec/verifier.md).

The corpus used for issue 30 is gpuocelot's tests (BSD; not vendored here):
fetch github.com/gtcasl/gpuocelot and copy its `*.ptx` files into DIR.
"""

from __future__ import annotations

import collections
import hashlib
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from neutrino.engine import instrument  # noqa: E402
from neutrino.errors import NeutrinoError  # noqa: E402
from neutrino.toolbox import load_probes  # noqa: E402

TARGET_RE = re.compile(rb"^\s*\.target\s+sm_(\d+)", re.M)


def old_target_files(directory: Path) -> list[tuple[Path, int]]:
    seen, files = set(), []
    for path in sorted(directory.glob("*.ptx")):
        data = path.read_bytes()
        digest, target = hashlib.sha1(data).digest(), TARGET_RE.search(data)
        if digest not in seen and target and int(target.group(1)) < 30:
            seen.add(digest)
            files.append((path, int(target.group(1))))
    return files


def assemble(text: str) -> tuple[bool, str]:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "k.ptx").write_text(text)
        proc = subprocess.run(["ptxas", "-arch=sm_75", str(Path(tmp) / "k.ptx"), "-o", str(Path(tmp) / "k.cubin")],
                              capture_output=True, text=True)
    return proc.returncode == 0, proc.stderr


def check(path: Path, tool: str) -> tuple[str, str]:
    text = path.read_text(errors="replace")
    try:
        out = instrument(text, load_probes(tool), source=path.name).ptx
    except NeutrinoError as e:
        return "refused", str(e).splitlines()[0][:200]
    ok, stderr = assemble(out)
    if ok:
        return "ok", ""
    first = next((line for line in stderr.splitlines() if "error" in line), stderr[:200])
    return ("ptxas-fail" if assemble(text)[0] else "baseline-fail"), first


def machine_code_check(path: Path, target: int) -> list[str]:
    from test_targets import machine_code, raised

    text = path.read_text(errors="replace")
    if not assemble(text)[0]:
        return []
    out = []
    for sm in (20, 30, 50):
        if target >= sm:
            continue
        try:
            result = "same" if machine_code(raised(text, sm)) == machine_code(text) else "DIFFERENT"
        except NeutrinoError:
            result = "refused"
        except AssertionError:
            result = "ptxas-fail"
        out.append(f"raise to sm_{sm}: {result}")
    return out


def main(argv: list[str]) -> None:
    directory = Path(argv[1])
    tools = argv[2].split(",") if len(argv) > 2 and not argv[2].startswith("-") else ["gmem_bytes", "tensorop", "block_sched", "dmat"]
    files = old_target_files(directory)
    jobs = [(path, target, tool) for path, target in files for tool in tools]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda job: (job, check(job[0], job[2])), jobs))
    print(f"{len(files)} distinct files:", dict(collections.Counter("sm_1x" if t < 20 else "sm_2x" for _, t in files)))
    counts = collections.Counter(("sm_1x" if t < 20 else "sm_2x", tool, outcome) for (_, t, tool), (outcome, _) in results)
    for key in sorted(counts):
        print(*key, counts[key])
    if "-v" in argv:
        for (path, _, tool), (outcome, message) in results:
            if outcome != "ok":
                print(f"{path.name} {tool}: {outcome}: {message}")
    if "--machine-code" in argv:
        tally = collections.Counter(line for path, target in files for line in machine_code_check(path, target))
        for line, n in sorted(tally.items()):
            print(line, n)


if __name__ == "__main__":
    main(sys.argv)

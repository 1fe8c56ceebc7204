"""Probe cost on a GPU (issue 24 item 4): the report's "probe cost" section for Triton kernels and the
nvcc corpus under block_sched and gmem_bytes with --benchmark, its registers checked against
`cuobjdump -res-usage` of the program's own code and `ptxas -v` of the probed PTX, its blocks per SM
against our occupancy formula. Set NEUTRINO_GPU_OUT to keep the reports."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuutil import WORKLOADS, base_env, gpu, run_probed

pytestmark = gpu

TOOLS = ["block_sched", "gmem_bytes"]
SLOWDOWN = re.compile(r"\d+\.\d\dx$")  # a row's measured slowdown (--benchmark), not "-"


def cuobjdump_resources(binary: Path) -> dict[str, dict[str, int]]:
    """Function name -> REG, SHARED, LOCAL of the SASS in an executable or cubin ({} without cuobjdump)."""
    if not shutil.which("cuobjdump"):
        return {}
    out = subprocess.run(["cuobjdump", "-res-usage", str(binary)], capture_output=True, text=True, timeout=300).stdout
    found = re.findall(r"Function ([^\s:]+):\s*\n\s*REG:(\d+) STACK:\d+ SHARED:(\d+) LOCAL:(\d+)", out)
    return {name: {"regs": int(r), "shared_static": int(s), "local": int(lo)} for name, r, s, lo in found}


def ptxas_log(log: str) -> dict[str, dict[str, int]]:
    """Entry name -> regs (and shared_static bytes) from the `ptxas -v` lines of a compile."""
    out, entry = {}, None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            entry = m.group(1)
        m = re.search(r"Used (\d+) registers", line)
        if m and entry is not None:
            smem = re.search(r"(\d+) bytes smem", line)
            out[entry] = {"regs": int(m.group(1)), "shared_static": int(smem.group(1)) if smem else 0}
            entry = None
    return out


def ptxas_resources(ptx: Path) -> dict[str, dict[str, int]]:
    """Entry name -> registers and static shared bytes `ptxas -v` gives the PTX (a whole program, as the
    runtime compiles it), for the architecture its .target names."""
    target = re.search(r"^\s*\.target\s+(sm_\w+)", ptx.read_text(), re.MULTILINE).group(1)
    r = subprocess.run(["ptxas", f"-arch={target}", "-v", "-o", os.devnull, str(ptx)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    return ptxas_log(r.stdout + r.stderr)


def report_section(trace_path: Path, env: dict, label: str) -> str:
    r = subprocess.run([sys.executable, "-m", "neutrino.cli", "report", str(trace_path)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    section = r.stdout[r.stdout.index("[probe cost]"):].split("\n\n")[0] if "[probe cost]" in r.stdout else ""
    print(f"--- {label} ---\n{section}")
    keep = os.environ.get("NEUTRINO_GPU_OUT")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        (Path(keep) / f"probe_cost_{label}.txt").write_text(r.stdout + "\n--- stderr ---\n" + r.stderr[-4000:])
    assert section, f"no [probe cost] section:\n{r.stdout[-3000:]}"
    return section


def check_costs(trace, originals: dict[str, dict[str, int]]) -> list[str]:
    """Each probe_cost event against the program's SASS and ptxas of probed.ptx; the mismatches."""
    costs = [e for e in trace.events if e.get("event") == "probe_cost"]
    assert costs, "no probe_cost event"
    kernel_dirs = {e["kernel"]: e["kernel_dir"] for e in trace.events if e.get("event") == "instrument"}
    problems = []
    for ev in costs:
        name = ev["kernel"]
        assert "error" not in ev, ev
        kdir = Path(trace.path) / kernel_dirs[name]
        want_probed = ptxas_resources(kdir / "probed.ptx").get(name, {}).get("regs")
        # cuobjdump's SHARED reads 1024 for Triton kernels whose only shared memory is the extern (dynamic)
        # array, where the driver (CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES) and ptxas -v say 0 static bytes (H200,
        # sm_90a): static shared is checked against ptxas -v of the original PTX
        want_shared = ptxas_resources(kdir / "original.ptx").get(name, {}).get("shared_static")
        want = originals.get(name)
        if want is not None and want_shared is not None:
            want = {**want, "shared_static": want_shared}
        print(f"{name[:40]:40s} regs {ev['original']['regs']:3d} (SASS {want and want['regs']}) -> "
              f"{ev['probed']['regs']:3d} (ptxas {want_probed}); blocks/SM {ev['original']['blocks_per_sm']} -> "
              f"{ev['probed']['blocks_per_sm']} (formula {ev['original']['formula_blocks']} -> "
              f"{ev['probed']['formula_blocks']}, {ev['probed']['limiter']}); shared "
              f"{ev['original']['shared_static']} -> {ev['probed']['shared_static']}; local "
              f"{ev['original']['local']} -> {ev['probed']['local']}; insns {ev['instructions']}")
        if want is None:
            problems.append(f"{name}: not in the program's SASS")
        elif any(ev["original"][key] != value for key, value in want.items()):
            problems.append(f"{name}: original {ev['original']} but the program's code says {want}")
        if ev["probed"]["regs"] != want_probed:
            problems.append(f"{name}: probed regs {ev['probed']['regs']} but ptxas -v says {want_probed}")
        for side in ("original", "probed"):
            if ev[side]["formula_blocks"] != ev[side]["blocks_per_sm"]:
                problems.append(f"{name}: {side} blocks/SM driver {ev[side]['blocks_per_sm']} formula "
                                f"{ev[side]['formula_blocks']}")
        if not ev["instructions"].get("inserted", 0) > 0:
            problems.append(f"{name}: no instructions inserted? {ev['instructions']}")
    benchmarked = {e["kernel"] for e in trace.events if e.get("event") == "benchmark"}
    missing = {e["kernel"] for e in costs} - benchmarked
    if missing:
        problems.append(f"not benchmarked: {sorted(missing)}")
    return problems


@pytest.fixture(scope="module")
def nvcc_program(tmp_path_factory):
    if not shutil.which("nvcc"):
        pytest.skip("no nvcc")
    d = tmp_path_factory.mktemp("nvcc")
    exe = d / "corpus"
    # SASS for the program to run (cuobjdump reads its resources) and PTX for Neutrino to probe
    r = subprocess.run(["nvcc", "-gencode", "arch=compute_90,code=[sm_90,compute_90]", "-Xptxas", "-v", "-o",
                        str(exe), str(WORKLOADS / "corpus_main.cu")], cwd=WORKLOADS, timeout=600,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    sass = cuobjdump_resources(exe)
    print(f"the program's resources from {'cuobjdump' if sass else 'ptxas -v'}")
    return exe, base_env(d), sass or ptxas_log(r.stdout + r.stderr)


@pytest.mark.parametrize("tool", TOOLS)
def test_probe_cost_of_the_nvcc_corpus(tool, tmp_path, nvcc_program):
    exe, env, originals = nvcc_program
    _, trace = run_probed(tool, [str(exe), str(tmp_path / "out.bin")], tmp_path / "t", env, "--benchmark")
    section = report_section(trace.path, env, f"nvcc_{tool}")
    problems = check_costs(trace, originals)
    assert all(SLOWDOWN.search(row) for row in section.splitlines()[3:] if row.strip()), section
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("tool", TOOLS)
def test_probe_cost_of_triton_kernels(tool, tmp_path):
    env = base_env(tmp_path)
    env["TRITON_CACHE_DIR"] = str(tmp_path / "tc")
    cmd = [sys.executable, str(WORKLOADS / "w_triton.py"), str(tmp_path / "probed.npz")]
    _, trace = run_probed(tool, cmd, tmp_path / "t", env, "--benchmark")
    section = report_section(trace.path, env, f"triton_{tool}")
    originals = {}
    for cubin in (tmp_path / "tc").rglob("*.cubin"):  # the code Triton compiled and the program loaded
        originals.update(cuobjdump_resources(cubin))
    print(f"Triton's resources from cuobjdump of {len(list((tmp_path / 'tc').rglob('*.cubin')))} cubin(s)")
    problems = check_costs(trace, originals)
    assert {"vadd", "softmax", "matmul", "layernorm"} <= {e["kernel"] for e in trace.events
                                                          if e.get("event") == "probe_cost"}
    assert all(SLOWDOWN.search(row) for row in section.splitlines()[3:] if row.strip()), section
    assert not problems, "\n".join(problems)

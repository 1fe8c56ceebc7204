"""What JAX/XLA does with its PTX on this machine, and what Neutrino sees of it. One run diagnoses and verifies.

usage: python tests/gpu/jax_diagnose.py [--probe block_sched] [--keep DIR]

Prints: the installed jax / jaxlib / CUDA plugin versions and devices; where libnvJitLink and ptxas
are (XLA compiles PTX with libnvJitLink when it loads, else with a ptxas subprocess, else the driver);
then runs a small jitted program (elementwise function + MLP gradient step) under
`neutrino -p PROBE` with XLA's compilation-provider log on, and summarises the trace: which
compiler XLA chose, modules by PTX source, modules without PTX by likely origin and reason,
probed launches per kernel, fallbacks, the XLA flags Neutrino added. Exit status 0 when at least
one XLA kernel was probed from nvJitLink's PTX.
"""

from __future__ import annotations

import argparse
import collections
import glob
import importlib.metadata as md
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
PROGRAM = r"""
import jax, jax.numpy as jnp, numpy as np
x = jnp.arange(1 << 16, dtype=jnp.float32)
print("elementwise", float(jax.jit(lambda a: jnp.tanh(a) * 2 + 1)(x).sum()))
w = jnp.ones((256, 256), jnp.float32) * 0.01
def loss(w, x): return jnp.mean(jax.nn.relu(x @ w) ** 2)
step = jax.jit(lambda w, x: w - 0.1 * jax.grad(loss)(w, x))
print("train", float(step(w, jnp.ones((64, 256), jnp.float32)).sum()))
"""
PACKAGES = ("jax", "jaxlib", "jax-cuda13-plugin", "jax-cuda13-pjrt", "jax-cuda12-plugin", "jax-cuda12-pjrt",
            "nvidia-nvjitlink", "nvidia-nvjitlink-cu12", "nvidia-cuda-nvcc", "nvidia-cuda-nvcc-cu12")
PROVIDER_LINES = re.compile(r"(Using (libnvjitlink|libnvptxcompiler|ptxas|the driver)[^\n]*|Has Nv\w+ support:[^\n]*|"
                            r"No PTX compilation provider[^\n]*)")


def section(title: str) -> None:
    print(f"\n== {title}")


def versions() -> None:
    section("versions")
    print(f"python {sys.version.split()[0]} ({sys.executable})")
    for name in PACKAGES:
        try:
            print(f"{name:24s} {md.version(name)}")
        except md.PackageNotFoundError:
            pass
    r = subprocess.run([sys.executable, "-c", "import jax; print(jax.devices()); d = jax.devices()[0]; "
                        "print(d.platform, d.device_kind, getattr(d, 'core_count', '?'))"],
                       capture_output=True, text=True, timeout=300)
    print((r.stdout + r.stderr).strip()[-1500:])


def compilers() -> None:
    section("PTX compilers XLA can find")
    site = Path(sysconfig.get_paths()["purelib"])
    for pattern in ("nvidia/*/lib/libnvJitLink.so*", "nvidia/nvjitlink/lib/libnvJitLink.so*",
                    "nvidia/*/bin/ptxas", "nvidia/cuda_nvcc/bin/ptxas"):
        for hit in sorted(glob.glob(str(site / pattern))):
            print(f"found {hit}")
    for tool in ("ptxas", "nvlink"):
        path = subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True, text=True).stdout.strip()
        print(f"{tool} on PATH: {path or 'no'}")
    print(f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}")


def run_probed(probe: str, out: Path) -> tuple[int, str]:
    section(f"a jitted program under neutrino -p {probe}")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "0")
    env.setdefault("TF_CPP_VMODULE", "assemble_compilation_provider=4,nvptx_compiler=1")
    cmd = [sys.executable, "-m", "neutrino.runtime.start.launcher", "-p", probe, "--tracedir", str(out), "--",
           sys.executable, "-c", PROGRAM]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    text = r.stdout + r.stderr
    for line in sorted(set(m.group(0) for m in PROVIDER_LINES.finditer(text))):
        print(f"XLA: {line}")
    tail = [ln for ln in text.splitlines() if ln.startswith(("neutrino", "  ", "elementwise", "train"))]
    print("\n".join(tail[-40:]))
    print(f"exit status {r.returncode}")
    return r.returncode, text


def summarise(out: Path) -> int:
    sys.path.insert(0, str(REPO))
    import neutrino.trace as nt

    section("trace")
    runs = [p for p in out.iterdir() if (p / "event.log").exists()] if out.exists() else []
    if not runs:
        print("no trace written")
        return 0
    probed_from_jitlink = 0
    for run in runs:
        trace = nt.load(run)
        events = trace.events
        sources = collections.Counter(e.get("source") for e in events if e.get("event") == "module")
        no_ptx = collections.Counter((e.get("origin"), e.get("reason")) for e in events if e.get("event") == "no_ptx")
        print(f"{run.name}: modules with PTX by source: {dict(sources)}")
        for (origin, reason), n in no_ptx.most_common(8):
            print(f"  no PTX: {n:4d} x {origin}: {reason}")
        for e in [e for e in events if e.get("event") == "no_ptx"][:20]:
            print(f"    unprobed module {e.get('module')}: {', '.join(e.get('kernels') or ['?'])}")
        for e in events:
            if e.get("event") == "subprocess_compilers":
                print(f"  compiler subprocesses: {e['calls']}, failed {e['failed']}, nvlink inputs {e['nvlink_inputs']}")
        for e in events:
            if e.get("event") == "framework_flags":
                print(f"  flags added for {e['framework']}: {e['variable']} += {e['added']}")
        kernels = collections.Counter(la.kernel for la in trace.launches)
        print(f"  probed launches: {len(trace.launches)} in {len(kernels)} kernel(s)")
        for name, n in kernels.most_common(15):
            print(f"    {n:5d}  {name}")
        fb = collections.Counter((e.get("kernel"), e.get("stage"), e.get("reason")) for e in events
                                 if e.get("event") == "fallback")
        for (kernel, stage, reason), n in fb.most_common(8):
            print(f"  fallback {n} x {kernel} [{stage}]: {reason}")
        if sources.get("nvJitLink") or sources.get("ptxas"):  # either of XLA's in-process routes
            probed_from_jitlink += len(trace.launches)
    return probed_from_jitlink


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--probe", default="block_sched")
    ap.add_argument("--keep", default=None, help="keep the trace in this directory")
    args = ap.parse_args()
    versions()
    compilers()
    out = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="neutrino-jax-"))
    rc, _ = run_probed(args.probe, out)
    probed = summarise(out)
    section("verdict")
    if rc == 0 and probed:
        print(f"OK: {probed} launch(es) of XLA kernels probed from the PTX XLA gave nvJitLink or ptxas")
        return 0
    print("NOT OK: no XLA kernel was probed from the PTX XLA compiled (see the compiler lines and no-PTX reasons above)")
    return 1


if __name__ == "__main__":
    sys.exit(main())

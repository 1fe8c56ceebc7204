"""Session settings for the CPU tests: the fake driver's ptxas (tests/fakecuda/fake_ptxas.py), so the
runtime's whole-program compile (neutrino/runtime/instrument/ptxas.py) makes what the fake drivers load.
The GPU tests' environments drop it (tests/gpu/gpuutil.py, base_env)."""

import os
from pathlib import Path

FAKE_PTXAS = str(Path(__file__).resolve().parent / "fakecuda" / "fake_ptxas.py")
os.environ.setdefault("NEUTRINO_PTXAS", FAKE_PTXAS)

"""Issue 29, the launcher's cold check: compiling a PTX probe loads neither the GCN backend (and the GCN
assembly parser behind it) nor, for the loop limits, the passes package; the limits are one set."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport json, sys; print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True, cwd=ROOT,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_compiling_a_ptx_probe_loads_no_gcn_code_and_no_passes():
    loaded = modules_after("from neutrino.language import compile_file\n"
                           "compile_file('neutrino/tools/block_sched/probe.py')")
    assert not {m for m in loaded if m.startswith(("neutrino.isa.gcn", "neutrino.language.backend_gcn"))}
    assert not {m for m in loaded if m.startswith("neutrino.passes")}


def test_every_backend_is_found_by_its_name():
    from neutrino.language.backends import BACKENDS, backend_class, get_backend

    for name in BACKENDS:
        assert backend_class(name).name == name
        assert get_backend(name).name == name
    with pytest.raises(ValueError, match="unknown backend 'sass'.*gcn, ptx, rdna"):
        get_backend("sass")


def test_the_compiler_and_the_verifier_share_the_loop_limits():
    import neutrino.language.loops as compiler_side
    import neutrino.loop_limits as limits
    import neutrino.passes.probe_loops as verifier_side

    for name in ("MAX_PATH_LENGTH", "MAX_TRIP_COUNT", "MAX_LOOP_DEPTH"):
        assert getattr(compiler_side, name) == getattr(verifier_side, name) == getattr(limits, name)

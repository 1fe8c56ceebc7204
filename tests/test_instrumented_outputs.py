"""What the engine produces for every corpus kernel under every built-in tool and test probe, PTX, GCN and RDNA alike,
is what tests/data/instrumented_digests.json recorded: refactorings of the passes change no output by accident.

An intended change: `python benchmarks/instrumented_outputs.py --digests tests/data/instrumented_digests.json`,
after checking the new outputs (ptxas / llvm-mc: tests/test_instrument_corpus.py, tests/test_gcn.py, tests/test_rdna.py).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).parent.parent
RECORDED = ROOT / "tests" / "data" / "instrumented_digests.json"


def load_script():
    spec = importlib.util.spec_from_file_location("instrumented_outputs", ROOT / "benchmarks" / "instrumented_outputs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_output_is_the_recorded_one():
    recorded = json.loads(RECORDED.read_text())
    now = load_script().digests()
    assert len(now) > 500 and any(k.startswith("gcn__") for k in now) and any(k.startswith("rdna__") for k in now)
    assert sorted(set(now) ^ set(recorded)) == [], "cases added or gone: regenerate the digests"
    changed = sorted(name for name in now if now[name] != recorded[name])
    assert changed == [], f"{len(changed)} outputs changed, e.g. {changed[:5]}"

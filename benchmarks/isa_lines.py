"""Lines of AMD-specific (GCN/RDNA) code and of the ISA-neutral SAVE core, per file, at git revisions.

    python benchmarks/isa_lines.py REV [REV ...]      e.g. 3439a16 main x-isa

Counted, per revision: every `.py` file under neutrino/isa/gcn, neutrino/isa/rdna,
neutrino/passes/gcn, plus neutrino/engine_gcn.py, neutrino/cli_gcn.py and the DSL's
backend_gcn.py/backend_rdna.py (RDNA's now in backend_gcn.py), less the generated mnemonic lists (mnemonics_gfx*.py);
"code" lines are those neither blank nor comment-only. The code generation subset is
the steps of the pipeline (match, virtualize, resolve, lower-save, verify, buffers,
registers, the ISA adapter, the dialect table, what positions match, the translation of the neutral operations);
the rest is the IR, parser, printer, semantics table, ABI, metadata, the mnemonic lists' lookup and the DSL's
backends. "neutral" is the ISA-neutral SAVE core, the neutral operations and the splicing helpers (passes/save_core.py,
passes/neutral_ops.py, passes/build.py, passes/site_code.py, and the DSL's IR in the neutral operations,
language/backend_neutral.py): not AMD code, but listed so that code moved out of isa/gcn shows where it went.
"""

from __future__ import annotations

import subprocess
import sys

AREAS = ("neutrino/isa/gcn", "neutrino/isa/rdna", "neutrino/passes/gcn", "neutrino/engine_gcn.py", "neutrino/cli_gcn.py",
         "neutrino/language/backend_gcn.py", "neutrino/language/backend_rdna.py", "neutrino/passes/save_core.py",
         "neutrino/passes/neutral_ops.py", "neutrino/passes/build.py", "neutrino/passes/site_code.py",
         "neutrino/language/backend_neutral.py")
NEUTRAL = ("save_core.py", "neutral_ops.py", "passes/build.py", "passes/site_code.py", "backend_neutral.py")
CODEGEN = ("buffers.py", "lower_save.py", "match.py", "resolve.py", "registers.py", "state.py", "target.py", "verify.py",
           "virtualize.py", "dialect.py", "positions.py", "translate.py", "engine_gcn.py", "cli_gcn.py",
           "passes/gcn/__init__.py")


def files(rev: str) -> list[str]:
    out = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev, "--", *AREAS], capture_output=True, text=True,
                         check=True).stdout.split()
    return [f for f in out if f.endswith(".py") and "mnemonics_gfx" not in f]


def count(rev: str, path: str) -> tuple[int, int]:
    text = subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True, text=True, check=True).stdout
    lines = text.splitlines()
    return len(lines), sum(1 for line in lines if line.strip() and not line.strip().startswith("#"))


def main(revs: list[str]) -> None:
    for rev in revs:
        totals = {"all": [0, 0], "codegen": [0, 0], "neutral": [0, 0]}
        print(f"== {rev}")
        for path in files(rev):
            lines, code = count(rev, path)
            kind = "neutral" if path.endswith(NEUTRAL) else \
                "codegen" if path.endswith(CODEGEN) and "backend_" not in path else "all"
            print(f"{lines:6d} {code:6d}  {kind:8s} {path}")
            for key in {kind, "all"} if kind != "neutral" else {kind}:
                totals[key][0] += lines
                totals[key][1] += code
        for key, (lines, code) in totals.items():
            print(f"   {key:8s} lines {lines:5d}  code {code:5d}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["main", "HEAD"])

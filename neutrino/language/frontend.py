"""Frontend: Python source (read with `ast`, never executed) -> Neutrino IR.

Three phases, in this order, one module each:

1. frontend_scan.py: `ModuleScan` walks the top level: imports (to know which names mean
   `neutrino.language`), module registers, constants, `@Map` classes and
   `@probe` functions. Everything else is refused.
2. frontend_types.py: `infer_types` gives every variable of the file one type (u32/u64): the
   declared one, else the widest type assigned to it anywhere in the file
   (fixpoint, since probes share registers and may read a variable another
   probe writes).
3. frontend_lower.py: `ProbeLowering` (an `ast.NodeVisitor`, one `visit_<Node>` per statement;
   its expressions half, one `value_<Node>` per expression, in frontend_values.py) lowers each
   probe body to IR; `if`/`else` becomes predication.

Every problem is a `Diagnostic` at the user's file:line:col; errors in
different statements are all reported.
"""

from __future__ import annotations

import ast
from typing import Optional

from neutrino.errors import Diagnostic, Location
from neutrino.language.ir import Imm, Instr, ModuleIR, ProbeIR, Reg
from neutrino.language.frontend_scan import INIT_PROBE, MAX_NESTING, ModuleScan, Source, first_too_deep, mangle
from neutrino.language.frontend_types import infer_types
from neutrino.language.frontend_lower import ProbeLowering

__all__ = ["lower_module", "mangle"]


# ------------------------------------------------------------------ entry point


def lower_module(text: str, filename: str) -> tuple[Optional[ModuleIR], list[Diagnostic]]:
    """Source text -> (ModuleIR, diagnostics). The module is None when there are errors."""
    src = Source(text, filename)
    diags: list[Diagnostic] = []
    try:
        tree = ast.parse(text, filename=filename)
    except (SyntaxError, ValueError) as e:  # ValueError: NUL bytes in the source
        if not isinstance(e, SyntaxError):
            return None, [Diagnostic(Location(filename), f"cannot parse: {e}")]
        line = e.lineno or 0
        loc = Location(filename, line, e.offset or 0, src.lines[line - 1] if 0 < line <= len(src.lines) else "")
        return None, [Diagnostic(loc, f"syntax error: {e.msg}")]
    except (RecursionError, MemoryError):  # Python's own parser gives up (thousands of nested operators)
        return None, [Diagnostic(src.busiest_line(text), f"expression nested too deeply (more than {MAX_NESTING} levels)")]
    too_deep = first_too_deep(tree)
    if too_deep is not None:
        return None, [Diagnostic(src.location(too_deep), f"expression nested too deeply (more than {MAX_NESTING} levels)",
                                 hint="split it into several assignments")]
    scan = ModuleScan(src, diags)
    scan.run(tree)
    if not scan.probes and not diags:
        diags.append(Diagnostic(Location(filename, 1, 1, src.lines[0] if src.lines else ""),
                                "the file defines no probe", hint="decorate a function with @probe(pos=..., level=...)"))
    types, assigned = infer_types(scan)
    implied: dict[str, MapIR] = {}
    probes = []
    for decl in scan.probes:
        lowering = ProbeLowering(scan, decl, types, assigned, diags, implied)
        body = lowering.run()
        if decl.size is not None and lowering.short_total == 0:
            diags.append(Diagnostic(src.location(decl.size_node), "size= is only for probes that record with nl.save(...)"))
        probes.append(ProbeIR(decl.name, decl.position, decl.level, decl.when, body, src.location(decl.node)))
    if diags:
        return None, diags
    registers = {n: Reg(mangle(n), t) for n, (t, _, _) in scan.registers.items()}
    if registers:
        init = [Instr("mov", reg.type, reg, (Imm(scan.registers[n][1], reg.type),),
                      loc=src.location(scan.registers[n][2])) for n, reg in registers.items()]
        probes.insert(0, ProbeIR(INIT_PROBE, "kernel", "thread", "before", init))
    maps = list(scan.maps.values()) + list(implied.values())
    module = ModuleIR(maps, probes, registers, scan.description, scan.analyze_hook, filename)
    return module, []

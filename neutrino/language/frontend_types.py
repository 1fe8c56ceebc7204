"""Frontend, phase 2: one type (u32/u64) for every variable of the file: the declared one, else the
widest type assigned to it anywhere in the file (a fixpoint: probes share registers and may read a
variable another probe writes)."""

from __future__ import annotations

import ast
from typing import Optional

from neutrino.language.ir import U32, U64
from neutrino.language.frontend_scan import DTYPES, FIELD_HELPERS, VALUE_HELPERS, CompileAbort, ModuleScan


def join_types(a: Optional[str], b: Optional[str]) -> Optional[str]:
    if a is None:
        return b
    if b is None:
        return a
    return U64 if U64 in (a, b) else U32



def infer_types(scan: ModuleScan) -> tuple[dict, set]:
    """Types of every variable of the file, and the set of variables that
    are assigned somewhere (a read of anything else is undefined)."""
    src = scan.src
    types: dict[str, str] = {n: t for n, (t, _, _) in scan.registers.items()}
    declared = set(types)
    assigned = set(types)
    assigns = []  # (name, value expr, is_aug)
    for p in scan.probes:
        for node in ast.walk(p.node):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                name = node.target.id
                try:
                    ty = scan.dtype(node.annotation)
                except CompileAbort:
                    ty = None
                if ty is None:
                    continue  # reported while lowering
                if name in types and types[name] != ty and name in declared:
                    continue  # conflicting declaration, reported while lowering
                types[name] = ty
                declared.add(name)
                if node.value is not None:
                    assigned.add(name)
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        assigned.add(t.id)
                        assigns.append((t.id, node.value, False))
            elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                assigns.append((node.target.id, node.value, True, type(node.op)))

    def type_of(e) -> Optional[str]:
        if isinstance(e, ast.Name):
            return types.get(e.id)
        if isinstance(e, ast.BinOp):
            if isinstance(e.op, (ast.LShift, ast.RShift)):
                return type_of(e.left)
            return join_types(type_of(e.left), type_of(e.right))
        if isinstance(e, ast.UnaryOp):
            return type_of(e.operand)
        if isinstance(e, ast.IfExp):
            return join_types(type_of(e.body), type_of(e.orelse))
        if isinstance(e, (ast.Call, ast.Attribute)):
            target = e.func if isinstance(e, ast.Call) else e
            try:
                h = scan.resolve_helper(target)
            except CompileAbort:
                return None
            if h in VALUE_HELPERS:  # nl.clock() or nl.clock: both forms are accepted
                return VALUE_HELPERS[h][1]
            if h in DTYPES and isinstance(e, ast.Call):
                return DTYPES[h]
            if h in FIELD_HELPERS:  # nl.addr or nl.addr()
                return FIELD_HELPERS[h][1]
        return None

    while True:
        changed = True
        while changed:
            changed = False
            for entry in assigns:
                name, value, aug = entry[0], entry[1], entry[2]
                if name in declared:
                    continue
                if aug and entry[3] in (ast.LShift, ast.RShift):
                    continue
                t = join_types(types.get(name), type_of(value))
                if t is not None and t != types.get(name):
                    types[name] = t
                    changed = True
        untyped = [name for name, *_ in assigns if name not in types]
        if not untyped:
            return types, assigned
        for name in untyped:
            types[name] = U64  # only constants assigned: 64 bits; then propagate again

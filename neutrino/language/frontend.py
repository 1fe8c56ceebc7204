"""Frontend: Python source (read with `ast`, never executed) -> Neutrino IR.

Three steps, in this order:

1. `_ModuleScan` walks the top level: imports (to know which names mean
   `neutrino.language`), module registers, constants, `@Map` classes and
   `@probe` functions. Everything else is refused.
2. `_infer_types` gives every variable of the file one type (u32/u64): the
   declared one, else the widest type assigned to it anywhere in the file
   (fixpoint, since probes share registers and may read a variable another
   probe writes).
3. `_ProbeLowering` (an `ast.NodeVisitor`, one `visit_<Node>` per statement,
   one `value_<Node>` per expression) lowers each probe body to IR;
   `if`/`else` becomes predication.

Every problem is a `Diagnostic` at the user's file:line:col; errors in
different statements are all reported.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize

import attrs
from typing import Optional

from neutrino.errors import Diagnostic, Location
from neutrino.probefile import FIELD_NAME_BYTES, MAP_NAME_BYTES, FieldNames, name_problem
from neutrino.maps import Buckets
from neutrino.language.loops import LoopState, lower_for, lower_while
from neutrino.language.ir import (
    BITS,
    PRED,
    U32,
    U64,
    Field,
    Guard,
    Imm,
    Instr,
    MapIR,
    ModuleIR,
    ProbeIR,
    Reg,
    record_bytes,
)

#: what `neutrino.language` offers to probe files
LANG_NAMES = frozenset(
    "probe Map save clock time cuid smid laneid u32 u64 addr bytes out in1 in2 in3 line block".split()
)
VALUE_HELPERS = {"clock": ("clock", U64), "time": ("time", U64), "cuid": ("cuid", U32), "smid": ("cuid", U32),
                 "laneid": ("laneid", U32)}
FIELD_HELPERS = {"addr": ("ADDR", U64), "bytes": ("BYTES", U32), "out": ("OUT", U64),
                 "in1": ("IN1", U64), "in2": ("IN2", U64), "in3": ("IN3", U64),
                 "line": ("LINE", U32), "block": ("BLOCK", U32)}
DTYPES = {"u32": U32, "u64": U64}
# What a probe may call on a map, by map type: each call is one SAVE into it.
MAP_METHODS_OF = {"array": ("save",), "sum": ("add", "save"), "hist": ("record",)}
MAP_METHODS = frozenset(m for methods in MAP_METHODS_OF.values() for m in methods)

#: PTX names a user variable must not turn into (special registers, helper words)
RESERVED = frozenset(
    """tid ntid laneid warpid nwarpid ctaid nctaid smid nsmid gridid lanemask_eq lanemask_le
    lanemask_lt lanemask_ge lanemask_gt clock clock_hi clock64 globaltimer globaltimer_lo
    globaltimer_hi total_smem_size aggr_smem_size dynamic_smem_size current_graph_exec
    is_explicit_cluster clusterid nclusterid cluster_ctaid cluster_nctaid cluster_ctarank
    cluster_nctarank ADDR BYTES OUT IN1 IN2 IN3 LINE BLOCK SAVE""".split()
) | {f"pm{i}" for i in range(8)} | {f"pm{i}_64" for i in range(8)} | {f"envreg{i}" for i in range(32)} | {
    n for n in ("reserved_smem_offset_begin", "reserved_smem_offset_end", "reserved_smem_offset_cap",
                "reserved_smem_offset_0", "reserved_smem_offset_1")
}

INIT_PROBE = "__init"
# Opcode prefixes joined by ':'; a modifier may carry '::' parts (shared::cluster), as in the TOML form.
_POSITION_PART = r"#?[a-z][a-z0-9_]*(\.[a-z0-9_]+(::[a-z0-9_]+)*)*"  # an opcode prefix or a #selector
# An optional `@ [FILE:]A[-B],…` limits them to source lines (neutrino/isa/ptx/lines.py; the TOML loader checks it).
POSITION_RE = re.compile(rf"{_POSITION_PART}(:{_POSITION_PART})*(\s*@\s*[^@]+)?$")

BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.FloorDiv: "div",
          ast.Mod: "rem", ast.LShift: "shl", ast.RShift: "shr", ast.BitAnd: "and",
          ast.BitOr: "or", ast.BitXor: "xor"}
CMPOPS = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"}
CMP_FOLD = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
            "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}

#: friendly names for constructs we refuse
CONSTRUCT_NAMES = {
    "For": "for loop", "AsyncFor": "for loop", "While": "while loop", "With": "with statement",
    "Return": "return statement", "Raise": "raise statement", "Try": "try statement",
    "FunctionDef": "nested function", "Lambda": "lambda", "ListComp": "list comprehension",
    "GeneratorExp": "generator expression", "DictComp": "dict comprehension",
    "SetComp": "set comprehension", "Subscript": "subscript", "List": "list", "Dict": "dict",
    "Set": "set", "Tuple": "tuple", "Starred": "starred expression", "JoinedStr": "f-string",
    "Await": "await", "Yield": "yield", "YieldFrom": "yield", "NamedExpr": "assignment expression",
    "Delete": "del statement", "Global": "global statement", "Nonlocal": "nonlocal statement",
    "Assert": "assert statement", "Import": "import inside a probe", "ImportFrom": "import inside a probe",
    "Break": "break", "Continue": "continue", "ClassDef": "class inside a probe", "Match": "match statement",
}

MASK64 = (1 << 64) - 1


def mangle(name: str) -> str:
    """User variable -> register name. Temporaries are `_d<N>`, `_r<N>`, `_p<N>`;
    user names starting with `_` get one more `_`, names that are PTX special
    registers or helper words become `_v_<name>`, so nothing collides."""
    if name.startswith("_"):
        return "_" + name
    if name in RESERVED:
        return "_v_" + name
    return name


class CompileAbort(Exception):
    """Internal: carries the diagnostic of one statement up to the loop that collects them."""

    def __init__(self, diagnostic: Diagnostic):
        super().__init__(diagnostic.message)
        self.diagnostic = diagnostic


def _join(a: Optional[str], b: Optional[str]) -> Optional[str]:
    if a is None:
        return b
    if b is None:
        return a
    return U64 if U64 in (a, b) else U32


# Expressions nested deeper than this are refused, located, before lowering (which recurses
# once per level). Probes nest a handful of levels; Python's own parser fails in the thousands.
MAX_NESTING = 100


def _first_too_deep(tree: ast.AST) -> ast.AST | None:
    """The first expression node nested more than MAX_NESTING expressions deep; one iterative walk."""
    stack = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, ast.expr):
            depth += 1
            if depth > MAX_NESTING:
                return node
        stack.extend((child, depth) for child in ast.iter_child_nodes(node))
    return None


class _Source:
    """The text of the file being compiled, for locations."""

    def __init__(self, text: str, filename: str):
        self.filename = filename
        self.lines = re.split(r"\r\n|\r|\n", text)  # Python's line ends (splitlines also splits at \x0c)

    def busiest_line(self, text: str) -> Location:
        """The line with the most tokens: where an expression too deep for Python's parser must be."""
        counts: dict[int, int] = {}
        try:
            for token in tokenize.generate_tokens(io.StringIO(text).readline):
                counts[token.start[0]] = counts.get(token.start[0], 0) + 1
        except (tokenize.TokenError, SyntaxError):
            pass
        line = max(counts, key=counts.get, default=0)
        return Location(self.filename, line, 0, self.lines[line - 1] if 0 < line <= len(self.lines) else "")

    def location(self, node) -> Location:
        line = getattr(node, "lineno", 0) or 0
        col = (getattr(node, "col_offset", -1) or 0) + 1 if hasattr(node, "col_offset") else 0
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        return Location(self.filename, line, col, text)

    def abort(self, node, message: str, hint: str = ""):
        raise CompileAbort(Diagnostic(self.location(node), message, hint=hint))

    def check_name(self, node, what: str, name: str, limit: int, hint: str = "") -> None:
        """Map and field names go into PTX names and result-file headers: the rules of spec/probe-toml.md."""
        problem = name_problem(what, name, limit)
        if problem:
            self.abort(node, problem, hint=hint)


# ------------------------------------------------------------------ module scan


class _ProbeDecl:
    def __init__(self, name, node, position, level, when, size, cap, size_node):
        self.name, self.node, self.position, self.level = name, node, position, level
        self.when, self.size, self.cap, self.size_node = when, size, cap, size_node


class _ModuleScan:
    """Top-level statements of the file."""

    def __init__(self, src: _Source, diags: list):
        self.src = src
        self.diags = diags
        self.aliases: dict[str, str] = {}  # local name -> "lang" | "neutrino" | "lang:<name>" | "foreign"
        self.registers: dict[str, tuple[str, int, ast.AST]] = {}  # name -> (type, init, node)
        self.constants: dict[str, int] = {}
        self.maps: dict[str, MapIR] = {}
        self.map_nodes: dict[str, ast.AST] = {}
        self.probes: list[_ProbeDecl] = []
        self.description: Optional[str] = None
        self.analyze_hook: Optional[str] = None
        self.defined_at: dict[str, int] = {}  # module-level name -> line

    # ---- name resolution
    def resolve(self, node) -> Optional[str]:
        """'lang:<name>' when `node` denotes an attribute of neutrino.language,
        'lang' for the module itself, 'neutrino' for the package, else None."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            if base == "neutrino":
                if node.attr == "language":
                    return "lang"
                return f"lang:{node.attr}"  # neutrino.probe, neutrino.Map (others: unknown helper)
            if base == "lang":
                return f"lang:{node.attr}"
        return None

    def resolve_helper(self, node) -> Optional[str]:
        """The helper name when `node` denotes neutrino.language.<helper>; an
        unknown attribute of the language module is an error."""
        r = self.resolve(node)
        if r is None or not r.startswith("lang:"):
            return None
        name = r[5:]
        if name not in LANG_NAMES:
            self.src.abort(node, f"unknown helper '{ast.unparse(node)}'",
                           hint="known: " + ", ".join(sorted(LANG_NAMES)))
        return name

    def dtype(self, node) -> Optional[str]:
        name = self.resolve_helper(node)
        return DTYPES.get(name) if name else None

    # ---- scan
    def run(self, tree: ast.Module) -> None:
        for i, stmt in enumerate(tree.body):
            try:
                self.statement(stmt, first=(i == 0))
            except CompileAbort as e:
                self.diags.append(e.diagnostic)

    def _define(self, name: str, node) -> None:
        if name in self.defined_at:
            self.src.abort(node, f"'{name}' is already defined at line {self.defined_at[name]}")
        self.defined_at[name] = node.lineno

    def statement(self, stmt, first: bool) -> None:
        if isinstance(stmt, ast.Import):
            for a in stmt.names:
                if a.asname is None:
                    top = a.name.split(".")[0]
                    self.aliases[top] = "neutrino" if top == "neutrino" else "foreign"
                elif a.name == "neutrino":
                    self.aliases[a.asname] = "neutrino"
                elif a.name == "neutrino.language":
                    self.aliases[a.asname] = "lang"
                else:
                    self.aliases[a.asname] = "foreign"
            return
        if isinstance(stmt, ast.ImportFrom):
            self.import_from(stmt)
            return
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
            if first:  # the docstring's first line describes the file
                self.description = (stmt.value.value.strip().splitlines() or [""])[0].strip() or None
            return
        if isinstance(stmt, ast.Pass):
            return
        if isinstance(stmt, ast.AnnAssign):
            self.register(stmt)
            return
        if isinstance(stmt, ast.Assign):
            self.module_assign(stmt)
            return
        if isinstance(stmt, ast.ClassDef):
            self.map_class(stmt)
            return
        if isinstance(stmt, ast.FunctionDef):
            self.probe_function(stmt)
            return
        if isinstance(stmt, ast.If) and _is_main_guard(stmt.test):
            return  # `if __name__ == "__main__":` is for running the file, not for us
        what = CONSTRUCT_NAMES.get(type(stmt).__name__, type(stmt).__name__)
        self.src.abort(stmt, f"unsupported construct at module level: {what}",
                       hint="a probe file holds imports, registers (x: nl.u64 = 0), constants, @Map classes and @probe functions")

    def import_from(self, stmt: ast.ImportFrom) -> None:
        mod = stmt.module or ""
        for a in stmt.names:
            local = a.asname or a.name
            if mod == "neutrino" and a.name == "language":
                self.aliases[local] = "lang"
            elif mod == "neutrino" and a.name in ("probe", "Map"):
                self.aliases[local] = f"lang:{a.name}"
            elif mod == "neutrino.language":
                if a.name == "*":
                    for n in LANG_NAMES:
                        self.aliases[n] = f"lang:{n}"
                elif a.name not in LANG_NAMES:
                    self.src.abort(stmt, f"unknown helper 'neutrino.language.{a.name}'")
                else:
                    self.aliases[local] = f"lang:{a.name}"
            elif mod == "__future__":
                continue
            elif a.name != "*":
                self.aliases[local] = "foreign"

    def register(self, stmt: ast.AnnAssign) -> None:
        if not isinstance(stmt.target, ast.Name):
            self.src.abort(stmt.target, "a module-level register must be a plain name")
        name = stmt.target.id
        ty = self.dtype(stmt.annotation)
        if ty is None:
            self.src.abort(stmt.annotation, f"register '{name}' must be annotated nl.u32 or nl.u64")
        init = 0
        if stmt.value is not None:
            init = self.const_int(stmt.value, f"the initial value of register '{name}'")
            init = _fit(self.src, stmt.value, init, ty)
        self._define(name, stmt)
        self.registers[name] = (ty, init, stmt)

    def const_int(self, node, what: str) -> int:
        value = _fold_constant(node, self.constants)
        if value is None:
            self.src.abort(node, f"{what} must be an integer constant")
        return value

    def module_assign(self, stmt: ast.Assign) -> None:
        if len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name):
            self.src.abort(stmt, "unsupported module-level assignment",
                           hint="assign one name: a constant (N = 16) or a register (x: nl.u64 = 0)")
        name = stmt.targets[0].id
        v = stmt.value
        if name in ("description", "analyze_hook"):
            if not (isinstance(v, ast.Constant) and isinstance(v.value, str)):
                self.src.abort(v, f"'{name}' must be a string")
            setattr(self, name, v.value)
            return
        value = _fold_constant(v, self.constants)
        if value is None:
            self.src.abort(v, f"module-level '{name}' must be an integer constant",
                           hint=f"declare a register with a type instead: {name}: nl.u64 = 0")
        self._define(name, stmt)
        self.constants[name] = value

    # ---- @Map classes
    def map_class(self, cls: ast.ClassDef) -> None:
        call = self.single_decorator(cls, "Map")
        self.src.check_name(cls, "map", cls.name, MAP_NAME_BYTES)
        kw = self.decorator_args(call, ("level", "type", "size", "cap", "buckets"), ())
        level = self.level(kw.get("level"), call)
        kind, kind_node = kw.get("type", ("array", call))
        if kind not in ("array", "sum", "hist"):
            self.src.abort(kind_node, f"bad map type {kind!r}: expected \"array\", \"sum\" or \"hist\"")
        if kind != "array":
            self.aggregate_map_class(cls, call, kw, kind, level)
            return
        if "buckets" in kw:
            self.src.abort(kw["buckets"][1], "buckets= is for type=\"hist\" maps")
        cap = self.cap(kw.get("cap"))
        fields = self.map_fields(cls)
        if "size" in kw:
            check_size(self.src, kw["size"], fields)
        self._define(cls.name, cls)
        self.maps[cls.name] = MapIR(cls.name, level, cap, fields, self.src.location(cls))
        self.map_nodes[cls.name] = cls

    def aggregate_map_class(self, cls: ast.ClassDef, call: ast.Call, kw: dict, kind: str, level: str) -> None:
        """type="sum": u64 fields, the launch's counters; type="hist": no fields, buckets=..."""
        for key in ("cap", "size"):
            if key in kw:
                self.src.abort(kw[key][1], f"{key}= does not apply to a {kind} map: it holds one set of counters per launch")
        buckets = None
        if kind == "hist":
            if "buckets" not in kw:
                self.src.abort(call, "a hist map needs buckets=\"log2\" or buckets=\"linear:MIN:MAX:STEP\"")
            value, node = kw["buckets"]
            try:
                buckets = str(Buckets.parse(value))
            except ValueError as e:
                self.src.abort(node, str(e))
            fields = [("value", U64)]
            body = [item for item in cls.body if not isinstance(item, ast.Pass)
                    and not (isinstance(item, ast.Expr) and isinstance(item.value, ast.Constant))]
            if body:
                self.src.abort(body[0], f"hist map '{cls.name}' has no fields: it counts the values given to {cls.name}.record(v)")
        else:
            if "buckets" in kw:
                self.src.abort(kw["buckets"][1], "buckets= is for type=\"hist\" maps")
            fields = self.map_fields(cls)
            for item, (fname, ty) in zip([i for i in cls.body if isinstance(i, ast.AnnAssign)], fields):
                if ty != U64:
                    self.src.abort(item.annotation, f"field '{fname}' of sum map '{cls.name}' must be nl.u64: counters are 64-bit")
        self._define(cls.name, cls)
        self.maps[cls.name] = MapIR(cls.name, level, 1, fields, self.src.location(cls), kind, buckets)
        self.map_nodes[cls.name] = cls

    def map_fields(self, cls: ast.ClassDef) -> list:
        fields = []
        seen = set()
        for i, item in enumerate(cls.body):
            if i == 0 and isinstance(item, ast.Expr) and isinstance(item.value, ast.Constant) and isinstance(item.value.value, str):
                continue
            if isinstance(item, ast.Pass):
                continue
            if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.value is None):
                self.src.abort(item, f"map '{cls.name}' may only contain fields (name: nl.u32 or name: nl.u64)")
            fname = item.target.id
            self.src.check_name(item.target, "field", fname, FIELD_NAME_BYTES)
            ty = self.dtype(item.annotation)
            if ty is None:
                self.src.abort(item.annotation, f"field '{fname}' must be nl.u32 or nl.u64")
            if fname in seen:
                self.src.abort(item.target, f"field '{fname}' is declared twice")
            seen.add(fname)
            fields.append((fname, ty))
        if not fields:
            self.src.abort(cls, f"map '{cls.name}' has no fields")
        return fields

    # ---- @probe functions
    def check_position(self, pos: str, node) -> None:
        """Each part names a PTX opcode prefix or a selector (the portable names GCN maps too): did you mean."""
        from neutrino.isa.ptx.lines import LINE_POSITIONS
        from neutrino.isa.ptx.semantics import position_problem

        pos = pos.split("@", 1)[0].strip()  # an `@ lines` range is the TOML loader's to check
        for part in ([] if pos == "kernel" else re.split(r"(?<!:):(?!:)", pos)):
            if part in LINE_POSITIONS:
                continue
            found = position_problem(tuple(part.split(".")))
            if found is not None:
                message, close = found
                self.src.abort(node, f"position {part!r}: {message}",
                               hint="did you mean " + " or ".join(f"'{c}'" for c in close) + "?" if close else "")

    def probe_function(self, fn: ast.FunctionDef) -> None:
        call = self.single_decorator(fn, "probe")
        kw = self.decorator_args(call, ("pos", "level", "before", "after", "size", "cap", "position"), ("pos", "level"))
        if "position" in kw:
            kw.setdefault("pos", kw.pop("position"))
        if "pos" not in kw:
            self.src.abort(call, "@probe needs pos=\"kernel\" or an instruction position such as pos=\"ld.global\"")
        pos, pos_node = kw["pos"]
        if not isinstance(pos, str) or not POSITION_RE.match(pos):
            self.src.abort(pos_node, f"bad position {pos!r}",
                           hint="\"kernel\", or instruction prefixes joined by ':' such as \"ld.global:st.global\"")
        self.check_position(pos, pos_node)
        level = self.level(kw.get("level"), call)
        when = self.when(fn, kw, call)
        a = fn.args
        if a.args or a.posonlyargs or a.kwonlyargs or a.vararg or a.kwarg:
            self.src.abort(fn.args.args[0] if a.args else fn, f"probe '{fn.name}' must take no arguments")
        if fn.name == INIT_PROBE:
            self.src.abort(fn, f"the name '{INIT_PROBE}' is reserved for the register-initialising probe")
        size, size_node = kw.get("size", (None, None))
        if size is not None and (not isinstance(size, int) or isinstance(size, bool)):
            self.src.abort(size_node, "size= must be an integer (bytes per record)")
        cap = self.cap(kw.get("cap"))
        if any(p.name == fn.name for p in self.probes):
            self.src.abort(fn, f"probe '{fn.name}' is defined twice")
        self.probes.append(_ProbeDecl(fn.name, fn, pos, level, when, size, cap, size_node))

    def when(self, fn, kw, call) -> str:
        before = kw.get("before")
        after = kw.get("after")
        for v in (before, after):
            if v is not None and not isinstance(v[0], bool):
                self.src.abort(v[1], "before=/after= must be True or False")
        if before is not None and after is not None and before[0] == after[0]:
            self.src.abort(call, "give either before=True or after=True (a probe runs at one place)")
        if before is not None:
            return "before" if before[0] else "after"
        if after is not None:
            return "after" if after[0] else "before"
        # Neither given: a probe that records something (save) or reads the
        # instruction's result runs after its position, any other before it.
        for node in ast.walk(fn):
            r = self.resolve(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
            if r in ("lang:save", "lang:out") or (isinstance(node, ast.Attribute) and node.attr in MAP_METHODS):
                return "after"
        return "before"

    def single_decorator(self, node, kind: str) -> ast.Call:
        what = "map class" if kind == "Map" else "probe function"
        decos = [d for d in node.decorator_list]
        fix = "@Map(level=\"thread\", ...)" if kind == "Map" else "@probe(pos=\"kernel\", level=\"thread\")"
        if len(decos) != 1:
            self.src.abort(node, f"a {what} needs exactly one decorator, {fix}")
        d = decos[0]
        target = d.func if isinstance(d, ast.Call) else d
        r = self.resolve_helper(target)
        if r != kind:
            self.src.abort(d, f"'{node.name}' is not decorated with {kind}: expected {fix}")
        if not isinstance(d, ast.Call):
            self.src.abort(d, f"@{kind} needs arguments: {fix}")
        return d

    def decorator_args(self, call: ast.Call, allowed, positional) -> dict:
        out = {}
        if len(call.args) > len(positional):
            self.src.abort(call.args[len(positional)], "too many positional arguments")
        for name, arg in zip(positional, call.args):
            out[name] = (self.literal(arg), arg)
        for k in call.keywords:
            if k.arg is None or k.arg not in allowed:
                self.src.abort(k, f"unknown argument '{k.arg}'", hint="known: " + ", ".join(allowed))
            if k.arg in out:
                self.src.abort(k, f"argument '{k.arg}' given twice")
            out[k.arg] = (self.literal(k.value), k.value)
        return out

    def literal(self, node):
        if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, bool)):
            return node.value
        value = _fold_constant(node, self.constants)
        if value is None:
            self.src.abort(node, "decorator arguments must be constants")
        return value

    def level(self, arg, call) -> str:
        if arg is None:
            return "thread"
        value, node = arg
        if value not in ("thread", "warp", "block"):
            self.src.abort(node, f"bad level {value!r}: expected \"thread\", \"warp\" or \"block\"")
        return value

    def cap(self, arg):
        if arg is None:
            return 1
        value, node = arg
        if value in ("dynamic", "count"):
            return "count"
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            self.src.abort(node, "cap= must be a positive integer or \"dynamic\"")
        return value


def check_size(src: _Source, size_arg, fields) -> None:
    size, node = size_arg
    want = record_bytes(fields)
    if isinstance(size, bool) or not isinstance(size, int) or size != want:
        layout = ", ".join(f"{n}:{t}" for n, t in fields)
        src.abort(node, f"size={size!r} does not match the record layout ({layout}: {want} bytes)")


def _is_main_guard(test) -> bool:
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__")


def _fold_constant(node, constants: dict) -> Optional[int]:
    """Value of an integer constant expression (constants, named constants,
    arithmetic on them), or None."""
    if isinstance(node, ast.Constant):
        v = node.value
        return v if isinstance(v, int) and not isinstance(v, bool) else None
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Invert)):
        v = _fold_constant(node.operand, constants)
        if v is None:
            return None
        return _reduce(-v if isinstance(node.op, ast.USub) else (~v if isinstance(node.op, ast.Invert) else v))
    if isinstance(node, ast.BinOp) and type(node.op) in BINOPS:
        a = _fold_constant(node.left, constants)
        b = _fold_constant(node.right, constants)
        if a is None or b is None:
            return None
        return _fold_binop(BINOPS[type(node.op)], a, b, U64)
    return None


def _reduce(v: int) -> int:
    """Keep a folded constant in [-2**63, 2**64); wrap anything else to 64 bits."""
    if -(1 << 63) <= v < (1 << 64):
        return v
    return v & MASK64


def _fold_binop(op: str, a: int, b: int, ty: str) -> Optional[int]:
    """Fold two constants; division, remainder and right shifts are unsigned
    in `ty`. Returns None on division by zero."""
    mask = (1 << BITS[ty]) - 1
    if op in ("div", "rem", "shr"):
        a, b = a & mask, b & mask
        if op != "shr" and b == 0:
            return None
        return {"div": a // b if b else 0, "rem": a % b if b else 0, "shr": a >> min(b, 64)}[op]
    if op == "shl":
        b &= mask
        return _reduce((a << b) & mask) if b < 64 else 0
    res = {"add": a + b, "sub": a - b, "mul": a * b, "and": a & b, "or": a | b, "xor": a ^ b}[op]
    return _reduce(res)


def _fit(src: _Source, node, value: int, ty: str) -> int:
    bits = BITS[ty]
    if value >= (1 << bits) or value < -(1 << (bits - 1)):
        src.abort(node, f"constant {value} does not fit in {ty}")
    return value & ((1 << bits) - 1)


# ------------------------------------------------------------------ type inference


def _infer_types(scan: _ModuleScan) -> tuple[dict, set]:
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
            return _join(type_of(e.left), type_of(e.right))
        if isinstance(e, ast.UnaryOp):
            return type_of(e.operand)
        if isinstance(e, ast.IfExp):
            return _join(type_of(e.body), type_of(e.orelse))
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
                t = _join(types.get(name), type_of(value))
                if t is not None and t != types.get(name):
                    types[name] = t
                    changed = True
        untyped = [name for name, *_ in assigns if name not in types]
        if not untyped:
            return types, assigned
        for name in untyped:
            types[name] = U64  # only constants assigned: 64 bits; then propagate again


# ------------------------------------------------------------------ probe lowering


class _ProbeLowering(ast.NodeVisitor):
    """Lowers one probe body to IR instructions."""

    def __init__(self, scan: _ModuleScan, decl: _ProbeDecl, types: dict, assigned: set, diags: list, implied_maps: dict):
        self.scan = scan
        self.src = scan.src
        self.decl = decl
        self.types = types
        self.assigned = assigned
        self.diags = diags
        self.implied_maps = implied_maps
        self.body: list[Instr] = []
        self.guard: Optional[Guard] = None
        self.counters = {U64: 0, U32: 0, PRED: 0}
        self.node = decl.node  # the statement being lowered, for instruction locations
        self.negations: dict[Reg, Reg] = {}
        self.dead = 0  # >0 while lowering a branch that a constant condition never takes
        self.loops = LoopState()  # loop variables in scope, nesting (language/loops.py)
        # the short form: nl.save(...) calls of this probe build one record
        self.short_total = sum(
            1 for n in ast.walk(decl.node)
            if isinstance(n, ast.Call) and self._is_short_save(n.func)
        )
        self.short_seen = 0
        self.short_fields: list[tuple[str, str]] = []
        self.short_names = FieldNames()  # unique field names, in linear time
        self.short_regs: list[Reg] = []
        self.short_guard = None

    def _is_short_save(self, func) -> bool:
        try:
            return self.scan.resolve(func) == "lang:save"
        except CompileAbort:
            return False

    # ---- emission
    def temp(self, ty: str) -> Reg:
        prefix = {U64: "_d", U32: "_r", PRED: "_p"}[ty]
        n = self.counters[ty]
        self.counters[ty] += 1
        return Reg(f"{prefix}{n}", ty, temp=True)

    def emit(self, ins: Instr, guarded: bool = True) -> None:
        if guarded:
            ins.guard = self.guard
        ins.loc = self.src.location(self.node)
        if not self.dead:
            self.body.append(ins)

    def user_reg(self, name: str) -> Reg:
        return Reg(mangle(name), self.types[name])

    # ---- statements
    def run(self) -> list[Instr]:
        self.statements(self.decl.node.body, top=True)
        return self.body

    def statements(self, stmts, top=False) -> None:
        for i, stmt in enumerate(stmts):
            if top and i == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
                continue  # docstring
            self.node = stmt
            try:
                self.visit(stmt)
            except CompileAbort as e:
                d = e.diagnostic
                self.diags.append(attrs.evolve(d, message=f"[probe {self.decl.name}] {d.message}"))

    def generic_visit(self, node):
        what = CONSTRUCT_NAMES.get(type(node).__name__, type(node).__name__)
        self.src.abort(node, f"unsupported construct: {what}")

    def visit_Pass(self, node):
        pass

    def visit_Assign(self, node: ast.Assign):
        if len(node.targets) != 1:
            self.src.abort(node.targets[1], "chained assignment is not supported", hint="assign one name per statement")
        target = node.targets[0]
        if not isinstance(target, ast.Name):
            what = CONSTRUCT_NAMES.get(type(target).__name__, type(target).__name__)
            self.src.abort(target, f"unsupported assignment target: {what}", hint="assign to a plain name")
        self.assign(target, node.value)

    def visit_AnnAssign(self, node: ast.AnnAssign):
        if not isinstance(node.target, ast.Name):
            self.src.abort(node.target, "unsupported assignment target", hint="assign to a plain name")
        name = node.target.id
        ty = self.scan.dtype(node.annotation)
        if ty is None:
            self.src.abort(node.annotation, f"variable '{name}' must be annotated nl.u32 or nl.u64")
        if self.types.get(name) != ty:
            self.src.abort(node.annotation, f"wrong types: '{name}' is {self.types.get(name)} elsewhere in this file, not {ty}")
        if node.value is not None:
            self.assign(node.target, node.value)

    def visit_AugAssign(self, node: ast.AugAssign):
        if not isinstance(node.target, ast.Name):
            self.src.abort(node.target, "unsupported assignment target", hint="assign to a plain name")
        if type(node.op) not in BINOPS:
            self.src.abort(node, f"unsupported operator '{_op_text(node.op)}='")
        load = ast.copy_location(ast.Name(node.target.id, ast.Load()), node.target)
        value = ast.copy_location(ast.BinOp(load, node.op, node.value), node)
        self.assign(node.target, value)

    def assign(self, target: ast.Name, value) -> None:
        name = target.id
        self.check_assignable(target)
        reg = self.user_reg(name)
        op = self.value(value, hint=reg.type, dst=reg)
        if op == reg:
            return
        if op.type == U64 and reg.type == U32:
            self.src.abort(value, f"wrong types: cannot assign a u64 value to u32 variable '{name}'",
                           hint="convert explicitly: nl.u32(...)")
        self.move(reg, op, value)

    def check_assignable(self, target: ast.Name) -> None:
        name = target.id
        if name in self.scan.constants:
            self.src.abort(target, f"cannot assign to constant '{name}'")
        if name in self.scan.maps or name in self.scan.aliases:
            self.src.abort(target, f"cannot assign to '{name}': it names a {'map' if name in self.scan.maps else 'module'}")

    def move(self, dst: Reg, op, node) -> None:
        """dst = op, converting (zero-extending or truncating) as needed."""
        op = self.coerce(op, dst.type, node, truncate=True, dst=dst)
        if op != dst:
            self.emit(Instr("mov", dst.type, dst, (op,)))

    def visit_If(self, node: ast.If):
        cond = self.condition(node.test)
        if isinstance(cond, bool):
            live, dead = (node.body, node.orelse) if cond else (node.orelse, node.body)
            self.statements(live)
            self.dead += 1
            try:
                self.statements(dead)
            finally:
                self.dead -= 1
            return
        outer = self.guard
        self.guard = self.combine(outer, Guard(cond))
        self.statements(node.body)
        if node.orelse:
            self.node = node
            self.guard = self.combine(outer, Guard(cond, negated=True))
            self.statements(node.orelse)
        self.guard = outer

    def combine(self, outer: Optional[Guard], inner: Guard) -> Guard:
        """The guard of a branch nested under `outer`: outer AND inner, computed unguarded."""
        if outer is None:
            return inner
        regs = []
        for g in (outer, inner):
            if g.negated:
                regs.append(self.negation(g.reg))
            else:
                regs.append(g.reg)
        t = self.temp(PRED)
        self.emit(Instr("pand", PRED, t, tuple(regs)), guarded=False)
        return Guard(t)

    def negation(self, pred: Reg) -> Reg:
        """`not pred`, computed once per predicate (temporaries are assigned once)."""
        if pred not in self.negations:
            t = self.temp(PRED)
            self.emit(Instr("pnot", PRED, t, (pred,)), guarded=False)
            self.negations[pred] = t
        return self.negations[pred]

    def visit_For(self, node: ast.For):
        lower_for(self, node, _fold_constant, _Const)

    def visit_While(self, node: ast.While):
        lower_while(self, node, _fold_constant)

    def visit_Expr(self, node: ast.Expr):
        call = node.value
        if isinstance(call, ast.Constant) and isinstance(call.value, str):
            return  # a string statement is a comment
        if not isinstance(call, ast.Call):
            self.src.abort(node, "expression statement has no effect", hint="assign it to a variable or save it")
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr in MAP_METHODS and isinstance(func.value, ast.Name) \
                and func.value.id not in self.scan.aliases:
            self.map_save(call, func.value, func.attr)
            return
        helper = self.scan.resolve_helper(func)
        if helper == "save":
            self.short_save(call)
            return
        if helper is not None:
            self.src.abort(call, f"the result of '{ast.unparse(func)}()' is not used")
        self.src.abort(call, f"unknown function '{ast.unparse(func)}'", hint="probe bodies can only call neutrino.language helpers and MAP.save(...)")

    # ---- saves
    def map_save(self, call: ast.Call, map_node: ast.Name, method: str = "save") -> None:
        """MAP.save(...) (array, sum), MAP.add(...) (sum), MAP.record(v) (hist): one SAVE."""
        name = map_node.id
        m = self.scan.maps.get(name)
        if m is None:
            self.src.abort(map_node, f"unknown map '{name}'", hint="declare it with @Map(...) class " + name + ": ...")
        if method not in MAP_METHODS_OF[m.type]:
            self.src.abort(call.func, f"{m.type} map '{name}' has no {method}()",
                           hint=f"use {' or '.join(f'{name}.{x}(...)' for x in MAP_METHODS_OF[m.type])}")
        args = list(call.args)
        if call.keywords and method == "add" and not call.args:
            args = self.keyword_values(call, m)
        elif call.keywords:
            self.src.abort(call.keywords[0], f"{name}.{method}() takes positional values only")
        fields = ", ".join(f"{n}:{t}" for n, t in m.fields)
        if len(args) != len(m.fields):
            self.src.abort(call, f"{method} of map '{name}' needs {len(m.fields)} values ({fields}), got {len(args)}")
        if m.level != self.decl.level:
            self.src.abort(call, f"probe '{self.decl.name}' has level {self.decl.level} but map '{name}' has level {m.level}",
                           hint="a probe saves only into maps of its own level")
        ops = []
        for arg, (_, ty) in zip(args, m.fields):
            if isinstance(arg, ast.Starred):
                self.src.abort(arg, "starred arguments are not supported")
            op = self.coerce(self.value(arg, hint=ty), ty, arg, truncate=True)
            ops.append(self.materialize(op))
        self.emit(Instr("save", srcs=tuple(ops), map=name))

    def keyword_values(self, call: ast.Call, m: MapIR) -> list:
        """MAP.add(field=value, ...): the named counters get the values, the others 0."""
        names = [n for n, _ in m.fields]
        given = {}
        for k in call.keywords:
            if k.arg not in names:
                self.src.abort(k, f"map '{m.name}' has no field '{k.arg}'", hint="fields: " + ", ".join(names))
            given[k.arg] = k.value
        return [given.get(n, ast.copy_location(ast.Constant(0), call)) for n in names]

    def short_save(self, call: ast.Call) -> None:
        dtype = None
        for k in call.keywords:
            if k.arg != "dtype":
                self.src.abort(k, f"unknown argument '{k.arg}' to nl.save", hint="nl.save(value or (values, ...), dtype=nl.u64)")
            dtype = self.scan.dtype(k.value)
            if dtype is None:
                self.src.abort(k.value, "dtype must be nl.u32 or nl.u64")
        if len(call.args) != 1:
            self.src.abort(call, "nl.save takes one value or a tuple of values", hint="nl.save((a, b), dtype=nl.u32)")
        arg = call.args[0]
        items = arg.elts if isinstance(arg, ast.Tuple) else [arg]
        if not items:
            self.src.abort(arg, "nothing to save")
        if self.short_seen and self.short_guard != self.guard:
            self.src.abort(call, "all nl.save calls of a probe must run under the same condition",
                           hint="they build one record; use a @Map class and MAP.save(...) for separate records")
        self.short_guard = self.guard
        for item in items:
            op = self.value(item, hint=dtype)
            ty = dtype or op.type or U64
            op = self.coerce(op, ty, item, truncate=True)
            last = self.short_seen + 1 == self.short_total
            if not (isinstance(op, Reg) and (op.temp or last)):
                # a register holding the value as it is at this call (SAVE comes at the last one)
                snap = self.temp(ty)
                self.emit(Instr("mov", ty, snap, (op,)))
                op = snap
            field = self.field_name(item)
            self.src.check_name(item, "field", field, FIELD_NAME_BYTES, hint="the field is named after the value saved")
            self.short_fields.append((field, ty))
            self.short_regs.append(op)
        self.short_seen += 1
        if self.short_seen == self.short_total:
            self.finish_short_map(call)

    def field_name(self, node) -> str:
        if isinstance(node, ast.Name):
            base = node.id
        else:
            target = node.func if isinstance(node, ast.Call) else node
            h = self.scan.resolve(target)
            base = h[5:] if h and h.startswith("lang:") and h[5:] not in DTYPES else "value"
            if h and h[5:] in DTYPES and isinstance(node, ast.Call) and node.args:
                return self.field_name(node.args[0])
        return self.short_names.claim(base)

    def finish_short_map(self, call) -> None:
        d = self.decl
        self.src.check_name(d.node, "map", d.name, MAP_NAME_BYTES, hint="nl.save in a probe implies a map named after it")
        if d.name in self.scan.maps:
            self.src.abort(call, f"nl.save in probe '{d.name}' implies a map '{d.name}', but a @Map class of that name exists",
                           hint=f"use {d.name}.save(...) or rename the probe")
        if d.size is not None:
            check_size(self.src, (d.size, d.size_node), self.short_fields)
        self.implied_maps[d.name] = MapIR(d.name, d.level, d.cap, list(self.short_fields), self.src.location(d.node))
        ins = Instr("save", srcs=tuple(self.short_regs), map=d.name)
        self.emit(ins)

    # ---- values
    def value(self, node, hint: Optional[str] = None, dst: Optional[Reg] = None):
        """Lower an expression; returns Reg, Field or Imm (Imm.type None = a
        constant whose type the context decides, kept as a Python int)."""
        method = getattr(self, "value_" + type(node).__name__, None)
        if method is None:
            what = CONSTRUCT_NAMES.get(type(node).__name__, type(node).__name__)
            if isinstance(node, (ast.Compare, ast.BoolOp)) or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)):
                self.src.abort(node, "wrong types: a condition is not a value",
                               hint="use it in an if statement, or write `1 if cond else 0`")
            self.src.abort(node, f"unsupported construct: {what}")
        return method(node, hint, dst)

    def value_Constant(self, node, hint, dst):
        v = node.value
        if isinstance(v, bool) or not isinstance(v, int):
            self.src.abort(node, f"unsupported constant {v!r}: only integers")
        return _Const(_reduce(v))

    def value_Name(self, node, hint, dst):
        name = node.id
        if name in self.loops.names:
            return self.loops.names[name]
        if name in self.scan.constants:
            return _Const(self.scan.constants[name])
        if name in self.types and name in self.assigned:
            return self.user_reg(name)
        if name in self.scan.maps:
            self.src.abort(node, f"map '{name}' is not a value", hint=f"save into it: {name}.save(...)")
        helper = self.scan.resolve_helper(node)
        if helper is not None:
            return self.helper_value(node, helper)
        if name in self.types:
            self.src.abort(node, f"undefined variable '{name}': it is never assigned",
                           hint=f"declare it at module level with an initial value: {name}: nl.u64 = 0")
        self.src.abort(node, f"undefined variable '{name}'")

    def value_Attribute(self, node, hint, dst):
        helper = self.scan.resolve_helper(node)
        if helper is None:
            self.src.abort(node, f"unknown name '{ast.unparse(node)}'")
        return self.helper_value(node, helper, dst)

    def helper_value(self, node, helper: str, dst=None):
        if helper in FIELD_HELPERS:
            return self.field(node, helper)
        if helper in VALUE_HELPERS:  # `nl.clock` written without the call: the same value as nl.clock()
            return self.read_register_helper(helper, dst)
        if helper in DTYPES:
            self.src.abort(node, f"'{ast.unparse(node)}' is a conversion: call it on a value, {ast.unparse(node)}(x)")
        self.src.abort(node, f"'{ast.unparse(node)}' is not a value",
                       hint=f"values: {', '.join(f'nl.{h}' for h in {**VALUE_HELPERS, **FIELD_HELPERS})}")

    def read_register_helper(self, helper: str, dst):
        op, ty = VALUE_HELPERS[helper]
        out = dst if dst is not None and dst.type == ty else self.temp(ty)
        self.emit(Instr(op, ty, out))
        return out

    def field(self, node, helper: str) -> Field:
        fname, ty = FIELD_HELPERS[helper]
        text = ast.unparse(node)
        if self.decl.position == "kernel":
            self.src.abort(node, f"{text} is not available at pos=\"kernel\"",
                           hint="field helpers describe the matched instruction; use an instruction position such as pos=\"ld.global\"")
        if fname == "OUT" and self.decl.when != "after":
            self.src.abort(node, f"{text} is only available after the instruction", hint="use after=True")
        return Field(fname, ty)

    def value_Call(self, node: ast.Call, hint, dst):
        helper = self.scan.resolve_helper(node.func)
        if helper is None:
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in MAP_METHODS:
                self.src.abort(node, f"{func.attr}(...) is a statement, not a value")
            self.src.abort(node, f"unknown function '{ast.unparse(func)}'",
                           hint="probe bodies can only call neutrino.language helpers and MAP.save(...)")
        text = ast.unparse(node.func)
        if helper in VALUE_HELPERS or helper in FIELD_HELPERS:
            if node.args or node.keywords:
                self.src.abort(node, f"{text}() takes no arguments", hint=f"write {text}() or {text}: both read the same value")
            if helper in FIELD_HELPERS:  # `nl.addr()`: the same value as nl.addr
                return self.field(node.func, helper)
            return self.read_register_helper(helper, dst)
        if helper in DTYPES:
            ty = DTYPES[helper]
            if len(node.args) != 1 or node.keywords:
                self.src.abort(node, f"{text}(x) takes one value")
            arg = node.args[0]
            op = self.value(arg, hint=ty)
            if isinstance(op, _Const):
                return Imm(op.value & _mask(ty), ty)  # an explicit conversion truncates
            return self.coerce(op, ty, arg, truncate=True, dst=dst)
        if helper == "save":
            self.src.abort(node, "nl.save(...) is a statement, not a value")
        self.src.abort(node, f"'{text}' cannot be called here",
                       hint="calls: nl.clock(), nl.time(), nl.cuid(), nl.smid(), nl.laneid(), nl.u32(x), nl.u64(x), "
                            "MAP.save(...)")

    def value_UnaryOp(self, node: ast.UnaryOp, hint, dst):
        if isinstance(node.op, ast.UAdd):
            return self.value(node.operand, hint, dst)
        if isinstance(node.op, ast.Not):
            self.src.abort(node, "wrong types: a condition is not a value", hint="use it in an if statement")
        op = self.value(node.operand, hint)
        name = "neg" if isinstance(node.op, ast.USub) else "not"
        c = _const_of(op)
        if c is not None:
            v = _reduce(-c[0] if name == "neg" else ~c[0])
            return _Const(v) if c[1] is None else Imm(v & _mask(c[1]), c[1])
        ty = op.type
        out = dst if dst is not None and dst.type == ty else self.temp(ty)
        self.emit(Instr(name, ty, out, (op,)))
        return out

    def value_BinOp(self, node: ast.BinOp, hint, dst):
        if type(node.op) not in BINOPS:
            self.src.abort(node, f"unsupported operator '{_op_text(node.op)}'")
        name = BINOPS[type(node.op)]
        shift = name in ("shl", "shr")
        a = self.value(node.left, hint)
        b = self.value(node.right, None if shift else hint)
        ca, cb = _const_of(a), _const_of(b)
        if ca is not None and cb is not None:
            ty = ca[1] if shift else _join(ca[1], cb[1])
            res = _fold_binop(name, ca[0], cb[0], ty or hint or U64)
            if res is None:
                self.src.abort(node.right, "division by zero")
            return _Const(res) if ty is None else Imm(res & _mask(ty), ty)
        if name in ("div", "rem") and cb is not None and cb[0] == 0:
            self.src.abort(node.right, "division by zero")
        if shift:
            ty = _type(a) or hint or U64
            b = self.coerce(b, U32, node.right, truncate=True)
        else:
            ty = _join(_type(a), _type(b)) or hint or U64
            b = self.coerce(b, ty, node.right)
        a = self.coerce(a, ty, node.left)
        out = dst if dst is not None and dst.type == ty else self.temp(ty)
        self.emit(Instr(name, ty, out, (a, b)))
        return out

    def value_IfExp(self, node: ast.IfExp, hint, dst):
        cond = self.condition(node.test)
        if isinstance(cond, bool):
            return self.value(node.body if cond else node.orelse, hint, dst)
        a = self.value(node.body, hint)
        b = self.value(node.orelse, hint)
        ty = _join(_type(a), _type(b)) or hint or U64
        a = self.coerce(a, ty, node.body)
        b = self.coerce(b, ty, node.orelse)
        out = dst if dst is not None and dst.type == ty else self.temp(ty)
        self.emit(Instr("selp", ty, out, (a, b, cond)))
        return out

    def coerce(self, op, ty: str, node, truncate: bool = False, dst: Optional[Reg] = None):
        """`op` as a value of type `ty`: constants take the type, narrower
        values are zero-extended; wider ones are truncated only when
        `truncate` (explicit conversions and saves)."""
        if isinstance(op, _Const):
            return Imm(_fit(self.src, node, op.value, ty), ty)
        if op.type == ty:
            return op
        if op.type == U64 and ty == U32 and not truncate:
            self.src.abort(node, "wrong types: u64 value where u32 is needed", hint="convert explicitly: nl.u32(...)")
        if isinstance(op, Imm):
            return Imm(op.value & _mask(ty), ty)
        out = dst if dst is not None and dst.type == ty else self.temp(ty)
        self.emit(Instr("cvt", ty, out, (op,), src_type=op.type))
        return out

    def materialize(self, op):
        """A register holding `op` (SAVE operands are registers)."""
        if isinstance(op, Reg):
            return op
        t = self.temp(op.type)
        self.emit(Instr("mov", op.type, t, (op,)))
        return t

    # ---- conditions
    def condition(self, node):
        """Lower a condition, unguarded (predicates must always be defined);
        returns a pred Reg, or a Python bool when it is constant."""
        saved = self.guard
        self.guard = None
        try:
            return self._condition(node)
        finally:
            self.guard = saved

    def _condition(self, node):
        if isinstance(node, ast.Compare):
            return self.compare(node)
        if isinstance(node, ast.BoolOp):
            parts = []
            is_and = isinstance(node.op, ast.And)
            for v in node.values:
                c = self._condition(v)
                if isinstance(c, bool):
                    if c != is_and:  # False in `and`, True in `or` decides
                        return c
                    continue
                parts.append(c)
            if not parts:
                return is_and
            acc = parts[0]
            for p in parts[1:]:
                t = self.temp(PRED)
                self.emit(Instr("pand" if is_and else "por", PRED, t, (acc, p)), guarded=False)
                acc = t
            return acc
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            c = self._condition(node.operand)
            if isinstance(c, bool):
                return not c
            t = self.temp(PRED)
            self.emit(Instr("pnot", PRED, t, (c,)), guarded=False)
            return t
        if isinstance(node, ast.Constant) and isinstance(node.value, bool):
            return node.value
        op = self.value(node)  # truthiness: x != 0
        return self.setp("ne", op, _Const(0), node)

    def compare(self, node: ast.Compare):
        result = True
        left = self.value(node.left)
        for cmp_op, right_node in zip(node.ops, node.comparators):
            if type(cmp_op) not in CMPOPS:
                self.src.abort(node, f"unsupported comparison '{_op_text(cmp_op)}'")
            right = self.value(right_node)
            c = self.setp(CMPOPS[type(cmp_op)], left, right, node)
            left = right
            if c is False:
                return False
            if c is True:
                continue
            if result is True:
                result = c
            else:
                t = self.temp(PRED)
                self.emit(Instr("pand", PRED, t, (result, c)), guarded=False)
                result = t
        return result

    def setp(self, cmp: str, a, b, node):
        ca, cb = _const_of(a), _const_of(b)
        if ca is not None and cb is not None:
            return CMP_FOLD[cmp](ca[0] & MASK64, cb[0] & MASK64)
        ty = _join(_type(a), _type(b)) or U64
        a = self.coerce(a, ty, node)
        b = self.coerce(b, ty, node)
        t = self.temp(PRED)
        self.emit(Instr("setp", ty, t, (a, b), cmp=cmp), guarded=False)
        return t


class _Const:
    """A constant whose type the context decides (Python int in [-2**63, 2**64))."""

    __slots__ = ("value",)
    type = None

    def __init__(self, value: int):
        self.value = value

    def __eq__(self, other):
        return isinstance(other, _Const) and other.value == self.value

    def __hash__(self):
        return hash(self.value)


def _const_of(op):
    """(value, type or None) when `op` is a constant, else None."""
    if isinstance(op, _Const):
        return op.value, None
    if isinstance(op, Imm):
        return op.value, op.type
    return None


def _mask(ty: str) -> int:
    return (1 << BITS[ty]) - 1


def _type(op) -> Optional[str]:
    return op.type


def _op_text(op) -> str:
    return {ast.Pow: "**", ast.MatMult: "@", ast.Is: "is", ast.IsNot: "is not", ast.In: "in",
            ast.NotIn: "not in"}.get(type(op), type(op).__name__)


# ------------------------------------------------------------------ entry point


def lower_module(text: str, filename: str) -> tuple[Optional[ModuleIR], list[Diagnostic]]:
    """Source text -> (ModuleIR, diagnostics). The module is None when there are errors."""
    src = _Source(text, filename)
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
    too_deep = _first_too_deep(tree)
    if too_deep is not None:
        return None, [Diagnostic(src.location(too_deep), f"expression nested too deeply (more than {MAX_NESTING} levels)",
                                 hint="split it into several assignments")]
    scan = _ModuleScan(src, diags)
    scan.run(tree)
    if not scan.probes and not diags:
        diags.append(Diagnostic(Location(filename, 1, 1, src.lines[0] if src.lines else ""),
                                "the file defines no probe", hint="decorate a function with @probe(pos=..., level=...)"))
    types, assigned = _infer_types(scan)
    implied: dict[str, MapIR] = {}
    probes = []
    for decl in scan.probes:
        lowering = _ProbeLowering(scan, decl, types, assigned, diags, implied)
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

"""Frontend, phase 1: the module scan. The language's vocabulary (what `neutrino.language` offers,
the names a register must not take), the source text with its diagnostics, and `ModuleScan`: the
top level of a probe file (imports, registers, constants, `@Map` classes, `@probe` functions;
everything else refused), with the constant folding it and the lowering share."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from typing import Optional

from neutrino.errors import Diagnostic, Location
from neutrino.probefile import FIELD_NAME_BYTES, MAP_NAME_BYTES, name_problem
from neutrino.maps import Buckets
from neutrino.language.ir import BITS, U32, U64, MapIR, record_bytes

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




# Expressions nested deeper than this are refused, located, before lowering (which recurses
# once per level). Probes nest a handful of levels; Python's own parser fails in the thousands.
MAX_NESTING = 100


def first_too_deep(tree: ast.AST) -> ast.AST | None:
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


class Source:
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


class ProbeDecl:
    def __init__(self, name, node, position, level, when, size, cap, size_node):
        self.name, self.node, self.position, self.level = name, node, position, level
        self.when, self.size, self.cap, self.size_node = when, size, cap, size_node


class ModuleScan:
    """Top-level statements of the file."""

    def __init__(self, src: Source, diags: list):
        self.src = src
        self.diags = diags
        self.aliases: dict[str, str] = {}  # local name -> "lang" | "neutrino" | "lang:<name>" | "foreign"
        self.registers: dict[str, tuple[str, int, ast.AST]] = {}  # name -> (type, init, node)
        self.constants: dict[str, int] = {}
        self.maps: dict[str, MapIR] = {}
        self.map_nodes: dict[str, ast.AST] = {}
        self.probes: list[ProbeDecl] = []
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
            init = fit(self.src, stmt.value, init, ty)
        self._define(name, stmt)
        self.registers[name] = (ty, init, stmt)

    def const_int(self, node, what: str) -> int:
        value = fold_constant(node, self.constants)
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
        value = fold_constant(v, self.constants)
        if value is None:
            self.src.abort(v, f"module-level '{name}' must be an integer constant",
                           hint=f"declare a register with a type instead: {name}: nl.u64 = 0")
        self._define(name, stmt)
        self.constants[name] = value

    # ---- @Map classes
    def map_class(self, cls: ast.ClassDef) -> None:
        call = self.single_decorator(cls, "Map")
        self.src.check_name(cls, "map", cls.name, MAP_NAME_BYTES)
        kw = self.decorator_args(call, ("level", "type", "size", "cap", "buckets", "stage"), ())
        level = self.level(kw.get("level"), call)
        kind, kind_node = kw.get("type", ("array", call))
        if kind not in ("array", "sum", "hist"):
            self.src.abort(kind_node, f"bad map type {kind!r}: expected \"array\", \"sum\" or \"hist\"")
        if kind != "array":
            self.aggregate_map_class(cls, call, kw, kind, level)
            return
        if "buckets" in kw:
            self.src.abort(kw["buckets"][1], "buckets= is for type=\"hist\" maps")
        if "stage" in kw:
            self.src.abort(kw["stage"][1], "stage= is for type=\"sum\" and type=\"hist\" maps")
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
        stage, stage_node = kw.get("stage", (None, call))
        if stage is not None and stage != "block":
            self.src.abort(stage_node, f"stage={stage!r}: the one stage is \"block\" (counters summed per block in shared memory)")
        self._define(cls.name, cls)
        self.maps[cls.name] = MapIR(cls.name, level, 1, fields, self.src.location(cls), kind, buckets, stage)
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
        self.probes.append(ProbeDecl(fn.name, fn, pos, level, when, size, cap, size_node))

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
        value = fold_constant(node, self.constants)
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


def check_size(src: Source, size_arg, fields) -> None:
    size, node = size_arg
    want = record_bytes(fields)
    if isinstance(size, bool) or not isinstance(size, int) or size != want:
        layout = ", ".join(f"{n}:{t}" for n, t in fields)
        src.abort(node, f"size={size!r} does not match the record layout ({layout}: {want} bytes)")


def _is_main_guard(test) -> bool:
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__")


def fold_constant(node, constants: dict) -> Optional[int]:
    """Value of an integer constant expression (constants, named constants,
    arithmetic on them), or None."""
    if isinstance(node, ast.Constant):
        v = node.value
        return v if isinstance(v, int) and not isinstance(v, bool) else None
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Invert)):
        v = fold_constant(node.operand, constants)
        if v is None:
            return None
        return wrap_constant(-v if isinstance(node.op, ast.USub) else (~v if isinstance(node.op, ast.Invert) else v))
    if isinstance(node, ast.BinOp) and type(node.op) in BINOPS:
        a = fold_constant(node.left, constants)
        b = fold_constant(node.right, constants)
        if a is None or b is None:
            return None
        return fold_binop(BINOPS[type(node.op)], a, b, U64)
    return None


def wrap_constant(v: int) -> int:
    """Keep a folded constant in [-2**63, 2**64); wrap anything else to 64 bits."""
    if -(1 << 63) <= v < (1 << 64):
        return v
    return v & MASK64


def fold_binop(op: str, a: int, b: int, ty: str) -> Optional[int]:
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
        return wrap_constant((a << b) & mask) if b < 64 else 0
    res = {"add": a + b, "sub": a - b, "mul": a * b, "and": a & b, "or": a | b, "xor": a ^ b}[op]
    return wrap_constant(res)


def fit(src: Source, node, value: int, ty: str) -> int:
    bits = BITS[ty]
    if value >= (1 << bits) or value < -(1 << (bits - 1)):
        src.abort(node, f"constant {value} does not fit in {ty}")
    return value & ((1 << bits) - 1)

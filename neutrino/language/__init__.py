"""The Neutrino probe language: probes written in Python, compiled (never run).

    from neutrino import probe, Map
    import neutrino.language as nl

    @Map(level="warp", type="array", size=16, cap=1)
    class block_sched:
        start: nl.u64
        elapsed: nl.u32
        cuid: nl.u32

    start: nl.u64 = 0

    @probe(pos="kernel", level="warp", before=True)
    def thread_start():
        start = nl.clock()

    @probe(pos="kernel", level="warp")
    def thread_end():
        block_sched.save(start, nl.clock() - start, nl.cuid())

Probe bodies may loop a number of times known at compile time, `for i in
range(N)` or a counted `while` (spec/ir.md, "Loops"; neutrino/language/loops.py).

`compile_file(path)` reads such a file with `ast` and returns the explicit TOML
form of spec/probe-toml.md. The names below exist so that the file imports and
lints as ordinary Python: the decorators return what they decorate, the
helpers refuse to run outside a compiled probe body.
"""

from __future__ import annotations

from neutrino.language.compiler import compile_file, compile_source, compile_to_ir
from neutrino.language.errors import DslError

__all__ = [
    "probe", "Map", "save", "clock", "time", "cuid", "smid", "laneid", "u32", "u64",
    "addr", "bytes", "out", "in1", "in2", "in3", "line", "block",
    "compile_file", "compile_source", "compile_to_ir", "DslError",
]


class _DType:
    def __init__(self, name: str, bits: int):
        self.name, self.bits = name, bits

    def __call__(self, value):
        """Explicit conversion; in Python, the value reduced to this width."""
        return int(value) & ((1 << self.bits) - 1)

    def __repr__(self) -> str:
        return f"nl.{self.name}"


u32 = _DType("u32", 32)
u64 = _DType("u64", 64)


def _compiled_only(name: str):
    def helper(*args, **kwargs):
        raise RuntimeError(f"neutrino.language.{name}() only has a meaning inside a probe body, "
                           "which Neutrino compiles instead of running")

    helper.__name__ = name
    return helper


clock = _compiled_only("clock")
time = _compiled_only("time")
cuid = _compiled_only("cuid")
laneid = _compiled_only("laneid")
smid = _compiled_only("smid")
save = _compiled_only("save")


class _FieldHelper:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"nl.{self.name}"


addr = _FieldHelper("addr")
bytes = _FieldHelper("bytes")  # noqa: A001 - the DSL's name for the BYTES field
out = _FieldHelper("out")
in1 = _FieldHelper("in1")
in2 = _FieldHelper("in2")
in3 = _FieldHelper("in3")
line = _FieldHelper("line")  # the LINE helper: index of the site's source line (neutrino/isa/ptx/lines.py)
block = _FieldHelper("block")  # the BLOCK helper: index of the site's basic block


def probe(pos=None, level="thread", before=None, after=None, size=None, cap=None, position=None):
    """Marks a probe function; returns it unchanged (see module docstring)."""
    if callable(pos) and level == "thread" and before is None and after is None:
        return pos  # used bare, @probe: the compiler reports the missing arguments

    def mark(fn):
        fn.__neutrino_probe__ = dict(pos=pos or position, level=level, before=before, after=after,
                                     size=size, cap=cap)
        return fn

    return mark


def Map(level="thread", type="array", size=None, cap=1, buckets=None, stage=None):  # noqa: N802 - the DSL's spelling
    """Marks a map class; returns it with placeholders for what probes call on it.

    type="array": records per unit, `MAP.save(values...)`; type="sum": u64
    counters per launch, `MAP.add(values...)` (or `MAP.add(field=value)`, or
    `MAP.save(...)`, the same); type="hist": buckets per launch ("log2" or
    "linear:MIN:MAX:STEP"), `MAP.record(value)`. stage="block" (sum and hist):
    summed per block in shared memory, then added to one global row.
    """

    def mark(cls):
        cls.__neutrino_map__ = dict(level=level, type=type, size=size, cap=cap, buckets=buckets, stage=stage)
        for method in ("save", "add", "record"):
            setattr(cls, method, staticmethod(_compiled_only(f"{cls.__name__}.{method}")))
        return cls

    return mark

"""Mutation fuzzing of Neutrino's inputs: the machinery shared by tests/test_fuzz.py and tests/fuzz_campaign.py.

Seeds are the project's own files (built-in probes and tools, tests/data probes,
PTX corpora) and small trace directories written with `neutrino.trace`. A case
is a seed and a few mutations (byte flips, truncation, line duplication and
splicing, token repetition, deep nesting, TOML/JSON value type swaps); it runs
through a real entry point (`neutrino instrument`, `report`, `export`,
`neutrino.trace.load`) in-process under a time limit and is classified:

    ok          accepted (for `instrument`: the probed PTX is kept for ptxas)
    refused     a non-zero exit with our own message
    traceback   an exception escaped the entry point
    unlocated   refused, but by a catch-all (internal compiler error, RecursionError, MemoryError)
    hang        the time limit ran out

Mutations are plain tuples so that hypothesis can draw and shrink them.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import os
import shutil
import signal
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import attrs
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
PACKAGE = ROOT / "neutrino"

CASE_SECONDS = float(os.environ.get("NEUTRINO_FUZZ_CASE_SECONDS", "5"))
# Mutations compound (a line of 3,000 tokens repeated 3,000 times): an input of megabytes may take
# its time, linearly. Each case gets CASE_SECONDS plus one second per BYTES_PER_SECOND of input.
BYTES_PER_SECOND = 50_000
# `report` draws its matplotlib figures in-process (a second or more on a loaded 2-core machine): a hang
# is still caught, well inside the 20 s issue 30 allows a corrupted trace.
PLOT_REPORT_SECONDS = 15.0
PTXAS_SECONDS = 120  # ptxas itself may take many minutes on a huge mutated module: not our bug


def case_seconds(size: int) -> float:
    return CASE_SECONDS + size / BYTES_PER_SECOND
UNLOCATED_MARKERS = ("internal compiler error", "(RecursionError)", "(MemoryError)", "Traceback (most recent call last)")


# ---------------------------------------------------------------- seeds


def _texts(paths) -> list[tuple[str, str]]:
    return [(p.name, p.read_text()) for p in sorted(paths)]


def toml_seeds() -> list[tuple[str, str]]:
    """Every TOML probe file of the project, and the TOML the DSL tools compile to."""
    from neutrino.language import compile_file

    files = [*PACKAGE.glob("probes/*.toml"), *DATA.glob("probes/*.toml"), *DATA.glob("realworld/probes/*.toml")]
    compiled = [(p.parent.name + ".toml", compile_file(p)) for p in sorted(PACKAGE.glob("tools/*/probe.py"))]
    return _texts(files) + compiled


def dsl_seeds() -> list[tuple[str, str]]:
    return _texts([*PACKAGE.glob("tools/*/probe.py"), *PACKAGE.glob("probes/*.py")])


def ptx_seeds(max_bytes: int | None = 12000) -> list[tuple[str, str]]:
    """The small PTX files of the corpora (the mutations, not the size, find the bugs); every one with None."""
    files = [p for p in DATA.rglob("*.ptx") if max_bytes is None or p.stat().st_size <= max_bytes]
    return [(str(p.relative_to(DATA)), p.read_text()) for p in sorted(files)]


# Kernels the probe fuzzers instrument, and probes the PTX fuzzer uses.
TARGET_PTX = [DATA / "corpus/nvcc/vec.sm90.ptx", DATA / "corpus/nvcc/histogram.sm80.ptx",
              DATA / "corpus/llvm/scale_kernel.sm90.ptx", DATA / "corpus/triton/vadd.sm90a.ptx"]
PTX_PROBES = ["block_sched", "gmem_bytes", "gmem_bytes_thread", str(DATA / "probes/mem_trace.toml"),
              str(DATA / "probes/out_value.toml"), str(DATA / "probes/in_operands.toml"), str(DATA / "probes/agg_explicit.toml")]


# ---------------------------------------------------------------- mutations

# (operation, where: 0..1, other: 0..1, count, donor index)
TEXT_OPS = ("flip", "truncate", "delete_lines", "dup_line", "swap_lines", "splice_line", "splice_token",
            "repeat_token", "nest", "insert")
TOML_OPS = TEXT_OPS + ("type_swap", "type_swap")
BYTE_OPS = ("byte_flip", "byte_truncate", "byte_dup", "byte_zero", "word_set")
JSON_OPS = TEXT_OPS + ("json_swap", "json_swap", "json_drop")

FLIP_CHARS = list('{}[]()";,.%=:\n\t\\\'#@!-+0xX9_$/* ') + ["\x00", "\x0c", "\u00e9", "\u2028", "\ufffd", "\x1b", "\r"]
INSERTS = ["{", "}", ";", "\n", "[p]\n", "[probe.p]\n", "[map.m]\n", '"""', "'''", "SAVE.u32 {%r};", "SAVE [ m ] {%r};",
           ".reg .u32 %r;", "@%p ", "bra L;", "L:", "{ }", ".entry k() { ret; }", "// c\n", "/* ", "*/", "IN1", "OUT",
           "ADDR", "BYTES", "%clock64", "%tid.x", "0x", "0f3F800000", "99999999999999999999", "-", "::", "nl.clock()",
           "    ", "\tif x:\n", "def f():\n", "@probe(pos='kernel')\n", "lambda: ", "**", "not ", "\\", "\x00"]
TOML_VALUES = ["true", "false", "0", "-1", "1.5", "nan", "inf", "1979-05-27", "07:32:00", '"x"', '""', "[]", '["a"]',
               "[1, 2]", "[[1]]", "{}", '{a = 1}', '{position = "kernel"}', '"""\nmov.u32 %r, 1;\n"""', "'lit'",
               '"kernel"', '"ld.global:st.global"', '"warp:16"', '"thread:8:count"', '"sum"', '"hist:log2"', '"count"',
               "9223372036854775807", "-9223372036854775808", '"\\u0000"']
JSON_VALUES = [None, True, False, 0, -1, 2**31, 2**64, 1.5, float("nan"), "x", "", [], [1], [1, 2], [1, 2, 3, 4],
               [-1, 1, 1], [2**40, 1, 1], ["a", 1, 1], {}, {"a": 1}, "result/0.bin", "result/../../etc", "/abs/path"]
INTERESTING_WORDS = [0, 1, 2, 0xFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 64, 4096, 10**9]


def _at(length: int, where: float) -> int:
    return min(int(where * length), max(length - 1, 0)) if length else 0


def _tokens(text: str) -> list[str]:
    return text.split() or [text]


def mutate_text(text: str, mutation: tuple, donors: list[str]) -> str:
    op, where, other, count, donor_index = mutation
    donor = donors[donor_index % len(donors)] if donors else text
    lines = text.split("\n")
    i, j = _at(len(lines), where), _at(len(lines), other)
    pos = _at(len(text) + 1, where)
    if op == "flip" and text:
        return text[:pos] + FLIP_CHARS[count % len(FLIP_CHARS)] + text[pos + 1:]
    if op == "truncate":
        return text[:pos]
    if op == "delete_lines":
        return "\n".join(lines[:i] + lines[i + 1 + count % 5:])
    if op == "dup_line":
        return "\n".join(lines[:i] + [lines[i]] * (count + 1) + lines[i:])
    if op == "swap_lines":
        lines[i], lines[j] = lines[j], lines[i]
        return "\n".join(lines)
    if op == "splice_line":
        donor_lines = donor.split("\n")
        return "\n".join(lines[:i] + [donor_lines[_at(len(donor_lines), other)]] + lines[i:])
    if op == "splice_token":
        tokens = _tokens(donor)
        return text[:pos] + tokens[_at(len(tokens), other)] + " " + text[pos:]
    if op == "repeat_token":
        tokens = _tokens(text)
        token = tokens[_at(len(tokens), other)]
        separator = ("", " ", ", ", "+1", "\n", ";")[count % 6]
        return text[:pos] + separator.join([token] * (count + 1)) + text[pos:]
    if op == "nest":
        opening, closing = ("{}", "()", "[]", "{}")[donor_index % 4]
        inner = opening * count + (closing * count if other < 0.5 else "")
        return text[:pos] + inner + text[pos:]
    if op == "insert":
        return text[:pos] + INSERTS[count % len(INSERTS)] + text[pos:]
    if op == "type_swap":
        keyed = [k for k, line in enumerate(lines) if "=" in line and not line.lstrip().startswith("#")]
        if not keyed:
            return text
        k = keyed[_at(len(keyed), where)]
        key = lines[k].split("=", 1)[0]
        lines[k] = f"{key}= {TOML_VALUES[count % len(TOML_VALUES)]}"
        return "\n".join(lines)
    if op in ("json_swap", "json_drop"):
        return _mutate_json_line(lines, i, other, count, op == "json_drop")
    return text


def _mutate_json_line(lines: list[str], i: int, other: float, count: int, drop: bool) -> str:
    try:
        value = json.loads(lines[i])
    except ValueError:
        return "\n".join(lines)
    if isinstance(value, dict) and value:
        keys = sorted(value)
        key = keys[_at(len(keys), other)]
        if drop:
            del value[key]
        else:
            value[key] = JSON_VALUES[count % len(JSON_VALUES)]
        lines[i] = json.dumps(value)
    return "\n".join(lines)


def mutate_bytes(data: bytes, mutation: tuple) -> bytes:
    op, where, other, count, _ = mutation
    raw = bytearray(data)
    pos = _at(len(raw), where)
    if op == "byte_flip" and raw:
        raw[pos] = count % 256
    elif op == "byte_truncate":
        del raw[pos:]
    elif op == "byte_dup":
        end = pos + 1 + count % 256
        raw[pos:pos] = raw[pos:end] * (1 + count % 3)
    elif op == "byte_zero":
        raw[pos:pos + 1 + count % 64] = bytes(len(raw[pos:pos + 1 + count % 64]))
    elif op == "word_set" and len(raw) >= 4:
        at = pos // 4 * 4
        at = min(at, len(raw) - 4)
        value = INTERESTING_WORDS[count % len(INTERESTING_WORDS)] if other < 0.7 else count
        raw[at:at + 4] = (value % 2**32).to_bytes(4, "little")
    return bytes(raw)


# ---------------------------------------------------------------- running a case


class Hang(BaseException):
    """The case's time ran out (a BaseException: code under test must not catch it)."""


@contextlib.contextmanager
def time_limit(seconds: float):
    def expire(signum, frame):
        raise Hang(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@attrs.define
class Outcome:
    status: str  # ok / refused / traceback / unlocated / hang
    detail: str = ""
    stdout: str = ""


def run_entry(function, *args, seconds: float = CASE_SECONDS) -> Outcome:
    """Call an entry point with stdout/stderr captured, under a time limit, and classify what happened."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with time_limit(seconds), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = function(*args)
    except Hang as e:
        return Outcome("hang", str(e))
    except SystemExit as e:  # argparse
        rc = e.code if isinstance(e.code, int) else 2
    except Exception as e:  # noqa: BLE001 - what the fuzzer looks for
        return Outcome("traceback", "".join(traceback.format_exception(e, limit=-4)))
    message = err.getvalue()
    if any(marker in message for marker in UNLOCATED_MARKERS):
        return Outcome("unlocated", message[-2000:])
    if rc == 0:
        return Outcome("ok", message[-500:], out.getvalue())
    if not message.strip():
        return Outcome("unlocated", f"exit status {rc} without a message")
    return Outcome("refused", message[-500:])


def cli(*argv: str) -> int:
    from neutrino.cli import main

    return main(list(argv))


def run_instrument(ptx_path: Path, probe_path: str, seconds: float = CASE_SECONDS) -> Outcome:
    return run_entry(cli, "instrument", str(ptx_path), "-p", str(probe_path), seconds=seconds)


def library(function, *args) -> int:
    """A library entry point run as the CLI runs it: our errors become a message and status 1."""
    from neutrino.errors import NeutrinoError

    try:
        result = function(*args)
    except NeutrinoError as e:
        print(f"neutrino: {e}", file=sys.stderr)
        return 1
    if isinstance(result, str):
        sys.stdout.write(result)
    return 0


def instrument_files(ptx_path: Path, probe: str) -> str:
    """What `neutrino instrument PTX -p PROBE` does, without the argument parsing: the probed PTX."""
    from neutrino.engine import instrument
    from neutrino.toolbox import load_probes

    return instrument(Path(ptx_path).read_text(), load_probes(str(probe)), source=str(ptx_path)).ptx


def instrument_text(ptx: str, probe: str) -> str:
    from neutrino.engine import instrument

    return instrument(ptx, cached_probes(probe), source="kernel.ptx").ptx


@functools.lru_cache(maxsize=None)
def cached_probes(probe: str):
    """The built-in and test probes the PTX fuzzer uses, loaded once (the pipeline does not change them)."""
    from neutrino.toolbox import load_probes

    return load_probes(probe)


def instrument_probe_text(text: str, suffix: str, ptx_path: Path) -> str:
    """`instrument_files` with the probe file's text in hand (as load_probes reads it): no file written."""
    from neutrino.engine import instrument
    from neutrino.language import compile_source
    from neutrino.probefile import parse_probes

    name = f"probe{suffix}"
    toml = compile_source(text, name) if suffix == ".py" else text
    return instrument(target_text(ptx_path), parse_probes(toml, name), source=str(ptx_path)).ptx


@functools.lru_cache(maxsize=None)
def target_text(path: Path) -> str:
    return path.read_text()


def run_probe_text(text: str, suffix: str, ptx_path: Path, via_cli: bool, tmp: Path) -> Outcome:
    """A mutated probe file (.toml or .py) through `neutrino instrument`, or the functions it calls."""
    seconds = case_seconds(len(text))
    if via_cli:
        probe = tmp / f"probe{suffix}"
        probe.write_bytes(text.encode("utf-8", "surrogatepass"))
        return run_instrument(ptx_path, str(probe), seconds)
    return run_entry(library, instrument_probe_text, text, suffix, ptx_path, seconds=seconds)


def run_ptx_text(text: str, probe: str, via_cli: bool, tmp: Path) -> list[tuple[str, Outcome]]:
    """A mutated PTX module through `neutrino instrument` and `neutrino print`, or the functions they call."""
    seconds = case_seconds(len(text))
    if not via_cli:
        return [("instrument", run_entry(library, instrument_text, text, probe, seconds=seconds))]
    ptx = tmp / "kernel.ptx"
    ptx.write_bytes(text.encode("utf-8", "surrogatepass"))
    return [("instrument", run_instrument(ptx, probe, seconds)), ("print", run_entry(cli, "print", str(ptx), seconds=seconds))]


def load_trace_fully(path: Path) -> int:
    """`neutrino.trace.load` and every map of every launch read, as an analysis would; 0, or 1 on TraceError."""
    import neutrino.trace as nt
    from neutrino.errors import NeutrinoError

    try:
        trace = nt.load(path)
        for launch in trace.launches:
            try:
                for data in launch.maps.values():
                    data.valid()
                    if data.type == "sum":
                        data.totals()
                    elif data.type == "hist":
                        data.histogram().rows()
            except NeutrinoError as e:
                print(f"neutrino: {e}", file=sys.stderr)
    except NeutrinoError as e:
        print(f"neutrino: {e}", file=sys.stderr)
        return 1
    return 0


# ---------------------------------------------------------------- traces


def write_base_trace(root: Path) -> Path:
    """A small real trace: launch events with per-launch result files (block_sched, gmem_bytes, a sum and a
    hist map), and a per-kernel result file with an index (the native writer's layout)."""
    import neutrino.trace as nt

    run = root / "20260101-000000_1"
    (run / "result").mkdir(parents=True)
    from neutrino.language import compile_file

    (run / "probe.toml").write_text(compile_file(PACKAGE / "tools" / "block_sched" / "probe.py"))
    events = [{"event": "start", "time": 0, "pid": 1, "argv": ["app"]},
              {"event": "instrument", "time": 0, "kernel": "vadd", "kernel_dir": "kernel/3_abc", "sites": 1}]
    for i, (grid, block) in enumerate((((2, 1, 1), (64, 1, 1)), ((1, 1, 1), (32, 1, 1)))):
        rel = f"result/{i}.bin"
        nt.write_result(run / rel, grid=grid, block=block, shared_bytes=0, maps=_sections(grid, block, seed=i))
        events.append({"event": "launch", "time": 1, "index": i, "kernel": "vadd", "grid": list(grid),
                       "block": list(block), "shared_bytes": 0, "result": rel, "frame": "app.py:3 (main)",
                       "duration_ns": 1000.0 + i})
    records = np.zeros(2, nt.INDEX_RECORD)
    with open(run / "result" / "3_abc.ntr", "ab") as fh:
        for i in range(2):
            grid, block = (1 + i, 1, 1), (32, 1, 1)
            off, size = nt.append_frame(fh, grid=grid, block=block, shared_bytes=0, maps=_sections(grid, block, seed=5 + i))
            records[i] = (3 + i, i, 7, off, size, grid, block, 0, 3, 0, 0, 500.0, 0)
    (run / "result" / "index.bin").write_bytes(nt.INDEX_MAGIC + nt.INDEX_HEADER_TAIL + records.tobytes())
    events.append({"event": "exit", "time": 2, "launches": 4})
    (run / "event.log").write_text("".join(json.dumps(e) + "\n" for e in events))
    return run


def _sections(grid, block, seed: int) -> list:
    import neutrino.trace as nt

    rng = np.random.default_rng(seed)
    out = []
    for name, level, fields, record_bytes, cap in (
        ("block_sched", "warp", [("lstart", "u64", 0), ("elapse", "u32", 8), ("smid", "u32", 12)], 16, 1),
        ("gmem_bytes", "thread", [("bytes", "u64", 0)], 8, 2),
    ):
        units = nt.units_for(level, grid, block)
        buf = np.zeros(nt.buffer_bytes(units, cap, record_bytes), np.uint8)
        buf[: 4 * units].view("<u4")[:] = rng.integers(0, cap + 2, units)
        body = buf[nt.align(4 * units, 16):]
        body[:] = rng.integers(0, 256, body.size, dtype=np.uint8)
        out.append(nt.MapSection(name, level, record_bytes, cap, units, fields, buf.tobytes()))
    buckets = nt.Buckets.parse("log2")
    for name, record_bytes, fields, kind, spec in (
        ("counters", 16, [("a", "u64", 0), ("b", "u64", 8)], "sum", None),
        ("sizes", 8 * buckets.count, [("value", "u64", 0)], "hist", "log2"),
    ):
        size = nt.section_bytes(kind, nt.STRIPES, 1, record_bytes)
        data = rng.integers(0, 9, size // 8).astype("<u8").tobytes()
        out.append(nt.MapSection(name, "thread", record_bytes, 1, nt.STRIPES, fields, data, type=kind, buckets=spec))
    return out


TRACE_FILES = ("event.log", "result/0.bin", "result/1.bin", "result/3_abc.ntr", "result/index.bin", "probe.toml")


def report_without_plots(path: Path) -> int:
    from neutrino.analysis.report import main as report_main

    return report_main(str(path), plots=False)


def export_perfetto(path: Path, out: Path) -> int:
    from neutrino.analysis.perfetto import export

    return library(export, str(path), str(out))


def run_trace_case(base: Path, work: Path, target: str, mutations: list[tuple], via_cli: bool = True) -> list[tuple[str, Outcome]]:
    """Copy the base trace, mutate one of its files, and read it through load, report and export
    (the commands, or without the CLI's argument parsing and plots)."""
    if work.exists():
        shutil.rmtree(work)
    run = work / base.name
    shutil.copytree(base, run)
    path = run / target
    if target in ("event.log", "probe.toml"):
        text = path.read_text()
        donors = [path.read_text()]
        for m in mutations:
            text = mutate_text(text, m, donors) if m[0] not in BYTE_OPS else mutate_bytes(text.encode(), m).decode("latin-1")
        path.write_bytes(text.encode("utf-8", "surrogatepass"))
    else:
        data = path.read_bytes()
        for m in mutations:
            data = mutate_bytes(data, m) if m[0] in BYTE_OPS else mutate_text(data.decode("latin-1"), m, []).encode("latin-1", "replace")
        path.write_bytes(data)
    s = case_seconds(path.stat().st_size)
    if not via_cli:
        return [("load", run_entry(load_trace_fully, run, seconds=s)), ("report", run_entry(report_without_plots, run, seconds=s)),
                ("export", run_entry(export_perfetto, run, work / "perfetto.json", seconds=s))]
    return [
        ("load", run_entry(load_trace_fully, run, seconds=s)),
        ("report", run_entry(cli, "report", str(run), "--out", str(work / "report"), seconds=max(s, PLOT_REPORT_SECONDS))),
        ("export", run_entry(cli, "export", str(run), "--perfetto", str(work / "perfetto.json"), seconds=s)),
    ]


# ---------------------------------------------------------------- the ptxas oracle


def ptxas_rejections(pairs: list[tuple[str, str]], workers: int = 2) -> list[str]:
    """(probed PTX, original PTX) pairs: ptxas's refusals of probed modules whose original it accepts.

    Each pair is one ptxas run (two when the probed module fails: the original is
    then tried, and a failure of both is not ours); runs go in parallel.
    """
    from neutrino import ptxas
    from neutrino.isa.ptx import parse_module

    if shutil.which("ptxas") is None:
        return []
    unique = {hashlib.sha256(p.encode()).hexdigest(): (p, o) for p, o in pairs}

    def one(pair):
        probed, original = pair
        result = ptxas.check(probed, parse_module(probed), original, timeout=PTXAS_SECONDS)
        if result.ok or result.skipped:
            return None
        return result.stderr.strip()[:1500] + "\n--- probed PTX ---\n" + probed[:3000]

    with ThreadPoolExecutor(workers) as pool:
        return [r for r in pool.map(one, unique.values()) if r is not None]


# ---------------------------------------------------------------- name collisions (issue 30 §2)

# Names the engine makes or wanted to make (registers of the %nt_ family, buffer parameters, counting
# entries): a module declaring them in any symbol table must still instrument into valid PTX that keeps its meaning.
ENGINE_LIKE_NAMES = (
    "%nt_lane", "%nt_warp", "%nt_tid_x", "%nt_blin", "%nt_tlin", "%nt_w64", "%nt_buf_dmat", "%nt_cur_dmat",
    "%nt_p_start", "%nt_exec", "%nt_g", "%nt_", "%nt1_", "%nt1_blin", "%nt2_tpb", "k__nt_buf_block_sched",
    "k__nt_buf_dmat", "k__nt_cap_dmat", "k__nt_buf_gmem_bytes", "k__nt_buf_program_progress",
    "k__nt_cap_program_progress", "k__nt_count", "k__nt_count_1", "k__nt_buf_dmat_1",
)
SYMBOL_TABLES = ("global", "const", "shared", "local_shared", "param", "label", "register", "register_range",
                 "function", "entry")
COLLISION_TOOLS = ("block_sched", "dmat", "gmem_bytes", "program_progress")


def name_collision_module(symbols: list[tuple[str, str]]) -> str:
    """A valid module where each (name, table) is declared in that symbol table and the kernel `k` uses it.

    Tables: module variables (global, const, shared), a kernel-scope shared variable, a kernel
    parameter, a label, a register or a register range (`NAME<2>`), a device function, an entry.
    Every value read is added into one sum the kernel stores, so a read that went to an engine
    register instead would change the result (and `name_clashes` sees the shadowing name).
    """
    top, params, decls, body = [], [".param .u64 k_param_0"], [], []
    for i, (name, table) in enumerate(symbols):
        if name.startswith("%") and table in ("function", "entry"):
            table = "label"  # ptxas takes `.func %f`, our parser not yet (issue 30 §4): a label instead
        if table in ("global", "const", "shared"):
            top.append(f".{table} .u32 {name};")
            body.append(f"ld.{table}.u32 %r1, [{name}];")
        elif table == "local_shared":
            decls.append(f".shared .u32 {name};")
            body.append(f"ld.shared.u32 %r1, [{name}];")
        elif table == "param":
            params.append(f".param .u32 {name}")
            body.append(f"ld.param.u32 %r1, [{name}];")
        elif table == "label":
            body.append(f"bra.uni {name};\n{name}:\n\tmov.u32 %r1, {i};")
        elif table == "register":
            decls.append(f".reg .b32 {name};")
            body.append(f"mov.u32 {name}, {i};\n\tmov.u32 %r1, {name};")
        elif table == "register_range":
            decls.append(f".reg .b32 {name}<2>;")
            body.append(f"mov.u32 {name}1, {i};\n\tmov.u32 %r1, {name}1;")
        elif table == "function":
            top.append(f".func {name}()\n{{\n\tret;\n}}")
            body.append(f"call.uni {name}, ();\n\tmov.u32 %r1, {i};")
        else:  # entry
            top.append(f".visible .entry {name}(\n\t.param .u64 e{i}_param_0\n)\n{{\n\tret;\n}}")
            body.append(f"mov.u32 %r1, {i};")
        body.append("add.u32 %r2, %r2, %r1;")
    lines = [".version 8.0", ".target sm_80", ".address_size 64", "", *top, "", ".visible .entry k(",
             "\t" + ",\n\t".join(params), ")", "{", "\t.reg .b32 %r<3>;", "\t.reg .b64 %rd<3>;",
             *("\t" + d for d in decls), "\tld.param.u64 %rd1, [k_param_0];", "\tcvta.to.global.u64 %rd2, %rd1;",
             "\tld.global.u32 %r2, [%rd2];", *("\t" + b for b in body), "\tst.global.u32 [%rd2], %r2;", "\tret;", "}", ""]
    return "\n".join(lines)


def instrument_in_memory(ptx: str, probes, kernel: str | None = None):
    """(probed module, kernel descriptions, probed PTX): the module keeps each statement's origin, which text loses."""
    from neutrino.engine import instrument_module
    from neutrino.isa.ptx import parse_module, print_module

    module = parse_module(ptx)
    ctx = instrument_module(module, probes, kernel)
    return module, ctx.info(), print_module(module)


def engine_names(probed, kernels: dict) -> set[str]:
    """The names the engine declared in a probed module (in memory): its registers, the parameters and
    counting entries kernel.json lists."""
    from neutrino.isa.ptx import ir

    names: set[str] = set()
    for function in probed.functions():
        for _, _, stmt in ir.walk(function.body or []):
            if type(stmt) is ir.RegDecl and stmt.origin is not None:
                names.update(stmt.declared())
    for desc in kernels.values():
        names.update(p["name"] for p in desc["params"])
        names.update([desc["count_kernel"]] if desc.get("count_kernel") else [])
    return names


def name_clashes(original_ptx: str, probed, kernels: dict) -> list[str]:
    """What breaks the program's meaning: engine names among the original's identifiers; original
    instructions of an instrumented kernel missing, changed or reordered (`probed`: the module in memory)."""
    import re

    from neutrino.isa.ptx import ir, parse_module

    # Every identifier but a range's stem (`.reg .b32 %x<2>` declares %x0 and %x1, not %x): a superset of the declared names.
    identifiers = set(re.findall(r"(?<![.\w$%])(?:[A-Za-z][\w$]*|[_$%][\w$]+)(?![\w$]|\s*<)", original_ptx, re.ASCII))
    ours = engine_names(probed, kernels)
    assert any(n.startswith("%") for n in ours), "no engine register found: the check would be vacuous"
    problems = [f"engine name {n} is also the program's" for n in sorted(ours & identifiers)]
    before = parse_module(original_ptx)
    for name in kernels:
        kept = [i.key() for i in ir.instructions(probed.function(name).body) if i.origin is None]
        if kept != [i.key() for i in ir.instructions(before.function(name).body)]:
            problems.append(f"{name}: the original instructions changed")


# ---------------------------------------------------------------- counting variants: side-effect-bearing calls
# Kernels whose device functions store, update atomics, reduce, printf and trap, at a random call depth
# (issue 30, section 1). `side_effect_module` writes one from a plan; the plan says whether the counting
# variant must be refused (an indirect call, an atomic's result or printf's deciding a branch, reachable
# from the kernel) and `counting_violations` checks an accepted one.

SAFE_OPS = ("store", "store_generic", "atom", "atom_sink", "red", "load", "printf", "trap", "call")
POISON_OPS = ("indirect", "atom_decides", "printf_decides")


@attrs.frozen
class SideEffectPlan:
    """functions[i]: the ops of f{i}; kernel: the kernel's. A `call` op is ("call", j)."""

    functions: tuple[tuple[tuple[str, int], ...], ...]
    kernel: tuple[tuple[str, int], ...]

    def reachable(self) -> set[int]:
        seen: set[int] = set()
        work = [j for op, j in self.kernel if op in ("call", "indirect")]
        while work:
            i = work.pop()
            if i not in seen:
                seen.add(i)
                work += [j for op, j in self.functions[i] if op in ("call", "indirect")]
        return seen

    def refused(self) -> bool:
        bodies = [self.kernel] + [self.functions[i] for i in self.reachable()]
        return any(op in POISON_OPS for body in bodies for op, _ in body)


def side_effect_plan(rng, poison: bool) -> SideEffectPlan:
    """A random plan: 1-5 functions of 1-6 ops, calls to any function (recursion and cycles too)."""
    count = rng.randint(1, 5)
    ops = SAFE_OPS + (POISON_OPS if poison else ())

    def body(length: int) -> tuple[tuple[str, int], ...]:
        return tuple((rng.choice(ops), rng.randrange(count)) for _ in range(length))

    functions = tuple(body(rng.randint(1, 6)) for _ in range(count))
    kernel = (("call", rng.randrange(count)),) + body(rng.randint(0, 4))
    return SideEffectPlan(functions, kernel)


_CALL_ARGS = "\t.param .b64 param0;\n\tst.param.b64 [param0], %rd1;\n\t.param .b32 param1;\n\tst.param.b32 [param1], %r1;\n\t.param .b32 retval0;\n"


def _op_text(op: str, arg: int, n: int) -> str:
    """PTX of one op; `n` makes its registers and labels unique in the function."""
    r, rd, p = f"%r{n + 10}", f"%rd{n + 10}", f"%p{n + 1}"
    address = f"\tmul.wide.u32 {rd}, %r1, 4;\n\tadd.s64 {rd}, %rd1, {rd};\n"
    counter = f"\tmov.u64 {rd}, counter;\n"
    printf = (f"\t{{\n\t.param .b64 param0;\n\tst.param.b64 [param0], %rd2;\n\t.param .b64 param1;\n\tst.param.b64 [param1], 0;\n"
              f"\t.param .b32 retval0;\n\tcall.uni (retval0), vprintf, (param0, param1);\n\tld.param.b32 {r}, [retval0];\n\t}}\n")
    return {
        "store": address + f"\tst.global.u32 [{rd}], %r1;\n",
        "store_generic": address + f"\tst.u32 [{rd}], %r1;\n",
        "atom": counter + f"\tatom.global.add.u32 {r}, [{rd}], 1;\n",
        "atom_sink": address + f"\tatom.exch.b32 _, [{rd}], %r1;\n",
        "red": address + f"\tred.global.add.u32 [{rd}], %r1;\n",
        "load": address + f"\tld.global.u32 {r}, [{rd}];\n",
        "printf": printf,
        "trap": f"\tsetp.eq.u32 {p}, %r1, 12345;\n\t@{p} trap;\n",
        "call": f"\t{{\n{_CALL_ARGS}\tcall.uni (retval0), f{arg}, (param0, param1);\n\tld.param.b32 {r}, [retval0];\n\t}}\n",
        "indirect": (f"\tmov.u64 {rd}, f{arg};\n\t{{\n{_CALL_ARGS}\tproto{n} : .callprototype (.param .b32 _) _ (.param .b64 _, .param .b32 _);\n"
                     f"\tcall (retval0), {rd}, (param0, param1), proto{n};\n\tld.param.b32 {r}, [retval0];\n\t}}\n"),
        "atom_decides": counter + f"\tatom.global.add.u32 {r}, [{rd}], 1;\n\tsetp.eq.u32 {p}, {r}, 7;\n\t@{p} bra $L_skip{n};\n"
                        f"\tst.global.u32 [%rd1], %r1;\n$L_skip{n}:\n",
        "printf_decides": printf + f"\tsetp.gt.s32 {p}, {r}, 2;\n\t@{p} bra $L_skip{n};\n\tst.global.u32 [%rd1], %r1;\n$L_skip{n}:\n",
    }[op]


def _body_text(ops: tuple[tuple[str, int], ...]) -> str:
    return "".join(_op_text(op, arg, n) for n, (op, arg) in enumerate(ops))


_REGISTERS = "\t.reg .pred %p<16>;\n\t.reg .b32 %r<32>;\n\t.reg .b64 %rd<32>;\n"
_FORMAT = "\tmov.u64 %rd2, fmt;\n\tcvta.global.u64 %rd2, %rd2;\n"


def side_effect_module(plan: SideEffectPlan) -> str:
    """The plan as a PTX module with one entry `k` (ptxas accepts it)."""
    heads = [f".func (.param .b32 f{i}_ret) f{i}(.param .b64 f{i}_p0, .param .b32 f{i}_p1)" for i in range(len(plan.functions))]
    parts = [
        ".version 8.0\n.target sm_90\n.address_size 64\n\n",
        ".extern .func (.param .b32 func_retval0) vprintf(.param .b64 vprintf_param_0, .param .b64 vprintf_param_1);\n",
        ".global .align 1 .b8 fmt[4] = {37, 100, 10, 0};\n.global .align 4 .u32 counter;\n",
        *(head + ";\n" for head in heads),
    ]
    for i, (head, ops) in enumerate(zip(heads, plan.functions)):
        parts.append(f"\n{head}\n{{\n{_REGISTERS}\tld.param.u64 %rd1, [f{i}_p0];\n\tld.param.u32 %r1, [f{i}_p1];\n"
                     f"{_FORMAT}{_body_text(ops)}\tst.param.b32 [f{i}_ret], %r1;\n\tret;\n}}\n")
    parts.append(f"\n.visible .entry k(.param .u64 k_p0, .param .u32 k_p1)\n{{\n{_REGISTERS}\tld.param.u64 %rd1, [k_p0];\n"
                 f"\tcvta.to.global.u64 %rd1, %rd1;\n\tmov.u32 %r1, %tid.x;\n{_FORMAT}{_body_text(plan.kernel)}"
                 "\tld.global.u32 %r2, [%rd1];\n\tst.global.u32 [%rd1+4], %r2;\n\tret;\n}\n")
    return "".join(parts)


def counting_violations(module, entry: str) -> list[str]:
    """What the counting variant of `entry` (and every function it reaches) still does to the program.

    Writes to global or generic memory by the program's own instructions (probe code writes its
    buffers), calls to body-less functions, indirect calls, traps: each is a violation.
    """
    from neutrino.isa.ptx import ir
    from neutrino.isa.ptx.semantics import access_spaces, lookup
    from neutrino.passes.counting import call_parts, counting_name

    defined = {f.name: f for f in module.functions() if f.body is not None}
    problems: list[str] = []
    seen, work = {counting_name(entry)}, [defined[counting_name(entry)]]
    while work:
        function = work.pop()
        for insn in ir.instructions(function.body):
            program = insn.origin is None or insn.origin == "counting-variant"
            control = lookup(insn.opcode).control
            if program and any(a in ("store", "atomic") and s in ("global", None) for _, a, s in access_spaces(insn.opcode)):
                problems.append(f"{function.name}: {insn.opcode} writes the program's memory")
            if control == "trap":
                problems.append(f"{function.name}: {insn.opcode}")
            if control != "call":
                continue
            target = call_parts(insn).target
            if not isinstance(target, ir.Symbol) or target.name not in defined:
                problems.append(f"{function.name}: calls {target}")
            elif target.name not in seen:
                seen.add(target.name)
                work.append(defined[target.name])
    return problems

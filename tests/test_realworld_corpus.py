"""Real compiler output (tests/data/realworld/, built by tests/realworld_src/build.sh).

Every file must parse, print back byte for byte, and instrument with every
built-in tool and every probe file of tests/data/realworld/probes/ into PTX
that ptxas accepts, keeping the original instructions in order. Pruning to one
kernel (the runtime's `-k` path) must also assemble.

What fails today is listed in KNOWN_FAILURES with the class of issue 10 it
belongs to; those cases are xfail(strict=False). Delete entries as fixes land:
a listed case that passes shows up as XPASS.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path

import attrs
import pytest

from neutrino.engine import instrument
from neutrino.errors import NeutrinoError
from neutrino.isa.ptx import parse_module, print_module
from neutrino.passes import PassManager
from neutrino.passes.manager import Context
from neutrino.toolbox import load_probes

from helpers import DATA, HAVE_PTXAS, assert_keeps_original

REALWORLD = DATA / "realworld"
FILES = sorted(REALWORLD.glob("*/*.ptx"))
BUILTIN_TOOLS = ["block_sched", "gmem_bytes", "dmat", "tensorop", "program_progress"]
OWN_PROBES = sorted((REALWORLD / "probes").glob("*.toml"))
TOOLS = BUILTIN_TOOLS + [p.name for p in OWN_PROBES]
PRUNE_TOOL = "block_sched"


def file_id(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


# ---------------------------------------------------------------------------
# Known failures: (file id or "*", check) → reason. A check is "parse",
# "reparse", "roundtrip", a tool name (instrument + ptxas), "prune" (one kernel with
# block_sched), or "cli_check" (`instrument --check` on relocatable code; no
# wildcards for it). The reasons are the classes of issue 10.
# ---------------------------------------------------------------------------
BARE_REGISTER = "class 1: register names without % (temp_param_reg, inline-asm p/P1/r0/__$1)"
SPACING = "class 2: token spacing (.reg.u64, opcode directly followed by {)"
OPERANDS = "class 3: operand forms (symbol+imm, vector registers, data directives in bodies)"
COUNTING_REWRITE = "class 4: counting variant rewrites an instruction into illegal PTX"
OLD_TARGET = "class 5: probe code newer than .version/.target, or ptxas flags"
LINEINFO_PRUNE = "class 6: pruning drops debug sections the kept code needs (.loc function_name, .target debug)"
HELPER_TYPES = "class 7: helper operands typed wrongly (u64/u32 instead of the site's type; packed bf16x2 read as 16-bit)"
OTHER = "unclassified: see tests/realworld_src/census.py"
THEN = "; behind it, "  # FIRST + THEN + NEXT: fails at FIRST today, at NEXT once FIRST is fixed

KNOWN_FAILURES: dict[tuple[str, str], str] = {}

# Files with a kernel whose counting variant cannot be made free of side effects (issue 30, section 1):
# tools with cap = "count" maps refuse that kernel with a located error (the runtime runs it unprobed);
# every other kernel of the file must still instrument and assemble alone. Value: what the error says.
INDIRECT = "an indirect call through"
EXTERN = "whose body is not in this module"
ATOMIC_DECIDES = "a value an atomic would return decides control flow"
COUNTING_REFUSALS: dict[str, str] = {
    "llvm/atomics.sm_80.O3.ptx": ATOMIC_DECIDES,  # a compare-and-swap loop (float atomic max)
    "llvm/atomics.sm_90.O0.ptx": ATOMIC_DECIDES,
    "llvm/calls.sm_80.O3.ptx": INDIRECT,
    "llvm/calls.sm_90.O0.ptx": INDIRECT,
    "nvcc/calls_printf.sm_80.G.ptx": INDIRECT,
    "nvcc/calls_printf.sm_80.ptx": INDIRECT,
    "nvcc/calls_printf.sm_90.lineinfo.ptx": INDIRECT,
    "nvcc/calls_printf.sm_90.rdc.ptx": INDIRECT,
    "nvcc/coop_groups.sm_80.ptx": ATOMIC_DECIDES,  # grid.sync(): a counting launch would wait for ever
    "nvcc/coop_groups.sm_90.lineinfo.ptx": ATOMIC_DECIDES,
    "nvcc/coop_groups.sm_90.rdc.ptx": ATOMIC_DECIDES,
    "nvcc/cub_prims.sm_90.G.ptx": ATOMIC_DECIDES,  # -G: the old value goes through the stack and pointers
    "nvcc/extern_calls.sm_80.rdc.ptx": EXTERN,
    "nvcc/extern_calls.sm_90a.rdc.lineinfo.ptx": EXTERN,
    "nvcc/half_bf16.sm_80.ptx": ATOMIC_DECIDES,  # bf16 atomicAdd as a compare-and-swap loop
    "nvcc/half_bf16.sm_90.G.ptx": ATOMIC_DECIDES,
    "triton/layernorm_dweight_atomic.sm_90.ptx": ATOMIC_DECIDES,  # a spin lock
}
COUNTING_REFUSED = "no counting variant for its cap = \"count\" maps"


def known_failure(fid: str, check: str) -> str | None:
    for key in ((fid, check), (fid, "*"), ("*", check)):
        if key in KNOWN_FAILURES:
            return KNOWN_FAILURES[key]
    return None


def cases(checks: list[str]) -> list:
    params = []
    for path in FILES:
        fid = file_id(path)
        for check in checks:
            reason = known_failure(fid, check)
            marks = [pytest.mark.xfail(reason=reason, strict=False)] if reason else []
            params.append(pytest.param(path, check, marks=marks, id=f"{fid}-{check}"))
    return params


# ---------------------------------------------------------------------------
# ptxas, as the oracle, with the module's own target; relocatable code
# (built with -rdc=true: `.rdc.` in the file name) is assembled with -c.
# Results are cached by content hash in pytest's cache.
# ---------------------------------------------------------------------------
@attrs.frozen
class Assembly:
    ok: bool
    log: str


TARGET = re.compile(r"^[ \t]*\.target[ \t]+(\w+)", re.MULTILINE)


def ptxas_flags(ptx: str, fid: str) -> list[str]:
    target = TARGET.search(ptx)
    flags = [f"-arch={target.group(1) if target else 'sm_90'}"]
    if ".rdc." in fid:
        flags.append("-c")
    return flags


def run_ptxas(ptx: str, flags: list[str]) -> Assembly:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        proc = subprocess.run(["ptxas", *flags, str(src), "-o", str(Path(tmp) / "k.cubin")], capture_output=True, text=True)
    return Assembly(proc.returncode == 0, proc.stderr)


class PtxasPool:
    """Runs ptxas jobs in parallel threads, memoised in pytest's cache by content."""

    def __init__(self, cache):
        self.cache = cache
        self.pool = ThreadPoolExecutor(max_workers=4)
        self.lock = threading.Lock()
        # A cached verdict holds for one ptxas only.
        self.version = subprocess.run(["ptxas", "--version"], capture_output=True, text=True).stdout if HAVE_PTXAS else ""

    def submit(self, ptx: str, flags: list[str]):
        key = "realworld/ptxas/" + hashlib.sha256("\n".join([self.version, *flags, ptx]).encode()).hexdigest()
        hit = self.cache.get(key, None) if self.cache else None
        if hit is not None:
            return _done(Assembly(**hit))

        def job() -> Assembly:
            result = run_ptxas(ptx, flags)
            if self.cache and result.ok:
                with self.lock:
                    self.cache.set(key, attrs.asdict(result))
            return result

        return self.pool.submit(job)


class _done:
    def __init__(self, value):
        self.value = value

    def result(self):
        return self.value


@pytest.fixture(scope="module")
def ptxas_pool(request):
    pool = PtxasPool(getattr(request.config, "cache", None))
    yield pool
    pool.pool.shutdown(wait=True)


@lru_cache(maxsize=None)
def probes_for(tool: str):
    return load_probes(str(REALWORLD / "probes" / tool) if tool.endswith(".toml") else tool)


@attrs.frozen
class Outcome:
    """What instrumenting one file with one tool gave: the PTX, or the engine's error."""

    ptx: str | None
    error: str | None
    entries: tuple[str, ...]


def instrument_file(path: Path, tool: str, kernel: str | None = None) -> Outcome:
    text = path.read_text()
    try:
        entries = tuple(f.name for f in parse_module(text, str(path)).entries())
        result = instrument(text, probes_for(tool), kernel=kernel, source=str(path))
    except NeutrinoError as e:
        return Outcome(None, str(e), ())
    except Exception as e:  # a crash is a failure like any other, but say so
        return Outcome(None, f"internal error: {type(e).__name__}: {e}", ())
    return Outcome(result.ptx, None, entries if kernel is None else (kernel,))


class FileResults:
    """Per file: instrument with every tool and prune, then assemble all results in parallel.

    Results are kept for one file at a time (the tests ask file by file), so
    memory stays bounded by the largest file's probed variants.
    """

    def __init__(self, pool: PtxasPool):
        self.pool = pool
        self.current: tuple[Path, dict[str, tuple[Outcome, object]]] | None = None

    def get(self, path: Path, check: str) -> tuple[Outcome, Assembly | None]:
        if self.current is None or self.current[0] != path:
            fid = file_id(path)
            self.current = (path, {check: self._submit(path, fid, check) for check in CHECKS})
        outcome, future = self.current[1][check]
        return outcome, future.result() if future is not None else None

    def _submit(self, path: Path, fid: str, check: str) -> tuple[Outcome, object]:
        if check == "prune":
            outcome = instrument_last_entry(path)
        else:
            outcome = instrument_file(path, check)
        future = self.pool.submit(outcome.ptx, ptxas_flags(outcome.ptx, fid)) if outcome.ptx is not None else None
        return outcome, future


def instrument_last_entry(path: Path) -> Outcome:
    """The runtime's `-k` path: the module pruned to one kernel (the last), probed with PRUNE_TOOL."""
    try:
        entries = parse_module(path.read_text(), str(path)).entries()
    except NeutrinoError as e:
        return Outcome(None, str(e), ())
    return instrument_file(path, PRUNE_TOOL, kernel=entries[-1].name)


CHECKS = TOOLS + ["prune"]


@pytest.fixture(scope="module")
def results(ptxas_pool):
    return FileResults(ptxas_pool)


# ---------------------------------------------------------------------------
# The checks
# ---------------------------------------------------------------------------
def test_corpus_is_present_and_varied():
    """The corpus holds every source family the acceptance list names."""
    families = {p.parent.name for p in FILES}
    assert {"nvcc", "cutlass", "llvm", "triton"} <= families
    names = " ".join(p.name for p in FILES)
    for variant in (".G.", ".lineinfo.", ".rdc.", "sm_80", "sm_90.", "sm_90a", "sm_100a"):
        assert variant in names, variant
    assert sum(p.stat().st_size for p in FILES) < 8_500_000


def test_known_failures_name_real_files_and_checks():
    """A stale entry (a file renamed or dropped, a check misspelt) would silently xfail nothing."""
    fids = {file_id(p) for p in FILES}
    checks = {"*", "parse", "reparse", "roundtrip", "cli_check", *CHECKS}
    for fid, check in KNOWN_FAILURES:
        assert fid == "*" or fid in fids, fid
        assert check in checks, check


@pytest.mark.parametrize("path,check", cases(["parse"]))
def test_parses(path, check):
    module = parse_module(path.read_text(), str(path))
    assert module.entries(), "every corpus file has an entry"


@pytest.mark.parametrize("path,check", cases(["reparse"]))
def test_prints_back_the_same_structure(path, check):
    """Weaker than exact: what the printer writes parses to the same IR, and prints the same again."""
    module = parse_module(path.read_text(), str(path))
    printed = print_module(module)
    again = parse_module(printed)
    assert again.structure() == module.structure()
    assert print_module(again) == printed


@pytest.mark.parametrize("path,check", cases(["roundtrip"]))
def test_round_trips_exactly(path, check):
    """Byte for byte, and again after a pipeline of no passes."""
    text = path.read_text()
    module = parse_module(text, str(path))
    assert_same_text(print_module(module), text)
    PassManager([]).run(module, Context(probes_for(PRUNE_TOOL)))
    assert_same_text(print_module(module), text)


def assert_same_text(printed: str, text: str) -> None:
    if printed == text:
        return
    # Name the first difference; never let pytest diff megabytes of text.
    got, want = printed.splitlines(keepends=True), text.splitlines(keepends=True)
    for number, (a, b) in enumerate(zip(got, want), 1):
        if a != b:
            pytest.fail(f"first difference at line {number}: printed {a!r}, source {b!r}")
    pytest.fail(f"{len(got)} printed lines vs {len(want)} source lines")


@pytest.mark.skipif(not HAVE_PTXAS, reason="ptxas not on PATH")
@pytest.mark.parametrize("path,check", cases(CHECKS))
def test_instruments_and_assembles(path, check, results):
    """Each tool on the whole module; "prune": block_sched on the last kernel alone."""
    outcome, assembly = results.get(path, check)
    if outcome.error is not None and COUNTING_REFUSED in outcome.error:
        check_counting_refusal(path, check, outcome.error)
        return
    assert outcome.error is None, outcome.error
    if check == "prune":
        assert [f.name for f in parse_module(outcome.ptx).entries()] == list(outcome.entries)
    assert_keeps_original(path.read_text(), outcome.ptx, list(outcome.entries))
    assert assembly.ok, f"ptxas {' '.join(ptxas_flags(outcome.ptx, file_id(path)))} failed:\n{assembly.log[:3000]}"


def check_counting_refusal(path: Path, tool: str, error: str) -> None:
    """An expected refusal (COUNTING_REFUSALS); each kernel alone is then refused the same way or assembles."""
    fid = file_id(path)
    assert fid in COUNTING_REFUSALS, f"a new counting refusal: {error}"
    assert COUNTING_REFUSALS[fid] in error, error
    refused = 0
    for entry in parse_module(path.read_text(), str(path)).entries():
        alone = instrument_file(path, tool, kernel=entry.name)
        if alone.error is not None:
            assert COUNTING_REFUSED in alone.error and f"kernel {entry.name}:" in alone.error, alone.error
            refused += 1
            continue
        assembly = run_ptxas(alone.ptx, ptxas_flags(alone.ptx, fid))
        assert assembly.ok, f"{entry.name}: ptxas failed:\n{assembly.log[:3000]}"
    assert refused >= 1


def test_counting_refusals_name_real_files():
    fids = {file_id(p) for p in FILES}
    assert set(COUNTING_REFUSALS) <= fids, set(COUNTING_REFUSALS) - fids


RELOCATABLE = [p for p in FILES if ".rdc." in p.name]


@pytest.mark.skipif(not HAVE_PTXAS, reason="ptxas not on PATH")
@pytest.mark.parametrize(
    "path",
    [pytest.param(p, marks=[pytest.mark.xfail(reason=r, strict=False)] if (r := KNOWN_FAILURES.get((file_id(p), "cli_check"))) else []) for p in RELOCATABLE],
    ids=file_id,
)
def test_instrument_check_accepts_relocatable_code(path):
    """`neutrino instrument --check` assembles -rdc output as ptxas does with -c (issue 10, class 5)."""
    from neutrino.cli import ptxas_check

    text = path.read_text()
    assert run_ptxas(text, ptxas_flags(text, file_id(path))).ok
    ptxas_check(text, TARGET.search(text).group(1))

"""SASS instructions executed per source line (spec/tools.md, "lines": SASS instructions).

We count PTX instructions exactly (block counts x the line map); Nsight Compute and the machine
count SASS, and one PTX instruction may become none, one or many machine instructions (nvcc's
parameter loads: 5 PTX instructions, 1 SASS). This module derives SASS thread-instructions per
line from the exact per-block PTX counts and the machine code of the ORIGINAL kernel:

1. `disassemble`: the original PTX assembled by `ptxas -lineinfo` (its own `.target`) and
   printed by `nvdisasm -c -gi` (every SASS instruction with its source file, line and
   inlining call site); `parse_nvdisasm` reads that text per code section.
2. `sass_graph`: the SASS basic blocks of each section (a label starts one; BRA, BRX, JMP,
   JMX, EXIT, RET, KILL, BPT end one; a guarded one also falls through), their successors,
   which are reachable from the section's start, and which lie on a cycle.
3. `match_blocks`: a SASS block of the kernel's own section is MATCHED to PTX block b when it
   is reachable and on no SASS cycle, every one of its instructions has a line of the line
   table, b is the only PTX block whose lines include all of the SASS block's lines, and b is
   on no PTX cycle. Every other reachable SASS instruction (in loops, in blocks of mixed or
   ambiguous lines, in called functions' sections) is UNMATCHED.
4. `sass_line_instructions`: SASS thread-instructions of line L =
   Σ over matched blocks s of threads[b(s)] × (SASS instructions of L in s)
   + U_L × E'_L / P'_L, where U_L = unmatched SASS instructions of L, and E'_L / P'_L = the
   exact PTX thread-instructions / static PTX instructions of L in the PTX blocks no SASS block
   is matched to (all of L's PTX blocks when that leaves none): each unmatched SASS instruction
   runs as often as the line's average PTX instruction there. The first term is exact when
   ptxas kept the matched block's code on its PTX block's path (acyclic code: no unrolling);
   the second is an estimate. A line with no SASS instruction gets 0.

Unreachable SASS (the padding `BRA` to itself after the last EXIT, NOPs) is left out.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import attrs
import numpy as np

SECTION_RE = re.compile(r"^//-+\s+(\.text\.\S+)\s+-+")
INSTRUCTION_RE = re.compile(r"^\s*/\*([0-9a-f]+)\*/\s+(@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")
LABEL_RE = re.compile(r"^([.\w$]+):\s*$")
LINE_RE = re.compile(r'^\s*//## File "([^"]*)", line (\d+)(?: inlined at "([^"]*)", line (\d+))?')
TARGET_RE = re.compile(r"`\(([.\w$]+)\)")
#: SASS opcodes after which the next instruction starts a new basic block
BLOCK_ENDS = frozenset({"BRA", "BRX", "JMP", "JMX", "EXIT", "RET", "KILL", "BPT"})
INDIRECT = frozenset({"BRX", "JMX"})
NO_LINE = (None, 0, None)


class SassUnavailable(Exception):
    """ptxas or nvdisasm was not found or failed (the message says which)."""


@attrs.frozen
class SassInstruction:
    address: int
    opcode: str  # without modifiers: BRA, EXIT, FFMA...
    guarded: bool  # under a predicate other than PT
    targets: tuple[str, ...]  # labels it branches to
    key: tuple  # (file, line, "site_file:site_line" or None): the line table's LineInfo key; NO_LINE


@attrs.frozen
class SassSection:
    name: str  # .text.<function>
    instructions: tuple[SassInstruction, ...]
    labels: dict  # label → index of the instruction it precedes


def parse_nvdisasm(text: str) -> list[SassSection]:
    """The code sections of `nvdisasm -c -gi` output, each instruction with its source line key.

    nvdisasm prints a group of `//## File` comments when the location changes: the first is the
    innermost position (with `inlined at` its immediate call site), the last the outermost one."""
    sections: list[SassSection] = []
    name, instructions, labels, group, key = None, [], {}, [], NO_LINE

    def close():
        if name is not None:
            sections.append(SassSection(name, tuple(instructions), dict(labels)))

    for line in text.splitlines():
        header = SECTION_RE.match(line)
        if header:
            close()
            name, instructions, labels, group, key = header.group(1), [], {}, [], NO_LINE
            continue
        if name is None:
            continue
        located = LINE_RE.match(line)
        if located:
            group.append(located.groups())
            continue
        label = LABEL_RE.match(line)
        if label:
            labels[label.group(1)] = len(instructions)
            continue
        found = INSTRUCTION_RE.match(line)
        if not found:
            continue
        if group:
            key, group = _group_key(group), []
        guard = (found.group(2) or "").strip()
        opcode = found.group(3).split(".", 1)[0]
        instructions.append(SassInstruction(int(found.group(1), 16), opcode, bool(guard) and guard != "@PT",
                                            tuple(TARGET_RE.findall(found.group(4))), key))
    close()
    return sections


def _group_key(group: list[tuple]) -> tuple:
    file, line, site_file, site_line = group[0]
    if int(line) == 0:
        return NO_LINE
    if site_file is None:
        return (file, int(line), None)
    outer = group[-1]
    if len(group) > 1 and outer[2] is None:
        site = f"{outer[0]}:{outer[1]}"
    else:  # the chain's last link names the outermost site
        site = f"{outer[2] or site_file}:{outer[3] or site_line}"
    return (file, int(line), site)


@attrs.frozen
class SassGraph:
    starts: tuple[int, ...]  # first instruction of each block
    successors: tuple[tuple[int, ...], ...]  # per block; -1: leaves the function
    reachable: frozenset  # every block when the graph is not known
    cyclic: frozenset  # blocks on a cycle
    known: bool  # False: an indirect branch or a branch to an unknown label (nothing is matched)


def sass_graph(section: SassSection) -> SassGraph:
    instructions = section.instructions
    starts = {0} | {i for i in section.labels.values() if i < len(instructions)}
    starts |= {i + 1 for i, insn in enumerate(instructions) if insn.opcode in BLOCK_ENDS and i + 1 < len(instructions)}
    starts = sorted(starts) if instructions else []
    block_at = {start: b for b, start in enumerate(starts)}
    successors, known = [], True
    for b, start in enumerate(starts):
        stop = starts[b + 1] if b + 1 < len(starts) else len(instructions)
        last = instructions[stop - 1]
        out = []
        if last.opcode in BLOCK_ENDS:
            if last.opcode in INDIRECT:
                known = False
            for label in last.targets:
                if label in section.labels and section.labels[label] in block_at:
                    out.append(block_at[section.labels[label]])
                elif last.opcode not in ("EXIT", "RET", "KILL", "BPT"):
                    known = False
            if last.opcode in ("EXIT", "RET"):
                out.append(-1)
        if last.opcode not in BLOCK_ENDS or last.guarded:
            out.append(b + 1 if b + 1 < len(starts) else -1)
        successors.append(tuple(dict.fromkeys(out)))
    reachable = (reachable_from(successors, 0) if known else range(len(starts))) if starts else ()
    return SassGraph(tuple(starts), tuple(successors), frozenset(reachable), frozenset(cyclic_nodes(successors)), known)


def reachable_from(successors, root: int) -> set[int]:
    seen, stack = {root}, [root]
    while stack:
        for child in successors[stack.pop()]:
            if child >= 0 and child not in seen:
                seen.add(child)
                stack.append(child)
    return seen


def cyclic_nodes(successors) -> set[int]:
    """Nodes on a cycle: in a strongly connected component of two or more, or with an edge to
    themselves (Tarjan's algorithm, iterative: linear in nodes and edges). -1 is no node."""
    index, low, on_stack, stack, out = {}, {}, set(), [], set()
    counter = 0
    for root in range(len(successors)):
        if root in index:
            continue
        work = [(root, iter(successors[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in successors[node]:
                        out.update(component)
            elif child < 0:
                continue
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(successors[child])))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return out


# ---------------------------------------------------------------- the PTX side: which blocks lie on a cycle


def ptx_successors(function, line_map) -> list[tuple[int, ...]] | None:
    """Successors of the line map's basic blocks (-1: leaves the kernel); None when a branch is
    indirect (`brx.idx`) or names a label not found."""
    from neutrino.isa.ptx import ir
    from neutrino.isa.ptx.lines import _walk

    label_at, count = {}, 0
    for stmt in _walk(function.body or []):
        if type(stmt) is ir.Label:
            label_at[stmt.name] = count
        elif type(stmt) is ir.Instruction and stmt.origin is None:
            count += 1
    block_of = line_map.block_of
    out = []
    for block in line_map.blocks:
        last = line_map.instructions[block.stop - 1]
        base, nxt = last.opcode.base, (block.index + 1 if block.index + 1 < len(line_map.blocks) else -1)
        successors = []
        if base == "brx":
            return None
        if base == "bra":
            target = last.operands[-1] if last.operands else None
            where = label_at.get(getattr(target, "name", None))
            if where is None:
                return None
            successors.append(block_of[where] if where < len(block_of) else -1)
        elif base in ("ret", "exit"):
            successors.append(-1)
        if base not in ("bra", "ret", "exit", "trap") or last.guard is not None:
            successors.append(nxt)
        out.append(tuple(dict.fromkeys(successors)))
    return out


# ---------------------------------------------------------------- matching SASS blocks to PTX blocks


@attrs.frozen
class SassLines:
    """The kernel's SASS instructions per line, split into matched blocks and the rest (module doc, 3)."""

    matched: tuple[tuple[tuple[int, int], ...], ...]  # per PTX block: (line, SASS instructions) matched to it
    unmatched: tuple[int, ...]  # per line: reachable SASS instructions in no matched block
    static: tuple[int, ...]  # per line: reachable SASS instructions
    unknown: int  # reachable SASS instructions at lines the line table does not have
    sass_blocks: int  # reachable SASS blocks of the kernel's section
    matched_blocks: int


def line_keys(table) -> dict[tuple, int]:
    """The line table's lines by SASS key (file, line, outermost call site as FILE:LINE)."""
    out = {}
    for i, info in enumerate(table.lines):
        out.setdefault(NO_LINE if info.line <= 0 else (info.file, info.line, info.inlined_at), i)
    return out


def _resolver(table):
    """SASS key → line index: exact, else by file base name (ptxas may print the path differently)."""
    exact = line_keys(table)

    def base(key):
        file, line, site = key
        return (os.path.basename(file or ""), line, None if site is None else os.path.basename(site))

    loose = {}
    for key, i in exact.items():
        loose.setdefault(base(key), i)
    return lambda key: exact.get(key, loose.get(base(key)) if key != NO_LINE else None)


def match_blocks(table, ptx_cyclic: set[int] | None, sections: list[SassSection], kernel: str) -> SassLines:
    """Split the reachable SASS instructions of every section into matched blocks (of the kernel's
    section only) and unmatched ones (module doc, 3). `ptx_cyclic` None: the PTX graph is unknown,
    nothing is matched."""
    resolve = _resolver(table)
    lines = len(table.lines)
    blocks_of_line: dict[int, set[int]] = {}  # line → the PTX blocks with instructions of it
    for block, pairs in enumerate(table.block_lines):
        for line, n in pairs:
            if n:
                blocks_of_line.setdefault(line, set()).add(block)
    matched = [dict() for _ in table.block_lines]
    unmatched, static = np.zeros(lines, np.int64), np.zeros(lines, np.int64)
    unknown = blocks = matched_blocks = 0
    for section in sections:
        graph = sass_graph(section)
        own = section.name == f".text.{kernel}"
        for b, start in enumerate(graph.starts):
            if b not in graph.reachable:
                continue
            stop = graph.starts[b + 1] if b + 1 < len(graph.starts) else len(section.instructions)
            found = [resolve(insn.key) for insn in section.instructions[start:stop]]
            unknown += sum(1 for i in found if i is None)
            found = [i for i in found if i is not None]
            for i in found:
                static[i] += 1
            blocks += own
            target = None
            if own and graph.known and ptx_cyclic is not None and b not in graph.cyclic and len(found) == stop - start:
                target = _only_block_with(set(found), blocks_of_line, ptx_cyclic)
            if target is None:
                for i in found:
                    unmatched[i] += 1
                continue
            matched_blocks += 1
            for i in found:
                matched[target][i] = matched[target].get(i, 0) + 1
    return SassLines(tuple(tuple(sorted(m.items())) for m in matched), tuple(int(v) for v in unmatched),
                     tuple(int(v) for v in static), unknown, blocks, matched_blocks)


def _only_block_with(lines: set[int], blocks_of_line: dict, ptx_cyclic: set[int]) -> int | None:
    """The one PTX block holding all of `lines`, if there is one and it is on no cycle (sets of the
    rarest line first: the intersection stays small)."""
    candidates = None
    for line in sorted(lines, key=lambda l: len(blocks_of_line.get(l, ()))):
        have = blocks_of_line.get(line, set())
        candidates = set(have) if candidates is None else candidates & have
        if len(candidates) <= 1:
            break
    if candidates is None or len(candidates) != 1:
        return None
    (block,) = candidates
    if len(lines) > 1 and not all(block in blocks_of_line.get(line, ()) for line in lines):
        return None
    return None if block in ptx_cyclic else block


def sass_line_instructions(block_threads, table, sass: SassLines) -> tuple[np.ndarray, np.ndarray]:
    """SASS thread-instructions per line (float: the unmatched part is an estimate) and, per line,
    whether it is exact (no unmatched SASS instruction): module doc, 4."""
    threads = np.zeros(len(table.block_lines), np.float64)
    given = np.asarray(block_threads, np.float64)[: len(threads)]
    threads[: len(given)] = given
    lines = len(table.lines)
    out = np.zeros(lines, np.float64)
    for block, pairs in enumerate(sass.matched):
        for line, n in pairs:
            out[line] += threads[block] * n
    matched_ptx = {block for block, pairs in enumerate(sass.matched) if pairs}
    executed, static = np.zeros((2, lines)), np.zeros((2, lines))  # row 0: every PTX block, row 1: unmatched ones
    for block, pairs in enumerate(table.block_lines):
        for line, n in pairs:
            executed[0, line] += threads[block] * n
            static[0, line] += n
            if block not in matched_ptx:
                executed[1, line] += threads[block] * n
                static[1, line] += n
    unmatched = np.asarray(sass.unmatched, np.float64)
    for line in np.nonzero(unmatched)[0]:
        row = 1 if static[1, line] else 0
        if static[row, line]:
            out[line] += unmatched[line] * executed[row, line] / static[row, line]
    return out, unmatched == 0


# ---------------------------------------------------------------- assembling and disassembling the original kernel


def find_nvdisasm() -> str | None:
    """$NVDISASM, nvdisasm on PATH, next to ptxas, in the CUDA toolkit, NVIDIA's wheel (a dependency of
    ours: nvidia-cuda-nvdisasm), or Triton's bundled one."""
    candidates = [os.environ.get("NVDISASM"), shutil.which("nvdisasm")]
    ptxas = shutil.which("ptxas")
    if ptxas:
        candidates.append(str(Path(os.path.realpath(ptxas)).parent / "nvdisasm"))
    candidates += ["/usr/local/cuda/bin/nvdisasm", _nvidia_wheel_tool("nvdisasm"), _triton_tool("nvdisasm")]
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


def _nvidia_wheel_tool(name: str) -> str | None:
    """A CUDA tool from NVIDIA's wheels (`nvidia/cu13/bin/<name>`), found without importing them."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return None
    for root in (spec.submodule_search_locations or []) if spec else []:
        for release in ("cu13", "cu12"):
            path = os.path.join(root, release, "bin", name)
            if os.access(path, os.X_OK):
                return path
    return None


def _triton_tool(name: str) -> str | None:
    import importlib.util

    try:
        spec = importlib.util.find_spec("triton")
    except (ImportError, ValueError):
        return None
    for root in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(root, "backends", "nvidia", "bin", name)
        if os.path.exists(path):
            return path
    return None


PTX_TARGET_RE = re.compile(r"^\s*\.target\s+(sm_\w+)", re.MULTILINE)


def disassemble(ptx: str, ptxas: str | None = None, nvdisasm: str | None = None, timeout: int = 300) -> str:
    """`nvdisasm -c -gi` of the cubin `ptxas -lineinfo` makes of `ptx` (for its own .target)."""
    # a real ptxas (NEUTRINO_PTXAS may be a test's fake): on PATH, the CUDA toolkit's, Triton's
    cuda = "/usr/local/cuda/bin/ptxas"
    ptxas = ptxas or shutil.which("ptxas") or (cuda if os.access(cuda, os.X_OK) else None) or _triton_tool("ptxas")
    nvdisasm = nvdisasm or find_nvdisasm()
    if not ptxas or not nvdisasm:
        raise SassUnavailable(f"no {'ptxas' if not ptxas else 'nvdisasm'} found (put ptxas on PATH; set NVDISASM)")
    target = PTX_TARGET_RE.search(ptx)
    try:
        with tempfile.TemporaryDirectory(prefix="neutrino-sass-") as tmp:
            src, cubin = Path(tmp) / "original.ptx", Path(tmp) / "original.cubin"
            src.write_text(ptx)
            steps = ([ptxas, "-lineinfo", f"-arch={target.group(1) if target else 'sm_90'}", "-o", str(cubin), str(src)],
                     [nvdisasm, "-c", "-gi", str(cubin)])
            for step in steps:
                try:
                    done = subprocess.run(step, capture_output=True, text=True, timeout=timeout)
                except (OSError, subprocess.TimeoutExpired) as e:
                    raise SassUnavailable(f"{step[0]}: {e}") from None
                if done.returncode != 0:
                    raise SassUnavailable(f"{step[0]} exit {done.returncode}: {(done.stderr or done.stdout).strip()[-400:]}")
            return done.stdout
    except OSError as e:  # no room for the PTX and cubin (a full or read-only TMPDIR): a note, not a traceback
        raise SassUnavailable(f"temporary files: {e}") from None


def sass_lines_of(ptx: str, kernel: str, table, disassembly: str | None = None) -> SassLines:
    """The kernel's SassLines: its PTX (the original) parsed for the PTX graph, assembled and disassembled
    (or `disassembly`, nvdisasm -c -gi text, given)."""
    from neutrino.isa.ptx import parse_module
    from neutrino.isa.ptx.lines import build_line_map

    module = parse_module(ptx, kernel)
    function = module.function(kernel)
    if function is None:
        raise ValueError(f"no function {kernel!r} in the PTX")
    line_map = build_line_map(module, function)
    successors = ptx_successors(function, line_map)
    text = disassembly if disassembly is not None else disassemble(ptx)
    cyclic = None if successors is None else cyclic_nodes(successors)
    # the module's other kernels are assembled too; their code is never this kernel's, even where it has
    # its lines (two instantiations of one template), while a called function's section is
    others = {f".text.{f.name}" for f in module.entries() if f.name != kernel}
    sections = [section for section in parse_nvdisasm(text) if section.name not in others]
    return match_blocks(table, cyclic, sections, kernel)

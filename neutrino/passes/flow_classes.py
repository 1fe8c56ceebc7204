"""Basic blocks of a kernel body that every thread runs equally often: the classes register counters share.

Blocks P and J run the same number of times in every thread's run that reaches an exit when

* P dominates J (a thread reaches J only through P),
* J post-dominates P (from P, every way to an exit passes J), and
* every cycle through P passes J and every cycle through J passes P.

Then, along a thread's path, P comes before the first J, J after the last P, and between two Ps
(a closed walk through P, which holds a simple cycle through P) there is a J, and the other
way round: the two alternate, P J P J ... P J. A thread that never reaches an exit flushes
nothing anyway (passes/register_counters.py).

The graph is that of the statements as they are at SAVE lowering (the kernel's code and the
probes' snippets, which are straight-line or bounded loops): a block starts at a label or
after a branch, `ret`, `exit` or `trap`, and ends at one of those; a guarded `ret`/`exit`
also falls through. An indirect branch (`brx.idx`) or a branch to a label not found leaves
every block in a class of its own. Dominators and post-dominators are computed with the
iterative algorithm on reverse post-order (Cooper, Harvey and Kennedy); the cycle condition
by a search that avoids the other block. The searches are bounded (CYCLE_CHECK_BUDGET steps
per body): past it, the remaining blocks keep classes of their own.
"""

from __future__ import annotations

from neutrino.isa.ptx import ir
from neutrino.isa.ptx.lines import BLOCK_ENDS

#: dominator-tree ancestors of a block tried as its class's representative
ANCESTORS_TRIED = 4
#: the most graph steps the cycle checks of one body may take (they then stop: fewer shared classes)
CYCLE_CHECK_BUDGET = 2_000_000
_ENDS = BLOCK_ENDS - {"bra", "brx"}  # the ends that leave the kernel (or stop it: trap)


def block_graph(body: list[ir.Statement]) -> tuple[list[int], list[list[int]]] | None:
    """(block of each flattened statement, successors of each block; -1 is the exit), or None when unknown."""
    statements = [stmt for _, _, stmt in ir.walk(body)]
    starts, labels = [0], {}
    for position, stmt in enumerate(statements):
        if type(stmt) is ir.Label:
            labels[stmt.name] = position
            starts.append(position)
        elif type(stmt) is ir.Instruction and stmt.opcode.base in BLOCK_ENDS:
            starts.append(position + 1)
    starts = sorted(set(s for s in starts if s <= len(statements)))
    block_of, block = [], -1
    boundaries = set(starts)
    for position in range(len(statements)):
        if position in boundaries:
            block += 1
        block_of.append(block)
    count = block + 1
    last: dict[int, int] = {}
    for position, b in enumerate(block_of):
        last[b] = position
    successors: list[list[int]] = [[] for _ in range(count)]
    for b in range(count):
        stmt = statements[last[b]]
        falls = True
        if type(stmt) is ir.Instruction:
            base = stmt.opcode.base
            if base == "brx":
                return None
            if base == "bra":
                target = stmt.operands[-1] if stmt.operands else None
                if not isinstance(target, (ir.Symbol, ir.Register)) or target.name not in labels:
                    return None
                successors[b].append(block_of[labels[target.name]])
                falls = stmt.guard is not None
            elif base in _ENDS:
                if base != "trap":
                    successors[b].append(-1)
                falls = stmt.guard is not None
        if falls:
            successors[b].append(b + 1 if b + 1 < count else -1)
    return block_of, [list(dict.fromkeys(s)) for s in successors]


def _reverse_postorder(successors: list[list[int]], root: int) -> list[int]:
    order, seen, stack = [], {root}, [(root, iter(successors[root]))]
    while stack:
        node, children = stack[-1]
        child = next(children, None)
        if child is None:
            stack.pop()
            order.append(node)
        elif child not in seen:
            seen.add(child)
            stack.append((child, iter(successors[child])))
    return order[::-1]


def dominators(successors: list[list[int]], root: int) -> dict[int, int]:
    """Immediate dominator of every node reachable from `root` (the root's is itself)."""
    order = _reverse_postorder(successors, root)
    rank = {node: k for k, node in enumerate(order)}
    predecessors: dict[int, list[int]] = {node: [] for node in order}
    for node in order:
        for child in successors[node]:
            predecessors[child].append(node)
    idom = {root: root}
    changed = True
    while changed:
        changed = False
        for node in order[1:]:
            done = [p for p in predecessors[node] if p in idom]
            new = done[0]
            for other in done[1:]:
                a, b = new, other
                while a != b:
                    while rank[a] > rank[b]:
                        a = idom[a]
                    while rank[b] > rank[a]:
                        b = idom[b]
                new = a
            if idom.get(node) != new:
                idom[node] = new
                changed = True
    return idom


def _dominates(idom: dict[int, int], a: int, b: int) -> bool:
    while b != a:
        parent = idom.get(b)
        if parent is None or parent == b:
            return False
        b = parent
    return True


class _Budget:
    def __init__(self, steps: int):
        self.steps = steps


def _on_cycle_avoiding(successors: list[list[int]], node: int, avoid: int, budget: _Budget) -> bool | None:
    """Whether some cycle through `node` avoids `avoid` (None: out of budget)."""
    stack, seen = [c for c in successors[node] if c != avoid and c >= 0], set()
    while stack:
        budget.steps -= 1
        if budget.steps < 0:
            return None
        current = stack.pop()
        if current == node:
            return True
        if current in seen:
            continue
        seen.add(current)
        stack.extend(c for c in successors[current] if c != avoid and c >= 0 and c not in seen)
    return False


def equal_count_classes(successors: list[list[int]]) -> list[int]:
    """The representative block of each block's class (itself when it shares none); blocks unreachable stay alone."""
    count = len(successors)
    representative = list(range(count))
    if count == 0:
        return representative
    idom = dominators(successors, 0)
    exit_node = count  # the exit, as a node of the reversed graph
    reversed_successors: list[list[int]] = [[] for _ in range(count + 1)]
    for node, children in enumerate(successors):
        for child in children:
            reversed_successors[exit_node if child < 0 else child].append(node)
    ipdom = dominators(reversed_successors, exit_node)
    budget = _Budget(CYCLE_CHECK_BUDGET)
    for block in _reverse_postorder(successors, 0):
        ancestor = block
        for _ in range(ANCESTORS_TRIED):
            parent = idom.get(ancestor)
            if parent is None or parent == ancestor:
                break
            ancestor = parent
            if block not in ipdom or not _dominates(ipdom, block, ancestor):
                continue
            apart = (_on_cycle_avoiding(successors, ancestor, block, budget),
                     _on_cycle_avoiding(successors, block, ancestor, budget))
            if None in apart:
                return representative
            if not any(apart):
                representative[block] = representative[ancestor]
                break
    return representative


def statement_classes(body: list[ir.Statement]) -> dict[int, int]:
    """id(instruction) → its block's class (the representative block's number); {} when the graph is unknown.

    Two unguarded instructions of the same class run equally often in every thread that exits.
    """
    graph = block_graph(body)
    if graph is None:
        return {}
    block_of, successors = graph
    representative = equal_count_classes(successors)
    statements = [stmt for _, _, stmt in ir.walk(body)]
    return {id(stmt): representative[block_of[p]] for p, stmt in enumerate(statements) if type(stmt) is ir.Instruction}

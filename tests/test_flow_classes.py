"""Classes of basic blocks that every thread runs equally often (neutrino/passes/flow_classes.py).

Checked on random control-flow graphs by walking random paths to the exit: every block runs as
often as its class's representative on every path. A check that ignores cycles is caught.
"""

from __future__ import annotations

import random

from neutrino.isa.ptx import ir, parse_module
from neutrino.passes import flow_classes


def random_graph(rng: random.Random, n: int) -> list[list[int]]:
    """n blocks, each with one or two successors among the blocks and the exit (-1)."""
    return [list(dict.fromkeys(rng.choice(list(range(n)) + [-1]) for _ in range(rng.choice((1, 2, 2)))))
            for _ in range(n)]


def walk(successors: list[list[int]], rng: random.Random, steps: int = 300) -> list[int] | None:
    """How often one random path from block 0 runs each block; None when it did not reach the exit."""
    counts, node = [0] * len(successors), 0
    for _ in range(steps):
        counts[node] += 1
        node = rng.choice(successors[node])
        if node < 0:
            return counts
    return None


def mismatches(seed: int, graphs: int = 400) -> tuple[int, int]:
    """(paths where a block ran a different number of times than its representative, blocks merged)."""
    rng = random.Random(seed)
    bad = merged = 0
    for _ in range(graphs):
        successors = random_graph(rng, rng.randint(2, 9))
        representative = flow_classes.equal_count_classes(successors)
        merged += sum(1 for b, r in enumerate(representative) if b != r)
        for _ in range(40):
            counts = walk(successors, rng)
            if counts is not None:
                bad += any(counts[b] != counts[r] for b, r in enumerate(representative))
    return bad, merged


def test_blocks_of_a_class_run_equally_often_on_every_path():
    bad, merged = mismatches(1)
    assert merged > 100  # the classes are not trivial
    assert bad == 0


def test_a_check_without_the_cycle_condition_is_caught(monkeypatch):
    monkeypatch.setattr(flow_classes, "_on_cycle_avoiding", lambda *args: False)
    bad, _ = mismatches(1)
    assert bad > 0


def test_dominance_both_ways_is_not_enough():
    """h → P → {A, J}; A → t; J → {t, exit}; t → h: J dominates nothing it skips, yet P runs more often."""
    h, p, a, j, t = range(5)
    successors = [[p], [a, j], [t], [t, -1], [h]]
    assert flow_classes.equal_count_classes(successors) == [0, 0, 2, 3, 4]  # h and P only (P follows h always)


DIAMOND = """.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u32 n)
{
.reg .pred %p<3>; .reg .b32 %r<4>;
ld.param.u32 %r1, [n];
mov.u32 %r2, 0;
HEAD:
setp.eq.u32 %p1, %r2, 3;
@%p1 bra ELSE;
add.u32 %r3, %r2, 1;
bra.uni JOIN;
ELSE:
sub.u32 %r3, %r2, 1;
JOIN:
add.u32 %r2, %r2, 1;
setp.lt.u32 %p2, %r2, %r1;
@%p2 bra HEAD;
ret;
}
"""


def test_an_if_else_join_shares_its_head_class():
    function = parse_module(DIAMOND).entries()[0]
    classes = flow_classes.statement_classes(function.body)
    by_text = {str(i.opcode) + " " + ", ".join(map(str, i.operands)): classes[id(i)] for i in ir.instructions(function.body)}
    head, then, other, join = (by_text[t] for t in ("setp.eq.u32 %p1, %r2, 3", "add.u32 %r3, %r2, 1",
                                                    "sub.u32 %r3, %r2, 1", "add.u32 %r2, %r2, 1"))
    assert head == join and len({head, then, other}) == 3
    assert by_text["ld.param.u32 %r1, [n]"] != head  # the entry runs once, the loop's head n times


def test_an_indirect_branch_leaves_every_block_alone():
    text = DIAMOND.replace("bra.uni JOIN;", "brx.idx %r1, TARGETS;").replace(
        ".reg .pred", "TARGETS: .branchtargets JOIN, ELSE;\n.reg .pred")
    function = parse_module(text).entries()[0]
    assert flow_classes.statement_classes(function.body) == {}

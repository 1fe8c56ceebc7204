"""The chain's head and slot layout (spec/runtime.md, "The chain"): one source of truth for the engine's
`graph_chain` variant (neutrino/passes/graph_chain.py) and the runtime (neutrino/runtime/cudagraphs/chain.py).
Plain constants: the runtime imports this without the instrumentation engine (nothing probed must import no
parser or pass: tests/test_startup.py)."""

from __future__ import annotations

# the head: u64 words at these byte offsets
CUR, ADV, RING, GEOM, WRITTEN, DROPPED, DRAINED = range(0, 56, 8)
HEAD_BYTES = 128  # 8 words, then a table (reserved) of the heads a node advancing several would take
PRIMED = 1 << 32  # in the DROPPED word, above the 32-bit drop count
TAG_BYTES = 16  # a slot's last 16 bytes: the u64 tag (1-based launch number), then 8 bytes of padding
SLOT_ALIGN = 256


def slot_stride(span: int) -> int:
    """A slot's bytes: the node's maps, then the tag, rounded up to SLOT_ALIGN."""
    return -(-(span + TAG_BYTES) // SLOT_ALIGN) * SLOT_ALIGN

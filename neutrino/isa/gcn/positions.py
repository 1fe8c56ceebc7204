"""What a probe position names on GCN and RDNA: mnemonic prefixes, or the portable PTX names the DSL's tools use.

A GCN position is a prefix of mnemonics (`global_load_`, `v_mfma_`); a PTX
position or selector that a portable probe names (`ld.global`, `#memory.global`)
stands for the GCN prefixes of `PORTABLE_POSITIONS`. A prefix that starts no
mnemonic of the generation (`neutrino/isa/gcn/mnemonics.py`) would match
nothing, silently: it is refused with the closest spellings.
"""

from __future__ import annotations

from neutrino.isa.gcn.dialect import GFX9, Dialect
from neutrino.isa.gcn.mnemonics import closest, prefix_known
from neutrino.isa.rdna.dialect import GFX11

#: the PTX positions that select by source line (neutrino/isa/ptx/lines.py): the lines tools
LINE_POSITIONS = ("block", "line")
#: the dialect of each AMDGPU snippet language (a probe file's `isa`)
DIALECTS = {"gcn": GFX9, "rdna": GFX11}

#: PTX positions a portable probe (the DSL's built-in tools) may name, and the GCN mnemonics they mean
PORTABLE_POSITIONS = {
    "ld.global": ("global_load_",), "st.global": ("global_store_",),
    "atom.global": ("global_atomic_",), "red.global": ("global_atomic_",),
    "ld.shared": ("ds_read", "ds_load"), "st.shared": ("ds_write", "ds_store"),
    "mma": ("v_mfma_",), "wgmma": ("v_mfma_",), "wmma": ("v_mfma_",), "bra": ("s_branch", "s_cbranch_"),
    # selectors of the PTX semantics table (spec/probe-toml.md, "Selectors") the built-in tools name
    "#memory.global": ("global_load_", "global_store_", "global_atomic_"), "#async_copy.global": (),
    "#tensor_core": ("v_mfma_",), "#branch": ("s_branch", "s_cbranch_"),
}


def _portable(text: str) -> list[str]:
    return [ptx for ptx in PORTABLE_POSITIONS if text == ptx or text.startswith(ptx + ".")]


def gcn_prefixes(position, dialect: Dialect = GFX9) -> tuple[str, ...]:
    """GCN mnemonic prefixes of a probe position: GCN prefixes as written, PTX ones through the table
    (the matrix instructions are the dialect's: MFMA on CDNA, WMMA on RDNA)."""
    out: list[str] = []
    for components in position:
        text = ".".join(components)
        mapped = [dialect.mma_prefix if gcn == "v_mfma_" else gcn for ptx in _portable(text) for gcn in PORTABLE_POSITIONS[ptx]]
        out.extend(mapped or ([text] if "." not in text else []))
    return tuple(dict.fromkeys(out))


def position_problem(components: tuple[str, ...], dialect: Dialect) -> tuple[str, list[str]] | None:
    """None when this part of a position names something on `dialect`; else (message, closest spellings)."""
    text = ".".join(components)
    if text in LINE_POSITIONS:  # not a typo, and not a mnemonic: GCN modules carry no source lines to select by
        return f"selects instructions by source line, which only PTX modules carry ({dialect.family} has none)", []
    if "." in text or text.startswith("#"):
        if _portable(text):
            return None
        return (f"is neither a {dialect.family} mnemonic prefix nor a portable PTX position (spec/gcn.md)",
                closest(text, PORTABLE_POSITIONS))
    if prefix_known(text, dialect.mnemonics):
        return None
    # suggest mnemonics and their prefixes up to an underscore, so `global_lod_` offers `global_load_`
    stems = {m[:i + 1] for m in dialect.mnemonics for i, c in enumerate(m) if c == "_"}
    return f"no {dialect.family} mnemonic starts with {text!r}", closest(text, stems | dialect.mnemonics)

"""The ISAs the engine knows, by name and by what a file looks like (a third one is added here)."""

from __future__ import annotations

from neutrino.errors import NeutrinoError
from neutrino.isa.gcn.target import GCN
from neutrino.isa.ptx.target import PTX
from neutrino.isa.rdna.target import RDNA

#: every ISA, PTX first: it is the one a file is taken for when no other recognizes it
ISAS = {isa.name: isa for isa in (PTX, GCN, RDNA)}
#: text near the start of an assembly file that names its ISA; PTX files (and binaries holding PTX) have none of these
SIGNATURES = {b"amdgcn-amd-amdhsa--gfx11": RDNA, b".amdgcn_target": GCN}  # the first that matches: gfx11 before other AMDGPU


def isa_named(name: str):
    isa = ISAS.get(name)
    if isa is None:
        raise NeutrinoError(f"unknown assembly {name!r} (known: {', '.join(sorted(ISAS))})")
    return isa


def isa_of_file(path: str):
    """The ISA of an assembly file, from its first 64 KiB; PTX when nothing else matches (or it cannot be read yet)."""
    try:
        with open(path, "rb") as f:
            head = f.read(65536)
    except OSError:
        return PTX  # the PTX reader says what is wrong with the path
    return next((isa for signature, isa in SIGNATURES.items() if signature in head), PTX)

"""AMDGPU (GCN/CDNA: gfx90a, gfx942) assembly: parse, print, the semantics of its instructions."""

from neutrino.isa.gcn.parser import parse_module
from neutrino.isa.gcn.printer import print_module, print_statement

__all__ = ["parse_module", "print_module", "print_statement"]

"""PTX: parse, print and the semantics of its instructions."""

from neutrino.isa.ptx.parser import parse_module, parse_statements
from neutrino.isa.ptx.printer import print_module, print_statement

__all__ = ["parse_module", "parse_statements", "print_module", "print_statement"]

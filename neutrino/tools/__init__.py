"""The built-in tools, one folder each (spec/tools.md, "A tool's folder"); neutrino.toolbox finds them."""

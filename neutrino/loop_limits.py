"""The limits on loops in probe code (spec/ir.md, "Loops"), shared by the DSL compiler
(neutrino/language/loops.py) and the verifier of loops in probe snippets
(neutrino/passes/probe_loops.py). Imports nothing: the compiler reads them without loading the
passes package and the PTX parser behind it (issue 29, the launcher's cold check)."""

MAX_PATH_LENGTH = 4096
MAX_TRIP_COUNT = 1024
MAX_LOOP_DEPTH = 3

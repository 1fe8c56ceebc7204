"""Where each `.entry` body ends (runtime/instrument/prebuild.py), found with the PTX parser's own
brace scan: braces inside comments and strings do not count; a body that never closes gives none."""

from neutrino.runtime.instrument.prebuild import entry_spans

MODULE = (".version 8.0\n.target sm_80\n.address_size 64\n"
          ".visible .entry a(.param .u32 x) // { in a comment\n"
          "{\n .reg .b32 %r<3>;\n { mov.u32 %r1, 1; } // } in a comment\n .pragma \"no}unroll\";\n ret;\n}\n"
          ".visible .entry b()\n{ /* } */ ret; }\n")


def test_entry_bodies_end_at_their_closing_brace():
    spans = entry_spans(MODULE)
    assert [name for _, _, name in spans] == ["a", "b"]
    texts = [MODULE[start:end] for start, end, _ in spans]
    assert texts[0].startswith(".visible .entry a") and texts[0].endswith("ret;\n}")
    assert texts[1] == ".visible .entry b()\n{ /* } */ ret; }"


def test_a_body_that_never_closes_gives_no_spans():
    assert entry_spans(MODULE + ".visible .entry c()\n{ ret;\n") == []
    assert entry_spans(".visible .entry d() } {\n}\n") == []  # a '}' before the body's '{'

"""The pipeline: source -> frontend -> IR verification -> backend -> TOML.

    lower_module   Python source (ast) -> ModuleIR; all user errors come from here
    verify         typing rules of spec/ir.md; a failure is a compiler bug
    emit_toml      each probe body through the backend, into the explicit form
"""

from __future__ import annotations

import os

from neutrino.errors import Diagnostic, Location
from neutrino.language.backends import get_backend
from neutrino.language.errors import DslError
from neutrino.language.frontend import lower_module
from neutrino.language.ir import ModuleIR, verify
from neutrino.language.toml_emit import emit_toml


def compile_to_ir(text: str, filename: str = "<input>") -> ModuleIR:
    """Source text -> verified Neutrino IR; raises DslError."""
    try:
        module, diags = lower_module(text, filename)
        if diags:
            raise DslError(diags)
        verify(module)
    except DslError:
        raise
    except RecursionError:
        raise DslError(Diagnostic(Location(filename), "expression nested too deeply")) from None
    except Exception as e:  # a compiler bug must still not surface as a traceback
        raise DslError(Diagnostic(Location(filename), f"internal compiler error: {type(e).__name__}: {e}",
                                  hint="please report this with the probe file")) from e
    return module


def compile_source(text: str, filename: str = "<input>", backend: str = "ptx") -> str:
    """DSL source text -> explicit-form TOML text (spec/probe-toml.md)."""
    module = compile_to_ir(text, filename)
    return emit_toml(module, get_backend(backend))


def compile_file(path, backend: str = "ptx") -> str:
    """A DSL probe file -> explicit-form TOML text; raises DslError."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise DslError(Diagnostic(Location(path), f"cannot read probe file: {e}")) from None
    return compile_source(text, path, backend)

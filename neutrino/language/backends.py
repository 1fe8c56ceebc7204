"""The backends by name: the PTX one (backend.py), the GCN one and its wave32 RDNA variant (backend_gcn.py).

Each is imported when asked for: compiling a PTX probe (the launcher's check on a probe-cache miss)
does not load the GCN backend and the GCN assembly parser behind it (issue 29)."""

from __future__ import annotations

import importlib

# name -> (module, class); each class's `name` is its key (tests/test_startup_imports.py)
BACKENDS: dict[str, tuple[str, str]] = {
    "ptx": ("neutrino.language.backend", "PTXBackend"),
    "gcn": ("neutrino.language.backend_gcn", "GCNBackend"),
    "rdna": ("neutrino.language.backend_gcn", "RDNABackend"),
}


def backend_class(name: str):
    """The Backend class registered as `name`; ValueError naming the known ones otherwise."""
    try:
        module, cls = BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r} (known: {', '.join(sorted(BACKENDS))})") from None
    return getattr(importlib.import_module(module), cls)


def get_backend(name: str = "ptx"):
    return backend_class(name)()

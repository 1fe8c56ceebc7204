"""The backends by name: the PTX one (backend.py), the GCN one and its wave32 RDNA variant (backend_gcn.py)."""

from __future__ import annotations

from neutrino.language.backend import Backend, PTXBackend
from neutrino.language.backend_gcn import GCNBackend, RDNABackend

BACKENDS: dict[str, type[Backend]] = {PTXBackend.name: PTXBackend, GCNBackend.name: GCNBackend, RDNABackend.name: RDNABackend}


def get_backend(name: str = "ptx") -> Backend:
    try:
        return BACKENDS[name]()
    except KeyError:
        raise ValueError(f"unknown backend {name!r} (known: {', '.join(sorted(BACKENDS))})") from None

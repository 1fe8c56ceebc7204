"""Neutrino: eBPF-style probes for GPU kernels."""

__version__ = "0.1.0"


def __getattr__(name):
    # The DSL is imported lazily so that `import neutrino` stays cheap (the runtime imports it at startup).
    if name in ("probe", "Map"):
        import neutrino.language as language

        return getattr(language, name)
    raise AttributeError(name)

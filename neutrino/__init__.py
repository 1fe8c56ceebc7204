"""Neutrino: eBPF-style probes for GPU kernels.

`from neutrino import probe, Map` gives the probe-language decorators
(`neutrino.language`), imported lazily so that `import neutrino` stays cheap
(the runtime imports it at startup). Probe files are read by `neutrino.probefile`.
`neutrino.annotate("name")` marks a range of the program (neutrino/annotation.py).
"""

__version__ = "0.1.0"


def __getattr__(name):
    if name in ("probe", "Map"):
        import neutrino.language as language

        return getattr(language, name)
    if name == "annotate":
        from neutrino.annotation import annotate

        globals()["annotate"] = annotate  # later lookups skip this function
        return annotate
    raise AttributeError(f"module 'neutrino' has no attribute {name!r}")

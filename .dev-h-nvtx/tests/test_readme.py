"""The README's custom-pass example runs and does what it says."""

import re
from pathlib import Path

from helpers import DATA

README = Path(__file__).parent.parent / "README.md"


def test_readme_custom_pass(monkeypatch):
    code = re.search(r"### A custom pass\n\n```python\n(.*?)```", README.read_text(), re.S).group(1)
    code = code.replace('open("kernel.ptx")', f'open("{DATA / "corpus" / "nvcc" / "vec.sm90.ptx"}")').replace("print(result.kernels)", "")
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    kernels = scope["result"].kernels
    assert kernels and all(k["sites"] <= 2 for k in kernels.values())  # one gmem site plus at most the kernel-exit ones


def test_readme_starts_with_install_and_test_commands():
    text = README.read_text()
    first_block = re.search(r"```sh\n(.*?)```", text, re.S).group(1).strip().splitlines()
    assert first_block[0].startswith("pip install") and "neutrino demo" in first_block[0]
    assert first_block[1].startswith("python -m pytest")
    ci = (README.parent / ".ci" / "run").read_text()
    assert "python3 -m pytest" in ci


def test_readme_toml_probe_records_what_the_builtin_tool_records(tmp_path):
    """The README's TOML probe and `-p block_sched` give the same map: one tool, one set of field names."""
    from neutrino.probefile import load_probes, parse_probes

    toml = re.search(r"## Probes\n.*?```toml\n(.*?)```", README.read_text(), re.S).group(1)
    by_hand, builtin = parse_probes(toml, "README.md").maps["block_sched"], load_probes("block_sched").maps["block_sched"]
    layout = [(f.name, f.type, f.offset) for f in builtin.fields]
    assert layout == [("start", "u64", 0), ("elapsed", "u32", 8), ("cuid", "u32", 12)]
    assert [(f.name, f.type, f.offset) for f in by_hand.fields] == layout
    assert (by_hand.level, by_hand.record_bytes) == (builtin.level, builtin.record_bytes)

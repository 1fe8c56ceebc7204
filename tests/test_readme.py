"""The README's custom-pass example runs and does what it says."""

import re
from pathlib import Path

from helpers import DATA

README = Path(__file__).parent.parent / "README.md"


def test_readme_custom_pass(tmp_path):
    """Run as a user would (a script next to kernel.ptx): one global access probed per kernel, its count still saved."""
    import shutil
    import subprocess
    import sys

    from neutrino.engine import instrument
    from neutrino.toolbox import load_probes

    code = re.search(r"### A custom pass\n.*?```python\n(.*?)```", README.read_text(), re.S).group(1)
    kernel = DATA / "corpus" / "nvcc" / "vec.sm90.ptx"
    shutil.copy(kernel, tmp_path / "kernel.ptx")
    (tmp_path / "example.py").write_text(code + "\nopen('probed.ptx', 'w').write(result.ptx)\n")
    run = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True,
                         env={**__import__("os").environ, "PYTHONPATH": str(README.parent)})
    assert run.returncode == 0, run.stderr
    full = instrument(kernel.read_text(), load_probes("gmem_bytes")).kernels
    lines = run.stdout.splitlines()
    assert len(lines) == len(full) == 2
    for line, (name, info) in zip(lines, full.items()):
        matched = info["matched"]["count_bytes"]
        assert matched > 1  # so that keeping one access is visible
        kept = info["sites"] - matched + 1  # every instruction site but the first; the entry and exit sites stay
        assert line == f"{name}: {matched} global accesses matched, {kept} sites kept, maps ['gmem_bytes']", line
    probed = (tmp_path / "probed.ptx").read_text()
    full_ptx = instrument(kernel.read_text(), load_probes("gmem_bytes")).ptx
    assert len(kernel.read_text()) < len(probed) < len(full_ptx)
    assert probed.count("red.global.add.u64") == full_ptx.count("red.global.add.u64") > 0  # the save is still there
    if shutil.which("ptxas"):
        from helpers import ptxas

        ptxas(probed)


def test_readme_starts_with_install_and_test_commands():
    text = README.read_text()
    first_block = re.search(r"```sh\n(.*?)```", text, re.S).group(1).strip().splitlines()
    assert first_block[0].startswith("pip install") and "neutrino demo" in first_block[0]
    assert first_block[1].startswith("python -m pytest")
    ci = (README.parent / ".ci" / "run").read_text()
    assert "python3 -m pytest" in ci


def test_readme_toml_probe_records_what_the_builtin_tool_records(tmp_path):
    """The README's TOML probe and `-p block_sched` give the same map: one tool, one set of field names."""
    from neutrino.probefile import parse_probes
    from neutrino.toolbox import load_probes

    toml = re.search(r"## Probes\n.*?```toml\n(.*?)```", README.read_text(), re.S).group(1)
    by_hand, builtin = parse_probes(toml, "README.md").maps["block_sched"], load_probes("block_sched").maps["block_sched"]
    layout = [(f.name, f.type, f.offset) for f in builtin.fields]
    assert layout == [("start", "u64", 0), ("elapsed", "u32", 8), ("cuid", "u32", 12)]
    assert [(f.name, f.type, f.offset) for f in by_hand.fields] == layout
    assert (by_hand.level, by_hand.record_bytes) == (builtin.level, builtin.record_bytes)

"""Bad input gets a located message and a non-zero exit, never a traceback (issue 11, first items)."""

from __future__ import annotations

from pathlib import Path

import pytest

from neutrino.cli import main
from neutrino.errors import ProbeError
from neutrino.probefile import parse_probes

VEC = Path(__file__).parent / "data" / "corpus" / "nvcc" / "vec.sm90.ptx"


@pytest.mark.parametrize("text,line", [
    ('[p]\nposition = "kernel"\nposition = "kernel"\nbefore = "mov.u32 %a, 1;"\n', 3),
    ('[a]\nposition = "kernel"\nbefore = ""\n[b]\nposition = "kernel"\nbefore = "x"\nbefore = "y"\n', 7),
    ('[p]\n"position" = "kernel"\nposition = "kernel"\n', 3),
])
def test_a_key_written_twice_is_located(text, line):
    with pytest.raises(ProbeError) as info:
        parse_probes(text, "dup.toml")
    message = str(info.value)
    assert f"dup.toml:{line}:" in message and "appears twice" in message


def test_duplicate_key_through_the_cli(tmp_path, capsys):
    probe = tmp_path / "dup.toml"
    probe.write_text('[p]\nposition = "kernel"\nposition = "kernel"\nbefore = "mov.u32 %a, 1;"\n')
    assert main(["instrument", str(VEC), "-p", str(probe)]) == 1
    err = capsys.readouterr().err
    assert "dup.toml:3:1: error" in err and "Traceback" not in err


@pytest.mark.parametrize("option", ["-o", "--info"])
def test_output_into_a_missing_directory(tmp_path, capsys, option):
    target = tmp_path / "no" / "such" / "dir" / "out"
    assert main(["instrument", str(VEC), "-p", "block_sched", option, str(target)]) == 1
    err = capsys.readouterr().err
    assert f"{option} {target}: cannot write: No such file or directory" in err and "Traceback" not in err

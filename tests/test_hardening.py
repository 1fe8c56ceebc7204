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


# ----------------------------------------------------------------- traces

import json  # noqa: E402

import numpy as np  # noqa: E402

import neutrino.trace as nt  # noqa: E402


def _one_launch_run(tmp_path, event_overrides=None, mutate=None):
    run = tmp_path / "run"
    (run / "result").mkdir(parents=True)
    buf = np.zeros(nt.buffer_bytes(2, 1, 8), np.uint8)
    sec = nt.MapSection("m", "block", 8, 1, 2, [("v", "u64", 0)], buf.tobytes())
    nt.write_result(run / "result" / "0.bin", grid=(2, 1, 1), block=(32, 1, 1), shared_bytes=0, maps=[sec])
    if mutate:
        raw = bytearray((run / "result" / "0.bin").read_bytes())
        mutate(raw)
        (run / "result" / "0.bin").write_bytes(bytes(raw))
    ev = {"event": "launch", "index": 0, "kernel": "k", "grid": [2, 1, 1], "block": [32, 1, 1], "result": "result/0.bin"}
    ev.update(event_overrides or {})
    (run / "event.log").write_text(json.dumps({"event": "start"}) + "\n" + json.dumps(ev) + "\n")
    return run


@pytest.mark.parametrize("override", [{"index": "zero"}, {"duration_ns": "fast"}, {"grid": [1, 2]}, {"block": "x"}])
def test_launch_events_of_the_wrong_kind_are_skipped_and_named(tmp_path, override):
    t = nt.load(_one_launch_run(tmp_path, override))
    assert not t.launches and len(t.problems) == 1 and "event.log: launch event" in t.problems[0]


def _poke(offset, data):
    def mutate(raw):
        raw[offset:offset + len(data)] = data
    return mutate


MAP0 = nt.FILE_HEADER.itemsize  # the first map header


@pytest.mark.parametrize("mutate,message", [
    (_poke(MAP0, b"\xff\xfe\xfd"), "map name is not UTF-8"),
    (_poke(MAP0 + 88, np.uint32(10**9).tobytes()), "claims 1000000000 fields"),
    (_poke(MAP0 + nt.MAP_HEADER.itemsize + 36, np.uint32(64).tobytes()), "lies outside its 8-byte record"),
])
def test_corrupt_result_files_are_refused_with_the_file(tmp_path, mutate, message):
    run = _one_launch_run(tmp_path, mutate=mutate)
    (launch,) = nt.load(run).launches
    with pytest.raises(nt.TraceError, match=message) as info:
        launch.maps
    assert "0.bin" in str(info.value)


def test_binary_event_log_is_not_an_empty_trace(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "event.log").write_bytes(bytes(range(256)) * 8 + b"\n\x00\x01\n")
    with pytest.raises(nt.TraceError, match="not a Neutrino event log"):
        nt.load(run)


def test_report_fails_when_no_result_can_be_read(tmp_path, capsys):
    run = _one_launch_run(tmp_path, mutate=_poke(MAP0, b"\xff\xfe\xfd"))
    assert main(["report", str(run)]) == 1
    err = capsys.readouterr().err
    assert "map name is not UTF-8" in err and "none of the 1 launch result(s) could be read" in err


def test_helper_of_a_branch_target_skips_the_site():
    """IN1 of `bra LABEL` names code, not a value: the site is skipped with the reason, never bad PTX."""
    from neutrino.engine import instrument

    probes = parse_probes('[p]\nposition = "bra"\nbefore = """.reg .b64 %a; mov.u64 %a, IN1;"""\n', "p.toml")
    ptx = (Path(__file__).parent / "data" / "corpus" / "nvcc" / "histogram.sm80.ptx").read_text()
    result = instrument(ptx, probes)
    skipped = [s for info in result.kernels.values() for s in info["skipped"]]
    assert skipped and all("branch target" in s["reason"] for s in skipped)
    from helpers import HAVE_PTXAS, ptxas
    if HAVE_PTXAS:
        ptxas(result.ptx)


@pytest.mark.parametrize("inner,message,column", [
    ("{" * 300 + "}" * 300, "braces nested more than 256 deep", 257),
    ("add.u32 %r1, " + "(" * 100 + "1" + ")" * 100 + ", 2;", "parentheses nested more than 64 deep", 79),
])
def test_nesting_beyond_the_limits_is_located(tmp_path, capsys, inner, message, column):
    ptx = VEC.read_text()
    at = ptx.index("ret;")
    path = tmp_path / "deep.ptx"
    path.write_text(ptx[:at] + inner + "\n\t" + ptx[at:])
    line = ptx[:at].count("\n") + 1
    assert main(["instrument", str(path), "-p", "block_sched"]) == 1
    err = capsys.readouterr().err
    assert f"deep.ptx:{line}:{column}: error: {message}" in err and "Traceback" not in err


def test_nesting_under_the_limit_instruments(tmp_path):
    from neutrino.engine import instrument
    from neutrino.toolbox import load_probes

    ptx = VEC.read_text()
    at = ptx.index("ret;")
    result = instrument(ptx[:at] + "{" * 250 + "}" * 250 + "\n\t" + ptx[at:], load_probes("block_sched"))
    assert result.kernels

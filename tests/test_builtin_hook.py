"""The analyze_hook shipped with the built-in block_sched tool."""

import numpy as np

from neutrino.toolbox import TOOLS_DIR, load_probes
from neutrino.runtime.results.callback import load_callback
from neutrino.trace import MapSection, buffer_bytes, write_result


def block_sched_result(path):
    units = 4  # 2 blocks of 64 threads: 2 warps each
    buf = np.zeros(buffer_bytes(units, 1, 16), np.uint8)
    buf[: 4 * units].view(np.uint32)[:] = 1
    rec = buf[16:].view(np.dtype([("start", "<u8"), ("elapsed", "<u4"), ("cuid", "<u4")]))
    rec["start"] = [100, 100, 300, 300]
    rec["elapsed"] = [50, 60, 50, 50]
    rec["cuid"] = [0, 0, 1, 1]
    fields = [("start", "u64", 0), ("elapsed", "u32", 8), ("cuid", "u32", 12)]
    section = MapSection("block_sched", "warp", 16, 1, units, fields, buf.tobytes())
    return write_result(path, grid=(2, 1, 1), block=(64, 1, 1), shared_bytes=0, maps=[section])


def test_block_sched_hook_summarises_per_kernel(tmp_path, capsys):
    """analyze() prints nothing per launch; finish() prints one line per kernel."""
    probes = load_probes("block_sched")
    hook = load_callback(probes.analyze_hook, base=str(TOOLS_DIR / "block_sched"))
    for i in range(3):
        hook(str(block_sched_result(tmp_path / f"{i}.bin")), {"index": i, "kernel": "k"})
    assert capsys.readouterr().err == ""
    hook.neutrino_finish(None)
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "block_sched k: 3 launch(es), 2 blocks on up to 2 SMs" in err

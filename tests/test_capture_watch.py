"""The shim counts stream work of ours done while a capture of the program is open (issue 24: such work slows
every later graph replay of the process). The count is what a GPU run reads to find the work that still lands
inside a capture: the exit event's `stream_work_in_capture`, by who did it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from test_runtime_shim import fakecuda, shim  # noqa: F401 - fixtures

# In a process with the shim preloaded and the fake libcuda: work noted before, during and after a capture the
# program opens and ends through the shim's entry points (which call the driver's).
PROGRAM = r"""
import ctypes as C
cuda = C.CDLL("libcuda.so.1", mode=C.RTLD_GLOBAL)
shim = C.CDLL(SHIM)
out = (C.c_uint64 * 6)()
def stats():
    shim.neutrino_graph_capture_stats(out)
    return list(out)
s = C.c_void_p()
assert cuda.cuStreamCreate(C.byref(s), 1) == 0
shim.neutrino_note_stream_work(0)
before = stats()
assert shim.cuStreamBeginCapture_v2(s, 2) == 0
shim.neutrino_note_stream_work(0)
shim.neutrino_note_stream_work(4)
shim.neutrino_note_stream_work(4)
shim.neutrino_note_stream_work(9)  # not a site: ignored
during = stats()
graph = C.c_void_p()
assert shim.cuStreamEndCapture(s, C.byref(graph)) == 0
shim.neutrino_note_stream_work(1)
print(repr([before, during, stats()]))
"""


def test_stream_work_is_counted_only_while_a_capture_is_open(tmp_path, fakecuda, shim):  # noqa: F811
    env = dict(os.environ, LD_LIBRARY_PATH=str(fakecuda), LD_PRELOAD=str(shim))
    r = subprocess.run([sys.executable, "-c", f"SHIM = {str(shim)!r}\n" + PROGRAM], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    before, during, after = json.loads(r.stdout)
    assert before == [0, 0, 0, 0, 0, 0]
    assert during == [1, 1, 0, 0, 0, 2]  # one capture begun; the writer once, the runtime twice
    assert after == during  # the capture over: the poller's work is not counted

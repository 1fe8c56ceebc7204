"""Captures a kernel into CUDA graphs like torch.cuda.graphs does (fake libcuda, through dlsym).

usage: graph_app.py PTXFILE KERNEL CYCLES REPLAYS
One eager launch, then CYCLES times: capture one launch on a stream (global mode), instantiate,
replay REPLAYS times, destroy the executable graph and the graph. Prints the fake driver's live
allocations (device and pinned) after the first cycle and at the end, and the graphs alive.
GRAPH_APP_KERNELS=K (default 1): K launches of the kernel inside each capture, K kernel nodes
in one graph (torch.cuda.graphs capturing several kernels). GRAPH_APP_CLONE=1: instantiate a clone of
the captured graph; GRAPH_APP_UPDATE_AT=N: cuGraphExecUpdate with the captured graph before replay N;
GRAPH_APP_CAPTURED_AT=N: replay N launched into a capturing stream; GRAPH_APP_GRAPH_FIRST=1: the graph
destroyed right after its instantiation, as PyTorch does (prints the graphs alive then);
GRAPH_APP_TWIN=graph|clone: a second executable graph
instantiated from the captured graph or a clone of it, launched right after each replay of the first;
GRAPH_APP_TWIN_AT=N (with GRAPH_APP_TWIN): that second graph instantiated only before replay N, launched after
each replay of the first from then on (torch.compile's backward graph, made after the forward's first replays);
GRAPH_APP_SET_NODE_GRID=G: cuGraphNodeSetParams on
the (last) kernel node before instantiation: the program's kernel on G blocks;
GRAPH_APP_RELEASE_AT=N: the primary context released before replay N (a teardown the shim reports).
GRAPH_APP_EXTRA=1: a kernel node of the program's own added with cuGraphAddKernelNode_v2 before instantiation
(unprobed); GRAPH_APP_EXTRA_GRID_AT=N: before replay N, cuGraphExecKernelNodeSetParams_v2 puts it on 2 blocks;
GRAPH_APP_EXTRA_OFF_AT=N: before replay N, cuGraphNodeSetEnabled disables it. GRAPH_APP_ALLOC=1: a memory alloc
node in the graph (the fake refuses to clone it). GRAPH_APP_STREAMS=2: odd replays on a second stream;
GRAPH_APP_DESTROY_SECOND_AT=N: the second stream destroyed before replay N (every replay on the first after it;
with GRAPH_APP_REMAKE_SECOND=1 a second stream is made again right after, and every replay goes there).
GRAPH_APP_FLAGS=F: the executable graph instantiated with flags F. GRAPH_APP_TICKER=1: a Python thread counts
milliseconds; prints how many passed during the launch into the capture (GRAPH_APP_CAPTURED_AT).
Prints, per cycle, the launches of the executable graph and of all graphs ("exec launches", after "live at end").
GRAPH_APP_PTSZ=1: the captures are of the per-thread default stream (the _ptsz entry points' NULL), and three
eager launches before and after them say how many capture-status queries they cost. Prints the fake driver's
cuGraphExecKernelNodeSetParams and cuGraphNodeSetEnabled calls at the end ("pick calls"), the process's threads
("threads"), and with
FAKECUDA_FORK_IN_SWITCH=1 the exit status of the child forked in the first switch ("fork child", -1: hung).
GRAPH_APP_DROP_IN_TWIN=1: when a twin's first launch starts in the fake driver, another thread of the program
calls cuGraphExecUpdate on the executable graph (the shim gives its plans up meanwhile; the launch goes on 0.2 s
later, and the program waits for that thread before its next replay); prints the launches of destroyed graphs at
the end ("dead launches", with FAKECUDA_CHECK_DESTROYED=1).
GRAPH_APP_REFUSE_SECOND_RECORDS=1: event records on the second stream fail; GRAPH_APP_DESTROY_IN_OTHER_CTX=1: the
second stream is destroyed with device 1's context current (FAKECUDA_CC="90,90").
GRAPH_APP_RETAIN=N: the primary context retained N times at the start (N = 2: cudart's and a library's, so that
the release before replay GRAPH_APP_RELEASE_AT leaves it alive).
GRAPH_APP_PAUSE=R:HOW,...: before replay R, neutrino_timeline_pause(HOW) (the shim's; 1 paused, 0 on, 5 every
graph replay node by node). GRAPH_APP_KEEP_EXECS=1: each cycle's executable graph is destroyed at the end only (all alive at once).
GRAPH_APP_PROFILE_AT=N / GRAPH_APP_PROFILE_OFF_AT=M: before replay N the program enables CUPTI's kernel records
itself (cuptiActivityEnable(CONCURRENT_KERNEL), as torch.profiler does), before replay M it disables them.
GRAPH_APP_PLAIN=KERNEL2: in each cycle a second graph, B, captured on the same stream after the first is instantiated:
GRAPH_APP_KERNELS launches of KERNEL2 (a kernel `--filter` leaves unprobed), instantiated with the same flags; its
replays alternate with the first's and it is destroyed with it. With FAKECUDA_LOG_CALLS the app marks in that log
where B's capture, instantiation, each replay and its end are ("== B ...": what the driver saw for B in between).
GRAPH_APP_IDLE_MS=M: after each cycle's replays the program sleeps M ms before destroying its graphs.
GRAPH_APP_THREADS=T: the REPLAYS replays of each cycle are launched by each of T threads of the program at once,
thread i on a stream of its own (i = 0: the capture's); prints the fake driver's order checks at the end ("order":
launches checked, launches not ordered after the previous launch of the captured graph's executable graphs, with
FAKECUDA_CHECK_ORDER=1).
GRAPH_APP_EAGER_EVERY=N: an eager launch of the kernel after every N-th replay (replays N, 2N, ...);
GRAPH_APP_EAGER_THREAD=L: while each cycle's replays run, another thread of the program launches the kernel L times
on a stream of its own.
"""
import ctypes as C
import os
import sys
import threading
import time


def eager_launches(cu, fn, params, n):
    """GRAPH_APP_EAGER_THREAD: n launches of fn on a stream of this thread's, as fast as they go."""
    stream = C.c_void_p()
    assert cu.cuStreamCreate(C.byref(stream), 1) == 0
    for _ in range(n):
        assert cu.cuLaunchKernel(fn, 4, 1, 1, 64, 1, 1, 0, stream, params, None) == 0


def say(*words):
    """To $GRAPH_APP_OUT (the test reads it) or stdout."""
    line = " ".join(map(str, words)) + "\n"
    out = os.environ.get("GRAPH_APP_OUT")
    if out:
        with open(out, "a") as fh:
            fh.write(line)
    else:
        sys.stdout.write(line)


def last_node(cu, stream):
    """The node the capture of `stream` added last."""
    status, cid, graph, deps, n = C.c_int(), C.c_ulonglong(), C.c_void_p(), C.POINTER(C.c_void_p)(), C.c_size_t()
    assert cu.cuStreamGetCaptureInfo_v2(C.c_void_p(stream.value), C.byref(status), C.byref(cid), C.byref(graph),
                                        C.byref(deps), C.byref(n)) == 0 and n.value == 1
    return deps[0]


def set_node_grid(cu, node, fn, params, grid_x):
    """cuGraphNodeSetParams (the generic form): the node runs `fn` with `params` on `grid_x` blocks."""
    buf = (C.c_uint64 * 32)()  # CUgraphNodeParams: type 0 (kernel), CUDA_KERNEL_NODE_PARAMS_v3 at byte 16
    base = C.addressof(buf)
    C.c_void_p.from_address(base + 16).value = fn.value
    (C.c_uint32 * 7).from_address(base + 24)[:] = [grid_x, 1, 1, 64, 1, 1, 0]
    C.c_void_p.from_address(base + 56).value = C.addressof(params)
    cu.cuGraphNodeSetParams.argtypes = [C.c_void_p, C.c_void_p]
    assert cu.cuGraphNodeSetParams(node, base) == 0


def kernel_node_params(fn, params, grid_x):
    """CUDA_KERNEL_NODE_PARAMS_v2: `fn` on `grid_x` blocks of 64 threads with `params`."""
    buf = (C.c_uint64 * 12)()
    base = C.addressof(buf)
    C.c_void_p.from_address(base).value = fn.value
    (C.c_uint32 * 7).from_address(base + 8)[:] = [grid_x, 1, 1, 64, 1, 1, 0]
    C.c_void_p.from_address(base + 40).value = C.addressof(params)
    return buf


def add_node(cu, node, graph, fn, params, grid_x):
    """A kernel node of the program's own at the end of `graph` (cuGraphAddKernelNode_v2)."""
    buf = kernel_node_params(fn, params, grid_x)
    cu.cuGraphAddKernelNode_v2.argtypes = [C.POINTER(C.c_void_p), C.c_void_p, C.c_void_p, C.c_size_t, C.c_void_p]
    assert cu.cuGraphAddKernelNode_v2(C.byref(node), graph, None, 0, C.addressof(buf)) == 0


def set_exec_node_grid(cu, exe, node, fn, params, grid_x):
    """cuGraphExecKernelNodeSetParams_v2: the executable graph's copy of `node` on `grid_x` blocks."""
    buf = kernel_node_params(fn, params, grid_x)
    cu.cuGraphExecKernelNodeSetParams_v2.argtypes = [C.c_void_p, C.c_void_p, C.c_void_p]
    assert cu.cuGraphExecKernelNodeSetParams_v2(exe, node, C.addressof(buf)) == 0


def capture_queries(cu, fn, stream, params):
    """cuStreamIsCapturing calls made by three eager launches on `stream`."""
    cu.fakecuda_is_capturing_calls.restype = C.c_long
    asked = cu.fakecuda_is_capturing_calls()
    for _ in range(3):
        assert cu.cuLaunchKernel(fn, 4, 1, 1, 64, 1, 1, 0, stream, params, None) == 0
    return cu.fakecuda_is_capturing_calls() - asked


def mark(what):
    """A line `== what` in the fake driver's call log (FAKECUDA_LOG_CALLS), between the driver calls around it."""
    path = os.environ.get("FAKECUDA_LOG_CALLS")
    if path:
        with open(path, "a") as fh:
            fh.write(f"== {what}\n")


def capture_plain(cu, fn, stream, params, flags):
    """Graph B (GRAPH_APP_PLAIN): GRAPH_APP_KERNELS launches of `fn` captured on `stream`, instantiated with `flags`;
    (graph, executable graph)."""
    graph, exe = C.c_void_p(), C.c_void_p()
    mark("B capture")
    assert cu.cuStreamBeginCapture_v2(stream, 0) == 0
    for _ in range(int(os.environ.get("GRAPH_APP_KERNELS", "1"))):
        assert cu.cuLaunchKernel(fn, 4, 1, 1, 64, 1, 1, 0, stream, params, None) == 0
    assert cu.cuStreamEndCapture(stream, C.byref(graph)) == 0
    mark("B instantiate")
    assert cu.cuGraphInstantiateWithFlags(C.byref(exe), graph, flags) == 0
    mark("B ready")
    return graph, exe


def replay_from_threads(cu, exe, stream, threads, replays):
    """`threads` threads each launch `exe` `replays` times, thread i on its own stream (0: `stream`), all at once."""
    streams = [stream] + [C.c_void_p() for _ in range(threads - 1)]
    for s in streams[1:]:
        assert cu.cuStreamCreate(C.byref(s), 1) == 0
    start = threading.Barrier(threads)
    failed = []

    def replay(s):
        start.wait()
        for _ in range(replays):
            rc = cu.cuGraphLaunch(exe, s)  # (ctypes lets the GIL go: the launches of the threads interleave)
            if rc:
                failed.append(rc)

    workers = [threading.Thread(target=replay, args=(s,)) for s in streams]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not failed, failed
    cu.cuStreamDestroy_v2.argtypes = [C.c_void_p]
    for s in streams[1:]:
        assert cu.cuStreamDestroy_v2(s) == 0


def main(ptx_path, kernel, cycles, replays):
    cu = C.CDLL("libcuda.so.1")
    P = C.c_void_p
    cu.cuLaunchKernel.argtypes = [P] + [C.c_uint] * 7 + [P] * 3
    begin = cu.cuStreamBeginCapture_v2
    begin.argtypes = [P, C.c_int]
    cu.cuGraphLaunch.argtypes = [P, P]
    cu.cuGraphDestroy.argtypes = cu.cuGraphExecDestroy.argtypes = [P]
    cu.cuStreamEndCapture.argtypes = [P, C.POINTER(P)]
    cu.cuGraphInstantiateWithFlags.argtypes = [C.POINTER(P), P, C.c_ulonglong]
    cu.fakecuda_live_allocations.restype = C.c_long
    cu.fakecuda_graphs_live.restype = C.c_long
    cu.fakecuda_pick_calls.restype = C.c_long
    cu.cuGraphClone.argtypes = [C.POINTER(P), P]
    cu.cuGraphExecUpdate_v2.argtypes = [P, P, P]
    mod, fn, stream = P(), P(), P()
    ptx = open(ptx_path, "rb").read() + b"\0"
    assert cu.cuModuleLoadData(C.byref(mod), C.c_char_p(ptx)) == 0
    assert cu.cuModuleGetFunction(C.byref(fn), mod, kernel.encode()) == 0
    assert cu.cuStreamCreate(C.byref(stream), 1) == 0
    for _ in range(int(os.environ.get("GRAPH_APP_RETAIN", "0"))):  # cudart's retain, then a library's
        cu.cuDevicePrimaryCtxRetain.argtypes = [C.POINTER(P), C.c_int]
        assert cu.cuDevicePrimaryCtxRetain(C.byref(P()), 0) == 0
    launched = []  # per cycle: launches of the executable graph, and of every graph so far
    second = P()  # GRAPH_APP_STREAMS=2: odd replays launched on a second stream
    if os.environ.get("GRAPH_APP_STREAMS") == "2":
        assert cu.cuStreamCreate(C.byref(second), 1) == 0
        if os.environ.get("GRAPH_APP_REFUSE_SECOND_RECORDS"):
            cu.fakecuda_refuse_records_on.argtypes = [P]
            cu.fakecuda_refuse_records_on(second)
    vals = [C.c_uint64(i) for i in range(4)]
    params = (P * 4)(*[C.addressof(v) for v in vals])
    assert cu.cuLaunchKernel(fn, 4, 1, 1, 64, 1, 1, 0, stream, params, None) == 0  # eager: builds the probed code
    # GRAPH_APP_PTSZ=1: the capture is of the per-thread default stream, through the _ptsz entry points' NULL
    ptsz = bool(os.environ.get("GRAPH_APP_PTSZ"))
    if ptsz:
        cu.cuStreamBeginCapture_v2_ptsz.argtypes = [P, C.c_int]
        cu.cuLaunchKernel_ptsz.argtypes = cu.cuLaunchKernel.argtypes
        cu.cuStreamEndCapture_ptsz.argtypes = cu.cuStreamEndCapture.argtypes
    if ptsz:
        say("capture queries before the captures", capture_queries(cu, fn, stream, params))
    kept = []
    for cycle in range(cycles):
        graph, exe = P(), P()
        if ptsz:
            assert cu.cuStreamBeginCapture_v2_ptsz(None, 0) == 0
            for _ in range(int(os.environ.get("GRAPH_APP_KERNELS", "1"))):
                assert cu.cuLaunchKernel_ptsz(fn, 4, 1, 1, 64, 1, 1, 0, None, params, None) == 0
            node = last_node(cu, P(2))  # CU_STREAM_PER_THREAD: the same stream
            assert cu.cuStreamEndCapture_ptsz(None, C.byref(graph)) == 0
        else:
            assert begin(stream, 0) == 0  # global mode, PyTorch's default
            for _ in range(int(os.environ.get("GRAPH_APP_KERNELS", "1"))):
                assert cu.cuLaunchKernel(fn, 4, 1, 1, 64, 1, 1, 0, stream, params, None) == 0
            node = last_node(cu, stream)
            assert cu.cuStreamEndCapture(stream, C.byref(graph)) == 0
        extra = P()
        if os.environ.get("GRAPH_APP_EXTRA"):  # a kernel node of the program's, not captured: unprobed
            add_node(cu, extra, graph, fn, params, 4)
        if os.environ.get("GRAPH_APP_ALLOC"):
            alloc_params = (C.c_uint64 * 16)()
            cu.cuGraphAddMemAllocNode.argtypes = [C.POINTER(P), P, P, C.c_size_t, P]
            assert cu.cuGraphAddMemAllocNode(C.byref(P()), graph, None, 0, C.addressof(alloc_params)) == 0
        if os.environ.get("GRAPH_APP_SET_NODE_GRID"):  # the program's own kernel on a smaller grid
            set_node_grid(cu, node, fn, params, int(os.environ["GRAPH_APP_SET_NODE_GRID"]))
        source = graph
        if os.environ.get("GRAPH_APP_CLONE"):
            source = P()
            assert cu.cuGraphClone(C.byref(source), graph) == 0
        flags = int(os.environ.get("GRAPH_APP_FLAGS", "0"), 0)
        assert cu.cuGraphInstantiateWithFlags(C.byref(exe), source, flags) == 0
        plain_graph = plain_exe = None
        if os.environ.get("GRAPH_APP_PLAIN"):
            plain_fn = P()
            assert cu.cuModuleGetFunction(C.byref(plain_fn), mod, os.environ["GRAPH_APP_PLAIN"].encode()) == 0
            plain_graph, plain_exe = capture_plain(cu, plain_fn, stream, params, flags)
        first = bool(os.environ.get("GRAPH_APP_GRAPH_FIRST"))
        if first:
            assert cu.cuGraphDestroy(graph) == 0
            say("graphs after destroy", cu.fakecuda_graphs_live())
        twin = P()  # GRAPH_APP_TWIN=clone|graph: a second executable graph of the capture, launched after each replay
        twin_of = os.environ.get("GRAPH_APP_TWIN")
        twin_at = int(os.environ.get("GRAPH_APP_TWIN_AT", "0"))
        if twin_of:
            twin_source = graph
            if twin_of == "clone":
                twin_source = P()
                assert cu.cuGraphClone(C.byref(twin_source), graph) == 0
            if not twin_at:
                assert cu.cuGraphInstantiateWithFlags(C.byref(twin), twin_source, 0) == 0
        remade = False
        updating = []  # GRAPH_APP_DROP_IN_TWIN: the thread started in the twin's launch, joined after it
        if os.environ.get("GRAPH_APP_DROP_IN_TWIN"):
            def update_from_another_thread():
                other = threading.Thread(target=lambda: cu.cuGraphExecUpdate_v2(exe, graph, None))
                other.start()
                updating.append(other)
                time.sleep(0.2)  # (the update waits for the launch: it may not act inside it)
            hook = C.CFUNCTYPE(None)(update_from_another_thread)
            cu.fakecuda_on_clone_launch.argtypes = [C.c_void_p]
            cu.fakecuda_on_clone_launch(C.cast(hook, C.c_void_p))
        ticks, ticker = [0], None
        if os.environ.get("GRAPH_APP_TICKER"):  # another Python thread of the program, counting every ms
            def tick():
                while True:
                    ticks[0] += 1
                    time.sleep(0.001)
            ticker = threading.Thread(target=tick, daemon=True)
            ticker.start()
        eager_thread = None
        if os.environ.get("GRAPH_APP_EAGER_THREAD"):
            eager_thread = threading.Thread(target=eager_launches, args=(cu, fn, params,
                                                                          int(os.environ["GRAPH_APP_EAGER_THREAD"])))
            eager_thread.start()
        eager_every = int(os.environ.get("GRAPH_APP_EAGER_EVERY", "0"))
        threads = int(os.environ.get("GRAPH_APP_THREADS", "0"))
        if threads:
            replay_from_threads(cu, exe, stream, threads, replays)
        for r in range(0 if threads else replays):
            for at, how in (w.split(":") for w in os.environ.get("GRAPH_APP_PAUSE", "").split(",") if w):
                if r == int(at):  # the timeline's recording switched (benchmarks/timeline_workload.py's A/B)
                    pause = C.CDLL(None).neutrino_timeline_pause
                    pause.argtypes = [C.c_int]
                    assert pause(int(how)) >= 0
            if r == int(os.environ.get("GRAPH_APP_PROFILE_AT", "-1")):  # the program's own profiler: kernel records
                assert C.CDLL("libcupti.so.13", mode=C.RTLD_GLOBAL).cuptiActivityEnable(10) == 0
            if r == int(os.environ.get("GRAPH_APP_PROFILE_OFF_AT", "-1")):
                assert C.CDLL("libcupti.so.13", mode=C.RTLD_GLOBAL).cuptiActivityDisable(10) == 0
            if r == int(os.environ.get("GRAPH_APP_RELEASE_AT", "-1")):
                assert cu.cuDevicePrimaryCtxRelease_v2(0) == 0
            if twin_of and twin_at and r == twin_at:
                assert cu.cuGraphInstantiateWithFlags(C.byref(twin), twin_source, 0) == 0
            if r == int(os.environ.get("GRAPH_APP_UPDATE_AT", "-1")):
                assert cu.cuGraphExecUpdate_v2(exe, graph, None) == 0
            if r == int(os.environ.get("GRAPH_APP_CAPTURED_AT", "-1")):  # the graph becomes a child graph node
                inner = P()
                assert begin(stream, 0) == 0
                ticks_before = ticks[0]
                assert cu.cuGraphLaunch(exe, stream) == 0
                if ticker is not None:
                    say("ticks during the launch into the capture", ticks[0] - ticks_before)
                assert cu.cuStreamEndCapture(stream, C.byref(inner)) == 0
                assert cu.cuGraphDestroy(inner) == 0
                continue
            if r == int(os.environ.get("GRAPH_APP_EXTRA_GRID_AT", "-1")):
                set_exec_node_grid(cu, exe, extra, fn, params, 2)
            if r == int(os.environ.get("GRAPH_APP_EXTRA_OFF_AT", "-1")):
                cu.cuGraphNodeSetEnabled.argtypes = [P, P, C.c_uint]
                assert cu.cuGraphNodeSetEnabled(exe, extra, 0) == 0
            if r == int(os.environ.get("GRAPH_APP_DESTROY_SECOND_AT", "-1")):
                cu.cuStreamDestroy_v2.argtypes = [P]
                gone = second.value
                other_ctx = bool(os.environ.get("GRAPH_APP_DESTROY_IN_OTHER_CTX"))
                if other_ctx:
                    assert cu.cuCtxSetCurrent(P(0x1C0)) == 0
                assert cu.cuStreamDestroy_v2(second) == 0
                if other_ctx:
                    assert cu.cuCtxSetCurrent(P(0xC0)) == 0
                second = P()
                if os.environ.get("GRAPH_APP_REMAKE_SECOND"):  # made again (its handle may come back)
                    assert cu.cuStreamCreate(C.byref(second), 1) == 0
                    say("second stream remade", "same" if second.value == gone else "other", hex(second.value))
                    remade = True
            assert cu.cuGraphLaunch(exe, second if (r % 2 or remade) and second else stream) == 0
            while updating:
                updating.pop().join()
            if twin_of and r >= twin_at:
                assert cu.cuGraphLaunch(twin, stream) == 0
            if plain_exe is not None:
                mark(f"B replay {r}")
                assert cu.cuGraphLaunch(plain_exe, stream) == 0
                mark("B replayed")
            if eager_every and (r + 1) % eager_every == 0:
                assert cu.cuLaunchKernel(fn, 4, 1, 1, 64, 1, 1, 0, stream, params, None) == 0
        if eager_thread is not None:
            eager_thread.join()
        time.sleep(float(os.environ.get("GRAPH_APP_IDLE_MS", "0")) / 1000)  # the graphs alive, none launched
        cu.fakecuda_exec_launches.restype = cu.fakecuda_graph_launches.restype = C.c_long
        cu.fakecuda_exec_launches.argtypes = [P]
        launched.append((cu.fakecuda_exec_launches(exe), cu.fakecuda_graph_launches()))
        if twin_of and twin.value:
            assert cu.cuGraphExecDestroy(twin) == 0
            if twin_source.value != graph.value:
                assert cu.cuGraphDestroy(twin_source) == 0
        if plain_exe is not None:
            mark("B destroy")
            assert cu.cuGraphExecDestroy(plain_exe) == 0 and cu.cuGraphDestroy(plain_graph) == 0
            mark("B destroyed")
        if os.environ.get("GRAPH_APP_KEEP_EXECS"):  # every cycle's executable graph alive until the end
            kept.append(exe)
        else:
            assert cu.cuGraphExecDestroy(exe) == 0
        if source.value != graph.value:
            assert cu.cuGraphDestroy(source) == 0
        if not first:
            assert cu.cuGraphDestroy(graph) == 0
        if cycle == 0:
            say("live after first cycle", cu.fakecuda_live_allocations())
    for exe in kept:
        assert cu.cuGraphExecDestroy(exe) == 0
    if ptsz:  # every capture has ended: launches ask the capture status as often as before any capture
        say("capture queries after the captures", capture_queries(cu, fn, stream, params))
    say("live at end", cu.fakecuda_live_allocations(), "graphs", cu.fakecuda_graphs_live())
    for own, every in launched:
        say("exec launches", own, every)
    say("threads", len(os.listdir("/proc/self/task")))  # the process's, ours included (a poller thread or none)
    cu.fakecuda_dead_launches.restype = C.c_long
    say("dead launches", cu.fakecuda_dead_launches())
    cu.fakecuda_order_checks.restype = cu.fakecuda_unordered_launches.restype = C.c_long
    say("order", cu.fakecuda_order_checks(), cu.fakecuda_unordered_launches())
    say("pick calls", cu.fakecuda_pick_calls())
    if os.environ.get("FAKECUDA_FORK_IN_SWITCH"):
        cu.fakecuda_fork_status.restype = C.c_long
        say("fork child", cu.fakecuda_fork_status())
    say("app done")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))

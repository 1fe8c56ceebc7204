/* Sampled graph replays chosen on the host (issue 24): a replay that `--launches` leaves out runs the
 * program's own kernels, and no append node.
 *
 * The device gate (neutrino/runtime/cudagraphs/ring.py, "Sampling") predicates a left-out replay's
 * probe stores off, but the probed kernels and the append kernel still run: 1.13x per replay on a
 * graph of 8 tiny kernels. Here the shim sees every cuGraphLaunch of an executable graph whose probed
 * nodes Python registered at instantiation (a plan: neutrino/runtime/cudagraphs/replay_select.py),
 * numbers the replay and, only when the choice changes from the previous replay, switches the nodes:
 *
 *   selected:  each probed node runs the probed kernel with an untagged buffer pointer (it never reads
 *              the gate), the append nodes are enabled, with arguments `skip` (replays the host left
 *              out, so the append kernel numbers the replay runs + skip) and `host` = 1 (selected);
 *   left out:  each probed node runs the original kernel with the original arguments, the append
 *              nodes are disabled.
 *
 * `cuGraphExecKernelNodeSetParams` (a func change is allowed since CUDA 12) and `cuGraphNodeSetEnabled`:
 * with `--launches every:50`, one switch each way per 50 replays. The arguments are copied at capture
 * (`neutrino_graph_pick_args`: the program's argument values live only during its launch call), sized
 * by `cuFuncGetParamInfo`.
 *
 * Two executable graphs (the default since issue 24's residual): at the plan, the shim also instantiates
 * the program's graph as the program made it (the *twin*: a clone of the captured graph whose probed
 * nodes run the original kernels with the original arguments and whose append nodes are removed), and
 * launches it for every replay left out; the program's executable graph stays probed (untagged, append
 * nodes enabled) and runs only the selected replays. No switch, no disabled node: a left-out replay is
 * the program's own graph, topology included. Launches stay in the program's order, as CUDA keeps the
 * launches of one executable graph: each launch of a plan is chosen, made and fenced under the plan's
 * order lock (planned_launch), after a wait for the other graph's last launch where that went to another
 * stream (an event of ours: recorded right after a launch on the per-thread stream, and after every
 * launch once the plan's launches have gone to two streams; else when needed, or at the latest before its
 * stream is destroyed or starts capturing: on one stream nothing of ours is added). The twin is let go
 * only under that lock, after the host waited for its last launch where the program's graph takes the
 * replays. Nothing calls into Python holding it. The program's changes to its executable graph (kernel,
 * memcpy, memset, host, child, event node parameters; node enables) are
 * applied to the twin too; a change that cannot be, and graphs that cannot be cloned (memory alloc/free nodes, conditional
 * nodes) or instantiated twice, leave the plan switching nodes as below (Python writes a
 * `graph_pick_switching` event).
 *
 * A chain's plan (NEUTRINO_GRAPH_CHAIN=1; spec/runtime.md, "The chain", "Sampling") has no append node, and its
 * "probed" parameters are the chain node's own (the variant, the head tagged: neutrino_graph_pick_args_chain), so a
 * switch to them never turns the head into a buffer; the probed graph's launches are the selected replays, which
 * the chain's poller numbers from the filter (shim/graphs.c chain_replay).
 *
 * What the host cannot choose keeps the device gate: executable graphs without a plan (instantiated for
 * device launch, from a clone, or holding the graph as a child node) and plans given up (the caller
 * reports it to Python, which restores the captured nodes here with `neutrino_graph_pick_drop`, sets
 * the gates for the next replay's number and writes a `graph_pick_fallback` event): a launch into a
 * capturing stream, a failed switch, `cuGraphExecUpdate`, the program's own parameters for one of the
 * plan's nodes.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

typedef int CUresult;

#define MAX_PARAMS 1024    /* parameters of one kernel (CUDA's limit on the bytes keeps it far lower) */
#define APPEND_ARGS 7      /* ring.py AppendParams: desc, start, stop, every, wait_ns, skip, host */
#define APPEND_SKIP 5
#define APPEND_HOST 6

/* CUDA_KERNEL_NODE_PARAMS_v2: function, grid, block, shared bytes, arguments, extra, CUkernel, context */
typedef struct {
    void *func;
    unsigned dims[7];
    void **params, **extra;
    void *kern, *ctx;
} knode_params;

/* A probed node's arguments, copied at capture: `tagged` as captured (the first buffer pointer's bit 0
 * set: the kernel reads the gate), `untagged` the same but that pointer. */
typedef struct {
    int n;
    void **tagged, **untagged;
    uint64_t buffer;  /* the untagged first buffer pointer */
    unsigned char *values;
} nt_pick_args;

/* Replays numbered by the host across the executable graphs of one captured graph (they share the
 * nodes' device state), and the append kernel's runs among them (the state's counter). */
typedef struct {
    uint64_t replays, runs;
    uint64_t inflight, inflight_runs;  /* launches chosen by a plan, not yet returned (numbered next), selected */
    int drop_failed;  /* a node of a plan given up could not be restored (neutrino_graph_pick_drop) */
} nt_pick_group;

typedef struct {
    void *node;
    knode_params tagged, untagged, original;
} pick_kernel;

typedef struct {
    void *node;
    knode_params params;
    uint64_t values[APPEND_ARGS];
    void *ptrs[APPEND_ARGS];
} pick_append;

enum { K_CAPTURED, K_PROBED, K_ORIGINAL };  /* what the plan's kernel nodes run now */

/* One twin: its executable graph, the clone it was made from, the event that orders launches of the two
 * graphs across streams (the fence) and its context. Its plan owns it and lets it go only under the plan's
 * order lock, which every launch of the plan holds: no launch uses a twin let go. */
typedef struct nt_twin {
    void *exec, *graph, *fence, *ctx;
} nt_twin;

/* A plan. The fields above `refs` are set before it is linked and never change. `refs` to `drop_skip`:
 * under picks_lock. From `order` on: under `order`, held by a launch from its choice of the graph to its
 * fence (planned_launch), and by every change to the nodes, the twin and the last launch. Lock order:
 * sweep_lock, then a plan's order, then picks_lock; nothing calls into Python holding one. */
typedef struct nt_pick_plan {
    void *exec;
    void *graph;      /* the captured graph its node handles belong to (kept until the plan goes) */
    struct nt_pick_plan *next;
    nt_pick_group *group;
    uint64_t start, stop, every;
    int nkernels, nappends;
    pick_kernel *kernels;
    pick_append *appends;
    void *ctx;        /* the graph's context */
    int refs;         /* the list's while linked, and one per caller between plan_get and plan_put */
    int linked;       /* in `plans`: launches go through it */
    int dropping;     /* given up (neutrino_graph_pick_drop): restored by the next holder of `order` */
    uint64_t drop_skip;  /* the append nodes' `skip` for that */
    struct nt_pick_plan *swept;  /* the next plan of a sweep (under sweep_lock) */
    pthread_mutex_t order;
    int kernels_run;  /* K_* */
    int appends_on;   /* the append nodes are enabled */
    int host_args;    /* the append nodes' arguments say host = 1, with `skip` below */
    uint64_t skip;
    /* the twin (NULL: switching): the program's graph as it made it, launched for the replays left out */
    struct nt_twin *twin;
    void *last, *last_stream;    /* the executable graph launched last (exec or the twin's), and its stream */
    pthread_t last_thread;       /* the thread of that launch (its per-thread stream is its own) */
    int fenced;                  /* the twin's fence was recorded after that launch */
    int spread;                  /* its launches went to more than one stream: fenced after each */
} nt_pick_plan;

/* Graphs the program destroyed while a plan still switches nodes by their handles (PyTorch destroys
 * the graph right after instantiating it): destroyed for real when their last plan goes. */
typedef struct kept_graph {
    void *graph;
    struct kept_graph *next;
} kept_graph;

static pthread_mutex_t picks_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t sweep_lock = PTHREAD_MUTEX_INITIALIZER;  /* one walk over every plan at a time */
static nt_pick_plan *plans;
static kept_graph *kept;
static _Atomic int plans_live, twins_live;
static _Atomic uint64_t pick_switches, pick_calls, pick_launches, twin_launches, twin_fences;

static struct {
    CUresult (*set_params)(void *, void *, const knode_params *);
    CUresult (*set_enabled)(void *, void *, unsigned);
    CUresult (*param_info)(void *, size_t, size_t *, size_t *);
    int loaded;
} drv;

/* A child forked while another thread held the lock (in a switch) must not wait for it forever. */
static void lock_in_forked_child(void) {
    pthread_mutex_init(&picks_lock, NULL);
    pthread_mutex_init(&sweep_lock, NULL);
    for (nt_pick_plan *p = plans; p; p = p->next) pthread_mutex_init(&p->order, NULL);
}
__attribute__((constructor)) static void graphpick_init(void) { pthread_atfork(NULL, NULL, lock_in_forked_child); }

static int load_driver(void) {
    if (!drv.loaded) {
        drv.set_params =
            (CUresult (*)(void *, void *, const knode_params *))neutrino_real_sym("cuGraphExecKernelNodeSetParams_v2");
        drv.set_enabled = (CUresult (*)(void *, void *, unsigned))neutrino_real_sym("cuGraphNodeSetEnabled");
        drv.param_info = (CUresult (*)(void *, size_t, size_t *, size_t *))neutrino_real_sym("cuFuncGetParamInfo");
        drv.loaded = drv.set_params && drv.set_enabled && drv.param_info ? 1 : -1;
    }
    return drv.loaded == 1;
}

/* ------------------------------------------------------------------ the twin: driver calls */

#define EVENT_DISABLE_TIMING 0x2
#define CAPTURE_MODE_RELAXED 2
#define PER_THREAD_STREAM ((void *)(uintptr_t)0x2)  /* CU_STREAM_PER_THREAD: each thread's own */
/* instantiation flags the twin takes as the program's graph does: auto-free on launch (only alloc nodes
 * care: such graphs cannot be cloned), node priority; upload (the twin is uploaded at its first launch) */
#define TWIN_FLAGS_KEPT 0x9ull
#define TWIN_FLAGS_OK 0xbull

static struct {
    CUresult (*clone)(void **, void *);
    CUresult (*find)(void **, void *, void *);
    CUresult (*node_set)(void *, const knode_params *);
    CUresult (*destroy_node)(void *);
    CUresult (*instantiate)(void **, void *, unsigned long long);
    CUresult (*exec_destroy)(void *);
    CUresult (*graph_destroy)(void *);
    CUresult (*ev_create)(void **, unsigned);
    CUresult (*ev_destroy)(void *);
    CUresult (*ev_record)(void *, void *);
    CUresult (*ev_sync)(void *);
    CUresult (*wait)(void *, void *, unsigned);
    CUresult (*capture_mode)(int *);
    CUresult (*ctx_sync)(void);
    CUresult (*ctx_get)(void **);
    CUresult (*ctx_set)(void *);
    int loaded;
} tw;

#define TW(field, name) ((tw.field = (__typeof__(tw.field))neutrino_real_sym(name)) != NULL)
static int load_twin(void) {
    if (!tw.loaded) {
        int ok = TW(clone, "cuGraphClone") & TW(find, "cuGraphNodeFindInClone") &
                 TW(node_set, "cuGraphKernelNodeSetParams_v2") & TW(destroy_node, "cuGraphDestroyNode") &
                 TW(instantiate, "cuGraphInstantiateWithFlags") & TW(exec_destroy, "cuGraphExecDestroy") &
                 TW(graph_destroy, "cuGraphDestroy") & TW(ev_create, "cuEventCreate") &
                 TW(ev_destroy, "cuEventDestroy_v2") & TW(ev_record, "cuEventRecord") &
                 TW(ev_sync, "cuEventSynchronize") & TW(wait, "cuStreamWaitEvent") &
                 TW(capture_mode, "cuThreadExchangeStreamCaptureMode") & TW(ctx_sync, "cuCtxSynchronize") &
                 TW(ctx_get, "cuCtxGetCurrent") & TW(ctx_set, "cuCtxSetCurrent");
        tw.loaded = ok ? 1 : -1;
    }
    return tw.loaded == 1;
}

/* ------------------------------------------------------------------ arguments and groups (Python) */

/* Copy the `params` of a launch of `func` (the probed kernel, as captured) while the program's values
 * are alive; `buffer` is the index of the first buffer pointer (tagged). NULL: no copy (a driver
 * without cuFuncGetParamInfo, or no memory): the node keeps the device gate. */
void *neutrino_graph_pick_args(void *func, void **params, int buffer) {
    if (!load_driver() || !params || buffer < 0) return NULL;
    size_t offsets[MAX_PARAMS], sizes[MAX_PARAMS], total = 0;
    int n = 0;
    while (n < MAX_PARAMS && drv.param_info(func, (size_t)n, &offsets[n], &sizes[n]) == 0) {
        if (offsets[n] + sizes[n] > total) total = offsets[n] + sizes[n];
        n++;
    }
    if (buffer >= n || sizes[buffer] != 8) return NULL;
    nt_pick_args *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->n = n;
    a->values = malloc(total ? total : 1);
    a->tagged = malloc(sizeof(void *) * (size_t)(n ? n : 1));
    a->untagged = malloc(sizeof(void *) * (size_t)(n ? n : 1));
    if (!a->values || !a->tagged || !a->untagged) {
        free(a->values), free(a->tagged), free(a->untagged), free(a);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        memcpy(a->values + offsets[i], params[i], sizes[i]);
        a->tagged[i] = a->untagged[i] = a->values + offsets[i];
    }
    memcpy(&a->buffer, a->values + offsets[buffer], 8);
    a->buffer &= ~(uint64_t)1;
    a->untagged[buffer] = &a->buffer;
    return a;
}

/* The arguments of a chain node (spec/runtime.md, "The chain", "Sampling"): its first buffer parameter is its
 * head, tagged, in every selected replay too (the plan's "probed" parameters are the node's as the chain set them:
 * switching to them never touches the head). */
void *neutrino_graph_pick_args_chain(void *func, void **params, int buffer) {
    nt_pick_args *a = neutrino_graph_pick_args(func, params, buffer);
    if (a) a->untagged[buffer] = a->tagged[buffer];
    return a;
}

void neutrino_graph_pick_args_free(void *args) {
    nt_pick_args *a = args;
    if (!a) return;
    free(a->values), free(a->tagged), free(a->untagged), free(a);
}

void *neutrino_graph_pick_group_new(void) { return calloc(1, sizeof(nt_pick_group)); }

/* After the last plan of the group is gone (its graphs are destroyed). */
void neutrino_graph_pick_group_free(void *group) { free(group); }

uint64_t neutrino_graph_pick_group_replays(void *group) {
    pthread_mutex_lock(&picks_lock);
    uint64_t r = ((nt_pick_group *)group)->replays;
    pthread_mutex_unlock(&picks_lock);
    return r;
}

/* Switches made, driver calls they took, launches of planned graphs, of them the twins' launches, and
 * waits ordering a launch after the other graph's on another stream (NEUTRINO_FAST_PROFILE, tests). */
void neutrino_graph_pick_counts(uint64_t out[5]) {
    out[0] = atomic_load(&pick_switches);
    out[1] = atomic_load(&pick_calls);
    out[2] = atomic_load(&pick_launches);
    out[3] = atomic_load(&twin_launches);
    out[4] = atomic_load(&twin_fences);
}


/* ------------------------------------------------------------------ plans */

static nt_pick_plan **plan_slot(void *exec) {
    nt_pick_plan **p = &plans;
    while (*p && (*p)->exec != exec) p = &(*p)->next;
    return p;
}

static void release_graph(void *graph);

static void plan_free(nt_pick_plan *p) {
    pthread_mutex_destroy(&p->order);
    free(p->kernels);
    free(p->appends);
    free(p);
}

static knode_params node_params(void *func, const uint32_t grid[3], const uint32_t block[3], uint32_t shared,
                                void **args) {
    knode_params k;
    memset(&k, 0, sizeof k);
    k.func = func;
    memcpy(k.dims, grid, 3 * sizeof(unsigned));
    memcpy(k.dims + 3, block, 3 * sizeof(unsigned));
    k.dims[6] = shared;
    k.params = args;
    return k;
}

/* Why a plan has no twin (replay_select.py, TWIN_REASONS). */
enum { TWIN_ON, TWIN_NOT_ASKED, TWIN_FLAGS, TWIN_CLONE, TWIN_BUILD, TWIN_INSTANTIATE, TWIN_EVENT, TWIN_DRIVER };

/* The twin of plan `p` (its kernels and appends set): the captured graph cloned, each probed node set to
 * the original kernel with the original arguments, the append nodes removed, instantiated with the
 * program's flags. Returns TWIN_ON, or why not (nothing of it is left behind). */
static int twin_build(nt_pick_plan *p, unsigned long long flags) {
    if (!load_twin()) return TWIN_DRIVER;
    if (flags & ~TWIN_FLAGS_OK) return TWIN_FLAGS;
    void *clone = NULL, *plain = NULL, *fence = NULL;
    if (tw.clone(&clone, p->graph) || !clone) return TWIN_CLONE;  /* alloc/free or conditional nodes */
    int why = TWIN_ON;
    for (int i = 0; i < p->nkernels && !why; i++) {
        void *node = NULL;
        if (tw.find(&node, p->kernels[i].node, clone) || tw.node_set(node, &p->kernels[i].original)) why = TWIN_BUILD;
    }
    for (int i = 0; i < p->nappends && !why; i++) {
        void *node = NULL;
        if (tw.find(&node, p->appends[i].node, clone) || tw.destroy_node(node)) why = TWIN_BUILD;
    }
    if (!why) neutrino_timeline_graph_instantiate_enter();  /* the twin is launched too: cupti.c, why */
    if (!why && (tw.instantiate(&plain, clone, flags & TWIN_FLAGS_KEPT) || !plain)) why = TWIN_INSTANTIATE;
    if (!why) neutrino_timeline_graph_instantiated(plain);
    if (!why && (tw.ev_create(&fence, EVENT_DISABLE_TIMING) || !fence)) why = TWIN_EVENT;
    nt_twin *t = why ? NULL : calloc(1, sizeof *t);
    if (!why && !t) why = TWIN_EVENT;
    if (why) {
        if (fence) tw.ev_destroy(fence);
        if (plain) tw.exec_destroy(plain);
        tw.graph_destroy(clone);
        return why;
    }
    t->exec = plain, t->graph = clone, t->fence = fence, t->ctx = p->ctx;
    p->twin = t;
    atomic_fetch_add(&twins_live, 1);
    return TWIN_ON;
}


enum { TWIN_LEFT = 1, TWIN_DESTROYED, TWIN_SETTLED };  /* how a twin goes */

/* Stands for a destroyed stream as the last launch's: no stream has it (a stream made later may get
 * the destroyed one's handle, and is not ordered after that launch). */
static const char stream_gone;
#define STREAM_GONE ((void *)&stream_gone)

/* Whether a launch on `stream` from this thread follows the plan's last launch in stream order. */
static int on_last_stream(const nt_pick_plan *p, void *stream) {
    return stream == p->last_stream && (stream != PER_THREAD_STREAM || pthread_equal(p->last_thread, pthread_self()));
}

/* The fence after the plan's last launch, recorded now where it was not and can be (its stream is alive and
 * not capturing, see neutrino_graph_pick_stream_event; another thread's per-thread stream is not ours to
 * record on). 1: fenced. Under order. */
static int fence_last(nt_pick_plan *p) {
    if (p->fenced) return 1;
    if (p->last_stream == STREAM_GONE) return 0;
    if (p->last_stream == PER_THREAD_STREAM && !pthread_equal(p->last_thread, pthread_self())) return 0;
    neutrino_note_stream_work(NT_WORK_PICK);
    p->fenced = tw.ev_record(p->twin->fence, p->last_stream) == 0;
    return p->fenced;
}

/* The host waits until the plan's last launch is done: its fence, else the twin's whole context (made
 * current for the synchronisation: the thread's own may be another), with this thread's capture mode
 * relaxed. Under order, never under picks_lock: other plans' launches go on meanwhile. */
static void host_wait_last(nt_pick_plan *p) {
    nt_twin *t = p->twin;
    int mode = CAPTURE_MODE_RELAXED;
    tw.capture_mode(&mode);
    if (!fence_last(p) || tw.ev_sync(t->fence)) {
        void *current = NULL;
        int own = tw.ctx_get(&current) == 0;
        if (own && (current == t->ctx || tw.ctx_set(t->ctx) == 0)) {
            tw.ctx_sync();
            if (current != t->ctx) tw.ctx_set(current);
        }
    }
    tw.capture_mode(&mode);
}

/* The plan lets its twin go (`how`: TWIN_SETTLED when the program's graph takes every replay from now on:
 * the host first waits for the twin's last launch, which CUDA does not order the program's graph after;
 * TWIN_DESTROYED when no replay follows; TWIN_LEFT when the context is going and takes it: no driver
 * call). Under order, never under picks_lock. */
static void twin_release(nt_pick_plan *p, int how) {
    nt_twin *t = p->twin;
    if (!t) return;
    if (how == TWIN_SETTLED && p->last == t->exec) host_wait_last(p);
    p->twin = NULL;
    p->last = p->last_stream = NULL;
    p->fenced = 0;
    atomic_fetch_sub(&twins_live, 1);
    if (how != TWIN_LEFT) {
        tw.exec_destroy(t->exec);  /* freed by CUDA when a launch in flight completes */
        tw.graph_destroy(t->graph);
        tw.ev_destroy(t->fence);   /* (a wait enqueued on it still holds) */
    }
    free(t);
}

/* Before launching `handle` (the program's graph or the twin) on `stream`: after the other one's launch
 * on another stream, that stream's work waits for it (the fence, recorded on that stream now if it was
 * not after the launch). Launches of one executable graph CUDA orders itself. 0: the fence could not be
 * recorded or waited for. Under order. */
static int twin_order(nt_pick_plan *p, void *handle, void *stream) {
    if (!p->last || handle == p->last || on_last_stream(p, stream)) return 1;
    if (!fence_last(p)) return 0;
    atomic_fetch_add(&twin_fences, 1);
    return tw.wait(stream, p->twin->fence, 0) == 0;
}

/* After `handle` was launched on `stream`: it is the last launch. Its fence is recorded right away only
 * where a later launch could not record it: on the per-thread stream (another thread's launch would
 * record on its own), and once the plan's launches have gone to two streams (recording later, on the
 * stream, would also order after the program's work enqueued there since). One stream, one thread:
 * nothing of ours is enqueued. Under order. */
static void note_launch(nt_pick_plan *p, void *handle, void *stream) {
    if (!p->twin) return;  /* one executable graph: CUDA orders its launches */
    if (p->last && !on_last_stream(p, stream)) p->spread = 1;
    p->last = handle, p->last_stream = stream, p->last_thread = pthread_self();
    p->fenced = 0;
    if (p->spread || stream == PER_THREAD_STREAM) {
        neutrino_note_stream_work(NT_WORK_PICK);
        p->fenced = tw.ev_record(p->twin->fence, stream) == 0;
    }
}

/* The plan of `exec`, held (plan_put lets it go), or NULL. */
static nt_pick_plan *plan_get(void *exec) {
    pthread_mutex_lock(&picks_lock);
    nt_pick_plan *p = *plan_slot(exec);
    if (p) p->refs++;
    pthread_mutex_unlock(&picks_lock);
    return p;
}

/* One hold ends; the last frees the plan (unlinked by then). Under picks_lock. */
static void plan_put_locked(nt_pick_plan *p) {
    if (--p->refs == 0) plan_free(p);
}

static void plan_put(nt_pick_plan *p) {
    pthread_mutex_lock(&picks_lock);
    plan_put_locked(p);
    pthread_mutex_unlock(&picks_lock);
}

/* The plan leaves the list: no launch goes through it from now on, and a graph kept for it alone is
 * destroyed (after its last switch: the caller holds order). Under picks_lock. */
static void plan_unlink(nt_pick_plan *p) {
    if (!p->linked) return;
    nt_pick_plan **slot = &plans;
    while (*slot && *slot != p) slot = &(*slot)->next;
    if (*slot) *slot = p->next;
    p->linked = 0;
    atomic_fetch_sub(&plans_live, 1);
    release_graph(p->graph);
    plan_put_locked(p);  /* the list's hold (the caller still holds one) */
}

/* Every linked plan, held, chained by `swept` (the caller walks the chain with order taken on each, then
 * lets each go). Under sweep_lock: one sweep at a time owns the chain. */
static nt_pick_plan *sweep_begin(void) {
    nt_pick_plan *first = NULL;
    pthread_mutex_lock(&picks_lock);
    for (nt_pick_plan *p = plans; p; p = p->next) {
        p->refs++;
        p->swept = first;
        first = p;
    }
    pthread_mutex_unlock(&picks_lock);
    return first;
}

int neutrino_graph_pick_plan(void *exec, void *graph, void *ctx, void *group, uint64_t start, uint64_t stop,
                             uint64_t every, int nkernels, const nt_pick_kernel_desc *kernels, int nappends,
                             const nt_pick_append_desc *appends, unsigned long long flags, int twin, int *twin_why) {
    *twin_why = TWIN_NOT_ASKED;
    if (!load_driver() || !exec || !group || nkernels <= 0 || nappends < 0 || !every) return 0;  /* (a chain: none) */
    nt_pick_plan *p = calloc(1, sizeof *p);
    if (!p) return 0;
    p->kernels = calloc((size_t)nkernels, sizeof *p->kernels);
    p->appends = calloc((size_t)nappends, sizeof *p->appends);
    if (!p->kernels || !p->appends) {
        plan_free(p);
        return 0;
    }
    p->exec = exec, p->graph = graph, p->ctx = ctx, p->group = group, p->start = start, p->stop = stop;
    p->every = every, p->nkernels = nkernels, p->nappends = nappends, p->appends_on = 1;
    for (int i = 0; i < nkernels; i++) {
        const nt_pick_kernel_desc *d = &kernels[i];
        const nt_pick_args *a = d->args;
        if (!a) {
            plan_free(p);
            return 0;
        }
        pick_kernel *k = &p->kernels[i];
        k->node = d->node;
        k->tagged = node_params(d->probed, d->grid, d->block, d->shared_bytes, a->tagged);
        k->untagged = node_params(d->probed, d->grid, d->block, d->shared_bytes, a->untagged);
        k->original = node_params(d->original, d->grid, d->block, d->shared_bytes, a->tagged);
        k->tagged.ctx = k->untagged.ctx = k->original.ctx = ctx;  /* the graph's, whatever is current */
    }
    for (int i = 0; i < nappends; i++) {
        pick_append *ap = &p->appends[i];
        ap->node = appends[i].node;
        memcpy(ap->values, appends[i].args, sizeof ap->values);
        for (int j = 0; j < APPEND_ARGS; j++) ap->ptrs[j] = &ap->values[j];
        ap->params = node_params(appends[i].func, appends[i].grid, appends[i].block, 0, ap->ptrs);
        ap->params.ctx = ctx;
    }
    if (twin) *twin_why = twin_build(p, flags);
    pthread_mutex_init(&p->order, NULL);
    p->refs = 1, p->linked = 1;  /* the list's hold */
    pthread_mutex_lock(&picks_lock);
    nt_pick_plan **slot = plan_slot(exec);
    nt_pick_plan *stale = *slot;  /* a plan left under a reused handle: it goes, held by us */
    if (stale) *slot = stale->next, stale->linked = 0;
    p->next = plans;
    plans = p;
    if (!stale) atomic_fetch_add(&plans_live, 1);
    pthread_mutex_unlock(&picks_lock);
    if (stale) {
        pthread_mutex_lock(&stale->order);
        twin_release(stale, TWIN_DESTROYED);
        pthread_mutex_unlock(&stale->order);
        pthread_mutex_lock(&picks_lock);
        release_graph(stale->graph);
        plan_put_locked(stale);
        pthread_mutex_unlock(&picks_lock);
    }
    return 1;
}

static int set_kernels(nt_pick_plan *p, int which) {
    for (int i = 0; i < p->nkernels; i++) {
        pick_kernel *k = &p->kernels[i];
        const knode_params *kp = which == K_PROBED ? &k->untagged : which == K_ORIGINAL ? &k->original : &k->tagged;
        atomic_fetch_add(&pick_calls, 1);
        if (drv.set_params(p->exec, k->node, kp)) return 0;
    }
    p->kernels_run = which;
    return 1;
}

static int set_appends(nt_pick_plan *p, int enabled) {
    for (int i = 0; i < p->nappends; i++) {
        atomic_fetch_add(&pick_calls, 1);
        if (drv.set_enabled(p->exec, p->appends[i].node, (unsigned)enabled)) return 0;
    }
    p->appends_on = enabled;
    return 1;
}

static int set_append_args(nt_pick_plan *p, uint64_t skip, int host) {
    for (int i = 0; i < p->nappends; i++) {
        pick_append *ap = &p->appends[i];
        ap->values[APPEND_SKIP] = skip;
        ap->values[APPEND_HOST] = (uint64_t)host;
        atomic_fetch_add(&pick_calls, 1);
        if (drv.set_params(p->exec, ap->node, &ap->params)) return 0;
    }
    p->skip = skip, p->host_args = host;
    return 1;
}

/* The nodes as the next replay needs them (`want`: selected, `skip` replays left out before it). Driver
 * calls only where it changes. Under order. */
static int put_state(nt_pick_plan *p, int want, uint64_t skip) {
    if (want) {
        if (p->kernels_run != K_PROBED) {
            atomic_fetch_add(&pick_switches, 1);
            if (!set_kernels(p, K_PROBED)) return 0;
        }
        if ((!p->host_args || p->skip != skip) && !set_append_args(p, skip, 1)) return 0;
        return p->appends_on || set_appends(p, 1);
    }
    if (p->kernels_run != K_ORIGINAL) {
        atomic_fetch_add(&pick_switches, 1);
        if (!set_kernels(p, K_ORIGINAL)) return 0;
    }
    return !p->appends_on || set_appends(p, 0);
}

static int selects(const nt_pick_plan *p, uint64_t r) {
    return r >= p->start && r < p->stop && (r - p->start) % p->every == 0;
}

/* A plan given up (`dropping`) is restored by whoever holds order first, its drop or a launch: the twin's
 * last launch waited for, every node as captured, the append nodes enabled numbering the next replay on
 * the device; then it leaves the list. A driver call that failed is told to the drop (group->drop_failed).
 * Under order. */
static void finish_drop(nt_pick_plan *p) {
    pthread_mutex_lock(&picks_lock);
    int due = p->linked && p->dropping;
    uint64_t skip = p->drop_skip;
    pthread_mutex_unlock(&picks_lock);
    if (!due) return;
    twin_release(p, TWIN_SETTLED);
    int restored = set_kernels(p, K_CAPTURED) & set_append_args(p, skip, 0);
    restored &= set_appends(p, 1);
    pthread_mutex_lock(&picks_lock);
    if (!restored) p->group->drop_failed = 1;
    plan_unlink(p);
    pthread_mutex_unlock(&picks_lock);
}

enum { R_PLAIN, R_CAPTURED, R_NUMBERED };

/* The replay's number taken in the group (launches in flight on other executable graphs of the group
 * count as made): `*picked` whether `--launches` selects it, `*skip` the replays left out before it.
 * R_PLAIN: the plan is gone (the launch runs the nodes as they are); R_CAPTURED: into a capture. Under order. */
static int number_replay(nt_pick_plan *p, int capturing, int *picked, uint64_t *skip) {
    pthread_mutex_lock(&picks_lock);
    int dropping = p->dropping, linked = p->linked;
    if (linked && !dropping && !capturing) {
        nt_pick_group *g = p->group;
        uint64_t r = g->replays + g->inflight;
        *picked = selects(p, r);
        *skip = r - g->runs - g->inflight_runs;
        g->inflight++, g->inflight_runs += (uint64_t)*picked;
    }
    pthread_mutex_unlock(&picks_lock);
    if (linked && dropping) finish_drop(p);
    return !linked || dropping ? R_PLAIN : capturing ? R_CAPTURED : R_NUMBERED;
}

/* The numbered launch is over: made (`launched`) or not (its number is given back). */
static void count_replay(nt_pick_plan *p, int picked, int launched, int twin) {
    pthread_mutex_lock(&picks_lock);
    nt_pick_group *g = p->group;
    g->inflight--, g->inflight_runs -= (uint64_t)picked;
    if (launched) g->replays++, g->runs += (uint64_t)picked;
    pthread_mutex_unlock(&picks_lock);
    if (launched) {
        atomic_fetch_add(&pick_launches, 1);
        if (twin) atomic_fetch_add(&twin_launches, 1);
    }
}

/* One replay of plan `p`, under its order lock: the twin for a replay left out, else the program's graph
 * with its nodes as the replay needs them; ordered after the plan's previous launch (twin_order), the
 * launch, then its fence where needed (note_launch). A twin the driver refuses to order or to launch goes
 * (the host waits for its last launch first) and the program's graph takes the replay. `as_is`: the
 * program's graph as its nodes are, unnumbered (the plan could not be given up). */
static int planned_launch(nt_pick_plan *p, void *stream, void *where, int capturing, int as_is,
                          nt_graph_launch_fn launch, int *rc) {
    int picked = 0, why = 0;
    uint64_t skip = 0;
    if (as_is) finish_drop(p);  /* (given up meanwhile: restored first) */
    int state = as_is ? R_NUMBERED : number_replay(p, capturing, &picked, &skip);
    if (state == R_CAPTURED) return NT_PICK_CAPTURED;
    if (state == R_PLAIN) {
        *rc = launch(p->exec, stream);
        return 0;
    }
    void *handle = p->twin && !picked && !as_is ? p->twin->exec : p->exec;
    if (p->twin && !twin_order(p, handle, where)) {  /* unordered: no twin from here on */
        twin_release(p, TWIN_SETTLED);
        why = NT_PICK_TWIN_LOST, handle = p->exec;
    }
    if (handle == p->exec && !as_is && !put_state(p, picked, skip)) {
        count_replay(p, picked, 0, 0);
        return NT_PICK_FAILED;
    }
    *rc = launch(handle, stream);
    if (*rc && handle != p->exec) {  /* the driver refused the twin: the program's graph takes the replay */
        twin_release(p, TWIN_SETTLED);
        why = NT_PICK_TWIN_LOST, handle = p->exec;
        if (!put_state(p, picked, skip)) {
            count_replay(p, picked, 0, 0);
            return NT_PICK_FAILED;
        }
        *rc = launch(handle, stream);
    }
    if (!as_is) count_replay(p, picked, *rc == 0, handle != p->exec);
    if (*rc == 0) note_launch(p, handle, where);
    return why;
}

/* A launch of executable graph `exec` on `stream` (`where`: the stream it names, CU_STREAM_PER_THREAD for
 * the _ptsz entry points' NULL; `capturing`: into a capture) by `launch`, the driver's cuGraphLaunch. With
 * a plan, successive launches of the program's graph and of its twin never overlap on the GPU, whatever
 * the threads and streams: each is chosen, launched and fenced under the plan's order lock, and ordered
 * after the one before (CUDA orders only the launches of one executable graph). Returns NT_PICK_CAPTURED
 * or NT_PICK_FAILED when the host cannot choose: nothing launched (the caller reports it, Python gives the
 * plan up, and the caller launches again); else `*rc` is the launch's result, and NT_PICK_TWIN_LOST says
 * that the plan switches nodes from now on. `as_is`: launch the program's graph as its nodes are, in
 * order (a plan Python could not give up). */
int neutrino_graph_pick_launch(void *exec, void *stream, void *where, int capturing, int as_is,
                               nt_graph_launch_fn launch, int *rc) {
    nt_pick_plan *p = plan_get(exec);
    if (!p) {
        *rc = launch(exec, stream);
        return 0;
    }
    pthread_mutex_lock(&p->order);
    int why = planned_launch(p, stream, where, capturing, as_is, launch, rc);
    pthread_mutex_unlock(&p->order);
    plan_put(p);
    return why;
}

/* A stream is about to be destroyed or to start capturing: a twin plan whose last launch went there and is
 * not fenced records its fence now (later, recording there would be too late or captured), or else the
 * host waits for that launch; the next launch of the other graph waits for the fence wherever it goes,
 * that stream's handle included. */
void neutrino_graph_pick_stream_event(void *stream) {
    if (!atomic_load_explicit(&twins_live, memory_order_relaxed)) return;
    pthread_mutex_lock(&sweep_lock);
    for (nt_pick_plan *p = sweep_begin(), *next; p; p = next) {
        next = p->swept;
        pthread_mutex_lock(&p->order);
        if (p->twin && p->last && on_last_stream(p, stream)) {
            if (fence_last(p)) {
                p->last_stream = STREAM_GONE;
            } else {  /* nothing to order after any more */
                if (p->last == p->twin->exec) host_wait_last(p);
                p->last = p->last_stream = NULL;
            }
        }
        pthread_mutex_unlock(&p->order);
        plan_put(p);
    }
    pthread_mutex_unlock(&sweep_lock);
}

/* The program changed node `node` of its executable graph `exec`: where `exec` has a twin, the same
 * change goes to the twin's copy of the node (`apply` with the twin and that node; 0: done). Returns 1
 * when applied or no twin, 0 when it could not be (the twin is gone: the plan switches nodes). */
int neutrino_graph_pick_mirror(void *exec, void *node, int (*apply)(void *twin, void *node, void *arg), void *arg) {
    if (!atomic_load_explicit(&twins_live, memory_order_relaxed)) return 1;
    nt_pick_plan *p = plan_get(exec);
    if (!p) return 1;
    int ok = 1;
    pthread_mutex_lock(&p->order);
    if (p->twin) {
        void *twin_node = NULL;
        ok = tw.find(&twin_node, node, p->twin->graph) == 0 && apply(p->twin->exec, twin_node, arg) == 0;
        if (!ok) twin_release(p, TWIN_SETTLED);
    }
    pthread_mutex_unlock(&p->order);
    plan_put(p);
    return ok;
}

/* Whether `exec` has a plan that involves `node` (NULL: any node). */
int neutrino_graph_pick_has(void *exec, void *node) {
    if (!atomic_load_explicit(&plans_live, memory_order_relaxed)) return 0;
    int found = 0;
    pthread_mutex_lock(&picks_lock);
    nt_pick_plan *p = *plan_slot(exec);
    for (int i = 0; p && !found && i < p->nkernels; i++) found = !node || p->kernels[i].node == node;
    for (int i = 0; p && !found && i < p->nappends; i++) found = p->appends[i].node == node;
    pthread_mutex_unlock(&picks_lock);
    return found;
}

/* 1 if the program destroyed `graph` while a plan needed it: the destroy is ours to do later. Called
 * by the cuGraphDestroy hook before the real call. */
int neutrino_graph_pick_keeps(void *graph) {
    if (!atomic_load_explicit(&plans_live, memory_order_relaxed) || !graph) return 0;
    int used = 0;
    pthread_mutex_lock(&picks_lock);
    for (nt_pick_plan *p = plans; p && !used; p = p->next) used = p->graph == graph;
    kept_graph *k = used ? malloc(sizeof *k) : NULL;
    if (k) {
        k->graph = graph;
        k->next = kept;
        kept = k;
    }
    pthread_mutex_unlock(&picks_lock);
    return k != NULL;  /* no memory: destroyed now (the plan's next switch fails and falls back) */
}

/* A plan left the list: a graph it kept, which no linked plan uses, is destroyed now. Under picks_lock. */
static void release_graph(void *graph) {
    for (nt_pick_plan *p = plans; p; p = p->next)
        if (p->graph == graph) return;
    for (kept_graph **k = &kept; *k; k = &(*k)->next) {
        if ((*k)->graph != graph) continue;
        kept_graph *gone = *k;
        *k = gone->next;
        free(gone);
        CUresult (*destroy)(void *) = (CUresult (*)(void *))neutrino_real_sym("cuGraphDestroy");
        if (destroy) destroy(graph);
        return;
    }
}

/* The executable graph is destroyed: its plan goes, no driver call but its twin's destruction. */
void neutrino_graph_pick_forget(void *exec) {
    if (!atomic_load_explicit(&plans_live, memory_order_relaxed)) return;
    nt_pick_plan *p = plan_get(exec);
    if (!p) return;
    pthread_mutex_lock(&p->order);
    twin_release(p, TWIN_DESTROYED);  /* the program destroyed its graph: no replay follows */
    pthread_mutex_lock(&picks_lock);
    plan_unlink(p);
    pthread_mutex_unlock(&picks_lock);
    pthread_mutex_unlock(&p->order);
    plan_put(p);
}

/* A context is going away: every plan goes, without a driver call (the graphs kept for them, and the
 * twins, are left to the context: destroying one now could touch freed memory). */
void neutrino_graph_pick_forget_all(void) {
    pthread_mutex_lock(&sweep_lock);
    nt_pick_plan *p = sweep_begin();
    pthread_mutex_lock(&picks_lock);
    kept_graph *k = kept;
    kept = NULL;
    for (nt_pick_plan *q = p; q; q = q->swept) {  /* unlinked without release_graph: no driver call */
        q->linked = 0;
        q->refs--;  /* the list's hold (the sweep holds one) */
    }
    plans = NULL;
    atomic_store(&plans_live, 0);
    pthread_mutex_unlock(&picks_lock);
    for (nt_pick_plan *next; p; p = next) {
        next = p->swept;
        pthread_mutex_lock(&p->order);
        twin_release(p, TWIN_LEFT);
        pthread_mutex_unlock(&p->order);
        plan_put(p);
    }
    pthread_mutex_unlock(&sweep_lock);
    while (k) {
        kept_graph *next = k->next;
        free(k);
        k = next;
    }
}

/* Give the plan of `exec` up, and every plan of its group (their executable graphs share the nodes'
 * device state: once one runs on the device gate, the host no longer sees every replay it numbers):
 * every node as captured (probed, reading the gate), the append nodes enabled and numbering the next
 * replay `*next_replay` (skip = the replays left out so far, host = 0; launches numbered and in flight
 * on other threads count as made). The group's plans are marked first, in one step; each is restored by
 * whoever takes its order lock next (finish_drop: this call, or a launch of it that comes first), after
 * its twin's last launch. Returns 0 when there was no plan, 1 when restored, -1 when a driver call failed
 * (the nodes may be left in either state: the program's results are the same, the probe's may be missing).
 * Called without the GIL: it may wait for the GPU. */
int neutrino_graph_pick_drop(void *exec, uint64_t *next_replay) {
    pthread_mutex_lock(&picks_lock);
    nt_pick_plan *p = *plan_slot(exec);
    if (!p || p->dropping) {  /* (being given up by another thread: that one sets the gates) */
        pthread_mutex_unlock(&picks_lock);
        return 0;
    }
    nt_pick_group *g = p->group;
    uint64_t next = g->replays + g->inflight;
    for (nt_pick_plan *q = plans; q; q = q->next)
        if (q->group == g) q->dropping = 1, q->drop_skip = next - g->runs - g->inflight_runs;
    g->drop_failed = 0;
    *next_replay = next;
    for (;;) {
        p = plans;
        while (p && !(p->group == g && p->dropping)) p = p->next;
        if (!p) break;
        p->refs++;
        pthread_mutex_unlock(&picks_lock);
        pthread_mutex_lock(&p->order);
        finish_drop(p);
        pthread_mutex_unlock(&p->order);
        pthread_mutex_lock(&picks_lock);
        plan_put_locked(p);
    }
    int ok = g->drop_failed ? -1 : 1;
    pthread_mutex_unlock(&picks_lock);
    return ok;
}

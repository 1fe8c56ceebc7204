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
 * the program's own graph, topology included. Launches stay in the program's order: each launch of one
 * of the two after a launch of the other on another stream waits for it (an event of ours, recorded on
 * that stream when the wait needs it, right after the launch on the per-thread stream, else at the latest
 * before its stream is destroyed or starts capturing: on one stream nothing of ours is added). A launch
 * that chose the twin holds it until its cuGraphLaunch returns (the plan may be given up by another thread
 * meanwhile), and the host's waits for a twin's last launch run outside the lock. The program's changes to
 * its executable graph (kernel, memcpy, memset, host, child, event node parameters; node enables) are
 * applied to the twin too; a change that cannot be, and graphs that cannot be cloned (memory alloc/free nodes, conditional
 * nodes) or instantiated twice, leave the plan switching nodes as below (Python writes a
 * `graph_pick_switching` event).
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

/* One twin (its executable graph, the clone it was made from, the event that orders launches of the two
 * graphs) with its uses: a launch that chose it under picks_lock launches it after the lock is let go, and
 * another thread may give the plan up in between; the twin is destroyed when the plan has let it go
 * (`gone`: TWIN_*) and no use is left, by whoever ends the last one. */
typedef struct nt_twin {
    void *exec, *graph, *fence, *ctx;
    int users;  /* under picks_lock */
    int gone;
} nt_twin;

/* A twin let go or waited for under picks_lock, finished outside it (twin_finish): wait for `fence`
 * (recorded after the twin's last launch), or without one synchronise the twin's context; then end
 * the use held on `twin` (NULL: none), destroying it when that was its last. */
typedef struct {
    nt_twin *twin;
    void *fence;
    int sync_ctx;
} twin_job;

typedef struct nt_pick_plan {
    void *exec;
    void *graph;      /* the captured graph its node handles belong to (kept until the plan goes) */
    struct nt_pick_plan *next;
    nt_pick_group *group;
    uint64_t start, stop, every;
    int nkernels, nappends;
    pick_kernel *kernels;
    pick_append *appends;
    int kernels_run;  /* K_* */
    int appends_on;   /* the append nodes are enabled */
    int host_args;    /* the append nodes' arguments say host = 1, with `skip` below */
    uint64_t skip;
    void *ctx;        /* the graph's context */
    /* the twin (NULL: switching): the program's graph as it made it, launched for the replays left out */
    struct nt_twin *twin;
    void *last, *last_stream;    /* the executable graph launched last (exec or the twin's), and its stream */
    int fenced;                  /* the twin's fence was recorded after that launch */
    twin_job job;                /* what is left to do for a twin let go under picks_lock (twin_finish) */
} nt_pick_plan;

/* Graphs the program destroyed while a plan still switches nodes by their handles (PyTorch destroys
 * the graph right after instantiating it): destroyed for real when their last plan goes. */
typedef struct kept_graph {
    void *graph;
    struct kept_graph *next;
} kept_graph;

static pthread_mutex_t picks_lock = PTHREAD_MUTEX_INITIALIZER;
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
static void lock_in_forked_child(void) { pthread_mutex_init(&picks_lock, NULL); }
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
    if (!why && (tw.instantiate(&plain, clone, flags & TWIN_FLAGS_KEPT) || !plain)) why = TWIN_INSTANTIATE;
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

enum { TWIN_KEPT, TWIN_LEFT, TWIN_DESTROYED, TWIN_SETTLED };  /* how the twin goes (KEPT: it stays) */

static void twin_destroy(nt_twin *t) {
    if (t->gone != TWIN_LEFT) {  /* TWIN_LEFT: its handles went with the context */
        tw.exec_destroy(t->exec);  /* freed by CUDA when a launch in flight completes */
        tw.graph_destroy(t->graph);
        tw.ev_destroy(t->fence);
    }
    free(t);
}

/* One use of `t` ends: the twin to destroy now (outside picks_lock), or NULL. Under picks_lock. */
static nt_twin *twin_unuse(nt_twin *t) {
    return t && --t->users == 0 && t->gone ? t : NULL;
}

/* The host waits until the twin's last launch is done (job->fence, else the twin's whole context,
 * made current for the synchronisation: the thread's own may be another), with this thread's capture
 * mode relaxed; then the job's use of the twin ends. Without picks_lock: other threads launch meanwhile. */
static void twin_finish(twin_job *job) {
    nt_twin *t = job->twin;
    if (!t) return;
    if (job->fence || job->sync_ctx) {
        int mode = CAPTURE_MODE_RELAXED;
        tw.capture_mode(&mode);
        if (!job->fence || tw.ev_sync(job->fence)) {
            void *current = NULL;
            int own = tw.ctx_get(&current) == 0;
            if (own && (current == t->ctx || tw.ctx_set(t->ctx) == 0)) {
                tw.ctx_sync();
                if (current != t->ctx) tw.ctx_set(current);
            }
        }
        tw.capture_mode(&mode);
    }
    pthread_mutex_lock(&picks_lock);
    nt_twin *gone = twin_unuse(t);
    pthread_mutex_unlock(&picks_lock);
    if (gone) twin_destroy(gone);
    memset(job, 0, sizeof *job);
}

/* A job that waits for the twin's last launch, when the twin ran last (its fence recorded now if it was
 * not: its stream is alive and not capturing, see neutrino_graph_pick_stream_event; another thread's
 * per-thread stream is not ours to record on). Holds a use of the twin. Under picks_lock. */
static twin_job twin_wait_job(nt_pick_plan *p) {
    twin_job job = {NULL, NULL, 0};
    nt_twin *t = p->twin;
    if (!t || !p->last || p->last != t->exec) return job;
    if (!p->fenced && p->last_stream != PER_THREAD_STREAM) p->fenced = tw.ev_record(t->fence, p->last_stream) == 0;
    t->users++;
    job.twin = t;
    job.fence = p->fenced ? t->fence : NULL;
    job.sync_ctx = !p->fenced;
    return job;
}

/* The plan lets its twin go (`how`: TWIN_SETTLED when the program's graph takes every replay from now on,
 * after the twin's last launch; TWIN_DESTROYED when no replay follows; TWIN_LEFT when the context is going
 * and takes it, no driver call). What is left to do goes to p->job: the caller runs twin_finish after
 * letting picks_lock go (a twin a launch still uses is destroyed by that launch). Under picks_lock. */
static void twin_let_go(nt_pick_plan *p, int how) {
    nt_twin *t = p->twin;
    if (!t) return;
    twin_job job = how == TWIN_SETTLED ? twin_wait_job(p) : (twin_job){NULL, NULL, 0};
    if (!job.twin) {  /* nothing to wait for: the job holds the use that destroys it, unless a launch does */
        t->users++;
        job.twin = t;
    }
    t->gone = how;
    p->twin = NULL;
    p->last = p->last_stream = NULL;
    p->job = job;  /* (a plan has one twin: its job is empty until now) */
    atomic_fetch_sub(&twins_live, 1);
}

/* Before launching `handle` (the program's graph or the twin) on `stream`: after the other one's launch
 * on another stream, wait for it (the fence recorded on that stream now, if it was not after the launch).
 * 0: the driver refused the event or the wait. Under picks_lock. */
static int twin_order(nt_pick_plan *p, void *handle, void *stream) {
    if (!p->last || handle == p->last || (stream == p->last_stream && stream != PER_THREAD_STREAM)) return 1;
    if (!p->fenced && (p->last_stream == PER_THREAD_STREAM || tw.ev_record(p->twin->fence, p->last_stream))) return 0;
    p->fenced = 1;
    atomic_fetch_add(&twin_fences, 1);
    return tw.wait(stream, p->twin->fence, 0) == 0;
}

/* Host-chosen replays for executable graph `exec` of the captured graph `graph`, in context `ctx`,
 * whose nodes are given (its kernels as captured, the append nodes enabled with host = 0, skip = 0),
 * instantiated with `flags`. With `twin`, the replays left out run a twin (above); `*twin_why` says
 * why not (TWIN_*). Returns 1, or 0 when the host cannot choose (a missing driver call, no memory, a
 * node without copied arguments). */
int neutrino_graph_pick_plan(void *exec, void *graph, void *ctx, void *group, uint64_t start, uint64_t stop,
                             uint64_t every, int nkernels, const nt_pick_kernel_desc *kernels, int nappends,
                             const nt_pick_append_desc *appends, unsigned long long flags, int twin, int *twin_why) {
    *twin_why = TWIN_NOT_ASKED;
    if (!load_driver() || !exec || !group || nkernels <= 0 || nappends <= 0 || !every) return 0;
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
    pthread_mutex_lock(&picks_lock);
    nt_pick_plan **slot = plan_slot(exec);
    nt_pick_plan *stale = *slot;  /* a plan left under a reused handle */
    if (stale) *slot = stale->next;
    p->next = plans;
    plans = p;
    if (stale) {
        twin_let_go(stale, TWIN_DESTROYED);
        release_graph(stale->graph);
    } else {
        atomic_fetch_add(&plans_live, 1);
    }
    pthread_mutex_unlock(&picks_lock);
    if (stale) {
        twin_finish(&stale->job);
        plan_free(stale);
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

/* The nodes as the next replay needs them (`want`: selected). Driver calls only where it changes. */
static int put_state(nt_pick_plan *p, int want) {
    if (want) {
        nt_pick_group *g = p->group;
        uint64_t skip = g->replays + g->inflight - g->runs - g->inflight_runs;
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

/* Before a launch of `exec` on `stream` (`capturing`: into a stream being captured, asked by the caller
 * only for a planned graph): `*launch` is what to launch (exec, or its twin for a replay left out),
 * its nodes as this replay needs them; `*token` what the launch took (neutrino_graph_pick_after_launch
 * gives it back). 0: done, or not a planned graph; else why the host cannot choose (NT_PICK_*: the caller
 * reports it; Python gives the plan up with neutrino_graph_pick_drop before the launch, or for
 * NT_PICK_TWIN_LOST notes that the plan switches nodes from now on). */
int neutrino_graph_pick_before_launch(void *exec, void *stream, int capturing, void **launch, nt_pick_token *token) {
    *launch = exec;
    memset(token, 0, sizeof *token);
    if (!atomic_load_explicit(&plans_live, memory_order_relaxed)) return 0;
    int why = 0;
    twin_job job = {NULL, NULL, 0};
    pthread_mutex_lock(&picks_lock);
    nt_pick_plan *p = *plan_slot(exec);
    if (p && capturing) {
        why = NT_PICK_CAPTURED;  /* the graph becomes a child node of another: its copy runs as captured */
    } else if (p) {
        int picked = selects(p, p->group->replays + p->group->inflight);
        void *handle = p->twin && !picked ? p->twin->exec : exec;
        if (p->twin && !twin_order(p, handle, stream)) {  /* unordered: no twin from here on */
            twin_let_go(p, TWIN_SETTLED);
            job = p->job;
            memset(&p->job, 0, sizeof p->job);
            why = NT_PICK_TWIN_LOST;
            handle = exec;
        }
        if (handle == exec && !put_state(p, picked)) why = NT_PICK_FAILED;
        if (why != NT_PICK_FAILED) {  /* a launch the plan numbers (a failed one is the device gate's) */
            p->group->inflight++, p->group->inflight_runs += (uint64_t)picked;
            token->group = p->group, token->picked = picked;
            if (handle != exec) p->twin->users++, token->twin = p->twin;
        }
        *launch = handle;
    }
    pthread_mutex_unlock(&picks_lock);
    twin_finish(&job);  /* the twin's last launch done before the program's graph takes the replay */
    return why;
}

/* After the launch of `launched_handle` on `stream` (`launched`: it was enqueued), with the token its
 * neutrino_graph_pick_before_launch gave: the replay is counted, and the append kernel's run; a twin let
 * go meanwhile is finished here (its launch waited for first when the program's graph takes the replays
 * after it). The twin's fence is recorded after the launch only on the per-thread stream (another
 * thread's launch could not record there); on another stream, only when a launch of the other graph
 * on another stream needs it (twin_order). */
void neutrino_graph_pick_after_launch(void *exec, void *launched_handle, void *stream, int launched,
                                      nt_pick_token *token) {
    if (!token->group) return;
    twin_job job = {NULL, NULL, 0};
    pthread_mutex_lock(&picks_lock);
    nt_pick_group *g = token->group;
    g->inflight--, g->inflight_runs -= (uint64_t)token->picked;
    if (launched) g->replays++, g->runs += (uint64_t)token->picked;
    nt_pick_plan *p = *plan_slot(exec);
    nt_twin *t = token->twin;
    if (launched) {
        atomic_fetch_add(&pick_launches, 1);
        if (t) atomic_fetch_add(&twin_launches, 1);
    }
    if (launched && p && p->twin && (launched_handle == exec || launched_handle == p->twin->exec)) {
        p->last = launched_handle, p->last_stream = stream, p->fenced = 0;
        if (stream == PER_THREAD_STREAM) p->fenced = tw.ev_record(p->twin->fence, stream) == 0;
    }
    if (t && t->gone == TWIN_SETTLED && launched) {  /* let go while this launch was made: wait for it */
        job.twin = t, job.sync_ctx = 1;
        if (tw.ev_record(t->fence, stream) == 0) job.fence = t->fence;
    } else if (t) {
        job.twin = t;  /* this launch's use ends */
    }
    pthread_mutex_unlock(&picks_lock);
    token->twin = NULL, token->group = NULL;
    twin_finish(&job);
}

/* The driver refused to launch the twin of `exec` (nothing of it ran; `token`: what the launch took, given
 * back here): the twin goes, and the replay runs the program's graph, its nodes as the replay needs them
 * (the token is the program's graph's launch from now on). 0: ready (or no plan any more: the nodes are
 * as captured); NT_PICK_FAILED: the host cannot choose (the caller reports it). */
int neutrino_graph_pick_twin_refused(void *exec, nt_pick_token *token) {
    int why = 0;
    twin_job job = {token->twin, NULL, 0}, settle = {NULL, NULL, 0};  /* the refused launch's use ends */
    token->twin = NULL;
    pthread_mutex_lock(&picks_lock);
    nt_pick_plan *p = *plan_slot(exec);
    if (p) {
        twin_let_go(p, TWIN_SETTLED);
        settle = p->job;
        memset(&p->job, 0, sizeof p->job);
        if (!put_state(p, token->picked)) why = NT_PICK_FAILED;
    }
    nt_pick_group *g = token->group;
    if (why && g) {  /* the device gate's replay */
        g->inflight--, g->inflight_runs -= (uint64_t)token->picked;
        token->group = NULL;
    }
    pthread_mutex_unlock(&picks_lock);
    twin_finish(&job);
    twin_finish(&settle);
    return why;
}

/* Stands for a destroyed stream as the last launch's: no stream has it (a stream made later may get
 * the destroyed one's handle, and is not ordered after that launch). */
static const char stream_gone;
#define STREAM_GONE ((void *)&stream_gone)

/* A stream is about to be destroyed or to start capturing: a twin plan whose last launch went there
 * and is not fenced records its fence now (later, recording there would be too late or captured), and
 * the next launch of the other graph waits for it wherever it goes, that stream's handle included. */
void neutrino_graph_pick_stream_event(void *stream) {
    if (!atomic_load_explicit(&twins_live, memory_order_relaxed)) return;
    for (int again = 1; again;) {
        again = 0;
        twin_job job = {NULL, NULL, 0};
        pthread_mutex_lock(&picks_lock);
        for (nt_pick_plan *p = plans; p && !again; p = p->next) {
            if (!p->twin || !p->last || p->last_stream != stream) continue;
            if (p->fenced || tw.ev_record(p->twin->fence, stream) == 0) {
                p->fenced = 1;
                p->last_stream = STREAM_GONE;
            } else {  /* the host waits for that launch instead (its context): nothing to order after any more */
                p->twin->users++;
                job.twin = p->twin, job.sync_ctx = p->last == p->twin->exec;
                p->last = NULL;
                again = 1;
            }
        }
        pthread_mutex_unlock(&picks_lock);
        twin_finish(&job);
    }
}

/* The program changed node `node` of its executable graph `exec`: where `exec` has a twin, the same
 * change goes to the twin's copy of the node (`apply` with the twin and that node; 0: done). Returns 1
 * when applied or no twin, 0 when it could not be (the twin is gone: the plan switches nodes). */
int neutrino_graph_pick_mirror(void *exec, void *node, int (*apply)(void *twin, void *node, void *arg), void *arg) {
    if (!atomic_load_explicit(&twins_live, memory_order_relaxed)) return 1;
    int ok = 1;
    twin_job job = {NULL, NULL, 0};
    pthread_mutex_lock(&picks_lock);
    nt_pick_plan *p = *plan_slot(exec);
    if (p && p->twin) {
        void *twin_node = NULL;
        ok = tw.find(&twin_node, node, p->twin->graph) == 0 && apply(p->twin->exec, twin_node, arg) == 0;
        if (!ok) {
            twin_let_go(p, TWIN_SETTLED);
            job = p->job;
            memset(&p->job, 0, sizeof p->job);
        }
    }
    pthread_mutex_unlock(&picks_lock);
    twin_finish(&job);
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

/* The plan is gone: a graph it kept, which no other plan uses, is destroyed now. Under picks_lock. */
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

static nt_pick_plan *unlink_plan(void *exec) {
    nt_pick_plan **slot = plan_slot(exec), *p = *slot;
    if (p) {
        twin_let_go(p, TWIN_DESTROYED);  /* the program destroyed its graph: no replay follows */
        *slot = p->next;
        atomic_fetch_sub(&plans_live, 1);
        release_graph(p->graph);
    }
    return p;
}

/* The executable graph is destroyed: its plan goes, no driver call but its twin's destruction. */
void neutrino_graph_pick_forget(void *exec) {
    if (!atomic_load_explicit(&plans_live, memory_order_relaxed)) return;
    pthread_mutex_lock(&picks_lock);
    nt_pick_plan *p = unlink_plan(exec);
    pthread_mutex_unlock(&picks_lock);
    if (p) {
        twin_finish(&p->job);
        plan_free(p);
    }
}

/* A context is going away: every plan goes, without a driver call (the graphs kept for them, and the
 * twins, are left to the context: destroying one now could touch freed memory). */
void neutrino_graph_pick_forget_all(void) {
    pthread_mutex_lock(&picks_lock);
    nt_pick_plan *p = plans;
    kept_graph *k = kept;
    plans = NULL, kept = NULL;
    atomic_store(&plans_live, 0);
    for (nt_pick_plan *q = p; q; q = q->next) twin_let_go(q, TWIN_LEFT);
    pthread_mutex_unlock(&picks_lock);
    while (p) {
        nt_pick_plan *next = p->next;
        twin_finish(&p->job);  /* no driver call: frees the twin's record unless a launch still holds it */
        plan_free(p);
        p = next;
    }
    while (k) {
        kept_graph *next = k->next;
        free(k);
        k = next;
    }
}

/* Give the plan of `exec` up, and every plan of its group (their executable graphs share the nodes'
 * device state: once one runs on the device gate, the host no longer sees every replay it numbers):
 * every node as captured (probed, reading the gate), the append nodes enabled and numbering the next
 * replay `*next_replay` (skip = the replays left out so far, host = 0; launches chosen by a plan and in
 * flight on other threads count as made). Returns 0 when there was no plan, 1 when restored, -1 when a
 * driver call failed (the nodes may be left in either state: the program's results are the same, the
 * probe's may be missing). The host waits for the twins' last launches after letting picks_lock go. */
int neutrino_graph_pick_drop(void *exec, uint64_t *next_replay) {
    pthread_mutex_lock(&picks_lock);
    nt_pick_plan *p = *plan_slot(exec), *gone = NULL;
    nt_pick_group *group = p ? p->group : NULL;
    int ok = p ? 1 : 0;
    uint64_t next = group ? group->replays + group->inflight : 0;
    if (group) *next_replay = next;
    for (nt_pick_plan **slot = &plans; group && *slot;) {
        p = *slot;
        if (p->group != group) {
            slot = &p->next;
            continue;
        }
        twin_let_go(p, TWIN_SETTLED);  /* the program's graph takes every replay: after the twin's last launch */
        /* the switches first: the graph whose node handles they use may go with the plan */
        uint64_t skip = next - group->runs - group->inflight_runs;
        int restored = set_kernels(p, K_CAPTURED) & set_append_args(p, skip, 0);
        if (!(restored & set_appends(p, 1))) ok = -1;
        *slot = p->next;
        atomic_fetch_sub(&plans_live, 1);
        p->next = gone;
        gone = p;
    }
    for (p = gone; p; p = p->next) release_graph(p->graph);
    pthread_mutex_unlock(&picks_lock);
    while (gone) {
        p = gone->next;
        twin_finish(&gone->job);
        plan_free(gone);
        gone = p;
    }
    return ok;
}

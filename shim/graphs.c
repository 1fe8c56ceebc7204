/* Neutrino and CUDA graphs: the replay side of a probed graph node, and the graph API hooks.
 *
 * A probed kernel launched into a capturing stream is captured by Python
 * (neutrino/runtime/cudagraphs/capture.py) as the probed kernel; when the capture ends, an
 * append node after all of them, a leaf, is added to the graph
 * (neutrino/runtime/cudagraphs/ring.py). It copies each selected replay's maps into
 * the next free slot of the node's ring in device memory and sets the slot's
 * flag, in pinned host memory mapped into the device, to the replay number + 1
 * (a full ring: the replay is dropped and counted there).
 * Here one thread polls every node's flags: it copies the filled slots out on a
 * stream of ours (the copy engine, beside the program's work), queues their
 * frames for the writer (writer.c), clears the flags and writes how many slots
 * it has consumed into the node's device state. No host node: a replay never
 * waits for the host. When the writer is behind by more than `pending_limit`
 * bytes, or the trace budget is spent, the frame is not copied, and counted.
 *
 * The graph API hooks report what decides the lifetime of a node's memory
 * (instantiate, clone, exec update, destroy) and kernel nodes made or changed
 * with the graph API to Python through one callback; for new kernel-node
 * parameters of a probed node, Python may answer with parameters to use instead.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shim.h"

typedef int CUresult;
#define CU_NOT_FOUND 500
#define CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM 0x2

/* ------------------------------------------------------------------ replay rings */

enum { RING_REPLAYS, RING_WRITTEN, RING_DROPPED, RING_CONSUMED };  /* the ring's u64 counters */
#define RING_FLAGS 64                                /* offset of the flags */
#define STATE_CONSUMED 24                            /* the device state's consumed counter */
#define MAX_SLOTS 1024                               /* graph_ring.MAX_DEVICE_SLOTS */
#define MAX_STAGE 64                                 /* graph_ring.MAX_HOST_SLOTS */
#define POLL_NS 100000                               /* between polls of the rings */
#define CAPTURE_MODE_RELAXED 2

typedef struct nt_graph_node {
    nt_graph_desc d;
    struct nt_graph_node *next;  /* the rings polled (under rings_lock) */
    uint64_t next_read;          /* the next slot to drain, counted from the first */
    int attached;                /* its ring is ours to read */
    _Atomic int active;
    _Atomic uint64_t written, dropped_trace, dropped_behind, errors;
    uint64_t replays_kept, dropped_kept;  /* the ring's counters when it was let go */
} nt_graph_node;

static pthread_mutex_t rings_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t rings_changed = PTHREAD_COND_INITIALIZER;
static nt_graph_node *rings;
static int poller_started, poller_stopped;
static _Atomic uint64_t pending_limit = 1ull << 30, pending;

/* The writer wrote (or failed to write) a replay's frame: its bytes no longer wait (registered
 * with the writer when the first ring is polled). */
static void graph_frame_done(uint64_t frame_size) { atomic_fetch_sub(&pending, frame_size); }

void neutrino_graph_set_pending_limit(uint64_t limit) { atomic_store(&pending_limit, limit); }

static uint64_t ring_counter(const nt_graph_node *n, int which) {
    return atomic_load_explicit((_Atomic uint64_t *)n->d.ring + which, memory_order_relaxed);
}

/* Room for one more frame of node n, `ahead` bytes already admitted this round: the writer is not
 * too far behind and the trace budget holds it (reserved). Every refusal is counted. */
static int frame_room(nt_graph_node *n, uint64_t ahead) {
    uint64_t size = n->d.frame_size;
    if (atomic_load(&pending) + ahead + size > atomic_load(&pending_limit)) {
        atomic_fetch_add(&n->dropped_behind, 1);
        return 0;
    }
    if (!neutrino_trace_reserve(size)) {
        atomic_fetch_add(&n->dropped_trace, 1);
        return 0;
    }
    return 1;
}

/* Hand one copied-out frame (replay `r`, its trace bytes reserved) to the writer: its first `head_len` bytes
 * from `frame`, the rest from `body` (the chain: the header in the host ring, the maps in a staging slot). */
static void submit_parts(nt_graph_node *n, const void *frame, uint64_t head_len, const void *body, uint64_t r) {
    uint64_t size = n->d.frame_size;
    void *copy = malloc(size);
    if (!copy) {
        neutrino_trace_give_back(size);
        atomic_fetch_add(&n->errors, 1);
        return;
    }
    memcpy(copy, frame, head_len);
    if (head_len < size) memcpy((char *)copy + head_len, body, size - head_len);
    nt_job job;
    memset(&job, 0, sizeof job);
    job.fd = n->d.fd;
    job.kernel_id = n->d.kernel_id;
    job.frame_id = n->d.frame_id;
    job.stream = (void *)(uintptr_t)n->d.stream;
    memcpy(job.grid, n->d.grid, sizeof job.grid);
    memcpy(job.block, n->d.block, sizeof job.block);
    job.shared_bytes = n->d.shared_bytes;
    job.kernel_launch = r;
    job.header = copy;
    job.header_len = size;
    job.frame_size = size;
    job.owns_header = 1;
    job.host_frame = 1;
    job.graph = (uint64_t)n->d.graph_id << 32 | n->d.node_id;
    atomic_fetch_add(&pending, size);
    if (!neutrino_writer_submit(&job)) { /* the writer has stopped (exit) */
        atomic_fetch_sub(&pending, size);
        free(copy);
        neutrino_trace_give_back(size);
        atomic_fetch_add(&n->errors, 1);
        return;
    }
    atomic_fetch_add(&n->written, 1);
}

static void submit_frame(nt_graph_node *n, const void *frame, uint64_t r) { submit_parts(n, frame, n->d.frame_size, NULL, r); }

/* The driver calls of the copy-out (the real ones: nothing of ours is in between). */
static struct {
    CUresult (*ctx_get)(void **);
    CUresult (*ctx_set)(void *);
    CUresult (*copy2d)(const void *, void *);
    CUresult (*htod)(uint64_t, const void *, size_t, void *);
    CUresult (*dtoh)(void *, uint64_t, size_t, void *);
    CUresult (*sync)(void *);
    CUresult (*capture_mode)(int *);
    int loaded;
} cu;

static int load_driver(void) {
    if (!cu.loaded) {
        cu.ctx_get = (CUresult (*)(void **))neutrino_real_sym("cuCtxGetCurrent");
        cu.ctx_set = (CUresult (*)(void *))neutrino_real_sym("cuCtxSetCurrent");
        cu.copy2d = (CUresult (*)(const void *, void *))neutrino_real_sym("cuMemcpy2DAsync_v2");
        cu.htod = (CUresult (*)(uint64_t, const void *, size_t, void *))neutrino_real_sym("cuMemcpyHtoDAsync_v2");
        cu.dtoh = (CUresult (*)(void *, uint64_t, size_t, void *))neutrino_real_sym("cuMemcpyDtoHAsync_v2");
        cu.sync = (CUresult (*)(void *))neutrino_real_sym("cuStreamSynchronize");
        cu.capture_mode = (CUresult (*)(int *))neutrino_real_sym("cuThreadExchangeStreamCaptureMode");
        cu.loaded = cu.ctx_get && cu.ctx_set && cu.copy2d && cu.htod && cu.dtoh && cu.sync && cu.capture_mode
                    ? 1 : -1;
    }
    return cu.loaded == 1;
}

/* CUDA_MEMCPY2D (cuda.h): device memory to host memory, row by row with a pitch on each side. */
typedef struct {
    size_t src_x, src_y;
    int src_type;
    const void *src_host;
    uint64_t src_device;
    void *src_array;
    size_t src_pitch;
    size_t dst_x, dst_y;
    int dst_type;
    void *dst_host;
    uint64_t dst_device;
    void *dst_array;
    size_t dst_pitch;
    size_t width, height;
} nt_memcpy2d;
#define MEMORYTYPE_HOST 1
#define MEMORYTYPE_DEVICE 2

/* The driver state of one pass over the rings: the context made current (and its capture mode
 * relaxed: another thread may be capturing) once for all the rings of that context, and what to
 * give back when the pass ends. The driver serialises our calls with the program's, so a pass
 * makes few: per context, two to enter, one synchronisation, two to leave; per ring, one copy
 * per run of slots and one for the consumed count. */
typedef struct {
    void *ctx, *before;
    int mode, entered;
} nt_pass;

static _Atomic uint64_t poller_calls, poller_frames;  /* driver calls of the copy-out, and frames it wrote */

static int pass_enter(nt_pass *p, void *ctx) {
    if (p->entered && p->ctx == ctx) return 1;
    if (!load_driver()) return 0;
    if (!p->entered) {
        if (cu.ctx_get(&p->before)) return 0;
        p->mode = CAPTURE_MODE_RELAXED;
        cu.capture_mode(&p->mode);
        atomic_fetch_add(&poller_calls, 2);
    }
    p->entered = 1;  /* from here on pass_leave gives the mode and context back */
    p->ctx = NULL;
    atomic_fetch_add(&poller_calls, 1);
    if (cu.ctx_set(ctx)) return 0;
    p->ctx = ctx;
    return 1;
}

static void pass_leave(nt_pass *p) {
    if (!p->entered) return;
    cu.capture_mode(&p->mode);
    cu.ctx_set(p->before);
    atomic_fetch_add(&poller_calls, 2);
    p->entered = 0;
    p->ctx = NULL;
}

/* Host slot of the i-th filled slot counted from next_read (device slot j lands in host slot j % nstage). */
static char *host_slot(const nt_graph_node *n, uint64_t i) {
    return (char *)n->d.ring + n->d.slots + (n->next_read + i) % n->d.nstage * n->d.stride;
}

/* One ring's share of a pass: its filled slots [0, k) counted from next_read (marks[i]: replay + 1,
 * k <= nstage), which of them the writer has room for (ok), and whether a copy is in flight. */
typedef struct {
    nt_graph_node *n;
    uint64_t k;
    uint64_t marks[MAX_STAGE];
    unsigned char ok[MAX_STAGE];
} nt_round;

/* Copy the admitted slots [first, last) of a round, all in one run of device and host slots (neither
 * wraps inside it), with one 2D copy: rows of `span` bytes, the device ring's stride apart, into
 * host slots the host ring's stride apart. A refused copy loses those frames (counted). */
static void copy_run(nt_round *r, uint64_t first, uint64_t last) {
    nt_graph_node *n = r->n;
    if (first == last) return;
    uint64_t slot = (n->next_read + first) % n->d.nslots;
    nt_memcpy2d c;
    memset(&c, 0, sizeof c);
    c.src_type = MEMORYTYPE_DEVICE;
    c.src_device = n->d.device_slots + slot * n->d.device_stride;
    c.src_pitch = n->d.device_stride;
    c.dst_type = MEMORYTYPE_HOST;
    c.dst_host = host_slot(n, first) + n->d.data_off;
    c.dst_pitch = n->d.stride;
    c.width = n->d.span;
    c.height = last - first;
    atomic_fetch_add(&poller_calls, 1);
    neutrino_note_stream_work(NT_WORK_POLLER);
    if (!cu.copy2d(&c, n->d.copy_stream)) return;
    for (uint64_t i = first; i < last; i++) {
        r->ok[i] = 0;
        neutrino_trace_give_back(n->d.frame_size);
        atomic_fetch_add(&n->errors, 1);
    }
}

/* Read a ring's filled slots (at most one round of host slots), admit the frames the writer has
 * room for and, for a ring on the device, enqueue their copies: one per run of consecutive admitted
 * slots that wraps neither ring. Returns 1 when the ring may hold more than this round. */
static int round_start(nt_round *r, nt_pass *p) {
    nt_graph_node *n = r->n;
    _Atomic uint64_t *flags = (_Atomic uint64_t *)((char *)n->d.ring + RING_FLAGS);
    uint64_t k = 0, ahead = 0;
    while (k < n->d.nstage) {
        uint64_t mark = atomic_load_explicit(&flags[(n->next_read + k) % n->d.nslots], memory_order_acquire);
        if (!mark) break;
        r->marks[k++] = mark;
    }
    r->k = k;
    int on_device = n->d.device_slots != 0, entered = !on_device || (k && pass_enter(p, n->d.ctx));
    for (uint64_t i = 0; i < k; i++) {
        r->ok[i] = entered && atomic_load_explicit(&n->active, memory_order_relaxed) && frame_room(n, ahead);
        if (r->ok[i]) ahead += n->d.frame_size;
        else if (!entered) atomic_fetch_add(&n->errors, 1);
    }
    if (on_device && entered) {
        uint64_t first = 0;
        for (uint64_t i = 0; i <= k; i++) {  /* a run ends at a refused slot, a wrap of either ring, or k */
            int wraps = i < k && i > first && ((n->next_read + i) % n->d.nslots == 0 || (n->next_read + i) % n->d.nstage == 0);
            if (i == k || !r->ok[i] || wraps) {
                copy_run(r, first, i);
                first = i < k && r->ok[i] ? i : i + 1;
            }
        }
    }
    return k == n->d.nstage;
}

/* After the pass's copies are done (`lost`: their synchronisation failed): hand the frames to the
 * writer, clear the flags, and tell the device the slots are free (the consumed count: in the host
 * ring, and copied into the device state for a ring on the device). */
static void round_finish(nt_round *r, int lost, nt_pass *p) {
    nt_graph_node *n = r->n;
    _Atomic uint64_t *flags = (_Atomic uint64_t *)((char *)n->d.ring + RING_FLAGS);
    for (uint64_t i = 0; i < r->k; i++) {
        if (!r->ok[i]) continue;
        if (lost) {
            neutrino_trace_give_back(n->d.frame_size);
            atomic_fetch_add(&n->errors, 1);
            continue;
        }
        submit_frame(n, host_slot(n, i), r->marks[i] - 1);
        atomic_fetch_add(&poller_frames, 1);
    }
    for (uint64_t i = 0; i < r->k; i++)
        atomic_store_explicit(&flags[(n->next_read + i) % n->d.nslots], 0, memory_order_release);
    n->next_read += r->k;
    uint64_t *counters = (uint64_t *)n->d.ring;
    atomic_store_explicit((_Atomic uint64_t *)&counters[RING_CONSUMED], n->next_read, memory_order_release);
    if (n->d.device_slots && p->entered && p->ctx == n->d.ctx) {
        atomic_fetch_add(&poller_calls, 1);
        neutrino_note_stream_work(NT_WORK_POLLER);
        if (cu.htod(n->d.device_state + STATE_CONSUMED, &counters[RING_CONSUMED], 8, n->d.copy_stream))
            atomic_fetch_add(&n->errors, 1);
    }
}

#define PASS_ROUNDS 64  /* rings whose copies one synchronisation covers */

/* Wait for the copies of the rounds gathered (one synchronisation per stream of ours: they are all
 * in the pass's current context), then finish them. */
static void pass_flush(nt_round *rounds, int *count, nt_pass *p) {
    void *synced = NULL;
    int lost = 0;
    for (int i = 0; i < *count; i++) {
        nt_graph_node *n = rounds[i].n;
        int copied = 0;
        for (uint64_t j = 0; j < rounds[i].k; j++) copied |= rounds[i].ok[j];
        if (n->d.device_slots && copied && n->d.copy_stream != synced) {
            atomic_fetch_add(&poller_calls, 1);
            lost = cu.sync(n->d.copy_stream) != 0;
            synced = n->d.copy_stream;
        }
        round_finish(&rounds[i], n->d.device_slots && lost, p);
    }
    *count = 0;
}

/* One pass over the rings (`only`: that ring alone), each at most one round of host slots; returns
 * 1 when a ring may hold more. Called under rings_lock. */
static int drain_pass(nt_graph_node *only) {
    static nt_round rounds[PASS_ROUNDS];  /* under rings_lock */
    int count = 0, more = 0;
    nt_pass p = {0};
    for (nt_graph_node *n = only ? only : rings; n; n = only ? NULL : n->next) {
        if (!n->attached) continue;
        if (count && (count == PASS_ROUNDS || (n->d.device_slots && p.entered && p.ctx != n->d.ctx)))
            pass_flush(rounds, &count, &p);  /* before the pass leaves this context for another */
        nt_round *r = &rounds[count];
        r->n = n;
        more |= round_start(r, &p);
        if (r->k) count++;
    }
    pass_flush(rounds, &count, &p);
    pass_leave(&p);
    return more;
}

/* What the device has put in the rings (`only`: one ring), in order: all of it, or what `passes`
 * passes take (a device that keeps filling a ring must not keep the poller, and rings_lock, for
 * ever). Called under rings_lock. */
static void drain_rings(nt_graph_node *only, int passes) {
    while (passes-- > 0 && drain_pass(only)) {}
}
/* ------------------------------------------------------------------ the chain's rings */

/* The chain (spec/runtime.md, "The chain"; neutrino/runtime/cudagraphs/chain.py): no append node; each probed
 * node's launches write straight into slots of its own device ring, and its head (device memory, HEAD_BYTES a
 * node) counts the slots published (`written`) and those the host has drained. A pass over one executable graph's
 * chain: one copy of all its heads and a wait; per node, the slots drained .. written - 1 copied out into pinned
 * staging and zeroed (two copies per run that does not wrap the ring: out, and pinned zeroes in); one wait; each frame (the
 * node's header from its host ring, then the maps) handed to the writer as the append path's are, launch number =
 * the slot's tag - 1; then the new drained counts written into the heads with one strided copy. */
#define CHAIN_HEAD_BYTES 128                    /* passes/graph_chain.py HEAD_BYTES */
#define CHAIN_TAG_BYTES 16
enum { CH_CUR, CH_ADV, CH_RING, CH_GEOM, CH_WRITTEN, CH_DROPPED, CH_DRAINED, CH_WORDS = 8 };  /* u64 words */
#define CHAIN_PRIMED (1ull << 32)
#define CHAIN_DROP_MASK 0xffffffffull

typedef struct nt_chain {
    nt_chain_desc d;             /* its arrays: copies of ours */
    struct nt_chain *next;       /* the chains polled (under rings_lock) */
    int attached, untracked;     /* untracked: an executable graph of it not counted (never idle) */
    uint64_t *drained, *written, *dropped;  /* per node: drained by us; the head's counts when last read */
    uint64_t *at, *count, *lost; /* per node, this pass: its slots' offset in the staging, how many, copy refused */
    uint64_t launches_seen;      /* graph_launches_made when its last pass began */
    uint64_t launched_seen;      /* launches of its executable graphs counted when its last pass began */
    uint64_t launched_gone;      /* those of its executable graphs gone (under rings_lock) */
    unsigned own[8], nown;       /* its slots in chain_execs (more executable graphs: untracked) */
    unsigned idle;               /* polls since its last pass, that pass having found nothing and every launch run */
    _Atomic uint64_t errors;
    /* `--launches` (chain_replay; set under rings_lock): launches 1..picked_upto ran the replays the host chose,
     * start + (k - 1) * every; each later one replay `unpicked_from` + (k - 1 - picked_upto), kept when selected */
    int picking;
    uint64_t start, stop, every, picked_upto, unpicked_from, filtered;
} nt_chain;

static nt_chain *chains;
/* An idle chain is polled only every CHAIN_IDLE_POLLS polls (and at least every K / 2): idle, its last pass found
 * nothing new, its heads said every launch of its executable graphs made by then had run (none in flight: the
 * launches queued ahead of a GPU run later, and fill a ring while it is passed over: issue 24), and no graph has
 * been launched since (cuGraphLaunch calls so far: graph_launch). */
static _Atomic uint64_t graph_launches_made;
/* The poller's passes over chains, those it passed over as idle, and the most slots one pass found in one ring
 * (how close a ring came to full: NEUTRINO_FAST_PROFILE's line, neutrino_graph_chain_poll_counts) */
static _Atomic uint64_t chain_passes, chain_idle_skips, chain_most;
#define CHAIN_IDLE_POLLS 64
static unsigned chain_idle_polls(const nt_chain *c) { return c->d.k / 2 < CHAIN_IDLE_POLLS ? c->d.k / 2 : CHAIN_IDLE_POLLS; }

/* The chains' executable graphs (neutrino_graph_chain_exec, from Python at instantiation) and their launches,
 * counted at the launch itself (before the driver's call: a pass never finds one launched and not counted): a
 * table read without a lock on the launch path, written under rings_lock. A slot whose exec went keeps a
 * tombstone (lookups go on past it). A chain with an executable graph the table had no room for is never idle. */
#define CHAIN_EXECS 512
#define EXEC_GONE ((void *)(uintptr_t)1)
typedef struct {
    _Atomic(void *) exec;
    _Atomic(void *) owner;  /* its chain */
    _Atomic uint64_t launches;
} nt_chain_exec;
static nt_chain_exec chain_execs[CHAIN_EXECS];
static _Atomic int chain_execs_live;

static unsigned exec_hash(const void *exec) { return (unsigned)(((uintptr_t)exec >> 4) * 2654435761u) % CHAIN_EXECS; }

static nt_chain_exec *chain_exec_find(const void *exec) {
    for (unsigned i = 0, at = exec_hash(exec); i < CHAIN_EXECS; i++, at = (at + 1) % CHAIN_EXECS) {
        void *e = atomic_load_explicit(&chain_execs[at].exec, memory_order_acquire);
        if (!e) return NULL;
        if (e == exec) return &chain_execs[at];
    }
    return NULL;
}

/* A launch of `exec` about to be made (+1) or refused after all (-1). */
static void chain_exec_count(const void *exec, int delta) {
    if (!atomic_load_explicit(&chain_execs_live, memory_order_relaxed)) return;
    nt_chain_exec *x = chain_exec_find(exec);
    if (x) atomic_fetch_add(&x->launches, (uint64_t)(int64_t)delta);
}

/* The launches of chain c's executable graphs so far (under rings_lock; each poll: its own slots only). */
static uint64_t chain_launched(const nt_chain *c) {
    uint64_t n = c->launched_gone;
    for (unsigned i = 0; i < c->nown; i++) n += atomic_load(&chain_execs[c->own[i]].launches);
    return n;
}

/* Slot x let go (under rings_lock); with none left, the tombstones too (a lookup then stops at once). */
static void chain_exec_let_go(nt_chain_exec *x) {
    nt_chain *c = atomic_load(&x->owner);
    if (c) {
        c->launched_gone += atomic_load(&x->launches);  /* (they may still be running) */
        unsigned at = (unsigned)(x - chain_execs), i = 0;
        while (i < c->nown && c->own[i] != at) i++;
        if (i < c->nown) c->own[i] = c->own[--c->nown];
    }
    atomic_store(&x->owner, NULL);
    atomic_store(&x->exec, EXEC_GONE);
    if (atomic_fetch_sub(&chain_execs_live, 1) == 1)
        for (unsigned i = 0; i < CHAIN_EXECS; i++) atomic_store(&chain_execs[i].exec, NULL);
}

/* Every slot of chain c's let go (under rings_lock). */
static void chain_execs_drop(nt_chain *c) {
    while (c->nown) chain_exec_let_go(&chain_execs[c->own[c->nown - 1]]);
}

/* Whether every launch counted (`launched`) has run, by the heads of the nodes its own descendants advance (in
 * the same replay: a probed sink's last launch waits for the next replay). */
static int chain_caught_up(const nt_chain *c, uint64_t launched) {
    if (c->untracked) return 0;
    for (uint32_t i = 0; i < c->d.n; i++)
        if (!c->d.sinks[i] && c->written[i] + c->dropped[i] < launched) return 0;
    return 1;
}

static uint64_t *chain_head(nt_chain *c, uint32_t i) { return (uint64_t *)((char *)c->d.host + CHAIN_HEAD_BYTES * i); }
static uint64_t *chain_drained_words(nt_chain *c) { return (uint64_t *)((char *)c->d.host + CHAIN_HEAD_BYTES * c->d.n); }
static char *chain_staging(nt_chain *c) { return (char *)(chain_drained_words(c) + c->d.n); }

/* Copy node i's published slots out into the staging at `at` and zero them (copies on our stream, not waited). */
static int chain_copy_out(nt_chain *c, uint32_t i, uint64_t at) {
    uint64_t stride = c->d.strides[i], k = c->d.k, from = c->drained[i], left = c->count[i];
    while (left) {
        uint64_t first = from % k, run = left < k - first ? left : k - first;
        uint64_t dev = c->d.rings[i] + first * stride;
        atomic_fetch_add(&poller_calls, 2);
        neutrino_note_stream_work(NT_WORK_POLLER);
        if (cu.dtoh(chain_staging(c) + at, dev, run * stride, c->d.copy_stream) ||
            cu.htod(dev, c->d.zeros, run * stride, c->d.copy_stream))  /* zeroes copied: no memset (spec/runtime.md) */
            return 0;
        at += run * stride, from += run, left -= run;
    }
    return 1;
}

/* The replay of node launch `tag` (1-based; spec/runtime.md, "The chain", "Sampling"), or UINT64_MAX when
 * `--launches` leaves it out (a launch the host could not choose). */
static uint64_t chain_replay(const nt_chain *c, uint64_t tag) {
    if (!c->picking) return tag - 1;
    if (tag <= c->picked_upto) return c->start + (tag - 1) * c->every;
    uint64_t r = c->unpicked_from + (tag - 1 - c->picked_upto);
    return r >= c->start && r < c->stop && (r - c->start) % c->every == 0 ? r : UINT64_MAX;
}

/* After the wait: nodes [first, last)'s frames to the writer, their drained counts advanced (`lost`: the copies
 * failed; the slots are drained all the same, their frames counted as errors). */
static void chain_hand_over(nt_chain *c, uint32_t first, uint32_t last, int lost) {
    for (uint32_t i = first; i < last; i++) {
        nt_graph_node *n = c->d.records[i];
        uint64_t stride = c->d.strides[i];
        for (uint64_t s = 0; s < c->count[i]; s++) {
            const char *slot = chain_staging(c) + c->at[i] + s * stride;
            uint64_t tag;
            memcpy(&tag, slot + stride - CHAIN_TAG_BYTES, 8);
            if (lost || c->lost[i] || !tag) {  /* (a published slot always has its tag) */
                atomic_fetch_add(&n->errors, 1);
                continue;
            }
            /* admitted one by one, each submitted at once: the writer's pending bytes hold the ones before */
            uint64_t replay = chain_replay(c, tag);
            if (replay == UINT64_MAX) {  /* (probed while the host could not choose: not a replay asked for) */
                c->filtered++;
                continue;
            }
            if (!atomic_load_explicit(&n->active, memory_order_relaxed) || !frame_room(n, 0)) continue;
            submit_parts(n, (char *)n->d.ring + n->d.slots, n->d.data_off, slot, replay);  /* (host slot 0: the header) */
            atomic_fetch_add(&poller_frames, 1);
        }
        c->drained[i] += c->count[i];
        chain_drained_words(c)[i] = c->drained[i];
        c->count[i] = 0;
    }
}

static int chain_wait(nt_chain *c) {
    atomic_fetch_add(&poller_calls, 1);
    return cu.sync(c->d.copy_stream) == 0;
}

/* Read the heads into the pinned copy (and wait). */
static int chain_read_heads(nt_chain *c) {
    atomic_fetch_add(&poller_calls, 1);
    neutrino_note_stream_work(NT_WORK_POLLER);
    return cu.dtoh(c->d.host, c->d.heads, (size_t)CHAIN_HEAD_BYTES * c->d.n, c->d.copy_stream) == 0 && chain_wait(c);
}

/* One pass over a chain (under rings_lock, `p` entered in the chain's context or not yet): returns the slots it
 * drained. The staging holds at least one full ring; nodes whose slots do not fit with the others' wait for the
 * next wait of the pass. */
static uint64_t chain_pass(nt_chain *c, nt_pass *p) {
    if (!pass_enter(p, c->d.ctx) || !chain_read_heads(c)) {
        atomic_fetch_add(&c->errors, 1);
        return 0;
    }
    uint64_t used = 0, total = 0;
    uint32_t first = 0;
    for (uint32_t i = 0; i < c->d.n; i++) {
        const uint64_t *h = chain_head(c, i);
        c->written[i] = h[CH_WRITTEN];
        c->dropped[i] = h[CH_DROPPED] & CHAIN_DROP_MASK;
        c->count[i] = 0;
        if (h[CH_WRITTEN] < c->drained[i] || h[CH_WRITTEN] - c->drained[i] > c->d.k) {  /* not a head of ours */
            atomic_fetch_add(&c->errors, 1);
            continue;
        }
        uint64_t bytes = (h[CH_WRITTEN] - c->drained[i]) * c->d.strides[i];
        if (used && used + bytes > c->d.staging_bytes) {
            chain_hand_over(c, first, i, !chain_wait(c));
            first = i, used = 0;
        }
        c->count[i] = h[CH_WRITTEN] - c->drained[i];
        if (c->count[i] > atomic_load_explicit(&chain_most, memory_order_relaxed)) atomic_store(&chain_most, c->count[i]);
        c->at[i] = used;
        total += c->count[i];
        c->lost[i] = c->count[i] && !chain_copy_out(c, i, used);
        used += bytes;
    }
    if (!total) return 0;
    chain_hand_over(c, first, c->d.n, !chain_wait(c));
    /* the drained counts, 8 bytes at offset 48 of each head: one strided copy, waited for by the next pass */
    nt_memcpy2d m;
    memset(&m, 0, sizeof m);
    m.src_type = MEMORYTYPE_HOST;
    m.src_host = chain_drained_words(c);
    m.src_pitch = 8;
    m.dst_type = MEMORYTYPE_DEVICE;
    m.dst_device = c->d.heads + 8 * CH_DRAINED;
    m.dst_pitch = CHAIN_HEAD_BYTES;
    m.width = 8;
    m.height = c->d.n;
    atomic_fetch_add(&poller_calls, 1);
    neutrino_note_stream_work(NT_WORK_POLLER);
    if (cu.copy2d(&m, c->d.copy_stream)) atomic_fetch_add(&c->errors, 1);
    return total;
}

/* Every chain once (`idle_skip`: the poller's, which passes over an idle chain; under rings_lock). */
static void drain_chains(int idle_skip) {
    nt_pass p = {0};
    uint64_t launches = atomic_load(&graph_launches_made);
    for (nt_chain *c = chains; c; c = c->next) {
        uint64_t launched = chain_launched(c);  /* (before the heads are read) */
        if (idle_skip && c->idle && launches == c->launches_seen && launched == c->launched_seen &&
            c->idle++ % chain_idle_polls(c)) {
            atomic_fetch_add_explicit(&chain_idle_skips, 1, memory_order_relaxed);
            continue;
        }
        atomic_fetch_add_explicit(&chain_passes, 1, memory_order_relaxed);
        c->launches_seen = launches, c->launched_seen = launched;
        c->idle = chain_pass(c, &p) == 0 && chain_caught_up(c, launched);
    }
    pass_leave(&p);
}

void *neutrino_graph_chain_new(const nt_chain_desc *d) {
    if (!d->n || d->k < 2 || (d->k & (d->k - 1)) || !d->host || !d->heads) return NULL;
    nt_chain *c = calloc(1, sizeof *c);
    uint64_t *words = calloc(9 * (size_t)d->n, sizeof(uint64_t));
    void **records = calloc(d->n, sizeof(void *));
    if (!c || !words || !records) {
        free(c), free(words), free(records);
        return NULL;
    }
    c->d = *d;
    memcpy(words, d->rings, 8 * d->n);
    memcpy(words + d->n, d->strides, 8 * d->n);
    memcpy(words + 2 * d->n, d->sinks, 8 * d->n);
    memcpy(records, d->records, sizeof(void *) * d->n);
    c->d.rings = words, c->d.strides = words + d->n, c->d.sinks = words + 2 * d->n, c->d.records = records;
    c->drained = words + 3 * d->n, c->written = words + 4 * d->n, c->dropped = words + 5 * d->n;
    c->at = words + 6 * d->n, c->count = words + 7 * d->n, c->lost = words + 8 * d->n;
    c->attached = 1;
    pthread_mutex_lock(&rings_lock);
    c->next = chains;
    chains = c;
    pthread_cond_broadcast(&rings_changed);
    pthread_mutex_unlock(&rings_lock);
    return c;
}

/* The host's advance of probed sink i's head (the device's advance, then `primed` cleared: spec/runtime.md, "A
 * probed sink's first and last advance"), on the pinned copy, then copied back with its new slot's tag; returns
 * whether it changed. */
static int chain_host_advance(nt_chain *c, uint32_t i) {
    uint64_t *h = chain_head(c, i);
    if (!(h[CH_DROPPED] & CHAIN_PRIMED)) return 0;  /* nothing ran since */
    if (h[CH_CUR]) h[CH_WRITTEN]++;
    else h[CH_DROPPED]++;
    uint64_t n = h[CH_WRITTEN], mask = h[CH_GEOM] & CHAIN_DROP_MASK, stride = h[CH_GEOM] >> 32;
    uint64_t next = n - c->drained[i] >= mask + 1 ? 0 : h[CH_RING] + (n & mask) * stride;
    uint64_t *tag = h + CH_WORDS;  /* (the pinned copy's reserved table: scratch for the tag's copy) */
    *tag = n + (h[CH_DROPPED] & CHAIN_DROP_MASK) + 1;
    h[CH_CUR] = next;
    h[CH_DROPPED] &= ~CHAIN_PRIMED;
    h[CH_DRAINED] = c->drained[i];
    atomic_fetch_add(&poller_calls, next ? 2 : 1);
    neutrino_note_stream_work(NT_WORK_POLLER);
    if ((next && cu.htod(next + stride - CHAIN_TAG_BYTES, tag, 8, c->d.copy_stream)) ||
        cu.htod(c->d.heads + (uint64_t)CHAIN_HEAD_BYTES * i, h, 8 * CH_WORDS, c->d.copy_stream))
        atomic_fetch_add(&c->errors, 1);
    return 1;
}

/* The probed sinks' last launches published by the host, then everything drained (`detach`: and the chain no
 * longer polled: its memory is about to go). Only with the context synchronised and no launch of the chain's
 * executable graphs in flight or being made (exit, teardown, memory going). */
void neutrino_graph_chain_finish(void *chain, int detach) {
    nt_chain *c = chain;
    pthread_mutex_lock(&rings_lock);
    if (c->attached) {
        nt_pass p = {0};
        if (pass_enter(&p, c->d.ctx) && chain_read_heads(c)) {
            int changed = 0;
            for (uint32_t i = 0; i < c->d.n; i++)
                if (c->d.sinks[i]) changed |= chain_host_advance(c, i);
            if (changed && !chain_wait(c)) atomic_fetch_add(&c->errors, 1);
            chain_pass(c, &p);
            chain_read_heads(c);  /* (the drained counts landed before the memory may go) */
        } else {
            atomic_fetch_add(&c->errors, 1);
        }
        pass_leave(&p);
        if (detach) {
            c->attached = 0;
            for (nt_chain **q = &chains; *q; q = &(*q)->next)
                if (*q == c) { *q = c->next; break; }
        }
    }
    pthread_mutex_unlock(&rings_lock);
}

/* `--launches` chosen by the host for the chain's graphs (replay_select.py): its k-th launch is replay start +
 * (k - 1) * every, until neutrino_graph_chain_unpick. */
void neutrino_graph_chain_pick(void *chain, uint64_t start, uint64_t stop, uint64_t every) {
    nt_chain *c = chain;
    if (!c || !every) return;
    pthread_mutex_lock(&rings_lock);
    c->picking = 1, c->start = start, c->stop = stop, c->every = every, c->picked_upto = UINT64_MAX;
    pthread_mutex_unlock(&rings_lock);
}

/* The host stops choosing at replay `next` (a plan given up, none made): the launches so far were the selected
 * replays before it; each later launch is one replay, numbered on, the ones `--launches` leaves out filtered. */
void neutrino_graph_chain_unpick(void *chain, uint64_t next) {
    nt_chain *c = chain;
    if (!c || !c->picking) return;
    pthread_mutex_lock(&rings_lock);
    if (c->picked_upto == UINT64_MAX) {
        uint64_t end = next < c->stop ? next : c->stop;
        c->picked_upto = end > c->start ? (end - c->start + c->every - 1) / c->every : 0;
        c->unpicked_from = next;
    }
    pthread_mutex_unlock(&rings_lock);
}

/* Node i's counts as the last pass read them: written, dropped (a full ring); and the chain's errors. */
void neutrino_graph_chain_counts(void *chain, uint32_t i, uint64_t out[3]) {
    nt_chain *c = chain;
    pthread_mutex_lock(&rings_lock);
    out[0] = i < c->d.n ? c->written[i] : 0;
    out[1] = i < c->d.n ? c->dropped[i] : 0;
    out[2] = atomic_load(&c->errors);
    pthread_mutex_unlock(&rings_lock);
}

/* A slot for `exec`, counted from 0 for chain c (under rings_lock); none left: c is never idle. */
static void chain_exec_add(nt_chain *c, void *exec) {
    unsigned at = exec_hash(exec), i = 0;
    for (; i < CHAIN_EXECS; i++, at = (at + 1) % CHAIN_EXECS) {
        void *e = atomic_load(&chain_execs[at].exec);
        if (!e || e == EXEC_GONE) break;
    }
    if (i == CHAIN_EXECS || c->nown == sizeof c->own / sizeof c->own[0]) {
        c->untracked = 1;
        return;
    }
    c->own[c->nown++] = at;
    atomic_store(&chain_execs[at].launches, 0);
    atomic_store(&chain_execs[at].owner, c);
    atomic_store_explicit(&chain_execs[at].exec, exec, memory_order_release);
    atomic_fetch_add(&chain_execs_live, 1);
}

/* Executable graph `exec` of the chain's captured graph made (`add`), or gone (destroyed, or updated to run
 * another graph's nodes): its launches are counted for the chain's idle rule while it lives, and kept after. */
void neutrino_graph_chain_exec(void *chain, void *exec, int add) {
    nt_chain *c = chain;
    if (!exec || exec == EXEC_GONE) return;
    pthread_mutex_lock(&rings_lock);
    nt_chain_exec *x = chain_exec_find(exec);
    if (x && !add) {
        chain_exec_let_go(x);
    } else if (add && c && !(x && atomic_load(&x->owner) == c)) {
        if (x) chain_exec_let_go(x);  /* (its handle again, for another chain) */
        chain_exec_add(c, exec);
    }
    pthread_mutex_unlock(&rings_lock);
}

void neutrino_graph_chain_free(void *chain) {
    nt_chain *c = chain;
    pthread_mutex_lock(&rings_lock);
    chain_execs_drop(c);
    if (c->attached)
        for (nt_chain **q = &chains; *q; q = &(*q)->next)
            if (*q == c) { *q = c->next; break; }
    pthread_mutex_unlock(&rings_lock);
    free((void *)c->d.rings);
    free((void *)c->d.records);
    free(c);
}

#define ALL_PASSES (MAX_SLOTS + 1)  /* a pass takes at least two slots of a ring that has more */
#define POLL_PASSES 4

void neutrino_graph_drain_all(void) {
    pthread_mutex_lock(&rings_lock);
    drain_rings(NULL, ALL_PASSES);
    drain_chains(0);
    pthread_mutex_unlock(&rings_lock);
}

/* The copy-out's driver calls and the frames it wrote, so far (NEUTRINO_FAST_PROFILE, tests). */
void neutrino_graph_poller_counts(uint64_t out[2]) {
    out[0] = atomic_load(&poller_calls);
    out[1] = atomic_load(&poller_frames);
}

/* The chains' passes so far, those passed over as idle, the most slots one pass found in one ring. */
void neutrino_graph_chain_poll_counts(uint64_t out[3]) {
    out[0] = atomic_load(&chain_passes);
    out[1] = atomic_load(&chain_idle_skips);
    out[2] = atomic_load(&chain_most);
}

/* Between polls: POLL_NS, or NEUTRINO_GRAPH_POLL_US microseconds (benchmarks/graph_residual.py isolates the
 * poller's share of a replay's cost with it); 0: no poller thread (the rings are drained only when a context
 * goes and at exit: a ring that fills drops the replays after it, counted). */
static long long poll_interval_ns(void) {
    const char *v = getenv("NEUTRINO_GRAPH_POLL_US");
    char *end = NULL;
    long long us = v && *v ? strtoll(v, &end, 10) : -1;
    return us < 0 || (end && *end) ? POLL_NS : us * 1000;
}

/* The poller: drains every ring each poll interval while there are any; sleeps while there are none. */
static void *poll_rings(void *arg) {
    (void)arg;
    long long interval = poll_interval_ns();
    pthread_mutex_lock(&rings_lock);
    while (!poller_stopped) {
        if ((!rings && !chains) || !interval) {
            pthread_cond_wait(&rings_changed, &rings_lock);
            continue;
        }
        drain_rings(NULL, POLL_PASSES);
        /* a chain's pass copies (its heads) every poll, not only when there is something: never while the program
         * captures (work of a stream of ours then slows every later replay: issue 24); its rings fill meanwhile */
        if (neutrino_captures_open() <= 0) drain_chains(1);
        pthread_mutex_unlock(&rings_lock);
        struct timespec t = {(time_t)(interval / 1000000000), (long)(interval % 1000000000)};
        nanosleep(&t, NULL);
        pthread_mutex_lock(&rings_lock);
    }
    pthread_mutex_unlock(&rings_lock);
    return NULL;
}

/* At exit, after the last drain: the writer stops next, so nothing more is handed to it. */
void neutrino_graph_stop_polling(void) {
    pthread_mutex_lock(&rings_lock);
    poller_stopped = 1;
    pthread_cond_broadcast(&rings_changed);
    pthread_mutex_unlock(&rings_lock);
}

void *neutrino_graph_node_new(const nt_graph_desc *d) {
    if (!d->nslots || d->nslots > MAX_SLOTS || !d->nstage || d->nstage > MAX_STAGE || !d->ring) return NULL;
    nt_graph_node *n = calloc(1, sizeof *n);
    if (!n) return NULL;
    n->d = *d;
    n->attached = 1;
    atomic_store(&n->active, 1);
    pthread_mutex_lock(&rings_lock);
    if (!poller_started) {
        neutrino_writer_on_host_frame_done(graph_frame_done);  /* before the poller submits a frame */
        pthread_t t;
        if (!poll_interval_ns()) {
            poller_started = 1;  /* NEUTRINO_GRAPH_POLL_US=0: no poller thread at all */
        } else {
            poller_started = pthread_create(&t, NULL, poll_rings, NULL) == 0;
            if (poller_started) pthread_detach(t);
        }
    }
    n->next = rings;
    rings = n;
    pthread_cond_broadcast(&rings_changed);
    pthread_mutex_unlock(&rings_lock);
    return n;
}

/* The ring's memory is about to go (its graphs are destroyed and the context synchronised, or the
 * context goes): drain it, keep its counters, stop polling it. */
void neutrino_graph_node_detach(void *node) {
    nt_graph_node *n = node;
    pthread_mutex_lock(&rings_lock);
    if (n->attached) {
        drain_rings(n, ALL_PASSES);
        n->replays_kept = ring_counter(n, RING_REPLAYS);
        n->dropped_kept = ring_counter(n, RING_DROPPED);
        n->attached = 0;
        for (nt_graph_node **p = &rings; *p; p = &(*p)->next)
            if (*p == n) { *p = n->next; break; }
    }
    pthread_mutex_unlock(&rings_lock);
}

void neutrino_graph_node_free(void *node) {
    neutrino_graph_node_detach(node);
    free(node);
}

void neutrino_graph_node_set_active(void *node, int active) { atomic_store(&((nt_graph_node *)node)->active, active); }

void neutrino_graph_node_stats(void *node, uint64_t out[5]) {
    nt_graph_node *n = node;
    pthread_mutex_lock(&rings_lock);
    int live = n->attached;
    out[0] = live ? ring_counter(n, RING_REPLAYS) : n->replays_kept;
    out[3] = atomic_load(&n->dropped_behind) + (live ? ring_counter(n, RING_DROPPED) : n->dropped_kept);
    pthread_mutex_unlock(&rings_lock);
    out[1] = atomic_load(&n->written);
    out[2] = atomic_load(&n->dropped_trace);
    out[4] = atomic_load(&n->errors);
}


/* While no capture is open (counted in writer.c, told by cuStreamBeginCapture* and cuStreamEndCapture
 * below), a launch the filter skips costs no capture query. */

/* 1 if `stream` (0: the default stream of the launch's kind) is being captured. */
int neutrino_graph_stream_capturing(void *stream, int ptsz) {
    if (neutrino_captures_open() <= 0) return 0;
    static CUresult (*_Atomic is_capturing)(void *, int *);
    CUresult (*fn)(void *, int *) = atomic_load(&is_capturing);
    if (!fn) {
        fn = (CUresult (*)(void *, int *))neutrino_real_sym("cuStreamIsCapturing");
        if (!fn) return 0;
        atomic_store(&is_capturing, fn);
    }
    int status = 0;
    void *s = stream ? stream : (void *)(uintptr_t)(ptsz ? 0x2 : 0x1);
    return fn(s, &status) == 0 && status != 0;
}

/* ------------------------------------------------------------------ graph API hooks */

/* what is reported (graphs.py: G_*) */
enum { G_INSTANTIATE, G_CLONE, G_EXEC_UPDATE, G_GRAPH_DESTROY, G_EXEC_DESTROY, G_ADD_KERNEL_NODE, G_SET_PARAMS, G_END_CAPTURE,
       G_PICK_FALLBACK, G_BEGIN_CAPTURE, G_INSTANTIATE_REFUSED };

typedef void *(*cb_graph_t)(int kind, void *a, void *b, void *c, int version);
static cb_graph_t _Atomic cb_graph;
static __thread int in_graph_callback;

void neutrino_graph_register_callback(cb_graph_t cb) { atomic_store(&cb_graph, cb); }

static void *report(int kind, void *a, void *b, void *c, int version) {
    cb_graph_t cb = atomic_load(&cb_graph);
    if (!cb || in_graph_callback) return NULL;
    in_graph_callback = 1;
    void *out = cb(kind, a, b, c, version);
    in_graph_callback = 0;
    return out;
}

enum {
    GH_INSTANTIATE_V2, GH_INSTANTIATE_FLAGS, GH_INSTANTIATE_PARAMS, GH_INSTANTIATE_PARAMS_PTSZ, GH_CLONE,
    GH_EXEC_UPDATE, GH_EXEC_UPDATE_V2, GH_DESTROY, GH_EXEC_DESTROY, GH_ADD_KERNEL, GH_ADD_KERNEL_V2,
    GH_SET_PARAMS, GH_SET_PARAMS_V2, GH_EXEC_SET_PARAMS, GH_EXEC_SET_PARAMS_V2,
    GH_BEGIN, GH_BEGIN_PTSZ, GH_BEGIN_TO_GRAPH, GH_BEGIN_TO_GRAPH_PTSZ, GH_END, GH_END_PTSZ, GH_LAUNCH, GH_LAUNCH_PTSZ,
    GH_EXEC_NODE_SET_PARAMS, GH_NODE_SET_PARAMS,
    /* the program's other changes to an executable graph: applied to a twin too (graphpick.c) */
    GH_EXEC_MEMCPY, GH_EXEC_MEMSET, GH_EXEC_HOST, GH_EXEC_CHILD, GH_EXEC_EVENT_RECORD, GH_EXEC_EVENT_WAIT,
    GH_EXEC_SEM_SIGNAL, GH_EXEC_SEM_WAIT, GH_EXEC_BATCH_MEM_OP, GH_NODE_SET_ENABLED, GH_COUNT
};

static const char *const graph_hook_names[GH_COUNT] = {
    "cuGraphInstantiate_v2", "cuGraphInstantiateWithFlags", "cuGraphInstantiateWithParams",
    "cuGraphInstantiateWithParams_ptsz", "cuGraphClone", "cuGraphExecUpdate", "cuGraphExecUpdate_v2",
    "cuGraphDestroy", "cuGraphExecDestroy", "cuGraphAddKernelNode", "cuGraphAddKernelNode_v2",
    "cuGraphKernelNodeSetParams", "cuGraphKernelNodeSetParams_v2", "cuGraphExecKernelNodeSetParams",
    "cuGraphExecKernelNodeSetParams_v2", "cuStreamBeginCapture_v2", "cuStreamBeginCapture_v2_ptsz",
    "cuStreamBeginCaptureToGraph", "cuStreamBeginCaptureToGraph_ptsz", "cuStreamEndCapture", "cuStreamEndCapture_ptsz",
    "cuGraphLaunch", "cuGraphLaunch_ptsz", "cuGraphExecNodeSetParams", "cuGraphNodeSetParams",
    "cuGraphExecMemcpyNodeSetParams", "cuGraphExecMemsetNodeSetParams", "cuGraphExecHostNodeSetParams",
    "cuGraphExecChildGraphNodeSetParams", "cuGraphExecEventRecordNodeSetEvent", "cuGraphExecEventWaitNodeSetEvent",
    "cuGraphExecExternalSemaphoresSignalNodeSetParams", "cuGraphExecExternalSemaphoresWaitNodeSetParams",
    "cuGraphExecBatchMemOpNodeSetParams", "cuGraphNodeSetEnabled",
};
static void *_Atomic graph_real[GH_COUNT];

static void *greal(int slot) {
    void *p = atomic_load_explicit(&graph_real[slot], memory_order_acquire);
    if (!p) {
        p = neutrino_real_sym(graph_hook_names[slot]);
        atomic_store_explicit(&graph_real[slot], p, memory_order_release);
    }
    return p;
}
#define GREAL(slot, type) ((type)greal(slot))

/* The driver refused to instantiate `graph`: the runtime makes our append nodes' programmatic edges (sm_90+)
 * ordinary ones, and says whether it changed any (then the instantiation is tried once more: a flag such
 * as device launch may not take them). */
static int edges_made_ordinary(void *graph, uint64_t flags) {
    return report(G_INSTANTIATE_REFUSED, graph, NULL, (void *)(uintptr_t)flags, 0) != NULL;
}

CUresult cuGraphInstantiate_v2(void **exec, void *graph, void **err_node, char *log, size_t log_size) {
    CUresult (*fn)(void **, void *, void **, char *, size_t) = GREAL(GH_INSTANTIATE_V2, CUresult(*)(void **, void *, void **, char *, size_t));
    if (!fn) return CU_NOT_FOUND;
    neutrino_timeline_graph_instantiate_enter();
    CUresult rc = fn(exec, graph, err_node, log, log_size);
    if (rc != 0 && edges_made_ordinary(graph, 0)) rc = fn(exec, graph, err_node, log, log_size);
    if (rc == 0) neutrino_timeline_graph_instantiated(*exec), report(G_INSTANTIATE, graph, *exec, NULL, 0);
    return rc;
}

CUresult cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags) {
    CUresult (*fn)(void **, void *, unsigned long long) = GREAL(GH_INSTANTIATE_FLAGS, CUresult(*)(void **, void *, unsigned long long));
    if (!fn) return CU_NOT_FOUND;
    neutrino_timeline_graph_instantiate_enter();
    CUresult rc = fn(exec, graph, flags);
    if (rc != 0 && edges_made_ordinary(graph, flags)) rc = fn(exec, graph, flags);
    if (rc == 0) neutrino_timeline_graph_instantiated(*exec), report(G_INSTANTIATE, graph, *exec, (void *)(uintptr_t)flags, 0);
    return rc;
}

/* CUDA_GRAPH_INSTANTIATE_PARAMS starts with the flags (u64). */
static uint64_t instantiate_flags(const void *params) { return params ? *(const uint64_t *)params : 0; }

CUresult cuGraphInstantiateWithParams(void **exec, void *graph, void *params) {
    CUresult (*fn)(void **, void *, void *) = GREAL(GH_INSTANTIATE_PARAMS, CUresult(*)(void **, void *, void *));
    if (!fn) return CU_NOT_FOUND;
    neutrino_timeline_graph_instantiate_enter();
    CUresult rc = fn(exec, graph, params);
    if (rc != 0 && edges_made_ordinary(graph, instantiate_flags(params))) rc = fn(exec, graph, params);
    if (rc == 0) neutrino_timeline_graph_instantiated(*exec), report(G_INSTANTIATE, graph, *exec, (void *)(uintptr_t)instantiate_flags(params), 0);
    return rc;
}

CUresult cuGraphInstantiateWithParams_ptsz(void **exec, void *graph, void *params) {
    CUresult (*fn)(void **, void *, void *) = GREAL(GH_INSTANTIATE_PARAMS_PTSZ, CUresult(*)(void **, void *, void *));
    if (!fn) return CU_NOT_FOUND;
    neutrino_timeline_graph_instantiate_enter();
    CUresult rc = fn(exec, graph, params);
    if (rc != 0 && edges_made_ordinary(graph, instantiate_flags(params))) rc = fn(exec, graph, params);
    if (rc == 0) neutrino_timeline_graph_instantiated(*exec), report(G_INSTANTIATE, graph, *exec, (void *)(uintptr_t)instantiate_flags(params), 0);
    return rc;
}

CUresult cuGraphClone(void **clone, void *graph) {
    CUresult (*fn)(void **, void *) = GREAL(GH_CLONE, CUresult(*)(void **, void *));
    if (!fn) return CU_NOT_FOUND;
    CUresult rc = fn(clone, graph);
    if (rc == 0) report(G_CLONE, graph, *clone, NULL, 0);
    return rc;
}

/* The host stops choosing the replays of `exec` (a plan involving `node`, NULL: any): Python restores
 * the captured nodes and the gates (graphpick.c), before the change the program makes. */
static void give_up_plan(void *exec, void *node, int why) {
    if (neutrino_graph_pick_has(exec, node)) report(G_PICK_FALLBACK, exec, NULL, (void *)(uintptr_t)why, 0);
}

CUresult cuGraphExecUpdate(void *exec, void *graph, void **err_node, int *result) {
    CUresult (*fn)(void *, void *, void **, int *) = GREAL(GH_EXEC_UPDATE, CUresult(*)(void *, void *, void **, int *));
    if (!fn) return CU_NOT_FOUND;
    give_up_plan(exec, NULL, NT_PICK_UPDATE);
    neutrino_timeline_graph_instantiate_enter();
    CUresult rc = fn(exec, graph, err_node, result);
    if (rc == 0) neutrino_timeline_graph_exec_gone(exec), neutrino_timeline_graph_instantiated(exec), report(G_EXEC_UPDATE, exec, graph, NULL, 0);
    return rc;
}

CUresult cuGraphExecUpdate_v2(void *exec, void *graph, void *result_info) {
    CUresult (*fn)(void *, void *, void *) = GREAL(GH_EXEC_UPDATE_V2, CUresult(*)(void *, void *, void *));
    if (!fn) return CU_NOT_FOUND;
    give_up_plan(exec, NULL, NT_PICK_UPDATE);
    neutrino_timeline_graph_instantiate_enter();
    CUresult rc = fn(exec, graph, result_info);
    if (rc == 0) neutrino_timeline_graph_exec_gone(exec), neutrino_timeline_graph_instantiated(exec), report(G_EXEC_UPDATE, exec, graph, NULL, 0);
    return rc;
}

CUresult cuGraphDestroy(void *graph) {
    CUresult (*fn)(void *) = GREAL(GH_DESTROY, CUresult(*)(void *));
    if (!fn) return CU_NOT_FOUND;
    /* an executable graph's plan switches nodes by this graph's handles: graphpick.c destroys it later */
    CUresult rc = neutrino_graph_pick_keeps(graph) ? 0 : fn(graph);
    if (rc == 0) report(G_GRAPH_DESTROY, graph, NULL, NULL, 0);
    return rc;
}

CUresult cuGraphExecDestroy(void *exec) {
    CUresult (*fn)(void *) = GREAL(GH_EXEC_DESTROY, CUresult(*)(void *));
    if (!fn) return CU_NOT_FOUND;
    neutrino_graph_pick_forget(exec);
    neutrino_timeline_graph_exec_gone(exec);
    CUresult rc = fn(exec);
    if (rc == 0) report(G_EXEC_DESTROY, exec, NULL, NULL, 0);
    return rc;
}

/* CUDA_KERNEL_NODE_PARAMS: v1 starts with the CUfunction; v2 adds the CUkernel and the context */
typedef struct { void *func; unsigned dims[7]; void **params, **extra; void *kern, *ctx; } kernel_node_params;

static void *node_function(const kernel_node_params *p, int version) {
    return p->func ? p->func : version >= 2 ? p->kern : NULL; /* `kern` is used only when `func` is NULL */
}

typedef CUresult (*add_kernel_t)(void **, void *, void *const *, size_t, const void *);
static CUresult add_kernel(int slot, int version, void **node, void *graph, void *const *deps, size_t n,
                           const kernel_node_params *p) {
    add_kernel_t fn = GREAL(slot, add_kernel_t);
    if (!fn) return CU_NOT_FOUND;
    CUresult rc = fn(node, graph, deps, n, p);
    if (rc == 0 && p) report(G_ADD_KERNEL_NODE, graph, node_function(p, version), *node, version);
    return rc;
}

CUresult cuGraphAddKernelNode(void **node, void *graph, void *const *deps, size_t n, const void *p) {
    return add_kernel(GH_ADD_KERNEL, 1, node, graph, deps, n, p);
}

CUresult cuGraphAddKernelNode_v2(void **node, void *graph, void *const *deps, size_t n, const void *p) {
    return add_kernel(GH_ADD_KERNEL_V2, 2, node, graph, deps, n, p);
}

/* New parameters for a kernel node: Python answers with the parameters of our probed node, or NULL (as given). */
static const void *node_params(void *exec, void *node, const void *p, int version) {
    const void *ours = report(G_SET_PARAMS, exec, node, (void *)p, version);
    return ours ? ours : p;
}

CUresult cuGraphKernelNodeSetParams(void *node, const void *p) {
    CUresult (*fn)(void *, const void *) = GREAL(GH_SET_PARAMS, CUresult(*)(void *, const void *));
    return fn ? fn(node, node_params(NULL, node, p, 1)) : CU_NOT_FOUND;
}

CUresult cuGraphKernelNodeSetParams_v2(void *node, const void *p) {
    CUresult (*fn)(void *, const void *) = GREAL(GH_SET_PARAMS_V2, CUresult(*)(void *, const void *));
    return fn ? fn(node, node_params(NULL, node, p, 2)) : CU_NOT_FOUND;
}

/* A change the program made to node `node` of its executable graph, for its twin (graphpick.c): the same
 * entry point, arguments `a` and `b` (the forms below), or `enabled`. */
typedef struct {
    int slot;
    void *a, *b;
    unsigned enabled;
} twin_change;

static int apply_to_twin(void *twin, void *node, void *arg) {
    const twin_change *c = arg;
    void *fn = greal(c->slot);
    if (!fn) return CU_NOT_FOUND;
    if (c->slot == GH_NODE_SET_ENABLED) return ((CUresult (*)(void *, void *, unsigned))fn)(twin, node, c->enabled);
    if (c->slot == GH_EXEC_MEMCPY || c->slot == GH_EXEC_MEMSET)  /* the parameters, then the context */
        return ((CUresult (*)(void *, void *, void *, void *))fn)(twin, node, c->a, c->b);
    return ((CUresult (*)(void *, void *, void *))fn)(twin, node, c->a);
}

/* After the program's change `c` to `exec` succeeded: its twin gets it too, or goes (Python notes it). */
static void mirror_change(void *exec, void *node, twin_change c) {
    if (!neutrino_graph_pick_mirror(exec, node, apply_to_twin, &c))
        report(G_PICK_FALLBACK, exec, NULL, (void *)(uintptr_t)NT_PICK_TWIN_LOST, 0);
}

static CUresult exec_change(int slot, void *exec, void *node, void *a, void *b) {
    twin_change c = {slot, a, b, 0};
    void *fn = greal(slot);
    if (!fn) return CU_NOT_FOUND;
    CUresult rc = apply_to_twin(exec, node, &c);  /* the program's own executable graph first */
    if (rc == 0) mirror_change(exec, node, c);
    return rc;
}

CUresult cuGraphExecMemcpyNodeSetParams(void *exec, void *node, const void *p, void *ctx) {
    return exec_change(GH_EXEC_MEMCPY, exec, node, (void *)p, ctx);
}
CUresult cuGraphExecMemsetNodeSetParams(void *exec, void *node, const void *p, void *ctx) {
    return exec_change(GH_EXEC_MEMSET, exec, node, (void *)p, ctx);
}
CUresult cuGraphExecHostNodeSetParams(void *exec, void *node, const void *p) {
    return exec_change(GH_EXEC_HOST, exec, node, (void *)p, NULL);
}
CUresult cuGraphExecChildGraphNodeSetParams(void *exec, void *node, void *child) {
    return exec_change(GH_EXEC_CHILD, exec, node, child, NULL);
}
CUresult cuGraphExecEventRecordNodeSetEvent(void *exec, void *node, void *event) {
    return exec_change(GH_EXEC_EVENT_RECORD, exec, node, event, NULL);
}
CUresult cuGraphExecEventWaitNodeSetEvent(void *exec, void *node, void *event) {
    return exec_change(GH_EXEC_EVENT_WAIT, exec, node, event, NULL);
}
CUresult cuGraphExecExternalSemaphoresSignalNodeSetParams(void *exec, void *node, const void *p) {
    return exec_change(GH_EXEC_SEM_SIGNAL, exec, node, (void *)p, NULL);
}
CUresult cuGraphExecExternalSemaphoresWaitNodeSetParams(void *exec, void *node, const void *p) {
    return exec_change(GH_EXEC_SEM_WAIT, exec, node, (void *)p, NULL);
}
CUresult cuGraphExecBatchMemOpNodeSetParams(void *exec, void *node, const void *p) {
    return exec_change(GH_EXEC_BATCH_MEM_OP, exec, node, (void *)p, NULL);
}
CUresult cuGraphNodeSetEnabled(void *exec, void *node, unsigned enabled) {
    CUresult (*fn)(void *, void *, unsigned) = GREAL(GH_NODE_SET_ENABLED, CUresult(*)(void *, void *, unsigned));
    if (!fn) return CU_NOT_FOUND;
    CUresult rc = fn(exec, node, enabled);
    if (rc == 0) mirror_change(exec, node, (twin_change){GH_NODE_SET_ENABLED, NULL, NULL, enabled});
    return rc;
}

CUresult cuGraphExecKernelNodeSetParams(void *exec, void *node, const void *p) {
    CUresult (*fn)(void *, void *, const void *) = GREAL(GH_EXEC_SET_PARAMS, CUresult(*)(void *, void *, const void *));
    if (!fn) return CU_NOT_FOUND;
    give_up_plan(exec, node, NT_PICK_SET_PARAMS);
    CUresult rc = fn(exec, node, node_params(exec, node, p, 1));
    if (rc == 0) mirror_change(exec, node, (twin_change){GH_EXEC_SET_PARAMS, (void *)p, NULL, 0});  /* as given */
    return rc;
}

CUresult cuGraphExecKernelNodeSetParams_v2(void *exec, void *node, const void *p) {
    CUresult (*fn)(void *, void *, const void *) = GREAL(GH_EXEC_SET_PARAMS_V2, CUresult(*)(void *, void *, const void *));
    if (!fn) return CU_NOT_FOUND;
    give_up_plan(exec, node, NT_PICK_SET_PARAMS);
    CUresult rc = fn(exec, node, node_params(exec, node, p, 2));
    if (rc == 0) mirror_change(exec, node, (twin_change){GH_EXEC_SET_PARAMS_V2, (void *)p, NULL, 0});
    return rc;
}

/* The generic form (CUDA 12.2): the host stops choosing the replays when it touches a node of a plan. */
CUresult cuGraphExecNodeSetParams(void *exec, void *node, void *p) {
    CUresult (*fn)(void *, void *, void *) = GREAL(GH_EXEC_NODE_SET_PARAMS, CUresult(*)(void *, void *, void *));
    if (!fn) return CU_NOT_FOUND;
    give_up_plan(exec, node, NT_PICK_SET_PARAMS);
    CUresult rc = fn(exec, node, p);
    if (rc == 0) mirror_change(exec, node, (twin_change){GH_EXEC_NODE_SET_PARAMS, p, NULL, 0});
    return rc;
}

/* The generic form (CUDA 12.2) on a graph's node. A kernel node's parameters (CUgraphNodeParams: the
 * type, 0 for a kernel node, then at byte 16 CUDA_KERNEL_NODE_PARAMS_v3, laid out as _v2) go the way of
 * cuGraphKernelNodeSetParams_v2: Python keeps a probed node probed, or lets them through; either way
 * the host stops choosing the replays of the graph's later executable graphs (a plan would switch the
 * node back to the arguments of the capture). */
#define GRAPH_NODE_PARAMS_BYTES 256
#define GRAPH_NODE_PARAMS_KERNEL 16
CUresult cuGraphNodeSetParams(void *node, void *p) {
    CUresult (*fn)(void *, void *) = GREAL(GH_NODE_SET_PARAMS, CUresult(*)(void *, void *));
    if (!fn) return CU_NOT_FOUND;
    if (!p || *(const int *)p != 0) return fn(node, p);
    const void *kernel = (const char *)p + GRAPH_NODE_PARAMS_KERNEL;
    const void *ours = node_params(NULL, node, kernel, 2);
    if (ours == kernel) return fn(node, p);
    unsigned char copy[GRAPH_NODE_PARAMS_BYTES];
    memcpy(copy, p, sizeof copy);
    memcpy(copy + GRAPH_NODE_PARAMS_KERNEL, ours, sizeof(kernel_node_params));
    return fn(node, copy);
}

/* Opening a capture under rings_lock (below); a driver may open it through another hooked entry point (a _ptsz
 * one through the plain one: the fake does), which then must not take the lock again. */
static __thread int opening_capture;
static void capture_opening(int on) {
    if (on ? opening_capture++ : --opening_capture) return;
    if (on) pthread_mutex_lock(&rings_lock);
    else pthread_mutex_unlock(&rings_lock);
}

typedef CUresult (*begin_t)(void *, int);
static CUresult begin_capture(int slot, void *stream, int mode) {
    begin_t fn = GREAL(slot, begin_t);
    if (!fn) return CU_NOT_FOUND;
    neutrino_graph_pick_stream_event(stream);  /* a twin's launch there is fenced before the capture */
    /* Python makes its stream for the context now: one made or used while a capture is open slows every
     * later graph replay of the process (issue 24, docs/overhead.md "Session 9") */
    report(G_BEGIN_CAPTURE, stream, NULL, NULL, 0);
    /* a chain pass the poller began before the capture opens ends first: it tests captures_open under rings_lock,
     * so no copy of its runs while the capture is open (tests/test_graph_chain_native.py, under load) */
    capture_opening(1);
    CUresult rc = fn(stream, mode);
    if (rc == 0) neutrino_captures_opened(1);
    capture_opening(0);
    return rc;
}
CUresult cuStreamBeginCapture_v2(void *stream, int mode) { return begin_capture(GH_BEGIN, stream, mode); }
CUresult cuStreamBeginCapture_v2_ptsz(void *stream, int mode) { return begin_capture(GH_BEGIN_PTSZ, stream, mode); }

typedef CUresult (*begin_to_graph_t)(void *, void *, const void *, const void *, size_t, int);
static CUresult begin_to_graph(int slot, void *stream, void *graph, const void *deps, const void *data, size_t n,
                               int mode) {
    begin_to_graph_t fn = GREAL(slot, begin_to_graph_t);
    if (!fn) return CU_NOT_FOUND;
    neutrino_graph_pick_stream_event(stream);
    report(G_BEGIN_CAPTURE, stream, NULL, NULL, 0);  /* as begin_capture */
    capture_opening(1);
    CUresult rc = fn(stream, graph, deps, data, n, mode);
    if (rc == 0) neutrino_captures_opened(1);
    capture_opening(0);
    return rc;
}
CUresult cuStreamBeginCaptureToGraph(void *stream, void *graph, const void *deps, const void *data, size_t n, int mode) {
    return begin_to_graph(GH_BEGIN_TO_GRAPH, stream, graph, deps, data, n, mode);
}
CUresult cuStreamBeginCaptureToGraph_ptsz(void *stream, void *graph, const void *deps, const void *data, size_t n,
                                          int mode) {
    return begin_to_graph(GH_BEGIN_TO_GRAPH_PTSZ, stream, graph, deps, data, n, mode);
}

/* A capture ends whether or not EndCapture succeeds (an invalidated capture ends with an error).
 * A graph it built gets, before the program instantiates it, the append node of its probed
 * kernel nodes (Python adds it: graphs.py, end_capture). */
static CUresult end_capture(int slot, void *stream, void **graph) {
    CUresult (*fn)(void *, void **) = GREAL(slot, CUresult(*)(void *, void **));
    if (!fn) return CU_NOT_FOUND;
    int was = neutrino_graph_stream_capturing(stream, slot == GH_END_PTSZ);  /* _ptsz: NULL is the per-thread stream */
    CUresult rc = fn(stream, graph);
    if (was) neutrino_captures_opened(-1);
    if (rc == 0 && was && graph && *graph) report(G_END_CAPTURE, stream, *graph, NULL, 0);
    return rc;
}
CUresult cuStreamEndCapture(void *stream, void **graph) { return end_capture(GH_END, stream, graph); }
CUresult cuStreamEndCapture_ptsz(void *stream, void **graph) { return end_capture(GH_END_PTSZ, stream, graph); }

/* The driver's launch, counted for a chain's executable graph (a twin launched instead is not one). */
static CUresult counted_launch(int slot, void *exec, void *stream) {
    chain_exec_count(exec, 1);
    CUresult rc = GREAL(slot, CUresult(*)(void *, void *))(exec, stream);
    if (rc) chain_exec_count(exec, -1);
    return rc;
}
static CUresult counted_launch_std(void *exec, void *stream) { return counted_launch(GH_LAUNCH, exec, stream); }
static CUresult counted_launch_ptsz(void *exec, void *stream) { return counted_launch(GH_LAUNCH_PTSZ, exec, stream); }

/* A replay: for a graph with a plan, its twin for a replay left out, or its nodes switched to what
 * `--launches` wants of this replay first, each in order after the plan's previous launch (graphpick.c);
 * where the host cannot choose, nothing is launched until Python has given the plan up (the report is
 * made holding no lock of graphpick.c: Python's drop takes the plan's). */
static CUresult graph_launch(int slot, int ptsz, void *exec, void *stream) {
    if (!GREAL(slot, CUresult(*)(void *, void *))) return CU_NOT_FOUND;
    CUresult (*fn)(void *, void *) = slot == GH_LAUNCH_PTSZ ? counted_launch_ptsz : counted_launch_std;
    atomic_fetch_add_explicit(&graph_launches_made, 1, memory_order_relaxed);
    if (!neutrino_graph_pick_has(exec, NULL)) return fn(exec, stream);
    /* only a planned graph pays the capture query (graphpick.c has no view of streams) */
    void *where = ptsz && !stream ? (void *)(uintptr_t)0x2 : stream;  /* per-thread: 0x2 */
    int capturing = neutrino_graph_stream_capturing(stream, ptsz), rc = 0;
    int why = neutrino_graph_pick_launch(exec, stream, where, capturing, 0, fn, &rc);
    if (why == NT_PICK_CAPTURED || why == NT_PICK_FAILED) {  /* not launched */
        report(G_PICK_FALLBACK, exec, stream, (void *)(uintptr_t)why, 0);
        why = neutrino_graph_pick_launch(exec, stream, where, capturing, 0, fn, &rc);
        if (why == NT_PICK_CAPTURED)  /* the plan stays (no Python to give it up): a copy of the nodes as they are */
            rc = fn(exec, stream);
        else if (why == NT_PICK_FAILED)
            why = neutrino_graph_pick_launch(exec, stream, where, capturing, 1, fn, &rc);
    }
    if (why == NT_PICK_TWIN_LOST) report(G_PICK_FALLBACK, exec, stream, (void *)(uintptr_t)why, 0);
    return rc;
}
/* The timeline chooses per-node or graph-level records for the replay first (cupti.c, "graph replays"). */
static CUresult graph_launch_recorded(int slot, int ptsz, void *exec, void *stream) {
    neutrino_timeline_graph_launch_enter(exec);
    CUresult rc = graph_launch(slot, ptsz, exec, stream);
    neutrino_timeline_graph_launch_exit();
    return rc;
}
CUresult cuGraphLaunch(void *exec, void *stream) { return graph_launch_recorded(GH_LAUNCH, 0, exec, stream); }
CUresult cuGraphLaunch_ptsz(void *exec, void *stream) { return graph_launch_recorded(GH_LAUNCH_PTSZ, 1, exec, stream); }

static void *const graph_hook_fns[GH_COUNT] = {
    (void *)cuGraphInstantiate_v2, (void *)cuGraphInstantiateWithFlags, (void *)cuGraphInstantiateWithParams,
    (void *)cuGraphInstantiateWithParams_ptsz, (void *)cuGraphClone, (void *)cuGraphExecUpdate,
    (void *)cuGraphExecUpdate_v2, (void *)cuGraphDestroy, (void *)cuGraphExecDestroy, (void *)cuGraphAddKernelNode,
    (void *)cuGraphAddKernelNode_v2, (void *)cuGraphKernelNodeSetParams, (void *)cuGraphKernelNodeSetParams_v2,
    (void *)cuGraphExecKernelNodeSetParams, (void *)cuGraphExecKernelNodeSetParams_v2,
    (void *)cuStreamBeginCapture_v2, (void *)cuStreamBeginCapture_v2_ptsz, (void *)cuStreamBeginCaptureToGraph,
    (void *)cuStreamBeginCaptureToGraph_ptsz, (void *)cuStreamEndCapture, (void *)cuStreamEndCapture_ptsz,
    (void *)cuGraphLaunch, (void *)cuGraphLaunch_ptsz, (void *)cuGraphExecNodeSetParams, (void *)cuGraphNodeSetParams,
    (void *)cuGraphExecMemcpyNodeSetParams, (void *)cuGraphExecMemsetNodeSetParams,
    (void *)cuGraphExecHostNodeSetParams,
    (void *)cuGraphExecChildGraphNodeSetParams, (void *)cuGraphExecEventRecordNodeSetEvent,
    (void *)cuGraphExecEventWaitNodeSetEvent, (void *)cuGraphExecExternalSemaphoresSignalNodeSetParams,
    (void *)cuGraphExecExternalSemaphoresWaitNodeSetParams, (void *)cuGraphExecBatchMemOpNodeSetParams,
    (void *)cuGraphNodeSetEnabled,
};

/* Our wrapper for an exported libcuda name (the dlsym route), or NULL. */
void *neutrino_graph_wrapper_named(const char *name) {
    if (strncmp(name, "cuGraph", 7) && strncmp(name, "cuStream", 8)) return NULL;
    for (int i = 0; i < GH_COUNT; i++)
        if (!strcmp(name, graph_hook_names[i])) return graph_hook_fns[i];
    return NULL;
}

/* Our wrapper for `symbol` asked through cuGetProcAddress at `version`, or NULL. From CUDA 12.0
 * the unsuffixed names resolve to the _v2 ABIs (and cuGraphInstantiate to cuGraphInstantiateWithFlags). */
void *neutrino_graph_wrapper_for(const char *symbol, int version, unsigned long long flags) {
    int ptsz = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    if (!strcmp(symbol, "cuStreamBeginCapture"))  /* version 10000 is the mode-less v1: not hooked */
        return version >= 10010 ? graph_hook_fns[ptsz ? GH_BEGIN_PTSZ : GH_BEGIN] : NULL;
    if (!strcmp(symbol, "cuStreamBeginCaptureToGraph")) return graph_hook_fns[ptsz ? GH_BEGIN_TO_GRAPH_PTSZ : GH_BEGIN_TO_GRAPH];
    if (!strcmp(symbol, "cuStreamEndCapture")) return graph_hook_fns[ptsz ? GH_END_PTSZ : GH_END];
    if (!strcmp(symbol, "cuGraphLaunch")) return graph_hook_fns[ptsz ? GH_LAUNCH_PTSZ : GH_LAUNCH];
    if (strncmp(symbol, "cuGraph", 7)) return NULL;
    int v12 = version >= 12000;
    if (!strcmp(symbol, "cuGraphInstantiate"))
        return v12 ? graph_hook_fns[GH_INSTANTIATE_FLAGS] : version >= 11000 ? graph_hook_fns[GH_INSTANTIATE_V2] : NULL;
    if (!strcmp(symbol, "cuGraphInstantiateWithParams"))
        return graph_hook_fns[ptsz ? GH_INSTANTIATE_PARAMS_PTSZ : GH_INSTANTIATE_PARAMS];
    if (!strcmp(symbol, "cuGraphExecUpdate")) return graph_hook_fns[v12 ? GH_EXEC_UPDATE_V2 : GH_EXEC_UPDATE];
    if (!strcmp(symbol, "cuGraphAddKernelNode")) return graph_hook_fns[v12 ? GH_ADD_KERNEL_V2 : GH_ADD_KERNEL];
    if (!strcmp(symbol, "cuGraphKernelNodeSetParams")) return graph_hook_fns[v12 ? GH_SET_PARAMS_V2 : GH_SET_PARAMS];
    if (!strcmp(symbol, "cuGraphExecKernelNodeSetParams"))
        return graph_hook_fns[v12 ? GH_EXEC_SET_PARAMS_V2 : GH_EXEC_SET_PARAMS];
    if (!strcmp(symbol, "cuGraphInstantiateWithFlags")) return graph_hook_fns[GH_INSTANTIATE_FLAGS];
    if (!strcmp(symbol, "cuGraphClone")) return graph_hook_fns[GH_CLONE];
    if (!strcmp(symbol, "cuGraphExecNodeSetParams")) return graph_hook_fns[GH_EXEC_NODE_SET_PARAMS];
    if (!strcmp(symbol, "cuGraphNodeSetParams")) return graph_hook_fns[GH_NODE_SET_PARAMS];
    if (!strcmp(symbol, "cuGraphDestroy")) return graph_hook_fns[GH_DESTROY];
    if (!strcmp(symbol, "cuGraphExecDestroy")) return graph_hook_fns[GH_EXEC_DESTROY];
    for (int i = GH_EXEC_MEMCPY; i < GH_COUNT; i++)  /* one ABI each */
        if (!strcmp(symbol, graph_hook_names[i])) return graph_hook_fns[i];
    return NULL;
}

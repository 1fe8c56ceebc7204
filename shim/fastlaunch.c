/* Neutrino's fast launch path: a probed launch of a known kernel, enqueued without Python.
 *
 * The first launch of a kernel (per context) goes through Python, which builds
 * the probed code and then registers a *plan* here (neutrino_fast_plan): the
 * probed function, how its map buffers are sized from the launch's grid, its
 * appended parameters, a frame-header template, its result file. Every later
 * selected launch of that kernel is done by neutrino_fast_launch, in C:
 *
 *   device buffers from our pool → event start → probed kernel → event end
 *   → one job for the writer (writer.c), which copies the buffers back, writes
 *     the frame, zeroes the buffers for their next launch and returns them here.
 *
 * The launch path zeroes device memory only when a new ring is made (once per ring).
 *
 * Nothing waits for the GPU. Anything unusual (a plan's limits exceeded, a
 * capturing stream, an allocation or launch error) returns -1 and the launch
 * takes the Python path, which knows how to fall back and log. Launches the
 * budgets have no room for are dropped: run unprobed (return -2) and counted.
 *
 * Lock order: pool_lock (plans, rings), then the writer's ev_lock or queue lock. The writer
 * takes pool_lock holding neither, and frees device memory holding none.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "shim.h"

typedef int CUresult;

#define FAST_PLANS 1024
#define FAST_CTXS 8

/* NEUTRINO_FAST_PROFILE=1: time each step of the launch path (printed at exit; a diagnostic
 * for benchmarks/, two clock reads per step when on, one load when off). */
enum { P_CTX, P_PLAN, P_CAPTURE, P_RESERVE, P_REGION, P_EVENTS, P_ZERO, P_EV_START, P_LAUNCH, P_EV_END, P_HEADER,
       P_SUBMIT, P_STEPS };
static const char *const step_names[P_STEPS] = {"ctx", "plan", "capture", "reserve", "region", "events", "zero",
                                                "ev_start", "launch", "ev_end", "header", "submit"};
typedef struct {
    _Atomic(void *) orig_func;
    void *ctx;
    nt_plan plan;
    unsigned char header[NT_MAX_HEADER];
    _Atomic int live;
    _Atomic uint64_t fast_launches;  /* numbers this plan's launches, for --time-every */
    uint64_t prof_ns[P_STEPS], prof_n;  /* NEUTRINO_FAST_PROFILE */
    nt_plan_stats stats;
} plan_entry;

/* Map buffers come from one device ring per context: a launch takes the next contiguous
 * region (its maps side by side), so the writer copies a batch of consecutive launches back
 * with one copy and zeroes it (copies of pinned zeros: writer.c, neutrino_zero_async). Few driver calls on the writer's thread matter
 * as much as few on the program's: the driver serialises the two threads' calls, and each
 * collision costs the program's thread a wake-up (measured on an H100: 36 µs of writer calls
 * per launch made a probed launch cost 40 µs instead of 11).
 *
 * Positions are byte counters that only grow; a region never wraps (a launch that does not fit
 * before the end starts the next lap, the skipped bytes freed with it). Regions are reserved
 * and their jobs submitted under the pool's lock, so a ring's jobs reach the writer in the
 * order of their regions and it frees them by moving `tail` forward. A ring that is too small
 * is retired (freed by the writer once drained) and replaced by one twice as large. */
typedef struct fast_ring {
    struct fast_ring *next;    /* the pool's retired rings */
    void *ctx;
    uint64_t device, size;
    uint64_t head;             /* under pool_lock */
    _Atomic uint64_t tail;     /* moved by the writer only */
    /* A new ring is zeroed whole by its first launch, on that launch's stream, then `zeroed_event`
     * is recorded there. Until one of the ring's jobs is written (so the zeroing is done), a launch
     * on another stream first waits for that event: it must not race with the zeroing. */
    int fresh;
    void *zeroed_on, *zeroed_event;
    _Atomic int zeroed;
} ring_t;

typedef struct {
    void *ctx;
    ring_t *ring, *retired;
} ctx_pool;

#define RING_START (8ull << 20)
#define REGION_ALIGN 256

static plan_entry plans[FAST_PLANS];
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static ctx_pool pools[FAST_CTXS];
static uint64_t budget = 1ull << 30;
static _Atomic uint64_t held;  /* device bytes of all rings, retired ones included */
static _Atomic uint64_t trace_limit = UINT64_MAX, trace_used;
static _Atomic int enabled;
static uint64_t time_every = 1;  /* the kernel's own time (two events) on every n-th fast launch */
/* --time-every's default (0 given): a launch the timeline records as probed is timed by that record, with no
 * events (the first launch of a plan is timed by events all the same); the others every AUTO_TIME_EVERY-th.
 * A timing event pair costs a loop of tiny kernels ~5 us of GPU time (docs/overhead.md, session 15). */
#define AUTO_TIME_EVERY 8
static int time_by_timeline;
static int wait_when_full;  /* --when-full=wait: a launch the buffer budget has no room for waits for the writer */

static int profiling;
static uint64_t step_ns[P_STEPS], profiled_launches;
/* The `fast_launch` phase (neutrino/runtime/start/phases.py): host time of the probed launches this
 * path made, from the plan found to the job submitted (the argument trace after it is Python's
 * `launch_args`), summed; read at exit (neutrino_fast_launch_stats). */
static _Atomic uint64_t fast_ns, fast_count, fast_max_ns;

static inline uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* Mark the end of a step: add the time since the last mark. */
#define STEP(id) do { if (profiling) { uint64_t t_ = now_ns(); lap[id] += t_ - mark; mark = t_; } } while (0)

static void print_steps(const char *what, const uint64_t *ns, uint64_t n) {
    uint64_t total = 0;
    for (int i = 0; i < P_STEPS; i++) total += ns[i];
    fprintf(stderr, "neutrino: fast path, %s, %llu probed launches, host ns per launch: total %.0f", what,
            (unsigned long long)n, (double)total / n);
    for (int i = 0; i < P_STEPS; i++) fprintf(stderr, " %s %.0f", step_names[i], (double)ns[i] / n);
    fprintf(stderr, "\n");
}

static void print_profile(void);
static void fast_ring_done(void *ring, uint64_t ring_end);
static void free_ring(ring_t *r);
static ring_t *sweep_retired(ctx_pool *pool);
static void free_rings(ring_t *r);

static CUresult (*p_ctx_get)(void **);
static CUresult (*p_capturing)(void *, int *);
static CUresult (*p_ev_record)(void *, void *);
static CUresult (*p_ev_create)(void **, unsigned);
static CUresult (*p_ev_destroy)(void *);
static CUresult (*p_wait_event)(void *, void *, unsigned);
static CUresult (*p_alloc)(uint64_t *, size_t);
static CUresult (*p_free)(uint64_t);
static CUresult (*p_launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                            void **, void **);
static CUresult (*p_launch_ptsz)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                                 void **, void **);
static CUresult (*p_launch_ex)(const void *, void *, void **, void **);
static CUresult (*p_launch_ex_ptsz)(const void *, void *, void **, void **);


static int resolve(void) {
#define R(var, name) if (!(var = (__typeof__(var))neutrino_real_sym(name))) return -1
    R(p_ctx_get, "cuCtxGetCurrent"); R(p_capturing, "cuStreamIsCapturing");
    R(p_ev_record, "cuEventRecord"); R(p_alloc, "cuMemAlloc_v2"); R(p_free, "cuMemFree_v2");
    R(p_ev_create, "cuEventCreate"); R(p_ev_destroy, "cuEventDestroy_v2"); R(p_wait_event, "cuStreamWaitEvent");
    R(p_launch, "cuLaunchKernel"); R(p_launch_ptsz, "cuLaunchKernel_ptsz");
    R(p_launch_ex, "cuLaunchKernelEx"); R(p_launch_ex_ptsz, "cuLaunchKernelEx_ptsz");
#undef R
    return 0;
}

/* Turn the fast path on with the budgets (bytes). 0 on success. */
int neutrino_fast_enable(uint64_t buffer_budget, uint64_t trace_budget, uint64_t timing_every, int wait_full) {
    if (resolve()) return -1;
    neutrino_writer_on_ring_done(fast_ring_done);  /* before any fast job is submitted */
    pthread_mutex_lock(&pool_lock);
    budget = buffer_budget;
    time_by_timeline = timing_every == 0;
    time_every = timing_every ? timing_every : AUTO_TIME_EVERY;
    wait_when_full = wait_full;
    pthread_mutex_unlock(&pool_lock);
    atomic_store(&trace_limit, trace_budget);
    const char *prof = getenv("NEUTRINO_FAST_PROFILE");
    if (prof && *prof && *prof != '0' && !profiling) { profiling = 1; atexit(print_profile); }
    atomic_store(&enabled, 1);
    return 0;
}

/* Bytes of the trace budget: the Python path reserves from the same counter. 1 if reserved. */
int neutrino_trace_reserve(uint64_t n) {
    uint64_t used = atomic_load(&trace_used);
    for (;;) {
        if (used + n > atomic_load(&trace_limit)) return 0;
        if (atomic_compare_exchange_weak(&trace_used, &used, used + n)) return 1;
    }
}

void neutrino_trace_give_back(uint64_t n) { atomic_fetch_sub(&trace_used, n); }

static inline unsigned plan_slot(void *f) {
    return (unsigned)(((uint64_t)(uintptr_t)f * 0x9E3779B97F4A7C15ull) >> 54) & (FAST_PLANS - 1);
}

static plan_entry *find_plan(void *f, void *ctx) {
    unsigned i = plan_slot(f);
    for (unsigned n = 0; n < FAST_PLANS; n++, i = (i + 1) & (FAST_PLANS - 1)) {
        void *k = atomic_load_explicit(&plans[i].orig_func, memory_order_acquire);
        if (!k) return NULL;
        if (k == f && plans[i].ctx == ctx) return &plans[i];
    }
    return NULL;
}

/* Register (or replace) the plan of plan->orig_func in plan->ctx. 0 on success. */
int neutrino_fast_plan(const nt_plan *plan) {
    if (plan->n_maps > NT_MAX_MAPS || plan->n_extra > 2 * NT_MAX_MAPS || plan->header_len > NT_MAX_HEADER) return -1;
    pthread_mutex_lock(&pool_lock);
    plan_entry *e = find_plan(plan->orig_func, plan->ctx);
    if (!e) {
        unsigned i = plan_slot(plan->orig_func);
        unsigned n = 0;
        while (atomic_load(&plans[i].orig_func) && n++ < FAST_PLANS) i = (i + 1) & (FAST_PLANS - 1);
        if (n >= FAST_PLANS) { pthread_mutex_unlock(&pool_lock); return -1; }
        e = &plans[i];
    }
    atomic_store(&e->live, 0);
    e->plan = *plan;
    memcpy(e->header, plan->header_template, plan->header_len);
    e->plan.header_template = e->header;
    e->ctx = plan->ctx;
    atomic_store_explicit(&e->orig_func, plan->orig_func, memory_order_release);
    atomic_store(&e->live, 1);
    pthread_mutex_unlock(&pool_lock);
    return 0;
}

/* Stop using every plan (a context is going away); idle slots are freed. */
void neutrino_fast_reset(void) {
    pthread_mutex_lock(&pool_lock);
    for (unsigned i = 0; i < FAST_PLANS; i++) atomic_store(&plans[i].live, 0);
    for (unsigned c = 0; c < FAST_CTXS; c++) {
        ctx_pool *pool = &pools[c];
        free_rings(sweep_retired(pool));
        /* Only a context with no launch out (in flight) is the one going away: its ring is freed. */
        if (pool->retired || (pool->ring && atomic_load(&pool->ring->tail) != pool->ring->head)) continue;
        if (pool->ring) free_ring(pool->ring);
        pool->ring = NULL;
        pool->ctx = NULL;  /* contexts created later get the entry: FAST_CTXS bounds live contexts only */
    }
    pthread_mutex_unlock(&pool_lock);
}

/* Function handle f no longer stands for the kernel its plans were made for (its module was
 * unloaded, or the driver returned it for another kernel): stop using them in every context. Their
 * counters are added to *out and zeroed, so that a plan made later for the handle's new kernel
 * counts only its own launches. Returns how many plans it had. A slot keeps its key: probe chains
 * stay intact and the next plan for f reuses it (neutrino_fast_plan). */
int neutrino_fast_forget(void *f, nt_plan_stats *out) {
    int n = 0;
    pthread_mutex_lock(&pool_lock);
    /* every plan of f (one per context) lies on f's probe chain, before its first empty slot */
    for (unsigned i = plan_slot(f), k = 0; k < FAST_PLANS; i = (i + 1) & (FAST_PLANS - 1), k++) {
        void *key = atomic_load(&plans[i].orig_func);
        if (!key) break;
        if (key != f) continue;
        atomic_store(&plans[i].live, 0);
        out->launches += plans[i].stats.launches;
        out->dropped_buffer += plans[i].stats.dropped_buffer;
        out->dropped_trace += plans[i].stats.dropped_trace;
        out->handed_back += plans[i].stats.handed_back;
        memset(&plans[i].stats, 0, sizeof plans[i].stats);
        n++;
    }
    pthread_mutex_unlock(&pool_lock);
    return n;
}

/* Per-plan counters, for the exit summary: 1 if entry i holds a plan. */
int neutrino_fast_stats(unsigned i, void **orig_func, uint32_t *kernel_id, nt_plan_stats *out) {
    if (i >= FAST_PLANS || !atomic_load(&plans[i].orig_func)) return 0;
    *orig_func = plans[i].plan.orig_func;
    *kernel_id = plans[i].plan.kernel_id;
    *out = plans[i].stats;
    return 1;
}

static void print_profile(void) {
    if (!profiled_launches) return;
    print_steps("all kernels", step_ns, profiled_launches);
    for (unsigned i = 0; i < FAST_PLANS; i++) {
        if (!plans[i].prof_n) continue;
        char what[32];
        snprintf(what, sizeof what, "kernel %u", plans[i].plan.kernel_id);
        print_steps(what, plans[i].prof_ns, plans[i].prof_n);
    }
    neutrino_writer_print_profile();
}

static ctx_pool *pool_of(void *ctx) {
    for (unsigned c = 0; c < FAST_CTXS; c++) {
        if (pools[c].ctx == ctx) return &pools[c];
        if (!pools[c].ctx) { pools[c].ctx = ctx; return &pools[c]; }
    }
    return NULL;
}

static ctx_pool *existing_pool(void *ctx) {
    for (unsigned c = 0; c < FAST_CTXS; c++)
        if (pools[c].ctx == ctx) return &pools[c];
    return NULL;
}

static void free_ring(ring_t *r) {
    if (r->zeroed_event) p_ev_destroy(r->zeroed_event);
    p_free(r->device);
    atomic_fetch_sub(&held, r->size);
    free(r);
}

/* Unlink the retired rings whose launches are all written; the caller frees them (free_rings)
 * after dropping pool_lock: cuMemFree may wait for the device. Called with pool_lock held. */
static ring_t *sweep_retired(ctx_pool *pool) {
    ring_t *drained = NULL;
    for (ring_t **at = &pool->retired; *at;) {
        ring_t *r = *at;
        if (atomic_load(&r->tail) == r->head) { *at = r->next; r->next = drained; drained = r; }
        else at = &r->next;
    }
    return drained;
}

static void free_rings(ring_t *r) {
    for (ring_t *nx; r; r = nx) { nx = r->next; free_ring(r); }
}

/* A new current ring with room for `bytes` (at least twice the last one and eight launches of
 * this size, within the budget): 0 on success, else *why = 1 (budget) / 2 (allocation error).
 * The old ring is retired: the writer frees it once drained (cuMemFree may wait for the device,
 * which the launch path must not). Called with pool_lock held. */
static int grow_ring(ctx_pool *pool, uint64_t bytes, int *why) {
    uint64_t want = pool->ring ? 2 * pool->ring->size : RING_START;
    while (want < 8 * bytes) want *= 2;
    uint64_t now = atomic_load(&held), room = budget > now ? budget - now : 0;
    if (want > room) want = room / REGION_ALIGN * REGION_ALIGN;
    if (want < bytes) { *why = 1; return -1; }
    ring_t *r = calloc(1, sizeof *r);
    if (!r || p_alloc(&r->device, want) != 0) { free(r); *why = 2; return -1; }
    r->size = want; r->ctx = pool->ctx; r->fresh = 1;
    atomic_fetch_add(&held, want);
    if (pool->ring) { pool->ring->next = pool->retired; pool->retired = pool->ring; }
    pool->ring = r;
    return 0;
}

/* Reserve `bytes` of the current ring: its position, or -1 with *why = 1 (budget) / 2 (error).
 * Called with pool_lock held. */
static int reserve_region(ctx_pool *pool, uint64_t bytes, uint64_t *pos, uint64_t *prev_head, int *why) {
    for (int tries = 0; tries < 2; tries++) {
        ring_t *r = pool->ring;
        if (r && bytes <= r->size) {
            uint64_t at = r->head, off = at % r->size;
            if (off + bytes > r->size) at += r->size - off;  /* start the next lap */
            if (at + bytes - atomic_load(&r->tail) <= r->size) {
                *pos = at; *prev_head = r->head; r->head = at + bytes;
                if (r->head - atomic_load(&r->tail) > r->size / 2) neutrino_writer_hurry();  /* free room soon */
                return 0;
            }
        }
        if (tries == 0 && grow_ring(pool, bytes, why) != 0) return -1;
    }
    *why = 1;
    return -1;
}

/* Called by the writer when fast jobs are written (in the ring's order): their regions, up to
 * ring position `ring_end`, come back (registered with the writer by neutrino_fast_enable). */
static void fast_ring_done(void *ring, uint64_t ring_end) {
    ring_t *r = ring;
    ring_t *drained = NULL;
    atomic_store_explicit(&r->zeroed, 1, memory_order_release);  /* a job of it ran: after the memset */
    pthread_mutex_lock(&pool_lock);
    atomic_store(&r->tail, ring_end);
    ctx_pool *pool = existing_pool(r->ctx);
    if (pool && pool->retired) drained = sweep_retired(pool);  /* this ring, or an older one retired idle */
    pthread_mutex_unlock(&pool_lock);
    free_rings(drained);  /* on the writer's thread, outside the lock */
}

static inline uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

/* The launch. Returns the CUresult of the probed launch (>= 0), -1 for "take the Python
 * path", -2 for "dropped: run the original unprobed". `config` is the CUlaunchConfig of a
 * cuLaunchKernelEx (its grid, block, stream and attributes are used as they are), or NULL. */
static void count_fast_launch(uint64_t ns) {
    atomic_fetch_add(&fast_ns, ns);
    atomic_fetch_add(&fast_count, 1);
    uint64_t seen = atomic_load(&fast_max_ns);
    while (ns > seen && !atomic_compare_exchange_weak(&fast_max_ns, &seen, ns)) {
    }
}

/* {seconds in ns, launches, longest in ns} of the `fast_launch` phase so far. */
void neutrino_fast_launch_stats(uint64_t out[3]) {
    out[0] = atomic_load(&fast_ns);
    out[1] = atomic_load(&fast_count);
    out[2] = atomic_load(&fast_max_ns);
}

int neutrino_fast_launch(int ptsz, const void *config, void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                         unsigned by, unsigned bz, unsigned shmem, void *stream, void **params, uint64_t kernel_launch) {
    if (!atomic_load_explicit(&enabled, memory_order_relaxed)) return -1;
    uint64_t mark = profiling ? now_ns() : 0, lap[P_STEPS] = {0};
    void *ctx = NULL;
    if (p_ctx_get(&ctx) != 0 || !ctx) return -1;
    STEP(P_CTX);
    plan_entry *e = find_plan(f, ctx);
    if (!e || !atomic_load_explicit(&e->live, memory_order_acquire)) return -1;
    const nt_plan *p = &e->plan;
    if (shmem > p->max_shared || (p->n_params && !params)) return -1;
    STEP(P_PLAN);
    uint64_t entered = now_ns();  /* a probed kernel's launch: its host time is the `fast_launch` phase */
    void *s = stream ? stream : (void *)(uintptr_t)(ptsz ? 0x2 : 0x1);
    int capturing = 0;
    if (p_capturing(s, &capturing) != 0 || capturing) return -1;
    STEP(P_CAPTURE);

    nt_job job;
    memset(&job, 0, sizeof job);
    uint64_t blocks = (uint64_t)gx * gy * gz, threads = (uint64_t)bx * by * bz;
    uint64_t sizes[NT_MAX_MAPS], units[NT_MAX_MAPS], region_off[NT_MAX_MAPS];
    uint32_t caps[NT_MAX_MAPS];
    uint64_t pos = align_up(p->header_len, NT_ALIGN), region = 0;
    for (unsigned m = 0; m < p->n_maps; m++) {
        unsigned mode = p->units_mode[m], level = mode >= 4 ? mode - 4 : mode;
        uint64_t u = level == 0 ? blocks * threads
                   : level == 1 ? blocks * ((threads + 31) / 32)
                   : level == 2 ? blocks : p->fixed_units[m];
        units[m] = u;
        uint64_t counts = align_up(4 * u, 16);
        caps[m] = p->cap[m];
        if (mode >= 4) {  /* a count-sized map's ring: cap slots per unit, at most fixed_units (maps.ring_slots) */
            uint64_t slots = p->cap[m] && u > p->fixed_units[m] / p->cap[m] ? p->fixed_units[m] : u * p->cap[m];
            caps[m] = (uint32_t)(slots ? slots : 1);
            sizes[m] = align_up(16 + 4 * (uint64_t)caps[m], 16) + (uint64_t)caps[m] * p->record_bytes[m];
        } else
            sizes[m] = mode == 3 ? p->fixed_size[m] : counts + u * p->cap[m] * p->record_bytes[m];
        job.offsets[m] = pos;
        job.sizes[m] = sizes[m];
        pos = align_up(pos + sizes[m], NT_ALIGN);
        region_off[m] = region;
        region = align_up(region + sizes[m], REGION_ALIGN);
    }
    if (!region) region = REGION_ALIGN;
    job.frame_size = pos;
    if (!neutrino_trace_reserve(pos)) { atomic_fetch_add(&e->stats.dropped_trace, 1); return -2; }
    STEP(P_RESERVE);

    /* pool_lock is held from the region's reservation to the job's submission: a ring's jobs
     * reach the writer in the order of their regions */
    int why = 0;
    uint64_t at = 0, prev_head = 0;
    pthread_mutex_lock(&pool_lock);
    ctx_pool *pool = pool_of(ctx);
    int got = pool ? reserve_region(pool, region, &at, &prev_head, &why) : (why = 2, -1);
    /* --when-full=wait: let the writer free room (it needs pool_lock for that), up to 10 s */
    for (int waits = 0; got != 0 && why == 1 && wait_when_full && region <= budget && waits < 100; waits++) {
        pthread_mutex_unlock(&pool_lock);
        neutrino_writer_wait(neutrino_writer_next_seq() - 1, 100);
        pthread_mutex_lock(&pool_lock);
        got = reserve_region(pool, region, &at, &prev_head, &why);
    }
    if (got != 0) {
        pthread_mutex_unlock(&pool_lock);
        neutrino_trace_give_back(pos);
        if (why == 1) { atomic_fetch_add(&e->stats.dropped_buffer, 1); return -2; }
        atomic_fetch_add(&e->stats.handed_back, 1);
        return -1;
    }
    ring_t *ring = pool->ring;
    uint64_t base = ring->device + at % ring->size;
    STEP(P_REGION);
    /* The start event costs a driver call on the program's path and the GPU a timestamp: only every
     * time_every-th launch measures the kernel's own time; the end event, which the writer waits for,
     * is an untimed one on the other launches. */
    int measure = neutrino_measure();
    uint64_t nth = atomic_fetch_add_explicit(&e->fast_launches, 1, memory_order_relaxed);
    int timed = nth == 0 || (nth % time_every == 0 && !(time_by_timeline && neutrino_timeline_flags_probed()));
    void *ev[2];
    if (neutrino_writer_take_events(ctx, ev, timed || (measure & NT_MEASURE_TIMED_END)) != 0) goto give_back_region;
    STEP(P_EVENTS);

    void *args[256 + 2 * NT_MAX_MAPS];
    uint64_t values[2 * NT_MAX_MAPS];
    if (p->n_params > 256) { neutrino_writer_recycle_events(ctx, ev[0], ev[1]); goto give_back_region; }
    if (p->n_params) memcpy(args, params, p->n_params * sizeof(void *));
    for (unsigned i = 0; i < p->n_extra; i++) {
        unsigned m = p->extra_map[i];
        values[i] = p->extra_is_buffer[i] ? base + region_off[m] : (uint64_t)caps[m];
        args[p->n_params + i] = &values[i];  /* a u32 cap is read from the first 4 bytes: little-endian */
    }
    int rc = 0;
    neutrino_note_stream_work(NT_WORK_LAUNCH);  /* the events on the program's stream, the zeroing or wait below */
    if (ring->fresh) {  /* once per ring; afterwards the writer zeroes what it copied back */
        rc = neutrino_zero_async(ring->device, ring->size, s);  /* (writer.c: copies, never a driver memset) */
        if (rc == 0 && !ring->zeroed_event) rc = p_ev_create(&ring->zeroed_event, 2 /* CU_EVENT_DISABLE_TIMING */);
        if (rc == 0) rc = p_ev_record(ring->zeroed_event, s);
        if (rc == 0) ring->zeroed_on = s;
    } else if (!atomic_load_explicit(&ring->zeroed, memory_order_acquire) && s != ring->zeroed_on) {
        rc = p_wait_event(s, ring->zeroed_event, 0);
    }
    STEP(P_ZERO);
    if (rc == 0 && timed) rc = p_ev_record(ev[0], s);
    STEP(P_EV_START);
    uint64_t timeline_token = rc == 0 ? neutrino_timeline_begin_probed() : 0;  /* cupti.c: flags it probed */
    if (rc == 0 && config) rc = (ptsz ? p_launch_ex_ptsz : p_launch_ex)(config, p->probed_func, args, NULL);
    else if (rc == 0) rc = (ptsz ? p_launch_ptsz : p_launch)(p->probed_func, gx, gy, gz, bx, by, bz, shmem, stream, args, NULL);
    neutrino_timeline_end_probed(timeline_token);
    if (rc != 0) {  /* the probed kernel did not run: Python takes it from here */
        neutrino_timeline_cancel_probed(timeline_token);
        neutrino_writer_recycle_events(ctx, ev[0], ev[1]);
        atomic_fetch_add(&e->stats.handed_back, 1);
        goto give_back_region;
    }
    ring->fresh = 0;
    /* The probed kernel has run: from here on the launch is ours, whatever fails. */
    STEP(P_LAUNCH);
    /* NEUTRINO_MEASURE=no-end-event (benchmarks only): the writer then finds the event complete at once */
    int status = (measure & NT_MEASURE_NO_END_EVENT) ? 0 : p_ev_record(ev[1], s) != 0;
    STEP(P_EV_END);

    /* the frame header of this launch: the template with grid, block and sizes filled in (on the
     * stack when small: the writer copies it into its queue node) */
    unsigned char small[NT_INLINE_HEADER];
    int on_stack = p->header_len <= sizeof small;
    unsigned char *hdr = on_stack ? small : malloc(p->header_len);
    if (!hdr) status = 1;
    else {
        memcpy(hdr, p->header_template, p->header_len);
        uint32_t dims[7] = {gx, gy, gz, bx, by, bz, shmem};
        memcpy(hdr + 16, dims, sizeof dims);
        for (unsigned m = 0; m < p->n_maps; m++) {
            unsigned char *mh = hdr + p->map_header_pos[m];
            memcpy(mh + 72, &caps[m], 4);
            memcpy(mh + 80, &units[m], 8);
            memcpy(mh + 96, &job.offsets[m], 8);
            memcpy(mh + 104, &sizes[m], 8);
        }
    }
    job.ctx = ctx; job.ev_start = ev[0]; job.ev_end = ev[1]; job.stream = s;
    job.fd = p->fd; job.status = status; job.kernel_id = p->kernel_id; job.frame_id = 0;
    job.grid[0] = gx; job.grid[1] = gy; job.grid[2] = gz; job.block[0] = bx; job.block[1] = by; job.block[2] = bz;
    job.shared_bytes = shmem; job.n_maps = p->n_maps; job.kernel_launch = kernel_launch;
    job.header = hdr; job.header_len = hdr ? p->header_len : 0;
    job.owns_header = !on_stack; job.copy_header = on_stack;
    for (unsigned m = 0; m < p->n_maps; m++) {
        job.device[m] = base + region_off[m];
        job.zero_bytes[m] = sizes[m];  /* a job the writer takes alone (a failure) still leaves its region zeroed */
    }
    job.ring = ring; job.ring_end = at + region; job.region = base; job.region_bytes = region;
    job.fast = 1;
    job.untimed = !timed;
    STEP(P_HEADER);
    uint64_t submitted = neutrino_writer_submit(&job);
    if (!submitted) ring->head = prev_head;  /* the writer is gone (exit): nothing will free the region */
    pthread_mutex_unlock(&pool_lock);
    STEP(P_SUBMIT);
    if (profiling) {
        profiled_launches++;
        e->prof_n++;
        for (int i = 0; i < P_STEPS; i++) { step_ns[i] += lap[i]; e->prof_ns[i] += lap[i]; }
    }
    if (!submitted && !on_stack) free(hdr);  /* the results are lost; the launch happened */
    count_fast_launch(now_ns() - entered);
    if (submitted) neutrino_args_record(f, ctx, params, submitted - 1);  /* argtrace.c: launch_args.jsonl */
    atomic_fetch_add(&e->stats.launches, 1);
    return 0;

give_back_region:  /* nothing was launched: the region is the last reserved, under pool_lock */
    ring->head = prev_head;
    pthread_mutex_unlock(&pool_lock);
    neutrino_trace_give_back(pos);
    return -1;
}

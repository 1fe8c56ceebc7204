/* The timeline: every kernel, copy and memset of the process, through CUPTI's Activity API.
 *
 * libcupti is dlopen()ed at run time (never linked: CI has no CUDA). The runtime starts the
 * timeline when it is built (the first CUDA module load, before any kernel of that module can
 * run) and stops it at exit (neutrino_timeline_stop flushes CUPTI's buffers first).
 *
 * CUPTI hands us filled buffers on its own thread (or on the thread that flushes); each is
 * converted to timeline.bin records (80 bytes, spec/trace-format.md) and appended with one
 * write(): the program's threads never wait for us. Kernel names go to timeline_names.txt,
 * once each (a hash table of the names seen).
 *
 * Joins, by CUPTI correlation id:
 *   - the launching thread and host time (default, level `host`): CUPTI's callback API, enabled
 *     for the launch and copy calls only (cuptiEnableCallback per id); at each call's entry the
 *     callback stores (Linux tid, CLOCK_REALTIME ns) under the call's correlation id, before the
 *     GPU record can exist. CUPTI has one subscriber per process: when the program subscribes
 *     (jax.profiler's XLA tracer, Kineto) we unsubscribe for its window and subscribe again after;
 *   - the launching thread from API records of the launch and copy calls (level `api`:
 *     cuptiActivityEnableDriverApi/RuntimeApi), each giving (correlation, Linux tid);
 *   - probed launches: the launch paths take a token around the probed kernel's launch
 *     (neutrino_timeline_begin_probed); the launch callback at its driver entry stores the token
 *     under the call's correlation id (level `host`), and/or it is pushed as an external correlation
 *     id of ours (kind CUSTOM2, level `ext`); the result writer maps the token to the launch's
 *     sequence number when the job is submitted (probe_launch = seq - 1).
 * A GPU record whose API record has not arrived yet waits for it (PENDING_NS, or until the stop).
 *
 * Coexistence (spec/runtime.md): CUPTI has one set of buffer callbacks per process. The shim
 * exports cuptiActivityRegisterCallbacks, cuptiActivityEnable/Disable, cuptiActivityFlushAll
 * and cuptiFinalize, so a profiler in the program (Kineto, through torch.profiler) reaches
 * ours: while the timeline runs, our callbacks stay registered, the program's are kept, and
 * every record of a kind the program enabled is copied into the program's own buffers.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cupti_abi.h"
#include "shim.h"

#define BUFFER_BYTES (4u << 20)
#define PENDING_NS 2000000000ull /* how long a GPU record waits for its API record */
#define PENDING_MAX (1u << 20)
#define TID_BITS 18            /* correlation -> tid, direct-mapped by the id's low bits */
#define PROBE_BITS 18          /* correlation -> token and token -> seq, likewise */
#define OUT_RECORDS 1024

/* ------------------------------------------------------------------ the library */

static void *(*rdlsym)(void *, const char *);
static void *lib;  /* the libcupti in use */

static struct {
    CUptiResult (*get_version)(uint32_t *);
    CUptiResult (*register_callbacks)(nt_buffer_requested_t, nt_buffer_completed_t);
    CUptiResult (*enable)(int);
    CUptiResult (*disable)(int);
    CUptiResult (*flush_all)(uint32_t);
    CUptiResult (*next_record)(uint8_t *, size_t, uint8_t **);
    CUptiResult (*dropped)(void *, uint32_t, size_t *);
    CUptiResult (*enable_driver_api)(uint32_t, uint8_t);
    CUptiResult (*enable_runtime_api)(uint32_t, uint8_t);
    CUptiResult (*push_external)(int, uint64_t);
    CUptiResult (*pop_external)(int, uint64_t *);
    CUptiResult (*set_thread_id_type)(int);
    CUptiResult (*get_timestamp)(uint64_t *);
    CUptiResult (*finalize)(void);
    CUptiResult (*subscribe)(nt_subscriber_t *, nt_callback_t, void *);
    CUptiResult (*unsubscribe)(nt_subscriber_t);
    CUptiResult (*enable_callback)(uint32_t, nt_subscriber_t, int, uint32_t);
    CUptiResult (*stream_id)(void *ctx, void *stream, uint8_t per_thread, uint32_t *id);
    CUptiResult (*set_attribute)(int attr, size_t *size, void *value);
    CUptiResult (*get_attribute)(int attr, size_t *size, void *value);
    CUptiResult (*enable_hw_trace)(uint8_t);
    CUptiResult (*flush_period)(uint32_t);
} api;

static void init_rdlsym(void) {
    if (rdlsym) return;
    rdlsym = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!rdlsym) rdlsym = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
}

/* A libcupti already in the process (PyTorch links one) is the one to use: two copies would
 * both attach to the driver. Else the path the runtime found (neutrino/runtime/timeline.py). */
static void *open_cupti(const char *path) {
    static const char *const sonames[] = {"libcupti.so.13", "libcupti.so.12", "libcupti.so"};
    for (unsigned i = 0; i < sizeof sonames / sizeof *sonames; i++) {
        void *h = dlopen(sonames[i], RTLD_NOW | RTLD_NOLOAD);
        if (h) return h;
    }
    return path && *path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
}

static int resolve_api(void) {
#define GET(field, name) (api.field = rdlsym(lib, name))
    GET(get_version, "cuptiGetVersion"); GET(register_callbacks, "cuptiActivityRegisterCallbacks");
    GET(enable, "cuptiActivityEnable"); GET(disable, "cuptiActivityDisable");
    GET(flush_all, "cuptiActivityFlushAll"); GET(next_record, "cuptiActivityGetNextRecord");
    GET(dropped, "cuptiActivityGetNumDroppedRecords"); GET(enable_driver_api, "cuptiActivityEnableDriverApi");
    GET(enable_runtime_api, "cuptiActivityEnableRuntimeApi");
    GET(push_external, "cuptiActivityPushExternalCorrelationId");
    GET(pop_external, "cuptiActivityPopExternalCorrelationId");
    GET(set_thread_id_type, "cuptiSetThreadIdType"); GET(get_timestamp, "cuptiGetTimestamp");
    GET(finalize, "cuptiFinalize"); GET(subscribe, "cuptiSubscribe"); GET(unsubscribe, "cuptiUnsubscribe");
    GET(enable_callback, "cuptiEnableCallback"); GET(stream_id, "cuptiGetStreamIdEx");
    GET(set_attribute, "cuptiActivitySetAttribute"); GET(get_attribute, "cuptiActivityGetAttribute");
    GET(enable_hw_trace, "cuptiActivityEnableHWTrace"); GET(flush_period, "cuptiActivityFlushPeriod");
#undef GET
    return api.get_version && api.register_callbacks && api.enable && api.disable && api.flush_all &&
           api.next_record;
}

/* ------------------------------------------------------------------ state */

static _Atomic int recording;      /* our kinds are enabled and records are written */
static _Atomic int multiplexing;   /* our buffer callbacks are the registered ones */
static pthread_mutex_t tl_lock = PTHREAD_MUTEX_INITIALIZER;  /* buffers are converted under it */
static int timeline_fd = -1, names_fd = -1;
/* records written, kernels, memcpys, memsets, probed kernels, records CUPTI dropped, distinct names,
 * records without a thread, API records seen, our external-correlation records seen, records
 * copied to the program's profiler, records it had no room for, records with a host time,
 * launch/copy callbacks taken, kernel/copy records without GPU time (flags bit 2) */
#define N_COUNTS 28
static uint64_t counts[N_COUNTS];
enum { N_RECORDS, N_KERNELS, N_MEMCPY, N_MEMSET, N_PROBED, N_DROPPED, N_NAMES, N_NO_TID, N_API, N_EXT, N_FORWARDED,
       N_FORWARD_LOST, N_HOST, N_CALLBACKS, N_NO_GPU_TIME, N_HOOKED, N_HOOK_MATCHED, N_HOOK_SKIPPED, N_GRAPH_REPLAYS,
       N_GRAPH_SAMPLED, N_GRAPH_WHOLE, N_GRAPH_SWITCHES, N_GRAPH_SWITCH_NS, N_GRAPH_UNTRACED, N_GRAPH_QUIET,
       N_QUIET_SWITCHES, N_QUIET_SWITCH_NS, N_QUIET_ERRORS };
#define FLAG_NO_GPU_TIME 4  /* timeline.bin flags bit 2 (spec/trace-format.md) */

/* What is enabled besides kernels: NEUTRINO_TIMELINE_LEVEL, a comma list of `copies` (MEMCPY,
 * MEMSET), `host` (launch/copy callbacks: each record's thread and host time), `api` (API records
 * of the launch and copy calls: the launching thread), `api_all` (every driver and runtime API
 * record), `ext` (external correlation: probed launches flagged), `hooks` (kernel launches' thread
 * and host time from the shim's own launch hooks, joined to CUPTI's kernel records by stream and
 * launch order: `host` then subscribes to the copy and graph-launch calls only; see "launch hooks"),
 * `graphs` (GRAPH_TRACE: one record per graph replay, timeline.bin kind 4; CUPTI then traces no node of
 * a replay: cheaper on the GPU, but a replay's kernels are not on the timeline one by one).
 * Default: copies,host,hooks (API records cost the most, CUPTI's launch callbacks next:
 * spec/runtime.md, "Timeline"). */
enum { L_COPIES = 1, L_API = 2, L_API_ALL = 4, L_EXT = 8, L_HOST = 16, L_HOOKS = 32, L_GRAPHS = 64 };
static int level = L_COPIES | L_HOST | L_HOOKS;

static void read_level(void) {
    const char *s = getenv("NEUTRINO_TIMELINE_LEVEL");
    if (!s) return;
    static const struct { const char *word; int bit; } words[] = {
        {"copies", L_COPIES}, {"api", L_API}, {"api_all", L_API_ALL}, {"ext", L_EXT}, {"host", L_HOST},
        {"hooks", L_HOOKS}, {"graphs", L_GRAPHS}};
    level = 0;
    for (const char *p = s; *p;) {
        size_t n = strcspn(p, ",");
        for (unsigned i = 0; i < sizeof words / sizeof *words; i++)
            if (n == strlen(words[i].word) && !strncmp(p, words[i].word, n)) level |= words[i].bit;
        p += n + (p[n] == ',');
    }
}

static struct { uint32_t corr, tid; } tid_of[1u << TID_BITS];
/* correlation -> (tid, host time) from the launch callbacks; written by the program's threads, read
 * by the buffer thread: `corr` is stored last (release) and checked again after the read. */
#define HOST_BITS 18
static struct { _Atomic uint32_t corr; uint32_t tid; uint64_t host_ns; } host_of[1u << HOST_BITS];
/* correlation -> token of a probed launch: from our external-correlation records (buffer thread) or the
 * launch callback at the probed launch's entry (the launching thread): `corr` stored last (release). */
static struct { _Atomic uint32_t corr; uint64_t token; } token_of[1u << PROBE_BITS];
static struct { uint64_t token, seq; } seq_of[1u << PROBE_BITS];
static pthread_mutex_t seq_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint64_t next_token;
static __thread uint64_t thread_token;  /* the probed launch this thread is submitting */

typedef struct { nt_timeline_record rec; uint64_t held_ns; } pending_t;
typedef int (*CUresult_ctx_t)(void **);
static pending_t *pending;
static void note_graph_replay(nt_timeline_record *r);
static uint64_t realtime_ns(void);
static uint64_t ticks_to_ns(uint64_t ticks);
static void tsc_refresh(void);
static uint64_t gpu_time_ns(uint64_t cupti_time);
static void their_clock_refresh(void);
static size_t n_pending, cap_pending;

static nt_timeline_record out[OUT_RECORDS];
static unsigned n_out;

/* ------------------------------------------------------------------ names */

typedef struct { char *name; uint32_t id; uint64_t hash; } name_slot;
static name_slot *names;
static size_t names_cap, names_used;

static uint64_t hash_name(const char *s) {
    uint64_t h = 1469598103934665603ull;  /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int names_grow(void) {
    size_t cap = names_cap ? names_cap * 2 : 1024;
    name_slot *t = calloc(cap, sizeof *t);
    if (!t) return -1;
    for (size_t i = 0; i < names_cap; i++) {
        if (!names[i].name) continue;
        size_t j = names[i].hash & (cap - 1);
        while (t[j].name) j = (j + 1) & (cap - 1);
        t[j] = names[i];
    }
    free(names);
    names = t;
    names_cap = cap;
    return 0;
}

/* The line of timeline_names.txt holding `name`, appended when new. */
static uint32_t name_id(const char *name) {
    if (!name) name = "";
    if ((names_used + 1) * 2 > names_cap && names_grow() != 0) return UINT32_MAX;
    uint64_t h = hash_name(name);
    size_t j = h & (names_cap - 1);
    for (; names[j].name; j = (j + 1) & (names_cap - 1))
        if (names[j].hash == h && !strcmp(names[j].name, name)) return names[j].id;
    char *copy = strdup(name);
    if (!copy) return UINT32_MAX;
    for (char *c = copy; *c; c++)
        if (*c == '\n' || *c == '\r') *c = ' ';  /* one name per line */
    names[j] = (name_slot){copy, (uint32_t)names_used++, h};
    size_t len = strlen(copy);
    copy[len] = '\n';
    ssize_t w = write(names_fd, copy, len + 1);
    copy[len] = '\0';
    (void)w;
    counts[N_NAMES]++;
    return names[j].id;
}

/* ------------------------------------------------------------------ joins */

static void note_tid(uint32_t corr, uint32_t tid) {
    unsigned i = corr & ((1u << TID_BITS) - 1);
    tid_of[i].corr = corr;
    tid_of[i].tid = tid;
}

static uint32_t find_tid(uint32_t corr) {
    unsigned i = corr & ((1u << TID_BITS) - 1);
    return corr && tid_of[i].corr == corr ? tid_of[i].tid : 0;
}

static void note_token(uint32_t corr, uint64_t token) {
    unsigned i = corr & ((1u << PROBE_BITS) - 1);
    atomic_store_explicit(&token_of[i].corr, 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    token_of[i].token = token;
    atomic_store_explicit(&token_of[i].corr, corr, memory_order_release);
}

static uint64_t find_token(uint32_t corr) {
    unsigned i = corr & ((1u << PROBE_BITS) - 1);
    if (!corr || atomic_load_explicit(&token_of[i].corr, memory_order_acquire) != corr) return 0;
    uint64_t token = token_of[i].token;
    atomic_thread_fence(memory_order_acquire);
    return atomic_load_explicit(&token_of[i].corr, memory_order_relaxed) == corr ? token : 0;
}

static int32_t probe_launch_of(uint64_t token) {
    pthread_mutex_lock(&seq_lock);
    unsigned i = token & ((1u << PROBE_BITS) - 1);
    int32_t launch = seq_of[i].token == token && seq_of[i].seq ? (int32_t)(seq_of[i].seq - 1) : -1;
    pthread_mutex_unlock(&seq_lock);
    return launch;
}

/* ------------------------------------------------------------------ records */

static void flush_out(void) {
    if (!n_out) return;
    const char *p = (const char *)out;
    size_t left = n_out * sizeof *out;
    while (left) {
        ssize_t w = write(timeline_fd, p, left);
        if (w <= 0) break;
        p += w;
        left -= (size_t)w;
    }
    n_out = 0;
}

/* Out to timeline.bin, with the launching thread and probed launch when they are known. */
static int find_host(uint32_t corr, uint32_t *tid, uint64_t *host_ns) {
    unsigned i = corr & ((1u << HOST_BITS) - 1);
    if (!corr || atomic_load_explicit(&host_of[i].corr, memory_order_acquire) != corr) return 0;
    *tid = host_of[i].tid;
    *host_ns = host_of[i].host_ns;
    atomic_thread_fence(memory_order_acquire);
    return atomic_load_explicit(&host_of[i].corr, memory_order_relaxed) == corr;
}

static void emit(nt_timeline_record *r) {
    uint32_t tid = 0;
    uint64_t host_ns = 0;
    if (r->tid && r->host_ns) {  /* joined to its launch hook's entry (convert_kernel) */
        counts[N_HOST]++;
    } else if (find_host((uint32_t)r->correlation, &tid, &host_ns)) {
        r->tid = tid;
        r->host_ns = ticks_to_ns(host_ns);
        counts[N_HOST]++;
    } else {
        r->tid = find_tid((uint32_t)r->correlation);
    }
    if (!r->tid) counts[N_NO_TID]++;
    if (r->flags & 2) note_graph_replay(r);
    if (r->kind == 1) {
        uint64_t token = find_token((uint32_t)r->correlation);
        if (token) {
            r->flags |= 1;
            r->probe_launch = probe_launch_of(token);
            counts[N_PROBED]++;
        }
    }
    if (r->flags & FLAG_NO_GPU_TIME) counts[N_NO_GPU_TIME]++;
    counts[N_RECORDS]++;
    counts[r->kind == 1 ? N_KERNELS : r->kind == 2 ? N_MEMCPY : r->kind == 3 ? N_MEMSET : N_GRAPH_REPLAYS]++;
    out[n_out++] = *r;
    if (n_out == OUT_RECORDS) flush_out();
}

static void hold(const nt_timeline_record *r) {
    if (!(level & (L_API | L_API_ALL)) || r->tid || find_tid((uint32_t)r->correlation) || !r->correlation) {
        nt_timeline_record c = *r;
        emit(&c);
        return;
    }
    if (n_pending == cap_pending) {
        size_t cap = cap_pending ? cap_pending * 2 : 4096;
        pending_t *p = cap <= PENDING_MAX ? realloc(pending, cap * sizeof *p) : NULL;
        if (!p) {
            nt_timeline_record c = *r;
            emit(&c);
            return;
        }
        pending = p;
        cap_pending = cap;
    }
    pending[n_pending++] = (pending_t){*r, realtime_ns()};
}

/* Records waiting for their API record: out once it came, or once they waited long enough. */
static void release_pending(int all) {
    size_t kept = 0;
    uint64_t now = n_pending ? realtime_ns() : 0;
    for (size_t i = 0; i < n_pending; i++) {
        pending_t *p = &pending[i];
        if (all || find_tid((uint32_t)p->rec.correlation) || now - p->held_ns > PENDING_NS) emit(&p->rec);
        else pending[kept++] = *p;
    }
    n_pending = kept;
}

/* CUPTI gives 0 for a time it does not have (a record flushed incomplete, by a forced flush while the
 * kernel ran): such a record is written with both times 0 and flags bit 2, never as time 0. */
static int debug_untimed = -1;  /* NEUTRINO_TIMELINE_DEBUG=1: CUPTI's raw times of such records to stderr */

static void set_gpu_times(nt_timeline_record *r, uint64_t start, uint64_t end) {
    if (!start || !end || end < start) {
        r->flags |= FLAG_NO_GPU_TIME;
        if (debug_untimed < 0) debug_untimed = getenv("NEUTRINO_TIMELINE_DEBUG") != NULL;
        if (debug_untimed && counts[N_NO_GPU_TIME] < 64)
            fprintf(stderr, "neutrino: timeline: kind %u correlation %u without GPU time: CUPTI start %llu end %llu, "
                    "now %llu\n", r->kind, (unsigned)r->correlation, (unsigned long long)start,
                    (unsigned long long)end, (unsigned long long)realtime_ns());
        return;
    }
    r->start_ns = gpu_time_ns(start);
    r->end_ns = gpu_time_ns(end);
}

static void join_launch_hook(nt_timeline_record *r, const char *name);

static void convert_kernel(const uint8_t *a) {
    nt_timeline_record r = {0};
    r.kind = 1;
    r.flags = nt_rd32(a, K_GRAPH_ID) ? 2 : 0;
    r.device = nt_rd32(a, K_DEVICE);
    r.stream = nt_rd32(a, K_STREAM);
    r.correlation = nt_rd32(a, K_CORRELATION);
    set_gpu_times(&r, nt_rd64(a, K_START), nt_rd64(a, K_END));
    r.bytes = nt_rd32(a, K_DYN_SHARED);
    const char *name;
    memcpy(&name, a + K_NAME, sizeof name);
    r.name_id = name_id(name);
    r.probe_launch = -1;
    for (int d = 0; d < 3; d++) {
        r.grid[d] = nt_rd32(a, K_GRID + 4 * d);
        r.block[d] = nt_rd32(a, K_BLOCK + 4 * d);
    }
    if (!(r.flags & 2)) join_launch_hook(&r, name);
    hold(&r);
}

/* A memcpy, a peer-to-peer memcpy (MEMCPY2: kind 2 too, its copy_kind CUPTI's, PtoP) or a memset. */
static void convert_copy(const uint8_t *a, int kind) {
    nt_timeline_record r = {0};
    int peer = kind == NT_ACT_MEMCPY2;
    r.kind = kind == NT_ACT_MEMSET ? 3 : 2;
    r.copy_kind = kind == NT_ACT_MEMSET ? 0 : a[C_COPY_KIND];
    r.flags = nt_rd32(a, peer ? P_GRAPH_ID : C_GRAPH_ID) ? 2 : 0;
    r.device = nt_rd32(a, C_DEVICE);
    r.stream = nt_rd32(a, C_STREAM);
    r.correlation = nt_rd32(a, peer ? P_CORRELATION : C_CORRELATION);
    set_gpu_times(&r, nt_rd64(a, C_START), nt_rd64(a, C_END));
    r.bytes = nt_rd64(a, C_BYTES);
    r.name_id = UINT32_MAX;
    r.probe_launch = -1;
    hold(&r);
}

/* A graph replay as one record (level `graphs`): kind 4, flags bit 1, `bytes` CUPTI's graphId. */
static void convert_graph_trace(const uint8_t *a) {
    nt_timeline_record r = {0};
    r.kind = 4;
    r.flags = 2;
    r.device = nt_rd32(a, GT_DEVICE);
    r.stream = nt_rd32(a, GT_STREAM);
    r.correlation = nt_rd32(a, GT_CORRELATION);
    set_gpu_times(&r, nt_rd64(a, GT_START), nt_rd64(a, GT_END));
    r.bytes = nt_rd32(a, GT_GRAPH_ID);
    r.name_id = UINT32_MAX;
    r.probe_launch = -1;
    hold(&r);
}

/* A buffer's kernel records outside graphs, joined to their launch hooks' entries in each stream's launch order:
 * CUPTI numbers the launch calls (correlation ids) as they are made, so a stream's records ordered by correlation
 * id are in its launch order whatever order CUPTI put them in the buffer. Not by GPU start: a forced flush (the
 * program's own profiler taking CUPTI over) hands records over without GPU time, and they would sort apart from
 * their stream's neighbours. Under tl_lock. */
typedef struct { uint32_t stream, corr; uint8_t *rec; } kernel_ref;
static kernel_ref *kernel_refs;
static size_t n_kernel_refs, kernel_refs_cap;

static int kernel_ref_order(const void *a, const void *b) {
    const kernel_ref *x = a, *y = b;
    if (x->stream != y->stream) return x->stream < y->stream ? -1 : 1;
    return (x->corr > y->corr) - (x->corr < y->corr);
}

/* Kept for the sorted join (1), or to be converted at once (0: level without hooks, a graph's node, or no memory). */
static int defer_kernel(uint8_t *rec) {
    if (!(level & L_HOOKS) || nt_rd32(rec, K_GRAPH_ID)) return 0;
    if (n_kernel_refs == kernel_refs_cap) {
        size_t cap = kernel_refs_cap ? kernel_refs_cap * 2 : 4096;
        kernel_ref *grown = realloc(kernel_refs, cap * sizeof *grown);
        if (!grown) return 0;
        kernel_refs = grown, kernel_refs_cap = cap;
    }
    kernel_refs[n_kernel_refs++] = (kernel_ref){nt_rd32(rec, K_STREAM), nt_rd32(rec, K_CORRELATION), rec};
    return 1;
}

/* The kept records, per stream by correlation id: n log n in the buffer's kernels. */
static void convert_deferred_kernels(void) {
    qsort(kernel_refs, n_kernel_refs, sizeof *kernel_refs, kernel_ref_order);
    for (size_t i = 0; i < n_kernel_refs; i++) convert_kernel(kernel_refs[i].rec);
    n_kernel_refs = 0;
}

/* First the joins (API and external-correlation records), then the GPU records. */
static void convert_buffer(uint8_t *buf, size_t valid) {
    tsc_refresh();
    their_clock_refresh();
    for (int pass = 0; pass < 2; pass++) {
        uint8_t *rec = NULL;
        while (api.next_record(buf, valid, &rec) == NT_CUPTI_SUCCESS) {
            int kind = (int)nt_rd32(rec, 0);
            if (pass == 0 && (kind == NT_ACT_DRIVER || kind == NT_ACT_RUNTIME)) {
                counts[N_API]++;
                note_tid(nt_rd32(rec, A_CORRELATION), nt_rd32(rec, A_THREAD));
            } else if (pass == 0 && kind == NT_ACT_EXTERNAL_CORRELATION) {
                if (nt_rd32(rec, X_KIND) == NT_EXT_CORRELATION_KIND) {
                    counts[N_EXT]++;
                    note_token(nt_rd32(rec, X_CORRELATION), nt_rd64(rec, X_ID));
                }
            } else if (pass == 1 && (kind == NT_ACT_CONCURRENT_KERNEL || kind == NT_ACT_KERNEL)) {
                if (!defer_kernel(rec)) convert_kernel(rec);
            } else if (pass == 1 && (kind == NT_ACT_MEMCPY || kind == NT_ACT_MEMSET || kind == NT_ACT_MEMCPY2)) {
                convert_copy(rec, kind);
            } else if (pass == 1 && kind == NT_ACT_GRAPH_TRACE) {
                convert_graph_trace(rec);
            }
        }
    }
    convert_deferred_kernels();
}

/* ------------------------------------------------------------------ the program's own profiler */

#define KINDS 64
static nt_buffer_requested_t their_requested;
static nt_buffer_completed_t their_completed;
static uint8_t their_enabled[KINDS];  /* kinds the program enabled, still on */
static uint8_t their_unflushed[KINDS]; /* kinds the program enabled since its last flush */
static uint8_t our_kinds[KINDS];
static pthread_mutex_t their_lock = PTHREAD_MUTEX_INITIALIZER;

/* The program's profiler gets its records in buffers it hands us, as CUPTI would give them. One of
 * its buffers is held open from its first Disable (or first copied record) until its FlushAll:
 * Kineto flushes only while it has a buffer out (spec/runtime.md, "Coexistence"). */
static pthread_mutex_t fwd_lock = PTHREAD_MUTEX_INITIALIZER;  /* held while calling the program */
static uint8_t *open_buf;
static size_t open_size, open_used;

static int open_their_buffer(nt_buffer_requested_t req) {
    if (open_buf) return 1;
    size_t max_records = 0;
    open_size = open_used = 0;
    req(&open_buf, &open_size, &max_records);
    if (open_buf && open_size) return 1;
    open_buf = NULL;
    return 0;
}

static void complete_their_buffer(nt_buffer_completed_t done) {
    if (!open_buf) return;
    uint8_t *b = open_buf;
    open_buf = NULL;
    done(NULL, 0, b, open_size, open_used);
}

static void forward_to_program(uint8_t *buf, size_t valid) {
    pthread_mutex_lock(&their_lock);
    nt_buffer_requested_t req = their_requested;
    nt_buffer_completed_t done = their_completed;
    uint8_t wanted[KINDS];
    memcpy(wanted, their_unflushed, sizeof wanted);
    pthread_mutex_unlock(&their_lock);
    if (!req || !done) return;
    uint64_t forwarded = 0, lost = 0;
    pthread_mutex_lock(&fwd_lock);
    uint8_t *rec = NULL, *next = NULL;
    int more = api.next_record(buf, valid, &rec) == NT_CUPTI_SUCCESS;
    while (more) {
        next = rec;
        more = api.next_record(buf, valid, &next) == NT_CUPTI_SUCCESS;
        size_t len = more ? (size_t)(next - rec) : valid - (size_t)(rec - buf);
        uint32_t kind = nt_rd32(rec, 0);
        int ours = kind == NT_ACT_EXTERNAL_CORRELATION && nt_rd32(rec, X_KIND) == NT_EXT_CORRELATION_KIND;
        if (kind < KINDS && wanted[kind] && !ours) {
            if (open_buf && open_used + len > open_size) complete_their_buffer(done);
            if (open_their_buffer(req) && open_used + len <= open_size) {
                memcpy(open_buf + open_used, rec, len);
                open_used += len;
                forwarded++;
            } else {
                lost++;
            }
        }
        rec = next;
    }
    pthread_mutex_unlock(&fwd_lock);
    pthread_mutex_lock(&tl_lock);
    counts[N_FORWARDED] += forwarded;
    counts[N_FORWARD_LOST] += lost;
    pthread_mutex_unlock(&tl_lock);
}

static size_t host_buffer_bytes = BUFFER_BYTES;  /* NEUTRINO_TIMELINE_BUFFER_BYTES */
static int zeroed_buffers;                        /* NEUTRINO_TIMELINE_ZEROED_BUFFERS=1: CUPTI told not to zero them */

static void buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = zeroed_buffers ? calloc(1, host_buffer_bytes) : aligned_alloc(8, host_buffer_bytes);
    *size = *buffer ? host_buffer_bytes : 0;
    *max_records = 0;
}

static void buffer_completed(void *ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid) {
    (void)ctx; (void)stream; (void)size;
    if (buf && valid) {
        if (atomic_load(&recording)) {
            pthread_mutex_lock(&tl_lock);
            if (timeline_fd >= 0) {
                convert_buffer(buf, valid);
                release_pending(0);
                flush_out();
            }
            pthread_mutex_unlock(&tl_lock);
        }
        forward_to_program(buf, valid);
    }
    size_t dropped = 0;
    if (api.dropped && api.dropped(ctx, stream, &dropped) == NT_CUPTI_SUCCESS && dropped) {
        pthread_mutex_lock(&tl_lock);
        counts[N_DROPPED] += dropped;
        pthread_mutex_unlock(&tl_lock);
    }
    free(buf);
}

/* What the program's profiler did through us, for the event log (neutrino_timeline_profiler_calls). */
#define CALL_LOG 256
enum { P_REGISTER = 1, P_ENABLE, P_DISABLE, P_FLUSH, P_FINALIZE, P_LOST, P_SUBSCRIBE, P_UNSUBSCRIBE, P_TIMESTAMP,
       P_CLOCK_FLUSH };
static struct { uint64_t time_ns; int32_t call, kind; } call_log[CALL_LOG];
static _Atomic unsigned n_calls;

static uint64_t realtime_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void log_call(int call, int kind) {
    unsigned i = atomic_fetch_add(&n_calls, 1);
    if (i < CALL_LOG) call_log[i].time_ns = realtime_ns(), call_log[i].call = call, call_log[i].kind = kind;
}

/* The program's calls, `n` of them at most, as (time_ns, call, kind) triples; returns how many were made. */
unsigned neutrino_timeline_profiler_calls(uint64_t *out_triples, unsigned n) {
    unsigned made = atomic_load(&n_calls), k = made < CALL_LOG ? made : CALL_LOG;
    for (unsigned i = 0; i < k && i < n; i++) {
        out_triples[3 * i] = call_log[i].time_ns;
        out_triples[3 * i + 1] = (uint64_t)call_log[i].call;
        out_triples[3 * i + 2] = (uint64_t)(int64_t)call_log[i].kind;
    }
    return made;
}

/* ------------------------------------------------------------------ start, stop */

static int listed(const uint32_t *list, unsigned n, uint32_t cbid) {
    for (unsigned i = 0; i < n; i++)
        if (list[i] == cbid) return 1;
    return 0;
}

/* API records of the launch and copy calls only: DRIVER and RUNTIME on, then every other callback
 * id off (cuptiActivityEnableDriverApi/RuntimeApi; enabling single ids alone gave no records with
 * CUPTI 13.0 on the H100). Returns the ids left on. */
static unsigned enable_api_records(void) {
    if (!(level & (L_API | L_API_ALL))) return 0;
    unsigned n = 0;
    static const struct { int kind; const uint32_t *ids; unsigned n_ids, size; } sets[] = {
        {NT_ACT_DRIVER, NT_DRIVER_CBIDS, sizeof NT_DRIVER_CBIDS / sizeof *NT_DRIVER_CBIDS, NT_DRIVER_CBID_SIZE},
        {NT_ACT_RUNTIME, NT_RUNTIME_CBIDS, sizeof NT_RUNTIME_CBIDS / sizeof *NT_RUNTIME_CBIDS, NT_RUNTIME_CBID_SIZE},
    };
    for (unsigned s = 0; s < 2; s++) {
        if (api.enable(sets[s].kind) != NT_CUPTI_SUCCESS) continue;
        our_kinds[sets[s].kind] = 1;
        CUptiResult (*select)(uint32_t, uint8_t) = s == 0 ? api.enable_driver_api : api.enable_runtime_api;
        if (!select || (level & L_API_ALL)) { n += sets[s].size; continue; }
        for (uint32_t id = 1; id < sets[s].size; id++) {
            int on = listed(sets[s].ids, sets[s].n_ids, id);
            if (!on) select(id, 0);
            n += on;
        }
    }
    return n;
}

/* ------------------------------------------------------------------ graph replays: sampled node records */

/* CUPTI records a graph replay either node by node (CONCURRENT_KERNEL, MEMCPY, MEMSET records, one per node,
 * all with the cuGraphLaunch call's correlation id) or, while GRAPH_TRACE is enabled, as one record of the whole
 * replay and none of its nodes. Node records cost every replay GPU time (~0.35 us a kernel node on an H100/H200:
 * benchmarks/timeline-results.md), GRAPH_TRACE almost none. The kind is global (or per context), not per graph,
 * and taken to be read when a replay is launched (not yet checked on a GPU: tests/gpu/test_gpu_timeline.py does,
 * and every run's exit says when sampled replays came without node records), so the shim switches it at each
 * executable graph's launch (graphs.c calls neutrino_timeline_graph_launch_enter before the driver's cuGraphLaunch):
 *   - NEUTRINO_TIMELINE_GRAPH_NODES=N (default 3): an executable graph's first N replays get node records (the
 *     timeline learns every node's kernel, grid, stream and duration), its later ones one graph-level record;
 *   - `all`: every replay node by node (GRAPH_TRACE never enabled: the timeline before this mode);
 *   - 0, or the level word `graphs`: every replay one graph-level record.
 * GRAPH_TRACE is switched only when a replay wants the other kind than the last one: in a steady state of replays
 * past their first N, never. Each executable graph gets a number (1 up, in the order of first launches; in every
 * mode); the
 * launch callback at the driver's cuGraphLaunch entry (level `host`) stores (number, replay) under the call's
 * correlation id, and every record of that replay (node or graph-level) is written with them (graph_exec,
 * graph_replay: spec/trace-format.md). Two threads launching graphs at once may see the other's switch between
 * their choice and their launch: that replay then comes as the other kind, written as what it is (the analysis
 * groups records by correlation id, never assumes the kind). */
static int env_number(const char *env, unsigned long long *value);
/* GM_QUIET (the default): the first N replays and every M-th node by node, the others with kernel records off
 * ("quiet replays" below); GM_SAMPLED: the later replays recorded whole (NEUTRINO_TIMELINE_GRAPH_REST=whole) */
enum { GM_NODES, GM_SAMPLED, GM_GRAPHS, GM_QUIET };
static int graph_mode = GM_QUIET;  /* NEUTRINO_TIMELINE_GRAPH_NODES: N (default 3), `all` or 0; spec/runtime.md */
static unsigned graph_every = 100;  /* NEUTRINO_TIMELINE_GRAPH_EVERY: quiet mode's every M-th replay (0: none) */
static int graph_mode_started = GM_NODES;  /* graph_mode when the timeline started (neutrino_timeline_pause may
                                            * change graph_mode for a while, and then back) */
static unsigned graph_node_replays = 3;      /* NEUTRINO_TIMELINE_GRAPH_NODES */
static _Atomic int graph_trace_on;           /* GRAPH_TRACE is enabled now (ours) */
static _Atomic int graphs_paused;            /* neutrino_timeline_pause: no switching */
static pthread_mutex_t graph_trace_lock = PTHREAD_MUTEX_INITIALIZER;

#define GRAPH_EXECS 8192  /* slots for the executable graphs known at once (open addressing), at most */
#define GRAPH_EXEC_GONE ((void *)(uintptr_t)1)
/* number 0: not launched yet (an entry made at instantiation); untraced: instantiated while GRAPH_TRACE was off;
 * tally: its replays launched node by node, quiet, whole (timeline_graphs.tsv) */
typedef struct { void *exec; uint32_t number, replays; int untraced; uint32_t tally[3]; } graph_exec_entry;
static graph_exec_entry graph_execs[GRAPH_EXECS];
enum { TALLY_NODES, TALLY_QUIET, TALLY_WHOLE };
/* the tallies of numbered graphs destroyed or updated, kept for timeline_graphs.tsv (grown by doubling) */
static struct { uint32_t number, replays, tally[3]; } *graphs_gone;
static size_t graphs_gone_n, graphs_gone_cap;
static unsigned graph_execs_used, graph_execs_live;  /* slots taken (live + gone), live */
static unsigned graph_exec_slots = GRAPH_EXECS;      /* NEUTRINO_TIMELINE_GRAPH_EXECS: a power of two, 64 up */
static uint32_t graph_exec_numbers;
static pthread_mutex_t graph_exec_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread struct { uint32_t number, replay; } graph_launching;  /* the replay this thread is launching */
static struct { _Atomic uint32_t corr; uint32_t number, replay; } graph_of[1u << HOST_BITS];

static void read_graph_mode(void) {
    const char *s = getenv("NEUTRINO_TIMELINE_GRAPH_NODES");
    unsigned long long n = 0;
    if (s && !strcmp(s, "all")) graph_mode = GM_NODES;
    else if (env_number("NEUTRINO_TIMELINE_GRAPH_NODES", &n) > 0)
        graph_mode = GM_SAMPLED, graph_node_replays = n > 1000000 ? 1000000 : (unsigned)n;
    const char *rest = getenv("NEUTRINO_TIMELINE_GRAPH_REST");
    if (graph_mode != GM_NODES) graph_mode = rest && !strcmp(rest, "whole") ? GM_SAMPLED : GM_QUIET;
    if (env_number("NEUTRINO_TIMELINE_GRAPH_EVERY", &n) > 0) graph_every = n > 1000000000 ? 1000000000 : (unsigned)n;
    if ((graph_mode != GM_NODES && graph_node_replays == 0) || (level & L_GRAPHS)) graph_mode = GM_GRAPHS;
    if (graph_mode == GM_GRAPHS) level |= L_GRAPHS;
    if (env_number("NEUTRINO_TIMELINE_GRAPH_EXECS", &n) > 0)
        for (graph_exec_slots = 64; graph_exec_slots < GRAPH_EXECS && graph_exec_slots < n;) graph_exec_slots *= 2;
}

static unsigned graph_slot(void *exec) {
    return (unsigned)(((uintptr_t)exec >> 4) * 0x9E3779B97F4A7C15ull >> 51) & (graph_exec_slots - 1);
}

/* Under graph_exec_lock, the table 3/4 taken by live and gone slots: the live ones placed again. */
static void graph_execs_compact(void) {
    static graph_exec_entry live[GRAPH_EXECS];
    unsigned n = 0;
    for (unsigned i = 0; i < graph_exec_slots; i++)
        if (graph_execs[i].exec && graph_execs[i].exec != GRAPH_EXEC_GONE) live[n++] = graph_execs[i];
    memset(graph_execs, 0, sizeof graph_execs);
    for (unsigned k = 0; k < n; k++) {
        unsigned i = graph_slot(live[k].exec);
        while (graph_execs[i].exec) i = (i + 1) & (graph_exec_slots - 1);
        graph_execs[i] = live[k];
    }
    graph_execs_used = graph_execs_live = n;
}

/* Under graph_exec_lock, the slot of `exec`, made when absent; -1 when the table is full (3/4 live). */
static int graph_exec_slot(void *exec) {
    unsigned i = graph_slot(exec);
    while (graph_execs[i].exec && graph_execs[i].exec != exec) i = (i + 1) & (graph_exec_slots - 1);
    if (graph_execs[i].exec) return (int)i;
    if (graph_execs_used + 1 > graph_exec_slots / 4 * 3) {
        graph_execs_compact();
        for (i = graph_slot(exec); graph_execs[i].exec; i = (i + 1) & (graph_exec_slots - 1)) {}
    }
    if (graph_execs_live + 1 > graph_exec_slots / 4 * 3) return -1;
    graph_execs[i] = (graph_exec_entry){.exec = exec};
    graph_execs_used++, graph_execs_live++;
    return (int)i;
}

/* The executable graph's number (1 up, in the order of first launches) and this replay's (1 up), and whether it
 * was instantiated while GRAPH_TRACE was off; number 0 when the table is full (3/4 live). */
static int graph_replay_plan(uint32_t number, uint32_t replay, int untraced);

/* ... and how the mode plans to launch it (TALLY_*), counted in its tally at once: the launch corrects the tally
 * (graph_exec_retally) only when it came otherwise (a refused switch, a pause, the program's profiler). */
static void graph_exec_count(void *exec, uint32_t *number, uint32_t *replay, int *untraced, int *plan) {
    pthread_mutex_lock(&graph_exec_lock);
    int i = graph_exec_slot(exec);
    if (i < 0) {
        pthread_mutex_unlock(&graph_exec_lock);
        *number = *replay = 0, *untraced = 0;
        *plan = graph_replay_plan(0, 0, 0);
        return;
    }
    if (!graph_execs[i].number) graph_execs[i].number = ++graph_exec_numbers;
    *number = graph_execs[i].number;
    *replay = ++graph_execs[i].replays;
    *untraced = graph_execs[i].untraced;
    *plan = graph_replay_plan(*number, *replay, *untraced);
    graph_execs[i].tally[*plan]++;
    pthread_mutex_unlock(&graph_exec_lock);
}

/* Under graph_exec_lock: a numbered graph's tallies kept when its slot goes (dropped when memory is short). */
static void graph_exec_retire(const graph_exec_entry *e) {
    if (!e->number) return;
    if (graphs_gone_n == graphs_gone_cap) {
        size_t cap = graphs_gone_cap ? graphs_gone_cap * 2 : 64;
        void *grown = realloc(graphs_gone, cap * sizeof *graphs_gone);
        if (!grown) return;
        graphs_gone = grown, graphs_gone_cap = cap;
    }
    graphs_gone[graphs_gone_n].number = e->number, graphs_gone[graphs_gone_n].replays = e->replays;
    memcpy(graphs_gone[graphs_gone_n++].tally, e->tally, sizeof e->tally);
}

void neutrino_timeline_graph_exec_gone(void *exec) {
    if (!exec) return;
    pthread_mutex_lock(&graph_exec_lock);
    for (unsigned i = graph_slot(exec); graph_execs[i].exec; i = (i + 1) & (graph_exec_slots - 1))
        if (graph_execs[i].exec == exec) {
            graph_exec_retire(&graph_execs[i]);
            graph_execs[i].exec = GRAPH_EXEC_GONE;
            graph_execs_live--;
            break;
        }
    pthread_mutex_unlock(&graph_exec_lock);
}

/* The replay just counted as `planned` was launched as `how` (TALLY_*): its graph's tally moved over. */
static void graph_exec_retally(void *exec, int planned, int how) {
    pthread_mutex_lock(&graph_exec_lock);
    for (unsigned i = graph_slot(exec); graph_execs[i].exec; i = (i + 1) & (graph_exec_slots - 1))
        if (graph_execs[i].exec == exec) {
            graph_execs[i].tally[planned]--, graph_execs[i].tally[how]++;
            break;
        }
    pthread_mutex_unlock(&graph_exec_lock);
}

static int tally_row(char *line, size_t len, uint32_t number, uint32_t replays, const uint32_t tally[3]) {
    return snprintf(line, len, "%u\t%u\t%u\t%u\t%u\n", number, replays, tally[0], tally[1], tally[2]);
}

/* At stop: run_dir/timeline_graphs.tsv, one row per numbered executable graph (destroyed ones included), in
 * number order (numbers are 1 up, each given once: a table indexed by number); nothing when no graph was
 * launched (spec/trace-format.md). */
static void write_graph_tallies(const char *run_dir) {
    pthread_mutex_lock(&graph_exec_lock);
    uint32_t numbers = graph_exec_numbers;
    char (*rows)[64] = numbers ? calloc((size_t)numbers + 1, 64) : NULL;
    for (size_t g = 0; rows && g < graphs_gone_n; g++)
        if (graphs_gone[g].number <= numbers)
            tally_row(rows[graphs_gone[g].number], 64, graphs_gone[g].number, graphs_gone[g].replays,
                      graphs_gone[g].tally);
    for (unsigned i = 0; rows && i < graph_exec_slots; i++) {
        graph_exec_entry *e = &graph_execs[i];
        if (e->exec && e->exec != GRAPH_EXEC_GONE && e->number && e->number <= numbers)
            tally_row(rows[e->number], 64, e->number, e->replays, e->tally);
    }
    pthread_mutex_unlock(&graph_exec_lock);
    char path[4200];
    snprintf(path, sizeof path, "%s/timeline_graphs.tsv", run_dir);
    FILE *f = rows ? fopen(path, "w") : NULL;
    if (f) {
        fputs("graph_exec\treplays\tnode_replays\tquiet_replays\twhole_replays\n", f);
        for (uint32_t g = 1; g <= numbers; g++)
            if (rows[g][0]) fputs(rows[g], f);
        fclose(f);
    }
    free(rows);
}

/* The program's own profiler records kernels (Kineto's CONCURRENT_KERNEL): GRAPH_TRACE would take the graph
 * replays' kernels from its records too (the kind is the process's), so the shim keeps it off meanwhile. */
static _Atomic int program_traces_kernels;

/* GRAPH_TRACE on or off for the next replays, unless the program's own profiler enabled it (its choice stands) or
 * records kernels (off). Returns whether it is on. */
static int graph_trace_set(int on) {
    if (atomic_load_explicit(&program_traces_kernels, memory_order_relaxed)) on = 0;
    if (atomic_load_explicit(&graph_trace_on, memory_order_relaxed) == on) return on;
    pthread_mutex_lock(&graph_trace_lock);
    pthread_mutex_lock(&their_lock);
    int theirs = their_enabled[NT_ACT_GRAPH_TRACE];
    pthread_mutex_unlock(&their_lock);
    if (!theirs && !atomic_load(&graphs_paused) && atomic_load(&graph_trace_on) != on) {
        uint64_t t0 = realtime_ns();  /* what a switch costs the launching thread (timeline_counts) */
        CUptiResult rc = on ? api.enable(NT_ACT_GRAPH_TRACE) : api.disable(NT_ACT_GRAPH_TRACE);
        counts[N_GRAPH_SWITCH_NS] += realtime_ns() - t0;
        if (rc == NT_CUPTI_SUCCESS) {
            atomic_store(&graph_trace_on, on);
            counts[N_GRAPH_SWITCHES]++;
        }
    }
    on = atomic_load(&graph_trace_on) || theirs;
    pthread_mutex_unlock(&graph_trace_lock);
    return on;
}

/* ---- quiet replays (GM_QUIET): a replay neither sampled nor every M-th is launched with our kernel records off,
 * which costs the GPU nothing (a graph replayed so ran as fast as one instantiated before CUPTI was on:
 * benchmarks/cupti_graph_states.py), where node records cost ~0.33 us a kernel node and a graph instantiated
 * with GRAPH_TRACE on ~0.9 us a replay even when nothing is recorded. The kind is the process's, so every kernel
 * launch of the program that the shim sees (preload.c's launch hooks) turns it on again first if a quiet replay
 * turned it off: a steady loop of replays switches never, a replay between eager launches twice. A launch counts
 * itself in kernel_launches_in_flight before it looks (and until it returns), and a replay going quiet marks
 * kernels_quiet before it looks at the count (both sequentially consistent): either the replay sees the launch
 * and stays recorded, or the launch sees the mark and waits on quiet_lock for the switch to finish, then turns
 * records on again. A launch on another thread during a quiet replay's cuGraphLaunch may so turn records on in
 * the middle of it: that replay then comes with node records (written as what it is). */
static int kernel_kind;  /* (defined below: NEUTRINO_TIMELINE_KERNEL_RECORDS) */
static _Atomic int kernels_quiet;              /* our kernel records are off now, for quiet replays */
static _Atomic long kernel_launches_in_flight; /* the program's kernel launches between their look and return */
static pthread_mutex_t quiet_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int kernel_launch_depth;       /* this thread's launches counted (nested: Python's own) */

/* Under quiet_lock: our kernel records on again (a quiet replay turned them off). */
static void kernels_loud_locked(void) {
    if (!atomic_load(&kernels_quiet)) return;
    uint64_t t0 = realtime_ns();
    CUptiResult rc = api.enable(kernel_kind);
    counts[N_QUIET_SWITCH_NS] += realtime_ns() - t0;
    counts[rc == NT_CUPTI_SUCCESS ? N_QUIET_SWITCHES : N_QUIET_ERRORS]++;
    atomic_store(&kernels_quiet, 0);
}

static void kernels_loud(void) {
    pthread_mutex_lock(&quiet_lock);
    kernels_loud_locked();
    pthread_mutex_unlock(&quiet_lock);
}

/* A replay wants to be quiet: 1 when our kernel records are off for it. Not while the timeline is paused or
 * stopping, not while the program's own profiler records kernels (its records would lose the replay too), not
 * while another thread is inside a kernel launch. */
static int kernels_go_quiet(void) {
    if (atomic_load_explicit(&kernels_quiet, memory_order_acquire)) return 1;  /* the steady state: no call */
    if (atomic_load(&program_traces_kernels) || atomic_load(&graphs_paused)) return 0;
    pthread_mutex_lock(&quiet_lock);
    int quiet = 0;
    if (!atomic_load(&graphs_paused) && !atomic_load(&program_traces_kernels)) {
        atomic_store(&kernels_quiet, 1);
        if (atomic_load(&kernel_launches_in_flight) == 0) {
            uint64_t t0 = realtime_ns();
            CUptiResult rc = api.disable(kernel_kind);
            counts[N_QUIET_SWITCH_NS] += realtime_ns() - t0;
            counts[rc == NT_CUPTI_SUCCESS ? N_QUIET_SWITCHES : N_QUIET_ERRORS]++;
            quiet = rc == NT_CUPTI_SUCCESS;
        }
        if (!quiet) atomic_store(&kernels_quiet, 0);
    }
    pthread_mutex_unlock(&quiet_lock);
    return quiet;
}

/* preload.c, at the entry of each kernel launch of the program (before the timeline's hook, captured or not). */
void neutrino_timeline_kernel_launch_begin(void) {
    if (graph_mode_started != GM_QUIET) return;
    kernel_launch_depth++;
    atomic_fetch_add(&kernel_launches_in_flight, 1);
    if (atomic_load(&kernels_quiet)) kernels_loud();
}

static inline void kernel_launch_end(void) {
    if (kernel_launch_depth > 0) kernel_launch_depth--, atomic_fetch_sub(&kernel_launches_in_flight, 1);
}

/* The program enabled (1) or disabled (0) its kernel records (cuptiActivityEnable/Disable through the shim). */
static void program_kernel_records(int on) {
    atomic_store(&program_traces_kernels, on);
    if (on && graph_mode != GM_NODES && graph_mode != GM_QUIET) graph_trace_set(0);
    if (on) {  /* the kind is on again (theirs): no replay is quiet meanwhile */
        pthread_mutex_lock(&quiet_lock);
        atomic_store(&kernels_quiet, 0);
        pthread_mutex_unlock(&quiet_lock);
    }
}

/* Sampled mode launches graphs with GRAPH_TRACE on that were instantiated with it off unless told otherwise, and
 * such a launch crashed CUPTI (a SIGSEGV in the driver's graph launch: a torch.compile reduce-overhead training
 * loop, whose backward graph is instantiated after the forward graph's first replays switched GRAPH_TRACE off;
 * a CUPTI-alone program enabling the kinds after instantiation, benchmarks/timeline-results.md). So each
 * instantiation (or update) happens with GRAPH_TRACE on where the shim may switch it, and an executable graph
 * instantiated while it could not be on (paused, the program's profiler recording kernels, a refused switch) is
 * remembered as untraced: every replay of it node by node, GRAPH_TRACE off at its launch. */
void neutrino_timeline_graph_instantiate_enter(void) {
    if (graph_mode != GM_SAMPLED || !atomic_load_explicit(&recording, memory_order_relaxed)) return;
    if (!atomic_load_explicit(&graphs_paused, memory_order_relaxed)) graph_trace_set(1);
}

/* (graph_mode_started, not graph_mode: a graph instantiated under a pause's mode 5 is launched sampled after it) */
void neutrino_timeline_graph_instantiated(void *exec) {
    if (graph_mode_started != GM_SAMPLED || !exec || !atomic_load_explicit(&recording, memory_order_relaxed)) return;
    pthread_mutex_lock(&their_lock);
    int traced = atomic_load(&graph_trace_on) || their_enabled[NT_ACT_GRAPH_TRACE];
    pthread_mutex_unlock(&their_lock);
    if (traced) return;  /* (its entry is made at its first launch, as any graph's) */
    pthread_mutex_lock(&graph_exec_lock);
    int i = graph_exec_slot(exec);
    if (i >= 0) graph_execs[i].untraced = 1;
    pthread_mutex_unlock(&graph_exec_lock);
    counts[N_GRAPH_UNTRACED]++;  /* racy on purpose: statistics */
}

/* How the mode plans to launch replay `replay` of graph `number` (0: unnumbered, the table full): TALLY_*. */
static int graph_replay_plan(uint32_t number, uint32_t replay, int untraced) {
    if (graph_mode == GM_QUIET)  /* an unnumbered graph is recorded node by node */
        return !number || replay <= graph_node_replays || (graph_every && replay % graph_every == 0) ? TALLY_NODES
                                                                                                    : TALLY_QUIET;
    int whole = graph_mode != GM_NODES && !untraced && (graph_mode == GM_GRAPHS || !number || replay > graph_node_replays);
    return whole ? TALLY_WHOLE : TALLY_NODES;
}

void neutrino_timeline_graph_launch_enter(void *exec) {
    graph_launching.number = graph_launching.replay = 0;
    if (!atomic_load_explicit(&recording, memory_order_relaxed) || !exec) return;
    uint32_t number, replay;
    int untraced, plan, how;
    graph_exec_count(exec, &number, &replay, &untraced, &plan);
    graph_launching.number = number, graph_launching.replay = replay;
    if (graph_mode == GM_QUIET) {
        if (plan == TALLY_NODES && atomic_load_explicit(&kernels_quiet, memory_order_relaxed)) kernels_loud();
        how = plan == TALLY_QUIET && !kernels_go_quiet() ? TALLY_NODES : plan;
        counts[how == TALLY_QUIET ? N_GRAPH_QUIET : N_GRAPH_SAMPLED]++;  /* racy on purpose: statistics */
    } else {
        int whole = plan == TALLY_WHOLE;
        if (graph_mode == GM_SAMPLED && !atomic_load_explicit(&graphs_paused, memory_order_relaxed))
            whole = graph_trace_set(whole);
        how = whole ? TALLY_WHOLE : TALLY_NODES;
        if (graph_mode != GM_NODES) counts[whole ? N_GRAPH_WHOLE : N_GRAPH_SAMPLED]++;  /* racy on purpose */
    }
    if (number && how != plan) graph_exec_retally(exec, plan, how);
}

void neutrino_timeline_graph_launch_exit(void) { graph_launching.number = graph_launching.replay = 0; }

/* The launch callback at a graph launch's driver entry (inside graphs.c's hook): the replay under the
 * correlation id its records will carry (the runtime call's when there is one). */
static void note_graph_launch(uint32_t corr) {
    if (!graph_launching.number) return;
    unsigned i = corr & ((1u << HOST_BITS) - 1);
    atomic_store_explicit(&graph_of[i].corr, 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    graph_of[i].number = graph_launching.number;
    graph_of[i].replay = graph_launching.replay;
    atomic_store_explicit(&graph_of[i].corr, corr, memory_order_release);
}

/* A record of a graph replay (node or whole): its graph's number and replay, when the callback stored them. */
static void note_graph_replay(nt_timeline_record *r) {
    uint32_t corr = (uint32_t)r->correlation;
    unsigned i = corr & ((1u << HOST_BITS) - 1);
    if (!corr || atomic_load_explicit(&graph_of[i].corr, memory_order_acquire) != corr) return;
    uint32_t number = graph_of[i].number, replay = graph_of[i].replay;
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&graph_of[i].corr, memory_order_relaxed) != corr) return;
    r->graph_exec = number, r->graph_replay = replay;
}

/* ------------------------------------------------------------------ host side of every launch */


static nt_subscriber_t our_subscriber;   /* NULL: not subscribed (level without `host`, or stepped aside) */
static pthread_mutex_t sub_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread uint32_t my_tid;
static __thread int in_runtime_call;  /* inside a runtime launch/copy: its driver call is not the record's */
static __thread uint32_t outer_corr;  /* the correlation id of the runtime call this thread is inside */
static __thread uint64_t pending_token;  /* a probed launch of this thread about to reach the driver */

/* The program's subscriber, shared: while ours is subscribed, a program's cuptiSubscribe gets a handle
 * of ours (their_handle) and its callback is called from ours for the (domain, cbid) it enabled; its
 * enables are applied to our real subscriber. NEUTRINO_TIMELINE_SHARE_SUBSCRIBER=0: step aside instead. */
#define CB_DOMAINS 8
#define CB_IDS 1024
static int share_subscriber = 1;
static char their_handle;
#define THEIR_SUBSCRIBER ((nt_subscriber_t)&their_handle)
static nt_callback_t their_callback;
static void *their_userdata;
static uint8_t their_cb[CB_DOMAINS][CB_IDS], their_whole_domain[CB_DOMAINS];
static uint8_t our_cb[CB_DOMAINS][CB_IDS];

static int theirs_on(int domain, uint32_t cbid) {
    if (domain <= 0 || domain >= CB_DOMAINS) return 0;
    return cbid < CB_IDS ? their_cb[domain][cbid] : their_whole_domain[domain];
}

/* Host time at a launch, cheaply: the TSC where it is invariant (x86-64 constant_tsc + nonstop_tsc),
 * converted to CLOCK_REALTIME ns when the record is written (ticks_to_ns, from two (TSC, realtime)
 * pairs: the timeline's start and the latest conversion); else clock_gettime. clock_gettime was the
 * callback's whole cost on the H100 machine (spec/runtime.md, "Timeline"). */
static int use_tsc;
static struct { uint64_t ticks, ns; } tsc_first, tsc_last;

static inline uint64_t host_ticks(void) {
#if defined(__x86_64__)
    if (use_tsc) return __builtin_ia32_rdtsc();
#endif
    return realtime_ns();
}

static int tsc_is_invariant(void) {
#if defined(__x86_64__)
    char buf[8192];
    int fd = open("/proc/cpuinfo", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    return strstr(buf, " constant_tsc") && strstr(buf, " nonstop_tsc") && !getenv("NEUTRINO_TIMELINE_NO_TSC");
#else
    return 0;
#endif
}

/* A (TSC, realtime) pair, realtime taken on both sides of the TSC read. */
static void tsc_pair(uint64_t *ticks, uint64_t *ns) {
    uint64_t a = realtime_ns();
    *ticks = host_ticks();
    uint64_t b = realtime_ns();
    *ns = a + (b - a) / 2;
}

/* Once per buffer converted (under tl_lock): the latest pair, for a longer base and a finer slope. */
static void tsc_refresh(void) {
    uint64_t t, ns;
    if (!use_tsc) return;
    tsc_pair(&t, &ns);
    if (t > tsc_first.ticks + 1000000 && ns > tsc_first.ns) tsc_last.ticks = t, tsc_last.ns = ns;
}

static uint64_t ticks_to_ns(uint64_t ticks) {
    if (!use_tsc) return ticks;
    if (tsc_last.ticks <= tsc_first.ticks) return tsc_first.ns;
    double per_tick = (double)(tsc_last.ns - tsc_first.ns) / (double)(tsc_last.ticks - tsc_first.ticks);
    return tsc_last.ns - (uint64_t)((double)(int64_t)(tsc_last.ticks - ticks) * per_tick);
}

/* cuLaunchKernel(_ptsz), cuLaunchKernelEx(_ptsz), cuLaunchCooperativeKernel(_ptsz): the first six ids of
 * NT_DRIVER_CBIDS. */
static int is_kernel_launch(uint32_t cbid) {
    for (unsigned i = 0; i < 6; i++)
        if (NT_DRIVER_CBIDS[i] == cbid) return 1;
    return 0;
}

/* At the entry of a launch or copy call: (tid, host ticks) under its correlation id. A runtime call
 * (cudaLaunchKernel) makes a driver call inside (cuLaunchKernel, its own correlation id): the GPU
 * record carries the runtime call's id, so the inner driver call is skipped. */
static void on_launch_call(void *userdata, int domain, uint32_t cbid, const void *cbdata) {
    (void)userdata;
    nt_callback_t theirs = their_callback;
    if (theirs && theirs_on(domain, cbid)) theirs(their_userdata, domain, cbid, cbdata);
    const uint8_t *d = cbdata;
    if (!d || domain <= 0 || domain >= CB_DOMAINS || cbid >= CB_IDS || !our_cb[domain][cbid]) return;
    int enter = nt_rd32(d, CB_SITE) == NT_CB_SITE_ENTER;
    if (domain == NT_CB_DOMAIN_RUNTIME) in_runtime_call += enter ? 1 : (in_runtime_call > 0 ? -1 : 0);
    if (!enter) return;
    uint32_t corr = nt_rd32(d, CB_CORRELATION);
    if (domain == NT_CB_DOMAIN_RUNTIME && in_runtime_call == 1) outer_corr = corr;
    if (pending_token && domain == NT_CB_DOMAIN_DRIVER && is_kernel_launch(cbid)) {  /* the probed kernel's launch */
        note_token(in_runtime_call ? outer_corr : corr, pending_token);
        pending_token = 0;
    }
    if (domain == NT_CB_DOMAIN_DRIVER && (cbid == 514 || cbid == 515))  /* cuGraphLaunch(_ptsz): inside our hook */
        note_graph_launch(in_runtime_call ? outer_corr : corr);
    if (domain == NT_CB_DOMAIN_DRIVER && in_runtime_call) return;
    if (!my_tid) my_tid = (uint32_t)syscall(SYS_gettid);
    unsigned i = corr & ((1u << HOST_BITS) - 1);
    atomic_store_explicit(&host_of[i].corr, 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    host_of[i].tid = my_tid;
    host_of[i].host_ns = host_ticks();
    atomic_store_explicit(&host_of[i].corr, corr, memory_order_release);
    counts[N_CALLBACKS]++;  /* racy on purpose: a statistic, never a join */
}

/* Our launch/copy callback ids on (again: a program's domain-wide disable turns them off): how many. */
static unsigned enable_ours(void) {
    unsigned n = 0;
    /* level `hooks`: the kernel launches (the first six ids of each list) are the shim's launch hooks' */
    unsigned first = (level & L_HOOKS) ? 6 : 0;
    for (unsigned i = first; i < sizeof NT_DRIVER_CBIDS / sizeof *NT_DRIVER_CBIDS; i++) {
        our_cb[NT_CB_DOMAIN_DRIVER][NT_DRIVER_CBIDS[i]] = 1;
        n += api.enable_callback(1, our_subscriber, NT_CB_DOMAIN_DRIVER, NT_DRIVER_CBIDS[i]) == NT_CUPTI_SUCCESS;
    }
    for (unsigned i = first; i < sizeof NT_RUNTIME_CBIDS / sizeof *NT_RUNTIME_CBIDS; i++) {
        our_cb[NT_CB_DOMAIN_RUNTIME][NT_RUNTIME_CBIDS[i]] = 1;
        n += api.enable_callback(1, our_subscriber, NT_CB_DOMAIN_RUNTIME, NT_RUNTIME_CBIDS[i]) == NT_CUPTI_SUCCESS;
    }
    return n;
}

/* Subscribe and enable the launch/copy callbacks; CUPTI's error (0: on). Under sub_lock. */
static CUptiResult subscribe_ours(unsigned *n_cbids) {
    if (our_subscriber) return NT_CUPTI_SUCCESS;
    if (!api.subscribe || !api.enable_callback || !api.unsubscribe) return 1;
    nt_subscriber_t sub = NULL;
    CUptiResult rc = api.subscribe(&sub, on_launch_call, NULL);
    if (rc != NT_CUPTI_SUCCESS) return rc;
    our_subscriber = sub;
    unsigned n = enable_ours();
    if (n_cbids) *n_cbids = n;
    return NT_CUPTI_SUCCESS;
}

static void unsubscribe_ours(void) {
    memset(our_cb, 0, sizeof our_cb);
    if (their_callback) return;  /* the program's callbacks go through our subscriber: it stays */
    if (our_subscriber && api.unsubscribe) api.unsubscribe(our_subscriber);
    our_subscriber = NULL;
}

/* ------------------------------------------------------------------ launch hooks (level `hooks`) */

/* The shim's launch hooks (preload.c) see every cuLaunchKernel* before the driver does: each launch
 * not being captured leaves an entry (thread, host ticks, function, grid, block) in a queue of its
 * stream, in launch order. A kernel record (outside graphs) takes the first entry of its stream not
 * yet taken, within HOOK_WINDOW of the oldest, whose grid and block equal its own and whose function
 * has its name (cuFuncGetName; not compared for a probed launch, whose instrumented copy runs). The
 * driver runs a stream's kernels in launch order, but CUPTI does not always hand their records over
 * in that order (a JAX program under jax.profiler, H200: half its kernels came out of order): a buffer's
 * records are joined per stream in correlation id order (convert_deferred_kernels), which is launch order, and an
 * entry passed over stays for a record of a later buffer, which takes the first fitting entry between the taken
 * ones of lower and of higher correlation ids (a stream's launch order is its correlation order); it
 * is given up (counted in N_HOOK_SKIPPED: a launch whose record never came, or came unjoined) once it
 * is HOOK_OVERTAKEN entries behind the furthest taken one, or when the timeline stops. Like kernels
 * (same name, grid, block) of one stream may swap host times when the later launch's record comes in an
 * earlier buffer, or when two threads launch on one stream at once (their entries may enter the queue in the other
 * order than the driver's); counts per thread never change. This replaces CUPTI's launch callbacks
 * (0.3-0.5 us per launch: spec/runtime.md). */
#define HOOK_CHUNK 256            /* queues per chunk of the table: a chunk is added when the ones there are taken */
#define HOOK_STREAMS 4096         /* queues at most (16 chunks) */
#define HOOK_QUEUE (1u << 16)     /* entries of each of the first HOOK_CHUNK queues' rings (4 MiB) */
#define HOOK_QUEUE_MORE (1u << 12) /* entries of the later queues' rings (256 KiB): memory stays bounded */
#define HOOK_WINDOW 4096     /* entries searched from the oldest not taken */
#define HOOK_OVERTAKEN 2048  /* an entry this far behind the furthest taken one is given up */
typedef struct {
    uint64_t ticks, token;
    void *func;
    uint32_t tid, grid[3], block[3];
    _Atomic int dead;  /* the launch failed: no record will come */
    int taken;         /* a record took it (under the queue's lock) */
    uint32_t corr;     /* that record's correlation id */
} hook_entry;
typedef struct {
    void *ctx, *handle;
    int ptsz;
    uint32_t owner;  /* ptsz: the thread whose per-thread default stream this is (one per thread); else 0 */
    uint32_t cupti_stream;
    uint32_t device;  /* the context's device: CUPTI gives every context's NULL stream the same id (7) */
    pthread_mutex_t lock;
    uint64_t head, tail;  /* entries [head, tail) wait for their record */
    uint64_t last_taken;  /* the furthest entry a record took (none at or after head: none out of order) */
    hook_entry *ring;
    uint64_t mask;        /* ring entries - 1 (a power of two) */
} hook_queue;
/* The table: chunks of HOOK_CHUNK queues, allocated as streams come and never moved or freed, so that a queue's
 * address stays valid while other threads use it; queue i is chunk i / HOOK_CHUNK's (i % HOOK_CHUNK)-th. A chunk
 * is published (its pointer stored) before n_hook_queues counts any queue in it (release / acquire). */
static hook_queue *hook_chunks[HOOK_STREAMS / HOOK_CHUNK];
static _Atomic int n_hook_queues;
static inline hook_queue *hook_queue_at(int i) { return &hook_chunks[i / HOOK_CHUNK][i % HOOK_CHUNK]; }
static pthread_mutex_t hook_table_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int hooks_on;
/* this thread's recent streams' queues, direct-mapped by stream handle: most launches hit one, so the table is
 * scanned only for a stream the thread has not launched on lately (an entry is checked against its queue's key:
 * a queue retired and given to another stream misses) */
#define RECENT_QUEUES 64
static __thread hook_queue *recent_queues[RECENT_QUEUES];
static __thread hook_entry *current_entry;     /* the launch this thread is inside (begin_probed marks it) */

/* The context of a queue whose stream or context is gone: it matches no launch (a stream or context made
 * again at its address is another, with another CUPTI stream id); its entries still wait for their records. */
#define HOOK_RETIRED ((void *)~(uintptr_t)0)

/* `ctx` is read first (acquire): a queue given to another stream (hook_queue_of) shows its new key whole. */
static int hook_queue_is(const hook_queue *q, void *ctx, void *handle, int ptsz, uint32_t owner) {
    return __atomic_load_n(&q->ctx, __ATOMIC_ACQUIRE) == ctx && q->handle == handle && q->ptsz == ptsz &&
           q->owner == owner;
}

/* Under hook_table_lock, the table full: a retired queue none of whose entries waits any more, or NULL. */
static hook_queue *hook_queue_reusable(int n) {
    for (int i = 0; i < n; i++) {
        hook_queue *q = hook_queue_at(i);
        if (__atomic_load_n(&q->ctx, __ATOMIC_ACQUIRE) != HOOK_RETIRED) continue;
        pthread_mutex_lock(&q->lock);
        int drained = q->head == q->tail;
        pthread_mutex_unlock(&q->lock);
        if (drained) return q;
    }
    return NULL;
}

/* preload.c, before a stream (stream not NULL) or a context (every queue of ctx; ctx NULL: of every context,
 * for a primary context released or reset) is destroyed: their queues are retired. */
void neutrino_timeline_streams_gone(void *ctx, void *stream) {
    if ((uintptr_t)stream <= 2 && stream) return;  /* CU_STREAM_LEGACY, CU_STREAM_PER_THREAD: never destroyed */
    pthread_mutex_lock(&hook_table_lock);
    int n = atomic_load(&n_hook_queues);
    for (int i = 0; i < n; i++) {
        hook_queue *q = hook_queue_at(i);
        void *of = __atomic_load_n(&q->ctx, __ATOMIC_ACQUIRE);
        if (of != HOOK_RETIRED && (stream ? q->handle == stream : !ctx || of == ctx))
            __atomic_store_n(&q->ctx, HOOK_RETIRED, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&hook_table_lock);
}

/* Under hook_table_lock: queue n of the table (its chunk added when n is the chunk's first), counted in
 * n_hook_queues once whole; NULL when memory is short. */
static hook_queue *hook_queue_new(int n, void *ctx, void *handle, int ptsz, uint32_t owner, uint32_t id,
                                  uint32_t device) {
    hook_queue **chunk = &hook_chunks[n / HOOK_CHUNK];
    if (!*chunk) {
        hook_queue *made = calloc(HOOK_CHUNK, sizeof *made);
        if (!made) return NULL;
        __atomic_store_n(chunk, made, __ATOMIC_RELEASE);
    }
    uint64_t entries = n < HOOK_CHUNK ? HOOK_QUEUE : HOOK_QUEUE_MORE;
    hook_entry *ring = calloc(entries, sizeof *ring);
    if (!ring) return NULL;
    hook_queue *q = &(*chunk)[n % HOOK_CHUNK];
    *q = (hook_queue){ctx, handle, ptsz, owner, id, device, PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, ring, entries - 1};
    atomic_store_explicit(&n_hook_queues, n + 1, memory_order_release);
    return q;
}

/* The device of the current context (the launch's: its queue is made while it is current); 0 when unknown. */
static uint32_t current_device(void) {
    static int (*get_device)(int *);
    static int looked;
    if (!looked) get_device = (int (*)(int *))neutrino_real_sym("cuCtxGetDevice"), looked = 1;
    int d = 0;
    return get_device && get_device(&d) == 0 && d >= 0 ? (uint32_t)d : 0;
}

/* The queue of (ctx, stream), made at its first launch (CUPTI's stream id asked once); NULL when the table is
 * full and no retired queue is drained. The
 * per-thread default stream is one stream per thread (each its own CUPTI id): its queues are the owner's. */
static hook_queue *hook_queue_of(void *ctx, void *handle, int ptsz) {
    uint32_t owner = ptsz ? my_tid : 0;
    hook_queue **recent = &recent_queues[((((uintptr_t)handle >> 4) * 0x9E3779B97F4A7C15ull) >> 58 ^ (unsigned)ptsz) &
                                         (RECENT_QUEUES - 1)];
    hook_queue *q = *recent;
    if (q && hook_queue_is(q, ctx, handle, ptsz, owner)) return q;
    int n = atomic_load_explicit(&n_hook_queues, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (hook_queue_is(hook_queue_at(i), ctx, handle, ptsz, owner)) return *recent = hook_queue_at(i);
    pthread_mutex_lock(&hook_table_lock);
    q = NULL;
    n = atomic_load(&n_hook_queues);
    for (int i = 0; i < n && !q; i++)
        if (hook_queue_is(hook_queue_at(i), ctx, handle, ptsz, owner)) q = hook_queue_at(i);
    uint32_t id = 0, device = current_device();
    hook_queue *reused = q || n < HOOK_STREAMS ? NULL : hook_queue_reusable(n);
    if (!q && (n < HOOK_STREAMS || reused) && api.stream_id &&
        api.stream_id(ctx, handle, (uint8_t)ptsz, &id) == NT_CUPTI_SUCCESS) {
        if (reused) {  /* its ring and counters stay; the key is written last, the context after the rest */
            q = reused;
            q->handle = handle, q->ptsz = ptsz, q->owner = owner, q->cupti_stream = id, q->device = device;
            __atomic_store_n(&q->ctx, ctx, __ATOMIC_RELEASE);
        } else {
            q = hook_queue_new(n, ctx, handle, ptsz, owner, id, device);
        }
    }
    pthread_mutex_unlock(&hook_table_lock);
    return q ? (*recent = q) : NULL;
}

/* preload.c, at a launch hook's entry (not for a launch being captured into a graph): the entry. */
void *neutrino_timeline_launch_enter(void *func, void *stream, int ptsz, const unsigned dims[6]) {
    if (!atomic_load_explicit(&hooks_on, memory_order_relaxed)) return NULL;
    static CUresult_ctx_t get_ctx;
    if (!get_ctx) get_ctx = (CUresult_ctx_t)neutrino_real_sym("cuCtxGetCurrent");
    void *ctx = NULL;
    if (!get_ctx || get_ctx(&ctx) != 0 || !ctx) return NULL;
    /* one key per stream: CU_STREAM_LEGACY (0x1) and CU_STREAM_PER_THREAD (0x2) are the NULL stream of either
     * kind, and `ptsz` (the per-thread default stream) matters only for the NULL stream */
    ptsz = (uintptr_t)stream == 2 || (stream == NULL && ptsz);
    stream = (uintptr_t)stream <= 2 ? NULL : stream;
    if (!my_tid) my_tid = (uint32_t)syscall(SYS_gettid);
    hook_queue *q = hook_queue_of(ctx, stream, ptsz);
    if (!q) return NULL;
    pthread_mutex_lock(&q->lock);
    if (q->tail - q->head == q->mask + 1) q->head++;  /* the oldest never got its record: overwritten */
    hook_entry *e = &q->ring[q->tail++ & q->mask];
    e->ticks = host_ticks();
    e->token = 0;
    e->func = func;
    e->tid = my_tid;
    for (int d = 0; d < 3; d++) e->grid[d] = dims[d], e->block[d] = dims[3 + d];
    atomic_store_explicit(&e->dead, 0, memory_order_relaxed);
    e->taken = 0;
    pthread_mutex_unlock(&q->lock);
    counts[N_HOOKED]++;  /* racy on purpose: a statistic */
    return current_entry = e;
}

/* preload.c, after the launch: a failed one leaves no record, its entry is passed over. */
void neutrino_timeline_launch_exit(void *entry, int rc) {
    kernel_launch_end();
    if (!entry) return;
    if (rc != 0) atomic_store_explicit(&((hook_entry *)entry)->dead, 1, memory_order_relaxed);
    current_entry = NULL;
}

/* The name of a launched function (cuFuncGetName, once each); NULL when the driver cannot say. */
static const char *hook_func_name(void *func) {
    static struct { void *func; const char *name; } cache[4096];
    static int (*get_name)(const char **, void *);
    static int looked;
    if (!looked) get_name = (int (*)(const char **, void *))neutrino_real_sym("cuFuncGetName"), looked = 1;
    unsigned i = (unsigned)(((uintptr_t)func >> 4) * 2654435761u) & 4095;
    if (cache[i].func == func) return cache[i].name;
    const char *name = NULL;
    if (!get_name || get_name(&name, func) != 0) name = NULL;
    cache[i].func = func;
    cache[i].name = name;
    return name;
}

static int hook_entry_fits(hook_entry *e, const nt_timeline_record *r, const char *name) {
    if (e->taken || atomic_load_explicit(&e->dead, memory_order_relaxed)) return 0;
    for (int d = 0; d < 3; d++)
        if (e->grid[d] != r->grid[d] || e->block[d] != r->block[d]) return 0;
    if (e->token || !name) return 1;  /* a probed launch runs its instrumented copy: no name check (nor with
                                         name NULL: the second try of hook_first_fit) */
    const char *theirs = hook_func_name(e->func);
    return !theirs || !strcmp(theirs, name);
}

/* Under q->lock: the oldest entry moves past the taken and dead ones, and past live ones overtaken by
 * HOOK_OVERTAKEN taken entries after them (or all, `all`: the stop), which are counted given up. */
static void hook_queue_advance(hook_queue *q, uint64_t last_taken, int all) {
    while (q->head < q->tail) {
        hook_entry *e = &q->ring[q->head & q->mask];
        int gone = e->taken || atomic_load_explicit(&e->dead, memory_order_relaxed);
        if (!gone && !all && (q->head > last_taken || last_taken - q->head < HOOK_OVERTAKEN)) break;
        if (!gone) counts[N_HOOK_SKIPPED]++;
        q->head++;
    }
}

/* The first entry in [from, to) of queue q that fits the record, or `to`; when none has its name too, the
 * first of its grid and block (the driver may name a function otherwise than CUPTI's record does). */
static uint64_t hook_first_fit(hook_queue *q, uint64_t from, uint64_t to, const nt_timeline_record *r, const char *name) {
    uint64_t at = from;
    while (at < to && !hook_entry_fits(&q->ring[at & q->mask], r, name)) at++;
    if (at < to || !name) return at;
    for (at = from; at < to && !hook_entry_fits(&q->ring[at & q->mask], r, NULL);) at++;
    return at;
}

/* The record's entry in queue q, within HOOK_WINDOW of the oldest not taken: the first that fits between
 * the taken entries of lower and of higher correlation ids (a stream's launch order is its correlation
 * order, so a record that came out of order goes back to its place), else the first that fits. */
static int join_from_queue(hook_queue *q, nt_timeline_record *r, const char *name) {
    pthread_mutex_lock(&q->lock);
    uint64_t end = q->tail - q->head > HOOK_WINDOW ? q->head + HOOK_WINDOW : q->tail, lo = q->head, hi = end;
    uint32_t corr = (uint32_t)r->correlation;
    for (uint64_t i = q->head; corr && i < end && i <= q->last_taken; i++) {
        hook_entry *e = &q->ring[i & q->mask];
        if (!e->taken) continue;
        if (e->corr < corr) lo = i + 1;
        else if (hi == end) hi = i;
    }
    uint64_t at = hi >= lo ? hook_first_fit(q, lo, hi, r, name) : hi;
    if (at >= hi || hi < lo) at = hook_first_fit(q, q->head, end, r, name);
    int found = at < end;
    if (found) {
        hook_entry *e = &q->ring[at & q->mask];
        r->tid = e->tid;
        r->host_ns = ticks_to_ns(e->ticks);
        uint64_t token = __atomic_load_n(&e->token, __ATOMIC_ACQUIRE);
        if (token) note_token(corr, token);
        e->taken = 1;
        e->corr = corr;
        if (at > q->last_taken || q->last_taken < q->head) q->last_taken = at;
        counts[N_HOOK_MATCHED]++;
        hook_queue_advance(q, q->last_taken, 0);
    }
    pthread_mutex_unlock(&q->lock);
    return found;
}

/* At the stop: the entries no record took are given up (counted). */
static void hook_queues_close(void) {
    int n = atomic_load_explicit(&n_hook_queues, memory_order_acquire);
    for (int i = 0; i < n; i++) {
        hook_queue *q = hook_queue_at(i);
        pthread_mutex_lock(&q->lock);
        hook_queue_advance(q, 0, 1);
        pthread_mutex_unlock(&q->lock);
    }
}

/* Under tl_lock: the record's thread, host time and probed token from its launch hook's entry (the queues
 * of its CUPTI stream id: one, unless a queue was retired while its stream lived on, e.g. every queue at a
 * primary context's release, and the stream's next launch made another; the older queue holds the older
 * launches, so the queues are tried in table order). The scan starts at the first queue of that id found
 * last time (a direct-mapped cache, the buffer thread's alone), and a queue before it given the id since
 * (a full table's reuse) is tried last. Not at the queue that joined last: tried first, it would give a
 * record of an older launch a newer launch's entry of the same kernel. */
static void join_launch_hook(nt_timeline_record *r, const char *name) {
    if (!(level & L_HOOKS)) return;
    static int first_queue_of_stream[256];  /* (CUPTI stream id, device) hashed -> first queue index + 1; 0: none */
    int n = atomic_load_explicit(&n_hook_queues, memory_order_acquire);
    int *cached = &first_queue_of_stream[(r->stream + 37 * r->device) & 255];
    int from = *cached > 0 && *cached <= n && hook_queue_at(*cached - 1)->cupti_stream == r->stream &&
               hook_queue_at(*cached - 1)->device == r->device ? *cached - 1 : 0;
    int first = -1;
    for (int i = from; i < n; i++) {
        hook_queue *q = hook_queue_at(i);
        if (q->cupti_stream != r->stream || q->device != r->device) continue;
        if (first < 0) *cached = (first = i) + 1;
        if (join_from_queue(q, r, name)) return;
    }
    for (int i = 0; i < from; i++)  /* a queue before it given the id since (a full table's reuse) */
        if (hook_queue_at(i)->cupti_stream == r->stream && hook_queue_at(i)->device == r->device &&
            join_from_queue(hook_queue_at(i), r, name))
            return;
}

static char run_dir_kept[4096];

static int open_outputs(const char *run_dir) {
    char path[4096 + 32];
    snprintf(run_dir_kept, sizeof run_dir_kept, "%s", run_dir);
    snprintf(path, sizeof path, "%s/timeline.bin", run_dir);
    timeline_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    snprintf(path, sizeof path, "%s/timeline_names.txt", run_dir);
    names_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (timeline_fd < 0 || names_fd < 0) return -1;
    unsigned char header[16] = {'N', 'T', 'T', 'I', 'M', 'E', 'L', '1'};
    nt_wr32(header, 8, 1);
    nt_wr32(header, 12, sizeof(nt_timeline_record));
    return write(timeline_fd, header, sizeof header) == (ssize_t)sizeof header ? 0 : -1;
}

/* External-correlation records can come after their kernel's record was written (CUPTI buffers
 * them apart), and a record can be written before the writer numbered its launch: at stop, kernel
 * records not flagged yet (or flagged with no probe_launch) whose correlation is a probed launch's
 * get their flag and probe_launch in place. One pass over the file. */
static void mark_late_probed(const char *run_dir) {
    char path[4096 + 32];
    snprintf(path, sizeof path, "%s/timeline.bin", run_dir);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return;
    enum { CHUNK = 4096 };
    static nt_timeline_record chunk[CHUNK];
    off_t at = 16;
    for (;;) {
        ssize_t got = pread(fd, chunk, sizeof chunk, at);
        if (got < (ssize_t)sizeof *chunk) break;
        size_t n = (size_t)got / sizeof *chunk;
        int changed = 0;
        for (size_t i = 0; i < n; i++) {
            nt_timeline_record *r = &chunk[i];
            /* a record flagged before the writer numbered its launch has no probe_launch yet: again */
            if (r->kind != 1 || ((r->flags & 1) && r->probe_launch >= 0)) continue;
            uint64_t token = find_token((uint32_t)r->correlation);
            if (!token) continue;
            counts[N_PROBED] += !(r->flags & 1);
            r->flags |= 1;
            r->probe_launch = probe_launch_of(token);
            changed = 1;
        }
        if (changed && pwrite(fd, chunk, n * sizeof *chunk, at) != (ssize_t)(n * sizeof *chunk)) break;
        at += (off_t)(n * sizeof *chunk);
    }
    close(fd);
}

static void close_outputs(void) {
    if (timeline_fd >= 0) close(timeline_fd);
    if (names_fd >= 0) close(names_fd);
    timeline_fd = names_fd = -1;
}

/* ------------------------------------------------------------------ CUPTI's own settings */

/* What CUPTI itself can be told, for measuring its cost per kernel (benchmarks/timeline_cost.py --knobs):
 * each from its NEUTRINO_TIMELINE_* variable, none set by default (CUPTI's defaults stand; spec/runtime.md,
 * "CUPTI settings"). Attributes are set before our buffer callbacks are registered and our kinds enabled,
 * and read back for the `timeline` event. */
static int kernel_kind = NT_ACT_CONCURRENT_KERNEL;  /* NEUTRINO_TIMELINE_KERNEL_RECORDS=serial: KERNEL */
static const struct { const char *env, *name; int attr, is_size; } ATTR_SETTINGS[] = {
    {"NEUTRINO_TIMELINE_DEVICE_BUFFER_BYTES", "device_buffer_bytes", NT_ATTR_DEVICE_BUFFER_SIZE, 1},
    {"NEUTRINO_TIMELINE_DEVICE_BUFFERS", "device_buffers_preallocated", NT_ATTR_DEVICE_BUFFER_PRE_ALLOCATE_VALUE, 1},
    {"NEUTRINO_TIMELINE_DEVICE_BUFFER_LIMIT", "device_buffer_limit", NT_ATTR_DEVICE_BUFFER_POOL_LIMIT, 1},
    {"NEUTRINO_TIMELINE_HOST_PINNED", "host_pinned", NT_ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED, 0},
    {"NEUTRINO_TIMELINE_PER_THREAD_BUFFERS", "per_thread_buffers", NT_ATTR_PER_THREAD_ACTIVITY_BUFFER, 0},
    {"NEUTRINO_TIMELINE_ZEROED_BUFFERS", "zeroed_buffers", NT_ATTR_ZEROED_OUT_ACTIVITY_BUFFER, 0},
};

/* The unsigned number in variable `env`: 1 when set and well formed, 0 unset, -1 not a number. */
static int env_number(const char *env, unsigned long long *value) {
    const char *s = getenv(env);
    if (!s || !*s) return 0;
    char *end = NULL;
    *value = strtoull(s, &end, 10);
    return *end || *s == '-' ? -1 : 1;
}

/* One attribute: set from its variable when given, then read back; `name=value`, `name=error:N` (CUPTI's error
 * setting or reading it) or `name=bad:TEXT` (the variable is not a number) appended to info. */
static int apply_attribute(unsigned i, char *info, int len) {
    unsigned long long want = 0;
    int given = env_number(ATTR_SETTINGS[i].env, &want);
    if (given < 0) return snprintf(info, len, " %s=bad:%s", ATTR_SETTINGS[i].name, getenv(ATTR_SETTINGS[i].env));
    size_t as_size = (size_t)want, size = ATTR_SETTINGS[i].is_size ? sizeof(size_t) : 1;
    uint8_t as_byte = want != 0;
    void *value = ATTR_SETTINGS[i].is_size ? (void *)&as_size : (void *)&as_byte;
    if (ATTR_SETTINGS[i].attr == NT_ATTR_ZEROED_OUT_ACTIVITY_BUFFER && given) zeroed_buffers = as_byte;
    CUptiResult rc = given && api.set_attribute ? api.set_attribute(ATTR_SETTINGS[i].attr, &size, value) : 0;
    if (rc == NT_CUPTI_SUCCESS) {
        as_size = 0, as_byte = 0, size = ATTR_SETTINGS[i].is_size ? sizeof(size_t) : 1;
        rc = api.get_attribute ? api.get_attribute(ATTR_SETTINGS[i].attr, &size, value) : 1;
    }
    if (rc != NT_CUPTI_SUCCESS) return snprintf(info, len, " %s=error:%d", ATTR_SETTINGS[i].name, rc);
    return snprintf(info, len, " %s=%llu", ATTR_SETTINGS[i].name,
                    ATTR_SETTINGS[i].is_size ? (unsigned long long)as_size : (unsigned long long)as_byte);
}

/* Every setting (before cuptiActivityRegisterCallbacks): the `cupti_settings` line of info. */
static int apply_cupti_settings(char *info, int len) {
    int n = snprintf(info, len, "\ncupti_settings\t");
    const char *serial = getenv("NEUTRINO_TIMELINE_KERNEL_RECORDS");
    kernel_kind = serial && !strcmp(serial, "serial") ? NT_ACT_KERNEL : NT_ACT_CONCURRENT_KERNEL;
    if (n < len) n += snprintf(info + n, len - n, "kernel_records=%s", kernel_kind == NT_ACT_KERNEL ? "serial" : "concurrent");
    unsigned long long v = 0;
    if (env_number("NEUTRINO_TIMELINE_BUFFER_BYTES", &v) > 0)  /* 64 KiB to 1 GiB, a multiple of 8 */
        host_buffer_bytes = (size_t)(v < (64u << 10) ? (64u << 10) : v > (1u << 30) ? (1u << 30) : v) & ~(size_t)7;
    if (n < len) n += snprintf(info + n, len - n, " host_buffer_bytes=%zu", host_buffer_bytes);
    for (unsigned i = 0; i < sizeof ATTR_SETTINGS / sizeof *ATTR_SETTINGS && n < len; i++)
        n += apply_attribute(i, info + n, len - n);
    if (env_number("NEUTRINO_TIMELINE_HW_TRACE", &v) > 0 && v && n < len) {  /* Blackwell only (CUPTI 13.0) */
        CUptiResult rc = api.enable_hw_trace ? api.enable_hw_trace(1) : -1;
        n += rc == NT_CUPTI_SUCCESS ? snprintf(info + n, len - n, " hw_trace=on")
                                    : snprintf(info + n, len - n, " hw_trace=error:%d", rc);
    }
    if (env_number("NEUTRINO_TIMELINE_FLUSH_PERIOD_MS", &v) > 0 && n < len) {
        CUptiResult rc = api.flush_period ? api.flush_period((uint32_t)v) : -1;
        n += rc == NT_CUPTI_SUCCESS ? snprintf(info + n, len - n, " flush_period_ms=%llu", v)
                                    : snprintf(info + n, len - n, " flush_period_ms=error:%d", rc);
    }
    return n < len ? n : len;
}

/* Sampled graph replays: GRAPH_TRACE on from the start (before the program instantiates any graph), each
 * executable graph's first replays switch it off; without it, every replay node by node. The `graph_records`
 * line of info: nodes, sampled:N or graphs. */
static int start_graph_mode(char *info, int len) {
    if (graph_mode == GM_QUIET) {  /* GRAPH_TRACE never on: no graph pays for an instantiation with it */
        graph_mode_started = graph_mode;
        atomic_store(&graphs_paused, 0);
        atomic_store(&kernels_quiet, 0);
        int n = len > 0 ? snprintf(info, len, "\ngraph_records\tquiet:%u:%u", graph_node_replays, graph_every) : 0;
        return n < len ? n : (len > 0 ? len : 0);
    }
    if (graph_mode == GM_SAMPLED) {
        if (api.enable(NT_ACT_GRAPH_TRACE) == NT_CUPTI_SUCCESS) our_kinds[NT_ACT_GRAPH_TRACE] = 1, graph_trace_on = 1;
        else graph_mode = GM_NODES;
    }
    if (graph_mode == GM_GRAPHS && !our_kinds[NT_ACT_GRAPH_TRACE]) graph_mode = GM_NODES;  /* refused */
    graph_mode_started = graph_mode;
    atomic_store(&graphs_paused, 0);
    if (len <= 0) return 0;
    int n = graph_mode == GM_SAMPLED ? snprintf(info, len, "\tgraph_trace\ngraph_records\tsampled:%u", graph_node_replays)
                                     : snprintf(info, len, "\ngraph_records\t%s", graph_mode == GM_GRAPHS ? "graphs" : "nodes");
    return n < len ? n : len;
}

static const struct { int kind; const char *name; int required, level; } OUR_KINDS[] = {
    {NT_ACT_CONCURRENT_KERNEL, "concurrent_kernel", 1, 0}, {NT_ACT_MEMCPY, "memcpy", 0, L_COPIES},
    {NT_ACT_MEMSET, "memset", 0, L_COPIES}, {NT_ACT_MEMCPY2, "memcpy_peer", 0, L_COPIES},
    {NT_ACT_EXTERNAL_CORRELATION, "external_correlation", 0, L_EXT},
    {NT_ACT_GRAPH_TRACE, "graph_trace", 0, L_GRAPHS},
};

/* Start recording into run_dir/timeline.bin. 0 on success; `info` gets tab-separated
 * key/value lines (library, version, kinds, clock_offset_ns) or, on failure, `reason`. */
int neutrino_timeline_start(const char *run_dir, const char *path, char *info, int info_len) {
    init_rdlsym();
    if (atomic_load(&recording)) return snprintf(info, info_len, "reason\tthe timeline is already on\n"), -1;
    lib = open_cupti(path);
    if (!lib) return snprintf(info, info_len, "reason\tcannot load libcupti: %s\n", dlerror()), -1;
    if (!resolve_api()) return snprintf(info, info_len, "reason\tlibcupti lacks the Activity API functions\n"), -1;
    uint32_t version = 0;
    api.get_version(&version);
    Dl_info where = {0};
    dladdr((void *)api.enable, &where);
    if (open_outputs(run_dir) != 0) {
        close_outputs();
        return snprintf(info, info_len, "reason\tcannot write %s/timeline.bin\n", run_dir), -1;
    }
    if (api.set_thread_id_type) api.set_thread_id_type(NT_THREAD_ID_TYPE_SYSTEM);
    char settings[1024];
    apply_cupti_settings(settings, sizeof settings);
    CUptiResult rc = api.register_callbacks(buffer_requested, buffer_completed);
    if (rc != NT_CUPTI_SUCCESS) {
        close_outputs();
        return snprintf(info, info_len, "reason\tcuptiActivityRegisterCallbacks failed (CUPTI error %d)\n", rc), -1;
    }
    atomic_store(&multiplexing, 1);
    int n = snprintf(info, info_len, "library\t%s\nversion\t%u%s\nkinds", where.dli_fname ? where.dli_fname : "?",
                     version, settings);
    read_level();
    read_graph_mode();
    for (unsigned i = 0; i < sizeof OUR_KINDS / sizeof *OUR_KINDS; i++) {
        if (OUR_KINDS[i].level && !(level & OUR_KINDS[i].level)) continue;
        int kind = OUR_KINDS[i].kind == NT_ACT_CONCURRENT_KERNEL ? kernel_kind : OUR_KINDS[i].kind;
        rc = api.enable(kind);
        if (rc == NT_CUPTI_SUCCESS) our_kinds[kind] = 1;
        else if (OUR_KINDS[i].required) {
            close_outputs();
            atomic_store(&multiplexing, 0);  /* the program's own profiler talks to CUPTI directly again */
            return snprintf(info, info_len, "reason\tcuptiActivityEnable(%s) failed (CUPTI error %d)\n",
                            kind == NT_ACT_KERNEL ? "KERNEL" : "CONCURRENT_KERNEL", rc), -1;
        }
        if (rc == NT_CUPTI_SUCCESS && n < info_len)
            n += snprintf(info + n, info_len - n, "\t%s", kind == NT_ACT_KERNEL ? "kernel" : OUR_KINDS[i].name);
    }
    n += start_graph_mode(info + n, info_len - n);
    unsigned api_cbids = enable_api_records();
    if (n < info_len) n += snprintf(info + n, info_len - n, "\napi_records\t%u\nlevel\t%d", api_cbids, level);
    if (level & (L_HOST | L_HOOKS)) {
        use_tsc = tsc_is_invariant();
        tsc_pair(&tsc_first.ticks, &tsc_first.ns);
        tsc_last = tsc_first;
    }
    if ((level & L_HOOKS) && !api.stream_id) level &= ~L_HOOKS;  /* no stream ids to join by: callbacks */
    atomic_store(&hooks_on, (level & L_HOOKS) != 0);
    if (level & L_HOST) {
        const char *share = getenv("NEUTRINO_TIMELINE_SHARE_SUBSCRIBER");
        share_subscriber = !(share && !strcmp(share, "0"));
        unsigned host_cbids = 0;
        pthread_mutex_lock(&sub_lock);
        CUptiResult hrc = subscribe_ours(&host_cbids);
        pthread_mutex_unlock(&sub_lock);
        if (n < info_len)
            n += hrc == NT_CUPTI_SUCCESS ? snprintf(info + n, info_len - n, "\nhost_callbacks\t%u\nhost_clock\t%s",
                                                    host_cbids, use_tsc ? "tsc" : "clock_gettime")
                                         : snprintf(info + n, info_len - n, "\nhost_error\t%d", hrc);
    }
    uint64_t cupti_ns = 0, before = realtime_ns();
    if (api.get_timestamp) api.get_timestamp(&cupti_ns);
    uint64_t after = realtime_ns();
    if (n < info_len)
        snprintf(info + n, info_len - n, "\nclock_offset_ns\t%lld\n",
                 cupti_ns ? (long long)(cupti_ns - (before / 2 + after / 2)) : 0LL);
    atomic_store(&recording, 1);
    return 0;
}

/* Flush CUPTI, write what is left, close the files; out_counts[] gets the N_COUNTS counters (their
 * order: the enum above; neutrino/runtime/context_tables/cupti.py names them). */
void neutrino_timeline_stop(uint64_t *out_counts, int n) {
    atomic_store(&hooks_on, 0);
    atomic_store(&graphs_paused, 1);  /* no GRAPH_TRACE switch while our kinds are disabled */
    if (atomic_load(&recording)) {
        pthread_mutex_lock(&quiet_lock);  /* no replay goes quiet now (graphs_paused); our kinds go off below */
        atomic_store(&kernels_quiet, 0);
        pthread_mutex_unlock(&quiet_lock);
        write_graph_tallies(run_dir_kept);
        api.flush_all(NT_ACTIVITY_FLAG_FLUSH_FORCED);
        for (int kind = 0; kind < KINDS; kind++) {
            pthread_mutex_lock(&their_lock);
            int theirs = their_enabled[kind], ours = our_kinds[kind];
            our_kinds[kind] = 0;
            pthread_mutex_unlock(&their_lock);
            if (ours && !theirs) api.disable(kind);
        }
        atomic_store(&graph_trace_on, 0);
        api.flush_all(NT_ACTIVITY_FLAG_FLUSH_FORCED);
        pthread_mutex_lock(&sub_lock);
        unsubscribe_ours();
        pthread_mutex_unlock(&sub_lock);
        pthread_mutex_lock(&tl_lock);
        release_pending(1);
        flush_out();
        close_outputs();
        mark_late_probed(run_dir_kept);
        hook_queues_close();
        atomic_store(&recording, 0);
        pthread_mutex_unlock(&tl_lock);
    }
    pthread_mutex_lock(&tl_lock);
    for (int i = 0; i < n && i < N_COUNTS; i++) out_counts[i] = counts[i];
    pthread_mutex_unlock(&tl_lock);
}

/* Pause (1) or resume (0) the recording: our activity kinds (those the program has not enabled), our
 * launch hooks and launch callbacks off, then on again; records of the paused window are not written.
 * For measuring the timeline's cost inside one process (benchmarks/timeline_cost.py --ab), more
 * ways to record: 2, CUPTI's launch callbacks instead of the launch hooks (the level `copies,host`);
 * 3, the records without host times (no hooks, no callbacks); 4, the launch hooks without callbacks
 * (the copies' host times left out); 5, every graph replay node by node (NEUTRINO_TIMELINE_GRAPH_NODES=all).
 * Returns the kinds switched. */
int neutrino_timeline_pause(int how) {
    if (!atomic_load(&recording)) return -1;
    static int configured = -1, configured_graphs = -1;
    if (configured < 0) configured = level, configured_graphs = graph_mode;
    graph_mode = how == 5 ? GM_NODES : configured_graphs;
    int paused = how == 1;
    level = how == 2   ? (configured & ~L_HOOKS) | L_HOST
            : how == 3 ? configured & ~(L_HOOKS | L_HOST)
            : how == 4 ? (configured & ~L_HOST) | L_HOOKS
                       : configured;
    int switched = 0;
    atomic_store(&hooks_on, !paused && (level & L_HOOKS));
    pthread_mutex_lock(&graph_trace_lock);  /* GRAPH_TRACE follows our kinds below: on again after a pause */
    pthread_mutex_lock(&quiet_lock);  /* kernel records too: a quiet replay's switch is undone by the loop below */
    atomic_store(&graphs_paused, paused);
    atomic_store(&kernels_quiet, 0);
    for (int kind = 0; kind < KINDS; kind++) {
        pthread_mutex_lock(&their_lock);
        int ours = our_kinds[kind], theirs = their_enabled[kind];
        pthread_mutex_unlock(&their_lock);
        if (!ours || theirs) continue;
        int done = (paused ? api.disable(kind) : api.enable(kind)) == NT_CUPTI_SUCCESS;
        if (done && kind == NT_ACT_GRAPH_TRACE) atomic_store(&graph_trace_on, !paused);
        switched += done;
    }
    if (!paused && graph_mode == GM_NODES && atomic_load(&graph_trace_on) && !their_enabled[NT_ACT_GRAPH_TRACE] &&
        api.disable(NT_ACT_GRAPH_TRACE) == NT_CUPTI_SUCCESS)  /* way 5: no replay recorded whole */
        atomic_store(&graph_trace_on, 0);
    pthread_mutex_unlock(&quiet_lock);
    pthread_mutex_unlock(&graph_trace_lock);
    pthread_mutex_lock(&sub_lock);
    if (our_subscriber) {
        for (int d = 1; d < CB_DOMAINS; d++)
            for (uint32_t id = 0; id < CB_IDS; id++)
                if (our_cb[d][id] && !their_cb[d][id]) api.enable_callback(0, our_subscriber, d, id);
        memset(our_cb, 0, sizeof our_cb);
        if (!paused && (level & L_HOST)) enable_ours();
    }
    pthread_mutex_unlock(&sub_lock);
    return switched;
}

/* ------------------------------------------------------------------ probed launches */

/* Around the launch of a probed kernel (fastlaunch.c, and Python's launch path through ctypes): a token
 * that marks its record probed, through our launch callback at the driver launch's entry (level `host`,
 * subscribed: exact and free) and/or an external correlation id (level `ext`). */
static __thread int ext_pushed;

uint64_t neutrino_timeline_begin_probed(void) {
    if (!atomic_load_explicit(&recording, memory_order_relaxed)) return 0;
    hook_entry *entry = (level & L_HOOKS) ? current_entry : NULL;
    int by_callback = !entry && !(level & L_HOOKS) && (level & L_HOST) && our_subscriber != NULL;
    int by_ext = (level & L_EXT) && api.push_external;
    if (!entry && !by_callback && !by_ext) return 0;
    uint64_t token = atomic_fetch_add(&next_token, 1) + 1;
    ext_pushed = by_ext && api.push_external(NT_EXT_CORRELATION_KIND, token) == NT_CUPTI_SUCCESS;
    if (!entry && !by_callback && !ext_pushed) return 0;
    if (entry) __atomic_store_n(&entry->token, token, __ATOMIC_RELEASE);  /* before the driver sees the launch */
    pending_token = by_callback ? token : 0;
    thread_token = token;
    return token;
}

/* Whether a probed launch made now by this thread gets a kernel record flagged with its launch (what
 * neutrino_timeline_begin_probed would do, without doing it): the fast path then times it by that record and
 * records no timing events (fastlaunch.c, --time-every's default). */
int neutrino_timeline_flags_probed(void) {
    if (!atomic_load_explicit(&recording, memory_order_relaxed) || atomic_load_explicit(&graphs_paused, memory_order_relaxed))
        return 0;
    if (!our_kinds[NT_ACT_CONCURRENT_KERNEL] && !our_kinds[NT_ACT_KERNEL]) return 0;
    if ((level & L_HOOKS) && current_entry) return 1;
    if (!(level & L_HOOKS) && (level & L_HOST) && our_subscriber != NULL) return 1;
    return (level & L_EXT) && api.push_external;
}

void neutrino_timeline_end_probed(uint64_t token) {
    if (!token) return;
    pending_token = 0;  /* the launch did not reach the driver (or was noted): nothing else gets it */
    if (!ext_pushed || !api.pop_external) return;
    ext_pushed = 0;
    uint64_t last = 0;
    api.pop_external(NT_EXT_CORRELATION_KIND, &last);
}

/* The probed launch `token` marked never ran (the driver refused the instrumented copy; the original may run in
 * its place, through the same launch hook): its entry gives the token back, so the record of what did run is
 * not flagged probed (with CUPTI's callbacks end_probed alone does this: the token waits in pending_token). */
void neutrino_timeline_cancel_probed(uint64_t token) {
    hook_entry *entry = current_entry;
    if (token && entry) __atomic_compare_exchange_n(&entry->token, &token, 0, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
    if (token && thread_token == token) thread_token = 0;
}

/* The result writer numbered this thread's probed launch: `seq` (writer.c). */
void neutrino_timeline_note_submit(uint64_t seq) {
    uint64_t token = thread_token;
    if (!token || !seq) return;
    thread_token = 0;
    pthread_mutex_lock(&seq_lock);
    unsigned i = token & ((1u << PROBE_BITS) - 1);
    seq_of[i].token = token;
    seq_of[i].seq = seq;
    pthread_mutex_unlock(&seq_lock);
}

/* ------------------------------------------------------------------ the program's CUPTI calls */

/* The library's own function `name`: from the libcupti in use, or the one the program loaded. */
static void *real_cupti(const char *name) {
    init_rdlsym();
    void *h = lib ? lib : open_cupti(NULL);
    void *p = h ? rdlsym(h, name) : NULL;
    return p ? p : rdlsym(RTLD_NEXT, name);
}

CUptiResult cuptiActivityRegisterCallbacks(nt_buffer_requested_t requested, nt_buffer_completed_t completed) {
    pthread_mutex_lock(&their_lock);
    their_requested = requested;
    their_completed = completed;
    pthread_mutex_unlock(&their_lock);
    log_call(P_REGISTER, -1);
    if (atomic_load(&multiplexing)) return NT_CUPTI_SUCCESS;  /* ours stay: theirs get copies */
    CUptiResult (*fn)(nt_buffer_requested_t, nt_buffer_completed_t) = real_cupti("cuptiActivityRegisterCallbacks");
    return fn ? fn(requested, completed) : 1 /* CUPTI_ERROR_INVALID_PARAMETER */;
}

CUptiResult cuptiActivityEnable(int kind) {
    CUptiResult (*fn)(int) = real_cupti("cuptiActivityEnable");
    CUptiResult rc = fn ? fn(kind) : 1;
    if (rc == NT_CUPTI_SUCCESS && kind >= 0 && kind < KINDS) {
        pthread_mutex_lock(&their_lock);
        their_enabled[kind] = their_unflushed[kind] = 1;
        pthread_mutex_unlock(&their_lock);
        if (kind == NT_ACT_CONCURRENT_KERNEL || kind == NT_ACT_KERNEL) program_kernel_records(1);
    }
    log_call(P_ENABLE, kind);
    return rc;
}

CUptiResult cuptiActivityDisable(int kind) {
    int keep = 0;
    if (kind >= 0 && kind < KINDS) {
        pthread_mutex_lock(&their_lock);
        their_enabled[kind] = 0;
        keep = our_kinds[kind] && atomic_load(&recording);
        int kernels = their_enabled[NT_ACT_CONCURRENT_KERNEL] || their_enabled[NT_ACT_KERNEL];
        pthread_mutex_unlock(&their_lock);
        if (!kernels) program_kernel_records(0);  /* the next replay past its first ones is recorded whole again */
    }
    log_call(P_DISABLE, kind);
    nt_buffer_requested_t req = their_requested;
    if (atomic_load(&multiplexing) && req) {  /* the program is stopping: let it see a buffer out */
        pthread_mutex_lock(&fwd_lock);
        open_their_buffer(req);
        pthread_mutex_unlock(&fwd_lock);
    }
    if (keep && (kind == NT_ACT_DRIVER || kind == NT_ACT_RUNTIME)) enable_api_records(); /* its Enable undid our selection */
    if (keep) return NT_CUPTI_SUCCESS;  /* still ours: the program gets no more of them */
    CUptiResult (*fn)(int) = real_cupti("cuptiActivityDisable");
    CUptiResult rc = fn ? fn(kind) : 1;
    if ((kind == NT_ACT_DRIVER || kind == NT_ACT_RUNTIME) && atomic_load(&recording)) enable_api_records();
    return rc;
}

CUptiResult cuptiActivityFlushAll(uint32_t flag) {
    /* A forced flush hands out the records of kernels still running with no times, and CUPTI never
     * completes them: while the timeline records, the program's flush takes the completed ones only. */
    if (atomic_load(&recording)) flag &= ~(uint32_t)NT_ACTIVITY_FLAG_FLUSH_FORCED;
    CUptiResult (*fn)(uint32_t) = real_cupti("cuptiActivityFlushAll");
    CUptiResult rc = fn ? fn(flag) : 1;
    if (atomic_load(&multiplexing) && their_completed) {  /* what was copied is the program's now */
        pthread_mutex_lock(&fwd_lock);
        complete_their_buffer(their_completed);
        pthread_mutex_unlock(&fwd_lock);
    }
    pthread_mutex_lock(&their_lock);
    memcpy(their_unflushed, their_enabled, sizeof their_unflushed);
    pthread_mutex_unlock(&their_lock);
    log_call(P_FLUSH, -1);
    return rc;
}

CUptiResult cuptiFinalize(void) {
    log_call(P_FINALIZE, -1);
    if (atomic_load(&multiplexing)) {  /* it would end our timeline too: flush what the program waits for */
        cuptiActivityFlushAll(NT_ACTIVITY_FLAG_FLUSH_FORCED);  /* not forced while we record (above) */
        return NT_CUPTI_SUCCESS;
    }
    CUptiResult (*fn)(void) = real_cupti("cuptiFinalize");
    return fn ? fn() : 1;
}

/* The program subscribes (one subscriber per process): it shares ours (kind 2), or our launch
 * callbacks step aside for its window (kind 1; NEUTRINO_TIMELINE_SHARE_SUBSCRIBER=0); kind 0: we were
 * not subscribed, its call went to CUPTI. */
static CUptiResult step_aside_for(CUptiResult (*call)(void *, void *, void *, void *), void *a, void *b, void *c,
                                  void *d) {
    pthread_mutex_lock(&sub_lock);
    if (our_subscriber && share_subscriber && !(level & L_API_ALL)) {
        CUptiResult rc = NT_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS;
        if (!their_callback && b) {
            memset(their_cb, 0, sizeof their_cb);
            memset(their_whole_domain, 0, sizeof their_whole_domain);
            their_userdata = c;
            their_callback = (nt_callback_t)b;
            *(nt_subscriber_t *)a = THEIR_SUBSCRIBER;
            rc = NT_CUPTI_SUCCESS;
        }
        pthread_mutex_unlock(&sub_lock);
        log_call(P_SUBSCRIBE, 2);
        return rc;
    }
    int aside = our_subscriber != NULL;
    unsubscribe_ours();
    CUptiResult rc = call(a, b, c, d);
    pthread_mutex_unlock(&sub_lock);
    log_call(P_SUBSCRIBE, aside);
    return rc;
}

static CUptiResult call_subscribe(void *sub, void *cb, void *ud, void *unused) {
    (void)unused;
    CUptiResult (*fn)(void *, void *, void *) = real_cupti("cuptiSubscribe");
    return fn ? fn(sub, cb, ud) : 1;
}

static CUptiResult call_subscribe_v2(void *sub, void *cb, void *ud, void *params) {
    CUptiResult (*fn)(void *, void *, void *, void *) = real_cupti("cuptiSubscribe_v2");
    return fn ? fn(sub, cb, ud, params) : 1;
}

CUptiResult cuptiSubscribe(nt_subscriber_t *subscriber, nt_callback_t callback, void *userdata) {
    return step_aside_for(call_subscribe, subscriber, (void *)callback, userdata, NULL);
}

CUptiResult cuptiSubscribe_v2(nt_subscriber_t *subscriber, nt_callback_t callback, void *userdata, void *params) {
    return step_aside_for(call_subscribe_v2, subscriber, (void *)callback, userdata, params);
}

/* The program's enables on the shared subscriber: recorded as theirs and applied to ours (a disable
 * only where we do not need the id). Under sub_lock. */
static CUptiResult their_enable(uint32_t enable, int domain, int first, int last) {
    if (domain <= 0 || domain >= CB_DOMAINS) return 1;
    CUptiResult rc = NT_CUPTI_SUCCESS;
    if (first < 0) {  /* the whole domain */
        CUptiResult (*fn)(uint32_t, nt_subscriber_t, int) = real_cupti("cuptiEnableDomain");
        their_whole_domain[domain] = (uint8_t)!!enable;
        memset(their_cb[domain], !!enable, CB_IDS);
        rc = fn ? fn(enable, our_subscriber, domain) : 1;
        if (!enable) enable_ours();
        return rc;
    }
    for (int id = first; id <= last && id < CB_IDS; id++) {
        their_cb[domain][id] = (uint8_t)!!enable;
        if (enable || !our_cb[domain][id]) rc = api.enable_callback(enable, our_subscriber, domain, (uint32_t)id);
    }
    return rc;
}

static void their_unsubscribe(void) {
    their_callback = NULL;
    for (int d = 1; d < CB_DOMAINS; d++) {
        if (their_whole_domain[d]) their_enable(0, d, -1, -1);
        for (int id = 0; id < CB_IDS; id++)
            if (their_cb[d][id]) their_enable(0, d, id, id);
    }
    if (!atomic_load(&recording)) unsubscribe_ours();
}

CUptiResult cuptiEnableCallback(uint32_t enable, nt_subscriber_t subscriber, int domain, uint32_t cbid) {
    if (subscriber != THEIR_SUBSCRIBER) {
        CUptiResult (*fn)(uint32_t, nt_subscriber_t, int, uint32_t) = real_cupti("cuptiEnableCallback");
        return fn ? fn(enable, subscriber, domain, cbid) : 1;
    }
    pthread_mutex_lock(&sub_lock);
    CUptiResult rc = our_subscriber ? their_enable(enable, domain, (int)cbid, (int)cbid) : 1;
    pthread_mutex_unlock(&sub_lock);
    return rc;
}

CUptiResult cuptiEnableDomain(uint32_t enable, nt_subscriber_t subscriber, int domain) {
    if (subscriber != THEIR_SUBSCRIBER) {
        CUptiResult (*fn)(uint32_t, nt_subscriber_t, int) = real_cupti("cuptiEnableDomain");
        return fn ? fn(enable, subscriber, domain) : 1;
    }
    pthread_mutex_lock(&sub_lock);
    CUptiResult rc = our_subscriber ? their_enable(enable, domain, -1, -1) : 1;
    pthread_mutex_unlock(&sub_lock);
    return rc;
}

CUptiResult cuptiEnableAllDomains(uint32_t enable, nt_subscriber_t subscriber) {
    if (subscriber != THEIR_SUBSCRIBER) {
        CUptiResult (*fn)(uint32_t, nt_subscriber_t) = real_cupti("cuptiEnableAllDomains");
        return fn ? fn(enable, subscriber) : 1;
    }
    pthread_mutex_lock(&sub_lock);
    CUptiResult rc = NT_CUPTI_SUCCESS;
    for (int d = 1; d < CB_DOMAINS && our_subscriber; d++) {
        CUptiResult r = their_enable(enable, d, -1, -1);
        if (d <= NT_CB_DOMAIN_RUNTIME) rc = r;  /* domains this CUPTI lacks may refuse: not an error */
    }
    pthread_mutex_unlock(&sub_lock);
    return rc;
}

CUptiResult cuptiGetCallbackState(uint32_t *enable, nt_subscriber_t subscriber, int domain, uint32_t cbid) {
    if (subscriber != THEIR_SUBSCRIBER) {
        CUptiResult (*fn)(uint32_t *, nt_subscriber_t, int, uint32_t) = real_cupti("cuptiGetCallbackState");
        return fn ? fn(enable, subscriber, domain, cbid) : 1;
    }
    if (!enable) return 1;
    *enable = (uint32_t)theirs_on(domain, cbid);
    return NT_CUPTI_SUCCESS;
}

/* The program's subscriber goes: a shared one is forgotten (kind 2); after a step aside ours comes
 * back while the timeline records (kind 1: it did). */
CUptiResult cuptiUnsubscribe(nt_subscriber_t subscriber) {
    if (subscriber == THEIR_SUBSCRIBER) {
        pthread_mutex_lock(&sub_lock);
        their_unsubscribe();
        pthread_mutex_unlock(&sub_lock);
        log_call(P_UNSUBSCRIBE, 2);
        return NT_CUPTI_SUCCESS;
    }
    CUptiResult (*fn)(nt_subscriber_t) = real_cupti("cuptiUnsubscribe");
    pthread_mutex_lock(&sub_lock);
    CUptiResult rc = fn ? fn(subscriber) : 1;
    int back = subscriber != our_subscriber && atomic_load(&recording) && (level & L_HOST) &&
               subscribe_ours(NULL) == NT_CUPTI_SUCCESS;
    pthread_mutex_unlock(&sub_lock);
    log_call(P_UNSUBSCRIBE, back);
    return rc;
}

/* ------------------------------------------------------------------ the program's clock */

/* cuptiActivityRegisterTimestampCallback: CUPTI then stamps every record, ours too, with the program's
 * clock (Kineto registers its TSC-based one when torch.profiler starts, and keeps it). The program
 * gets it (its profile is in its clock); our records' times in that clock are mapped back to
 * CLOCK_REALTIME by (their clock, realtime) pairs: one at registration, one 2 ms later (the slope),
 * one at each buffer converted. A time is taken to be in their clock when it is nearer their clock's
 * latest value than realtime's (records are from the recent past; the two clocks differ by far more). */
static uint64_t (*their_clock)(void);
static struct { uint64_t theirs, ns; } clock_first, clock_last;
static pthread_mutex_t clock_lock = PTHREAD_MUTEX_INITIALIZER;

static void their_clock_pair(uint64_t *theirs, uint64_t *ns) {
    uint64_t a = realtime_ns();
    *theirs = their_clock();
    uint64_t b = realtime_ns();
    *ns = a + (b - a) / 2;
}

static void their_clock_refresh(void) {
    pthread_mutex_lock(&clock_lock);
    if (their_clock) {
        uint64_t t, ns;
        their_clock_pair(&t, &ns);
        if (t > clock_last.theirs && ns > clock_last.ns) clock_last.theirs = t, clock_last.ns = ns;
    }
    pthread_mutex_unlock(&clock_lock);
}

static uint64_t distance(uint64_t a, uint64_t b) { return a > b ? a - b : b - a; }

static uint64_t gpu_time_ns(uint64_t t) {
    if (!their_clock || !t) return t;
    pthread_mutex_lock(&clock_lock);
    uint64_t out = t;
    if (distance(t, clock_last.ns) > distance(t, clock_last.theirs)) {
        double per_tick = clock_last.theirs > clock_first.theirs ? (double)(clock_last.ns - clock_first.ns) /
                                                                     (double)(clock_last.theirs - clock_first.theirs)
                                                                 : 1.0;
        out = clock_last.ns + (uint64_t)(int64_t)((double)(int64_t)(t - clock_last.theirs) * per_tick);
    }
    pthread_mutex_unlock(&clock_lock);
    return out;
}

/* Before the program's clock replaces CUPTI's: CUPTI converts a kernel's GPU times when it hands the
 * record out, with the clock registered then, and gave no times (start and end 0) to the records of
 * kernels that ran before the change but were still in its buffers (H200, torch.profiler: the kernels
 * of the steps before the profiler started). So the work already launched is waited for (the current
 * context) and every record flushed, forced, in the clock it ran under. NEUTRINO_TIMELINE_CLOCK_FLUSH=0
 * leaves this out (to measure the gap). */
static void flush_before_clock_change(void) {
    const char *env = getenv("NEUTRINO_TIMELINE_CLOCK_FLUSH");
    if (!atomic_load(&recording) || (env && !strcmp(env, "0"))) return;
    int (*sync)(void) = (int (*)(void))neutrino_real_sym("cuCtxSynchronize");
    int synced = sync && sync() == 0;
    api.flush_all(synced ? NT_ACTIVITY_FLAG_FLUSH_FORCED : 0);  /* unsynchronised: completed records only */
    log_call(P_CLOCK_FLUSH, synced);
}

CUptiResult cuptiActivityRegisterTimestampCallback(uint64_t (*fn)(void)) {
    if (fn) flush_before_clock_change();
    CUptiResult (*real)(uint64_t (*)(void)) = real_cupti("cuptiActivityRegisterTimestampCallback");
    CUptiResult rc = real ? real(fn) : 1;
    log_call(P_TIMESTAMP, rc);
    if (rc != NT_CUPTI_SUCCESS || !fn) return rc;
    pthread_mutex_lock(&clock_lock);
    their_clock = fn;
    their_clock_pair(&clock_first.theirs, &clock_first.ns);
    for (uint64_t until = clock_first.ns + 2000000; realtime_ns() < until;) {
    }
    their_clock_pair(&clock_last.theirs, &clock_last.ns);
    pthread_mutex_unlock(&clock_lock);
    return rc;
}

/* dlsym(handle, name) of one of the functions above in a libcupti (preload.c): ours instead. */
void *neutrino_cupti_wrapper_named(const char *name) {
    static const struct { const char *name; void *fn; } wrappers[] = {
        {"cuptiActivityRegisterCallbacks", (void *)cuptiActivityRegisterCallbacks},
        {"cuptiActivityEnable", (void *)cuptiActivityEnable},
        {"cuptiActivityDisable", (void *)cuptiActivityDisable},
        {"cuptiActivityFlushAll", (void *)cuptiActivityFlushAll},
        {"cuptiFinalize", (void *)cuptiFinalize},
        {"cuptiSubscribe", (void *)cuptiSubscribe},
        {"cuptiSubscribe_v2", (void *)cuptiSubscribe_v2},
        {"cuptiUnsubscribe", (void *)cuptiUnsubscribe},
        {"cuptiEnableCallback", (void *)cuptiEnableCallback},
        {"cuptiEnableDomain", (void *)cuptiEnableDomain},
        {"cuptiEnableAllDomains", (void *)cuptiEnableAllDomains},
        {"cuptiGetCallbackState", (void *)cuptiGetCallbackState},
        {"cuptiActivityRegisterTimestampCallback", (void *)cuptiActivityRegisterTimestampCallback},
    };
    for (unsigned i = 0; i < sizeof wrappers / sizeof *wrappers; i++)
        if (!strcmp(name, wrappers[i].name)) return wrappers[i].fn;
    return NULL;
}

/* A fake libcupti.so.13 for CPU-only tests of the timeline (shim/cupti.c).
 *
 * The fake driver (fakecuda.c) reports each launch, copy and memset here (fakecupti_kernel,
 * fakecupti_copy). Each gets a correlation id; with the kinds enabled, this library makes the
 * records CUPTI 13 would, laid out at the offsets of shim/cupti_abi.h: a DRIVER API record
 * (cuLaunchKernel's cbid, the Linux tid) when that cbid is enabled, preceded by an
 * EXTERNAL_CORRELATION record for each id pushed on the launching thread (as CUPTI does), and
 * the GPU record. GPU records and API
 * records sit in two queues, and a flush delivers the GPU queue first: the shim must join
 * records whose API record comes in a later buffer, as real CUPTI's per-thread buffers do.
 *
 * The callback API: one subscriber at a time (a second gets CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
 * a driver-domain callback enabled for the call's cbid is called at its entry and exit with a
 * CUpti_CallbackData laid out at cupti_abi.h's offsets (site, correlation id).
 *
 * FAKECUPTI_DROP=N: report N dropped records once. FAKECUPTI_BUFFER=B: deliver at most B bytes
 * per buffer.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cupti_abi.h"

static nt_buffer_requested_t requested;
static nt_buffer_completed_t completed;
static uint8_t enabled[64];
static uint8_t driver_cbids[1024];
static uint32_t next_corr;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static __thread uint64_t ext_stack[16];
static __thread int ext_depth;

typedef struct { uint8_t *data; size_t len, cap; } queue;
static queue api_q, ext_q;  /* ext_q: FAKECUPTI_EXT_LATE=1 delivers them after everything */
static int drop_reported;

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* cuptiActivityRegisterTimestampCallback: records are stamped with it from then on (as CUPTI does).
 * FAKECUPTI_CLOCK_CUTS=1: the GPU records still queued lose their times (start, end 0), as CUPTI 13 gave
 * the kernels that ran before Kineto registered its clock (it converts GPU times when it hands a
 * record out). */
static uint64_t (*stamp_fn)(void);
static uint64_t stamp(void) { return stamp_fn ? stamp_fn() : now_ns(); }
static queue gpu_q;
static size_t record_size(uint32_t kind);
CUptiResult cuptiActivityRegisterTimestampCallback(uint64_t (*fn)(void)) {
    stamp_fn = fn;
    for (size_t pos = 0; getenv("FAKECUPTI_CLOCK_CUTS") && pos + 4 <= gpu_q.len;) {
        uint8_t *r = gpu_q.data + pos;
        uint32_t kind = nt_rd32(r, 0);
        if (kind == NT_ACT_CONCURRENT_KERNEL) nt_wr64(r, K_START, 0), nt_wr64(r, K_END, 0);
        if (kind == NT_ACT_MEMCPY || kind == NT_ACT_MEMSET) nt_wr64(r, C_START, 0), nt_wr64(r, C_END, 0);
        pos += record_size(kind);
    }
    return 0;
}

static uint8_t *append(queue *q, size_t n) {
    if (q->len + n > q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 65536;
        while (cap < q->len + n) cap *= 2;
        q->data = realloc(q->data, cap);
        q->cap = cap;
    }
    uint8_t *p = q->data + q->len;
    memset(p, 0, n);
    q->len += n;
    return p;
}

static size_t record_size(uint32_t kind) {
    switch (kind) {
    case NT_ACT_CONCURRENT_KERNEL: case NT_ACT_KERNEL: return K_SIZE;
    case NT_ACT_MEMCPY: return MEMCPY_SIZE;
    case NT_ACT_MEMCPY2: return MEMCPY2_SIZE;
    case NT_ACT_MEMSET: return MEMSET_SIZE;
    case NT_ACT_DRIVER: case NT_ACT_RUNTIME: return API_SIZE;
    case NT_ACT_EXTERNAL_CORRELATION: return EXTCORR_SIZE;
    case NT_ACT_GRAPH_TRACE: return GRAPHTRACE_SIZE;
    default: return 0;
    }
}

static nt_callback_t subscriber_fn;
static void *subscriber_data;
static uint8_t callback_on[1024];  /* driver-domain cbids enabled for the subscriber */
static int subscriber_handle;      /* its address is the handle */

static void call_back(uint32_t cbid, uint32_t corr, int site) {
    if (!subscriber_fn || cbid >= 1024 || !callback_on[cbid]) return;
    uint8_t data[CB_DATA_SIZE] = {0};
    nt_wr32(data, CB_SITE, (uint32_t)site);
    nt_wr32(data, CB_CORRELATION, corr);
    subscriber_fn(subscriber_data, NT_CB_DOMAIN_DRIVER, cbid, data);
}

/* API-side records of one call: its API record and the external ids pushed on this thread. */
static uint32_t api_call(uint32_t cbid) {
    uint32_t corr = ++next_corr;
    call_back(cbid, corr, NT_CB_SITE_ENTER);
    call_back(cbid, corr, 1);
    int on = cbid < 1024 && (driver_cbids[cbid] == 1 || (enabled[NT_ACT_DRIVER] && driver_cbids[cbid] != 2));
    for (int i = 0; on && enabled[NT_ACT_EXTERNAL_CORRELATION] && i < ext_depth; i++) {  /* before its API record */
        uint8_t *x = append(getenv("FAKECUPTI_EXT_LATE") ? &ext_q : &api_q, EXTCORR_SIZE);
        nt_wr32(x, 0, NT_ACT_EXTERNAL_CORRELATION);
        nt_wr32(x, X_KIND, NT_EXT_CORRELATION_KIND);
        nt_wr64(x, X_ID, ext_stack[i]);
        nt_wr32(x, X_CORRELATION, corr);
    }
    if (on) {
        uint8_t *a = append(&api_q, API_SIZE);
        nt_wr32(a, 0, NT_ACT_DRIVER);
        nt_wr32(a, A_CBID, cbid);
        nt_wr32(a, A_THREAD, (uint32_t)syscall(SYS_gettid));
        nt_wr32(a, A_CORRELATION, corr);
    }
    return corr;
}

static void kernel_record(const char *name, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                          unsigned bz, unsigned shmem, uintptr_t stream, uint32_t graph_id);

/* The streams fakecuda.c made, newest last, and their ids (13, 14, ...: one per stream made, never reused). */
static struct { uintptr_t handle; uint32_t id; } made_streams[8192];
static unsigned n_made_streams;

void fakecupti_stream_made(void *stream) {
    pthread_mutex_lock(&lock);
    if (n_made_streams < 8192) made_streams[n_made_streams] = (typeof(made_streams[0])){(uintptr_t)stream, 13 + n_made_streams}, n_made_streams++;
    pthread_mutex_unlock(&lock);
}

/* A stream's CUPTI id: the per-thread default stream (CU_STREAM_PER_THREAD, 0x2, or NULL from a _ptsz entry
 * point, which fakecuda.c passes on as 0x2) is one per thread, as the driver's: 1000 + the thread's id; the
 * legacy NULL stream (NULL, CU_STREAM_LEGACY 0x1) 7; a stream made, the id of the newest made at its address;
 * any other 13. */
static uint32_t fake_stream_id(uintptr_t stream, int per_thread) {
    if (stream == 2 || (!stream && per_thread)) return 1000 + (uint32_t)syscall(SYS_gettid);
    if (stream <= 2) return 7;
    for (unsigned i = n_made_streams; i-- > 0;)
        if (made_streams[i].handle == stream) return made_streams[i].id;
    return 13;
}

void fakecupti_kernel(const char *name, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                      unsigned shmem, uintptr_t stream) {
    kernel_record(name, gx, gy, gz, bx, by, bz, shmem, stream, 0);
}

/* The replay being launched on this thread: its cuGraphLaunch call's correlation id (every record of the replay
 * carries it, as CUPTI's do) and whether GRAPH_TRACE was enabled when it was launched (read at the launch, as
 * CUPTI does: switching the kind later changes the next replays only). */
static __thread uint32_t replay_corr;
static int graph_trace_ever;  /* GRAPH_TRACE was enabled once (FAKECUPTI_GRAPH_TRACE_STICKY) */
static __thread int replay_whole;

/* A kernel node of a graph replay (graph_id != 0; its correlation is the cuGraphLaunch's). With GRAPH_TRACE
 * enabled at the replay's launch CUPTI traces no node of it (fakecupti_graph_launch made its one record). */
void fakecupti_graph_kernel(const char *name, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                            unsigned bz, uintptr_t stream, uint32_t graph_id) {
    if (!replay_whole) kernel_record(name, gx, gy, gz, bx, by, bz, 0, stream, graph_id);
}

/* Whether GRAPH_TRACE is enabled now (fakecuda.c asks at each instantiation and graph launch: see there). */
int fakecupti_graph_trace_enabled(void) { return enabled[NT_ACT_GRAPH_TRACE]; }

/* A graph replay's start (fakecuda.c's cuGraphLaunch): one API call (callbacks, correlation id); with GRAPH_TRACE
 * enabled, the replay's one record. */
void fakecupti_graph_launch(uintptr_t stream, uint32_t graph_id) {
    pthread_mutex_lock(&lock);
    uint32_t corr = api_call(514 /* cuGraphLaunch */);
    replay_corr = corr;
    /* FAKECUPTI_GRAPH_TRACE_STICKY=1: once GRAPH_TRACE was enabled, replays stay whole (a CUPTI that decided at
     * instantiation, or never switched back: what the shim's exit check is for) */
    replay_whole = enabled[NT_ACT_GRAPH_TRACE] || (graph_trace_ever && getenv("FAKECUPTI_GRAPH_TRACE_STICKY"));
    if (!replay_whole) {
        pthread_mutex_unlock(&lock);
        return;
    }
    uint8_t *g = append(&gpu_q, GRAPHTRACE_SIZE);
    uint64_t t = stamp();
    nt_wr32(g, 0, NT_ACT_GRAPH_TRACE);
    nt_wr32(g, GT_CORRELATION, corr);
    nt_wr64(g, GT_START, t);
    nt_wr64(g, GT_END, t + 3000);
    nt_wr32(g, GT_GRAPH_ID, graph_id);
    nt_wr32(g, GT_STREAM, fake_stream_id(stream, 0));
    pthread_mutex_unlock(&lock);
}

/* The device of the calling thread's current context (fakecuda.c's cuCtxGetDevice), as CUPTI's deviceId. */
static uint32_t current_device(void) {
    static int (*get_device)(int *);
    if (!get_device) get_device = (int (*)(int *))dlsym(RTLD_DEFAULT, "cuCtxGetDevice");
    int d = 0;
    return get_device && get_device(&d) == 0 ? (uint32_t)d : 0;
}

/* A peer-to-peer copy (fakecuda.c's cuMemcpyPeerAsync): a MEMCPY2 record (CUpti_ActivityMemcpyPtoP4), copy kind
 * PtoP (10), on the calling thread's device and `stream`. */
void fakecupti_peer_copy(uint64_t bytes, uintptr_t stream, uint32_t src_device, uint32_t dst_device) {
    pthread_mutex_lock(&lock);
    uint32_t corr = api_call(319 /* cuMemcpyPeerAsync */);
    if (enabled[NT_ACT_MEMCPY2]) {
        uint8_t *c = append(&gpu_q, MEMCPY2_SIZE);
        uint64_t t = stamp();
        nt_wr32(c, 0, NT_ACT_MEMCPY2);
        c[C_COPY_KIND] = 10;
        nt_wr64(c, C_BYTES, bytes);
        nt_wr64(c, C_START, t);
        nt_wr64(c, C_END, t + 700);
        nt_wr32(c, C_DEVICE, current_device());
        nt_wr32(c, C_STREAM, fake_stream_id(stream, 0));
        nt_wr32(c, P_SRC_DEVICE, src_device);
        nt_wr32(c, P_DST_DEVICE, dst_device);
        nt_wr32(c, P_CORRELATION, corr);
    }
    pthread_mutex_unlock(&lock);
}

static void kernel_record(const char *name, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                          unsigned bz, unsigned shmem, uintptr_t stream, uint32_t graph_id) {
    uint32_t device = current_device();
    pthread_mutex_lock(&lock);
    uint32_t corr = graph_id ? replay_corr : api_call(307 /* cuLaunchKernel */);
    static int launches;  /* FAKECUPTI_SKIP_KERNEL=N: no record of the N-th kernel launch (from 0), as if dropped */
    const char *skip = getenv("FAKECUPTI_SKIP_KERNEL");
    int skipped = !graph_id && skip && *skip && launches == atoi(skip);
    launches += !graph_id;
    int kind = enabled[NT_ACT_CONCURRENT_KERNEL] ? NT_ACT_CONCURRENT_KERNEL : enabled[NT_ACT_KERNEL] ? NT_ACT_KERNEL : 0;
    if (kind && !skipped) {
        uint8_t *k = append(&gpu_q, K_SIZE);
        uint64_t t = stamp();
        unsigned dims[6] = {gx, gy, gz, bx, by, bz};
        nt_wr32(k, 0, (uint32_t)kind);
        nt_wr64(k, K_START, t);
        nt_wr64(k, K_END, t + 1000);
        nt_wr32(k, K_DEVICE, device);
        nt_wr32(k, K_STREAM, fake_stream_id(stream, 0));
        for (int d = 0; d < 3; d++) nt_wr32(k, K_GRID + 4 * d, dims[d]), nt_wr32(k, K_BLOCK + 4 * d, dims[3 + d]);
        nt_wr32(k, K_DYN_SHARED, shmem);
        nt_wr32(k, K_CORRELATION, corr);
        nt_wr32(k, K_GRAPH_ID, graph_id);
        char *copy = strdup(name);  /* CUPTI owns the name; it outlives the buffer */
        memcpy(k + K_NAME, &copy, sizeof copy);
        /* FAKECUPTI_SWAP=1: each second kernel record goes before the one made just before it (adjacent in
         * the queue), as CUPTI handed some of one stream's records over out of launch order */
        static size_t last_pos = SIZE_MAX;
        static int odd;
        size_t pos = (size_t)(k - gpu_q.data);
        if (getenv("FAKECUPTI_SWAP") && odd && last_pos + K_SIZE == pos) {
            uint8_t tmp[K_SIZE];
            memcpy(tmp, gpu_q.data + last_pos, K_SIZE);
            memcpy(gpu_q.data + last_pos, k, K_SIZE);
            memcpy(k, tmp, K_SIZE);
            odd = 0;
        } else {
            odd = 1;
        }
        last_pos = pos;
    }
    pthread_mutex_unlock(&lock);
}

/* kind 1 memcpy (copy_kind 1 HtoD, 2 DtoH), kind 2 memset */
void fakecupti_copy(int kind, int copy_kind, uint64_t bytes) {
    pthread_mutex_lock(&lock);
    uint32_t corr = api_call(kind == NT_ACT_MEMCPY ? 277 : 216);
    if (enabled[kind]) {
        uint8_t *c = append(&gpu_q, kind == NT_ACT_MEMCPY ? MEMCPY_SIZE : MEMSET_SIZE);
        uint64_t t = stamp();
        nt_wr32(c, 0, (uint32_t)kind);
        if (kind == NT_ACT_MEMCPY) c[C_COPY_KIND] = (uint8_t)copy_kind;
        nt_wr64(c, C_BYTES, bytes);
        nt_wr64(c, C_START, t);
        nt_wr64(c, C_END, t + 500);
        nt_wr32(c, C_STREAM, 7);
        nt_wr32(c, C_CORRELATION, corr);
    }
    pthread_mutex_unlock(&lock);
}

/* Hand the queue to the registered callbacks in buffers of at most FAKECUPTI_BUFFER bytes. */
static void deliver(queue *q) {
    const char *limit_env = getenv("FAKECUPTI_BUFFER");
    size_t limit = limit_env && *limit_env ? strtoull(limit_env, NULL, 10) : SIZE_MAX;
    size_t pos = 0;
    while (pos < q->len && requested && completed) {
        uint8_t *buf = NULL;
        size_t size = 0, max_records = 0;
        requested(&buf, &size, &max_records);
        if (!buf) return;
        size_t used = 0;
        while (pos < q->len) {
            size_t n = record_size(nt_rd32(q->data + pos, 0));
            if (used + n > size || used + n > limit) break;
            memcpy(buf + used, q->data + pos, n);
            used += n;
            pos += n;
        }
        completed(NULL, 0, buf, size, used);
        if (!used) break;
    }
    q->len = 0;
}

CUptiResult cuptiGetVersion(uint32_t *v) { *v = 130001; return 0; }
CUptiResult cuptiActivityRegisterCallbacks(nt_buffer_requested_t r, nt_buffer_completed_t c) {
    requested = r;
    completed = c;
    return 0;
}
CUptiResult cuptiActivityEnable(int kind) {
    if (kind < 0 || kind >= 64) return 19;
    enabled[kind] = 1;
    graph_trace_ever |= kind == NT_ACT_GRAPH_TRACE;
    if (kind == NT_ACT_DRIVER) memset(driver_cbids, 0, sizeof driver_cbids);  /* the kind overrides single ids */
    return 0;
}
CUptiResult cuptiActivityDisable(int kind) { if (kind < 0 || kind >= 64) return 19; enabled[kind] = 0; return 0; }
/* 1 on, 2 off, 0 as the DRIVER kind says */
CUptiResult cuptiActivityEnableDriverApi(uint32_t cbid, uint8_t on) { if (cbid < 1024) driver_cbids[cbid] = on ? 1 : 2; return 0; }
CUptiResult cuptiActivityEnableRuntimeApi(uint32_t cbid, uint8_t on) { (void)cbid; (void)on; return 0; }
CUptiResult cuptiSetThreadIdType(int type) { (void)type; return 0; }
/* The stream id of the kernel records (kernel_record: 13 for a stream, 7 for the legacy NULL stream, 1000 + the
 * calling thread's id for its per-thread default stream);
 * FAKECUPTI_NO_STREAM_ID=1: the call fails (the shim then joins by callbacks). */
CUptiResult cuptiGetStreamIdEx(void *ctx, void *stream, uint8_t per_thread, uint32_t *id) {
    (void)ctx;
    if (getenv("FAKECUPTI_NO_STREAM_ID")) return 1;
    *id = fake_stream_id((uintptr_t)stream, per_thread);
    return 0;
}
CUptiResult cuptiGetTimestamp(uint64_t *t) { *t = now_ns(); return 0; }

/* Activity attributes as CUPTI 13.0 keeps them (cupti_activity.h's defaults; size_t or uint8_t values), read
 * back by the shim for its `cupti_settings`. FAKECUPTI_REFUSE_ATTR=N: setting attribute N fails (error 1). */
static size_t attr_value[16] = {[NT_ATTR_DEVICE_BUFFER_SIZE] = 3200000, [NT_ATTR_DEVICE_BUFFER_POOL_LIMIT] = 250,
                                [NT_ATTR_DEVICE_BUFFER_PRE_ALLOCATE_VALUE] = 3, [NT_ATTR_PER_THREAD_ACTIVITY_BUFFER] = 1};
static int attr_is_byte(int attr) {
    return attr == NT_ATTR_ZEROED_OUT_ACTIVITY_BUFFER || attr == NT_ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED ||
           attr == NT_ATTR_PER_THREAD_ACTIVITY_BUFFER;
}
CUptiResult cuptiActivitySetAttribute(int attr, size_t *size, void *value) {
    const char *refuse = getenv("FAKECUPTI_REFUSE_ATTR");
    if (attr < 0 || attr >= 16 || !size || !value || (refuse && *refuse && atoi(refuse) == attr)) return 1;
    if (*size != (attr_is_byte(attr) ? 1 : sizeof(size_t))) return 1;
    attr_value[attr] = attr_is_byte(attr) ? *(uint8_t *)value : *(size_t *)value;
    return 0;
}
CUptiResult cuptiActivityGetAttribute(int attr, size_t *size, void *value) {
    if (attr < 0 || attr >= 16 || !size || !value) return 1;
    if (attr_is_byte(attr)) *(uint8_t *)value = (uint8_t)attr_value[attr], *size = 1;
    else *(size_t *)value = attr_value[attr], *size = sizeof(size_t);
    return 0;
}
/* HW trace is Blackwell's only (cupti_activity.h): refused as on an H100 unless FAKECUPTI_HW_TRACE=1. */
CUptiResult cuptiActivityEnableHWTrace(uint8_t on) {
    (void)on;
    return getenv("FAKECUPTI_HW_TRACE") ? 0 : NT_CUPTI_ERROR_NOT_SUPPORTED;
}
CUptiResult cuptiActivityFlushPeriod(uint32_t ms) { (void)ms; return 0; }
CUptiResult cuptiFinalize(void) { return 0; }

/* FAKECUPTI_INCOMPLETE=1: a forced flush hands out the newest kernel record of its queue (other than
 * the runtime's clock kernel) as CUPTI does a kernel still running: start and end 0. FAKECUPTI_INCOMPLETE=2:
 * every other kernel record of the queue too, from the first (as seen on an H200 when the program's own
 * torch.profiler took CUPTI over: records of many launches, each stream's earliest among them, untimed). */
static void forced_flush_cuts_a_kernel(queue *q) {
    uint8_t *newest = NULL;
    int every_other = atoi(getenv("FAKECUPTI_INCOMPLETE")) == 2;
    unsigned seen = 0;
    for (size_t pos = 0; pos + 4 <= q->len; pos += record_size(nt_rd32(q->data + pos, 0))) {
        uint8_t *r = q->data + pos;
        const char *name = NULL;
        if (nt_rd32(r, 0) == NT_ACT_CONCURRENT_KERNEL) memcpy(&name, r + K_NAME, sizeof name);
        if (!name || !strcmp(name, "__neutrino_globaltimer")) continue;
        newest = r;
        if (every_other && seen++ % 2 == 0) nt_wr64(r, K_START, 0), nt_wr64(r, K_END, 0);
    }
    if (newest) nt_wr64(newest, K_START, 0), nt_wr64(newest, K_END, 0);
}

CUptiResult cuptiActivityFlushAll(uint32_t flag) {
    pthread_mutex_lock(&lock);
    if ((flag & 1) && getenv("FAKECUPTI_INCOMPLETE")) forced_flush_cuts_a_kernel(&gpu_q);
    queue gpu = gpu_q, apis = api_q, ext = ext_q;  /* delivered outside the lock: the callbacks may launch */
    gpu_q = api_q = ext_q = (queue){0};
    pthread_mutex_unlock(&lock);
    deliver(&gpu);
    deliver(&apis);
    deliver(&ext);
    free(gpu.data);
    free(apis.data);
    free(ext.data);
    return 0;
}

CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid, uint8_t **record) {
    size_t pos = *record ? (size_t)(*record - buffer) + record_size(nt_rd32(*record, 0)) : 0;
    if (pos + 4 > valid) return NT_CUPTI_ERROR_MAX_LIMIT_REACHED;
    *record = buffer + pos;
    return 0;
}

CUptiResult cuptiActivityGetNumDroppedRecords(void *ctx, uint32_t stream, size_t *dropped) {
    (void)ctx; (void)stream;
    const char *n = getenv("FAKECUPTI_DROP");
    *dropped = (n && !drop_reported++) ? strtoull(n, NULL, 10) : 0;
    return 0;
}

CUptiResult cuptiSubscribe(nt_subscriber_t *sub, nt_callback_t fn, void *data) {
    pthread_mutex_lock(&lock);
    int taken = subscriber_fn != NULL;
    if (!taken) {
        subscriber_fn = fn, subscriber_data = data;
        memset(callback_on, 0, sizeof callback_on);
        *sub = &subscriber_handle;
    }
    pthread_mutex_unlock(&lock);
    return taken ? NT_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS : 0;
}

CUptiResult cuptiUnsubscribe(nt_subscriber_t sub) {
    if (sub != &subscriber_handle || !subscriber_fn) return 1;
    pthread_mutex_lock(&lock);
    subscriber_fn = NULL;
    pthread_mutex_unlock(&lock);
    return 0;
}

CUptiResult cuptiEnableCallback(uint32_t on, nt_subscriber_t sub, int domain, uint32_t cbid) {
    if (sub != &subscriber_handle || !subscriber_fn) return 1;
    if (domain == NT_CB_DOMAIN_DRIVER && cbid < 1024) callback_on[cbid] = on ? 1 : 0;
    return 0;
}

CUptiResult cuptiActivityPushExternalCorrelationId(int kind, uint64_t id) {
    if (kind != NT_EXT_CORRELATION_KIND || ext_depth == 16) return 1;
    ext_stack[ext_depth++] = id;
    return 0;
}

CUptiResult cuptiActivityPopExternalCorrelationId(int kind, uint64_t *last) {
    if (kind != NT_EXT_CORRELATION_KIND || !ext_depth) return 1;
    *last = ext_stack[--ext_depth];
    return 0;
}

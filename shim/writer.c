/* Neutrino's result writer: drains probed launches to the trace without Python.
 *
 The launch path (Python's, or fastlaunch.c) enqueues a probed launch between
 * two events and hands this writer one job describing it (neutrino_writer_submit:
 * a mutex, a copy, a signal). A thread of ours waits for each job's kernel to
 * finish, copies its map buffers into one pinned staging buffer on a stream of
 * its own, appends the frame (header + map sections, spec/trace-format.md) to
 * the kernel's result file, appends one fixed-size record to result/index.bin,
 * zeroes what the buffers' next launch needs zeroed, and publishes the job's
 * sequence number in `neutrino_writer_completed`. Python reads that counter (no
 * call, no lock) to give finished launches' buffers back to its pool.
 *
 * The copy back is the writer's, not the launch path's: a launch costs two
 * events and the kernel, and the pool's buffers are device memory only (pinned
 * memory is slow to allocate; the writer keeps one staging buffer).
 *
 * Why in C: a Python writer thread competes for the GIL with the program's
 * launching thread; every hand-over costs the launching thread tens of
 * microseconds. This thread never touches the interpreter.
 *
 * Jobs are written in submission order; a job that failed on the launch path
 * (status != 0) waits for its stream and leaves a record with that status.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "shim.h"


typedef int CUresult;

/* One record of result/index.bin (96 bytes, little-endian on every CUDA host). */
typedef struct {
    uint64_t seq, kernel_launch, stream, offset, frame_size;
    uint32_t grid[3], block[3];
    uint32_t shared_bytes, kernel_id, frame_id, status;
    double duration_ns;
    uint64_t graph;  /* graph id << 32 | node id of a graph replay; 0 otherwise (was `reserved`) */
} nt_index_record;
_Static_assert(sizeof(nt_index_record) == 96, "index record layout");

/* A queued job. Nodes are recycled (`spare`), and a header of up to NT_INLINE_HEADER bytes travels
 * inside its node: the launch path allocates nothing once the queue has been as long before. */
#define SPARE_NODES 4096
typedef struct node { nt_job job; struct node *next; unsigned char header[NT_INLINE_HEADER]; } node;

static CUresult (*ev_sync)(void *);
static CUresult (*ev_query)(void *);
static CUresult (*ev_elapsed)(float *, void *, void *);
static CUresult (*stream_sync)(void *);
static CUresult (*ctx_set)(void *);
static CUresult (*stream_create)(void **, unsigned);
static CUresult (*d2h_async)(void *, uint64_t, size_t, void *);
static CUresult (*host_alloc)(void **, size_t, unsigned);
static CUresult (*host_free)(void *);

/* The writer thread's own: a stream per context, one pinned staging buffer. */
#define W_CTXS 16
static struct { void *ctx, *stream; } wstreams[W_CTXS];
static void *staging;
static uint64_t staging_size;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t more = PTHREAD_COND_INITIALIZER;
static pthread_cond_t progress = PTHREAD_COND_INITIALIZER;
static node *head, *tail;
static node *spare;  /* under `lock` */
static unsigned n_spare;
static pthread_t thread;
static int running, stopping, index_fd = -1;
/* The writer polls while launches keep coming (so submitting costs no wake-up call on the
 * program's path) and sleeps on `more` after IDLE_POLLS empty polls; a submit wakes it then. */
#define POLL_NS 200000
#define IDLE_POLLS 500
static int sleeping;
/* Between batches the writer naps (NAP_NS) unless BATCH_JOBS jobs are queued or a launch found
 * its ring short of room: fewer, larger batches mean fewer driver calls beside the program's. */
#define NAP_NS 1000000
static int napping;
static unsigned queued;
static _Atomic int hurry;
void neutrino_writer_hurry(void) { atomic_store(&hurry, 1); }

/* What to call back when jobs are written (registered by their submitters: see writer.h). */
static _Atomic(nt_ring_done_fn) ring_done;
static _Atomic(nt_frame_done_fn) host_frame_done;
void neutrino_writer_on_ring_done(nt_ring_done_fn fn) { atomic_store(&ring_done, fn); }
void neutrino_writer_on_host_frame_done(nt_frame_done_fn fn) { atomic_store(&host_frame_done, fn); }
static uint64_t next_seq = 1;

/* Event pairs (start, end) for launches, per context. */
#define EV_POOL 4096
static pthread_mutex_t ev_lock = PTHREAD_MUTEX_INITIALIZER;
static struct { void *ctx, *ev[2]; } ev_free[EV_POOL];
static unsigned ev_n;
static CUresult (*ev_create)(void **, unsigned);

_Atomic uint64_t neutrino_writer_completed;  /* highest sequence number written (jobs finish in order) */
_Atomic uint64_t neutrino_writer_errors;     /* jobs whose frame could not be written */
_Atomic uint64_t neutrino_writer_bytes;      /* bytes appended to result files */

static const char zeros[NT_ALIGN];

/* The captures of the program open now and begun so far, and our stream work while one was open (writer.h). */
static _Atomic long captures_open;
static _Atomic uint64_t captures_begun, work_in_capture[NT_WORK_SITES];

void neutrino_captures_opened(int delta) {
    atomic_fetch_add(&captures_open, delta);
    if (delta > 0) atomic_fetch_add(&captures_begun, 1);
}

long neutrino_captures_open(void) { return atomic_load_explicit(&captures_open, memory_order_relaxed); }

void neutrino_note_stream_work(int site) {
    if (site >= 0 && site < NT_WORK_SITES && atomic_load_explicit(&captures_open, memory_order_relaxed) > 0)
        atomic_fetch_add_explicit(&work_in_capture[site], 1, memory_order_relaxed);
}

/* out[0]: captures begun; out[1 + site]: stream work of ours while one was open (the exit event's
 * `captures` and `stream_work_in_capture`). */
void neutrino_graph_capture_stats(uint64_t *out) {
    out[0] = atomic_load(&captures_begun);
    for (int i = 0; i < NT_WORK_SITES; i++) out[1 + i] = atomic_load(&work_in_capture[i]);
}

/* NEUTRINO_MEASURE (benchmarks only, never for results: docs/overhead.md, "The runtime's own GPU time per
 * eager launch"): a comma list that turns single GPU operations of ours off or swaps them, so that
 * benchmarks/overhead.py can split what a probed eager launch costs the GPU inside the real runtime.
 *   no-copy   the writer copies no ring region back (frames hold stale staging bytes)
 *   no-zero   the writer does not zero a copied region (later launches accumulate onto old counts)
 *   no-end-event, timed-end: read by fastlaunch.c (neutrino_measure)
 *   zero-by-memset  zero with cuMemsetD8Async, as before session 14 (the default zeroes by copies of
 *             pinned zeros: neutrino_zero_async); zero-by-copy, that default's old name, is accepted
 * Unset (the default) changes nothing. */
static int measure_flags = -1;
int neutrino_measure(void) {
    if (measure_flags >= 0) return measure_flags;
    static const struct { const char *word; int bit; } words[] = {
        {"no-copy", NT_MEASURE_NO_COPY}, {"no-zero", NT_MEASURE_NO_ZERO}, {"no-end-event", NT_MEASURE_NO_END_EVENT},
        {"timed-end", NT_MEASURE_TIMED_END}, {"zero-by-copy", NT_MEASURE_ZERO_BY_COPY},
        {"zero-by-memset", NT_MEASURE_ZERO_BY_MEMSET}};
    const char *v = getenv("NEUTRINO_MEASURE");
    int flags = 0;
    for (const char *p = v ? v : ""; *p;) {
        size_t n = strcspn(p, ",");
        for (unsigned i = 0; i < sizeof words / sizeof *words; i++)
            if (n == strlen(words[i].word) && !strncmp(p, words[i].word, n)) flags |= words[i].bit;
        p += n + (p[n] == ',');
    }
    measure_flags = flags;
    return flags;
}

/* Where the writer's time goes (printed with the fast path's profile, NEUTRINO_FAST_PROFILE). */
enum { W_WAIT_KERNEL, W_COPY, W_APPEND, W_STEPS };
static uint64_t wcalls;  /* driver calls the writer made for its batches (profile) */
static uint64_t wstep_ns[W_STEPS], wjobs, wbatches;

/* The CLOCK_REALTIME time `ns` from now (pthread_cond_timedwait's deadline). */
static struct timespec deadline_after(uint64_t ns) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    ns += (uint64_t)t.tv_nsec;
    t.tv_sec += (time_t)(ns / 1000000000ull);
    t.tv_nsec = (long)(ns % 1000000000ull);
    return t;
}

static inline uint64_t wnow(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

void neutrino_writer_print_profile(void) {
    if (!wjobs) return;
    static const char *const names[W_STEPS] = {"wait_kernel", "copy_and_zero", "append"};
    fprintf(stderr, "neutrino: writer, %llu jobs in %llu batches, %.2f driver calls per job, ns per job:",
            (unsigned long long)wjobs, (unsigned long long)wbatches, (double)wcalls / wjobs);
    for (int i = 0; i < W_STEPS; i++) fprintf(stderr, " %s %.0f", names[i], (double)wstep_ns[i] / wjobs);
    fprintf(stderr, "\n");
}

static int write_all(int fd, struct iovec *iov, int n) {
    while (n > 0) {
        ssize_t w = writev(fd, iov, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        while (n > 0 && (size_t)w >= iov->iov_len) { w -= iov->iov_len; iov++; n--; }
        if (n > 0) { iov->iov_base = (char *)iov->iov_base + w; iov->iov_len -= w; }
    }
    return 0;
}

/* Append the job's frame at the next multiple of NT_ALIGN; returns its offset or -1. */
static int64_t append_frame(const nt_job *j, char *const *data) {
    off_t end = lseek(j->fd, 0, SEEK_END);
    if (end < 0) return -1;
    uint64_t start = ((uint64_t)end + NT_ALIGN - 1) / NT_ALIGN * NT_ALIGN;
    struct iovec iov[2 + 2 * NT_MAX_MAPS + 1];
    int n = 0;
    if (start > (uint64_t)end) iov[n++] = (struct iovec){(void *)zeros, start - end};
    iov[n++] = (struct iovec){(void *)j->header, j->header_len};
    uint64_t pos = j->header_len;
    for (uint32_t m = 0; m < j->n_maps; m++) {
        uint64_t pad = j->offsets[m] - pos;
        while (pad > 0) {  /* section starts are NT_ALIGN-aligned: padding < NT_ALIGN, but stay safe */
            uint64_t k = pad < NT_ALIGN ? pad : NT_ALIGN;
            if (n >= (int)(sizeof iov / sizeof *iov) - 2) { if (write_all(j->fd, iov, n)) return -1; n = 0; }
            iov[n++] = (struct iovec){(void *)zeros, k};
            pad -= k;
        }
        iov[n++] = (struct iovec){data[m], j->sizes[m]};
        pos = j->offsets[m] + j->sizes[m];
    }
    if (j->frame_size > pos) iov[n++] = (struct iovec){(void *)zeros, j->frame_size - pos};
    if (write_all(j->fd, iov, n)) return -1;
    atomic_fetch_add(&neutrino_writer_bytes, j->frame_size + (start - end));
    return (int64_t)start;
}

/* A count-sized map's ring (map header word cap_is_count = 2, neutrino.maps.RING_SECTION) holds
 * records only in its first min(head, cap) slots: the frame gets the ring of that many slots (its
 * tags and records moved together in the staged copy, the header's cap, offsets and sizes
 * rewritten), not the whole device ring. The head stays, so dropped = head - cap still holds.
 * Returns `j` itself when it has no ring, else `c` (a copy of it whose header is `hdr`). */
#define FRAME_HEADER 48
#define MAP_HEADER 112
#define FIELD_DESC 40
#define RING_SECTION 2
static uint64_t ring_records_at(uint64_t slots) { return (16 + 4 * slots + 15) / 16 * 16; }

static const nt_job *trim_rings(const nt_job *j, char *const *data, nt_job *c, unsigned char *hdr) {
    const unsigned char *h = j->header;
    uint64_t at_header[NT_MAX_MAPS], pos = FRAME_HEADER;
    int rings = 0;
    if (!h || !data || j->n_maps > NT_MAX_MAPS || j->header_len > NT_MAX_HEADER) return j;
    for (uint32_t m = 0; m < j->n_maps; m++) {
        uint32_t n_fields, word;
        if (pos + MAP_HEADER > j->header_len) return j;
        memcpy(&word, h + pos + 76, 4);
        memcpy(&n_fields, h + pos + 88, 4);
        rings |= word == RING_SECTION;
        at_header[m] = pos;
        pos += MAP_HEADER + (uint64_t)FIELD_DESC * n_fields;
    }
    if (!rings) return j;
    *c = *j;
    memcpy(hdr, h, j->header_len);
    c->header = hdr;
    uint64_t at = j->n_maps ? j->offsets[0] : 0;
    for (uint32_t m = 0; m < j->n_maps; m++) {
        unsigned char *mh = hdr + at_header[m];
        uint32_t word, cap, record_bytes;
        memcpy(&word, mh + 76, 4);
        memcpy(&cap, mh + 72, 4);
        memcpy(&record_bytes, mh + 68, 4);
        if (word == RING_SECTION && j->sizes[m] == ring_records_at(cap) + (uint64_t)cap * record_bytes) {
            uint64_t head;
            memcpy(&head, data[m], 8);
            uint32_t slots = head < cap ? (uint32_t)head : cap;
            memmove(data[m] + ring_records_at(slots), data[m] + ring_records_at(cap), (uint64_t)slots * record_bytes);
            c->sizes[m] = ring_records_at(slots) + (uint64_t)slots * record_bytes;
            memcpy(mh + 72, &slots, 4);
        }
        c->offsets[m] = at;
        memcpy(mh + 96, &at, 8);
        memcpy(mh + 104, &c->sizes[m], 8);
        at = (at + c->sizes[m] + NT_ALIGN - 1) / NT_ALIGN * NT_ALIGN;
    }
    c->frame_size = at;
    return c;
}

static pthread_mutex_t wstreams_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int contexts_forgotten;  /* the writer thread must set its context again */

static void *stream_for(void *ctx) {
    void *st = NULL;
    pthread_mutex_lock(&wstreams_lock);
    for (unsigned i = 0; i < W_CTXS; i++) {
        if (wstreams[i].ctx == ctx) { st = wstreams[i].stream; break; }
        if (!wstreams[i].ctx) {
            if (stream_create(&st, 1 /* non-blocking */) != 0) { st = NULL; break; }
            wstreams[i].ctx = ctx;
            wstreams[i].stream = st;
            break;
        }
    }
    pthread_mutex_unlock(&wstreams_lock);
    return st;
}

/* A context is going away (everything in flight is written by then): forget the streams and
 * pooled events made in contexts, since a context created later may reuse a handle. They are
 * not destroyed: the dying context takes its own with it, and the others keep a few idle ones. */
void neutrino_writer_forget_contexts(void) {
    pthread_mutex_lock(&wstreams_lock);
    memset(wstreams, 0, sizeof wstreams);
    atomic_store(&contexts_forgotten, 1);
    pthread_mutex_unlock(&wstreams_lock);
    pthread_mutex_lock(&ev_lock);
    ev_n = 0;
    pthread_mutex_unlock(&ev_lock);
}

/* At most this many jobs per batch (one sync each), and no more staged bytes than the staging
 * buffer holds: it starts at STAGING_START and grows only for a single job larger than it
 * (pinning memory is slow and holds the driver up for every thread of the program). */
#define BATCH_JOBS 256
#define STAGING_START (8ull << 20)

static uint64_t batch_bytes(void) { return staging_size > STAGING_START ? staging_size : STAGING_START; }

/* Staging room for `total` bytes (grown geometrically, pinned); 0 on success. */
static int ensure_staging(uint64_t total) {
    if (total <= staging_size) return 0;
    uint64_t want = staging_size ? staging_size : STAGING_START;
    while (want < total) want *= 2;
    void *p = NULL;
    if (host_alloc(&p, want, 1 /* portable: any context */) != 0) return -1;
    if (staging) host_free(staging);
    staging = p;
    staging_size = want;
    return 0;
}

static uint64_t staged_bytes(const nt_job *j) {
    uint64_t total = 0;
    for (uint32_t m = 0; m < j->n_maps; m++) total += (j->sizes[m] + NT_ALIGN - 1) / NT_ALIGN * NT_ALIGN;
    return total;
}

/* Enqueue the copy of the job's buffers into staging at `at`, then the zeroing its buffers' next
 * launch needs (same stream: after the copy). 0 on success, data[] set. */
static void enqueue_zero(const nt_job *j, void *ws) {
    for (uint32_t m = 0; m < j->n_maps; m++)
        if (j->zero_bytes[m]) { neutrino_note_stream_work(NT_WORK_WRITER); neutrino_zero_async(j->device[m], j->zero_bytes[m], ws); }
}

static int enqueue_copy_and_zero(const nt_job *j, void *ws, uint64_t at, char **data) {
    int rc = 0;
    for (uint32_t m = 0; m < j->n_maps; m++) {
        data[m] = (char *)staging + at;
        if (j->sizes[m]) neutrino_note_stream_work(NT_WORK_WRITER);
        if (j->sizes[m] && d2h_async(data[m], j->device[m], j->sizes[m], ws) != 0) rc = -1;
        at += (j->sizes[m] + NT_ALIGN - 1) / NT_ALIGN * NT_ALIGN;
    }
    enqueue_zero(j, ws);
    return rc;
}

static void fill_record(nt_index_record *r, const nt_job *j) {
    memset(r, 0, sizeof *r);
    r->seq = j->seq; r->kernel_launch = j->kernel_launch; r->stream = (uint64_t)(uintptr_t)j->stream;
    memcpy(r->grid, j->grid, sizeof r->grid); memcpy(r->block, j->block, sizeof r->block);
    r->shared_bytes = j->shared_bytes; r->kernel_id = j->kernel_id; r->frame_id = j->frame_id;
    r->status = j->status;
    r->duration_ns = -1.0;
    r->graph = j->graph;
}

/* A CUDA graph replay's frame, copied out of its node's ring by the thread draining the rings
 * (graphs.c): nothing to wait for, copy back or zero; only the file write and its record. */
static void write_host_frame(const nt_job *j) {
    nt_index_record r;
    fill_record(&r, j);
    int64_t off = append_frame(j, NULL);
    if (off < 0) r.status = 3;
    else { r.offset = (uint64_t)off; r.frame_size = j->frame_size; }
    if (r.status) atomic_fetch_add(&neutrino_writer_errors, 1);
    struct iovec iov = {&r, sizeof r};
    if (index_fd >= 0) write_all(index_fd, &iov, 1);
}


/* Our device memory is zeroed by copies of pinned zeros (a copy engine), never by cuMemsetD8Async: the driver
 * runs a memset as a kernel of its own, and one such memset in a process left a torch.compile decode graph's later
 * replays 12% slower for the rest of the process (benchmarks/memset_residual.py, docs/overhead.md "Session 14";
 * session 11 found the same for the graph path's zeroing). One pinned chunk of NT_ZERO_CHUNK zero bytes, made at
 * the first zeroing and never freed (copies in flight read it), is copied as often as the span needs.
 * NEUTRINO_MEASURE=zero-by-memset: the memset (benchmarks only). */
#define NT_ZERO_CHUNK (4u << 20)
#define NT_ZERO_TRIES 8  /* allocations tried (one refused inside another thread's global capture): then memsets */
static void *zero_chunk;
static int zero_tries;
static pthread_mutex_t zero_lock = PTHREAD_MUTEX_INITIALIZER;
static CUresult (*zero_h2d)(uint64_t, const void *, size_t, void *);
static CUresult (*zero_memset)(uint64_t, unsigned char, size_t, void *);

static void *zero_source(void) {
    void *chunk = __atomic_load_n(&zero_chunk, __ATOMIC_ACQUIRE);
    if (chunk || __atomic_load_n(&zero_tries, __ATOMIC_RELAXED) >= NT_ZERO_TRIES) return chunk;
    pthread_mutex_lock(&zero_lock);
    if (!zero_chunk && zero_tries < NT_ZERO_TRIES) {
        zero_tries++;
        zero_h2d = (CUresult (*)(uint64_t, const void *, size_t, void *))neutrino_real_sym("cuMemcpyHtoDAsync_v2");
        CUresult (*alloc)(void **, size_t, unsigned) =
            (CUresult (*)(void **, size_t, unsigned))neutrino_real_sym("cuMemHostAlloc");
        void *p = NULL;
        if (zero_h2d && alloc && alloc(&p, NT_ZERO_CHUNK, 1 /* PORTABLE: any context */) == 0 && p) {
            memset(p, 0, NT_ZERO_CHUNK);
            __atomic_store_n(&zero_chunk, p, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&zero_lock);
    return __atomic_load_n(&zero_chunk, __ATOMIC_ACQUIRE);
}

int neutrino_zero_async(uint64_t device, uint64_t bytes, void *stream) {
    void *chunk = (neutrino_measure() & NT_MEASURE_ZERO_BY_MEMSET) ? NULL : zero_source();
    uint64_t done = 0;
    while (chunk && done < bytes) {
        uint64_t n = bytes - done < NT_ZERO_CHUNK ? bytes - done : NT_ZERO_CHUNK;
        if (zero_h2d(device + done, chunk, n, stream) != 0) break;
        done += n;
    }
    if (done == bytes) return 0;
    if (!zero_memset) zero_memset = (CUresult (*)(uint64_t, unsigned char, size_t, void *))neutrino_real_sym("cuMemsetD8Async");
    return zero_memset ? (int)zero_memset(device + done, 0, bytes - done, stream) : -1;
}

static void zero_async(uint64_t device, uint64_t bytes, void *ws) { neutrino_zero_async(device, bytes, ws); }

/* A run of consecutive regions of one ring (gather_candidates): one copy back into staging and
 * one memset, for all of them. Returns n: every job's data[] is set. */
static unsigned copy_ring_run(node *const *jobs, unsigned n, void *ws, nt_index_record *recs,
                              char *(*data)[NT_MAX_MAPS], int *copied) {
    const nt_job *first = &jobs[0]->job, *last = &jobs[n - 1]->job;
    uint64_t span = last->region + last->region_bytes - first->region;
    int measure = neutrino_measure();  /* 0 unless a benchmark set NEUTRINO_MEASURE */
    neutrino_note_stream_work(NT_WORK_WRITER);
    int ok = (measure & NT_MEASURE_NO_COPY) || d2h_async(staging, first->region, span, ws) == 0;
    if (!(measure & NT_MEASURE_NO_ZERO)) zero_async(first->region, span, ws);
    wcalls += 2;
    for (unsigned i = 0; i < n; i++) {
        const nt_job *j = &jobs[i]->job;
        fill_record(&recs[i], j);
        copied[i] = ok;
        if (!ok) recs[i].status = 2;
        for (uint32_t m = 0; m < j->n_maps; m++) data[i][m] = (char *)staging + (j->device[m] - first->region);
    }
    return n;
}

/* Write a batch of jobs of one context whose kernels have finished (loop() waited for the
 * first, gather_batch() saw the others' end events complete). Their copies and zeroing share
 * one stream and one sync, their index records one write. */
static void write_batch(node *const *jobs, unsigned n, void **current_ctx) {
    nt_index_record recs[BATCH_JOBS];
    char *data[BATCH_JOBS][NT_MAX_MAPS];
    int copied[BATCH_JOBS];
    const nt_job *first = &jobs[0]->job;
    if (first->ctx != *current_ctx && ctx_set && ctx_set(first->ctx) == 0) *current_ctx = first->ctx;
    void *ws = stream_for(first->ctx);
    uint64_t t1 = wnow(), t2, t3;
    uint64_t total = 0;
    int ring_run = first->ring && first->status == 0;  /* consecutive regions of one ring (gather_candidates) */
    if (ring_run) total = jobs[n - 1]->job.region + jobs[n - 1]->job.region_bytes - first->region;
    else for (unsigned i = 0; i < n; i++) total += staged_bytes(&jobs[i]->job);
    int staged = ws && ensure_staging(total) == 0;
    uint64_t at = 0;
    unsigned from = ring_run && ws && staged ? copy_ring_run(jobs, n, ws, recs, data, copied) : 0;
    for (unsigned i = from; i < n; i++) {
        const nt_job *j = &jobs[i]->job;
        fill_record(&recs[i], j);
        copied[i] = 0;
        if (j->status != 0 || !ws || !staged) {
            stream_sync(j->stream);  /* the kernel may still be writing the buffers */
            if (!recs[i].status) recs[i].status = 2;
            if (ws) enqueue_zero(j, ws);  /* its buffers go back to a pool: clean */
        } else {
            copied[i] = enqueue_copy_and_zero(j, ws, at, data[i]) == 0;
            wcalls += 2 * j->n_maps;
            if (!copied[i]) recs[i].status = 2;  /* the copy back failed */
            at += staged_bytes(j);
        }
    }
    int synced = ws && stream_sync(ws) == 0;
    wcalls++;
    t2 = wnow();
    static unsigned char trimmed_header[NT_MAX_HEADER];  /* the writer's thread only */
    nt_job trimmed;
    for (unsigned i = 0; i < n; i++) {
        const nt_job *j = &jobs[i]->job;
        if (!copied[i]) continue;
        if (!synced) { recs[i].status = 2; continue; }
        float ms = 0;
        if (!j->untimed && ev_elapsed && (wcalls++, ev_elapsed(&ms, j->ev_start, j->ev_end) == 0))
            recs[i].duration_ns = (double)ms * 1e6;
        j = trim_rings(j, data[i], &trimmed, trimmed_header);
        int64_t off = append_frame(j, data[i]);
        if (off < 0) recs[i].status = 3;  /* the file write failed */
        else { recs[i].offset = (uint64_t)off; recs[i].frame_size = j->frame_size; }
    }
    for (unsigned i = 0; i < n; i++)
        if (recs[i].status) atomic_fetch_add(&neutrino_writer_errors, 1);
    struct iovec iov = {recs, n * sizeof *recs};
    if (index_fd >= 0) write_all(index_fd, &iov, 1);
    t3 = wnow();
    wstep_ns[W_COPY] += t2 - t1; wstep_ns[W_APPEND] += t3 - t2;
    wjobs += n;
    wbatches++;
}

/* The events of a launch made in `ctx` (current on the calling thread), from the free list or new:
 * timed, two timing events (start, end); else no start (ev2[0] = NULL) and an end event made with
 * CU_EVENT_DISABLE_TIMING, which the writer only waits for (no timestamp for the GPU to write:
 * docs/overhead.md, "The runtime's own GPU time per eager launch"). */
int neutrino_writer_take_events(void *ctx, void **ev2, int timed) {
    pthread_mutex_lock(&ev_lock);
    for (unsigned i = ev_n; i-- > 0;) {
        if (ev_free[i].ctx == ctx && (ev_free[i].ev[0] != NULL) == !!timed) {
            ev2[0] = ev_free[i].ev[0];
            ev2[1] = ev_free[i].ev[1];
            ev_free[i] = ev_free[--ev_n];
            pthread_mutex_unlock(&ev_lock);
            return 0;
        }
    }
    pthread_mutex_unlock(&ev_lock);
    if (!ev_create) ev_create = (CUresult (*)(void **, unsigned))neutrino_real_sym("cuEventCreate");
    if (!ev_create) return -1;
    if (!timed) {
        ev2[0] = NULL;
        return ev_create(&ev2[1], 2 /* CU_EVENT_DISABLE_TIMING */) ? -1 : 0;
    }
    if (ev_create(&ev2[0], 0)) return -1;
    if (ev_create(&ev2[1], 0)) {
        void (*destroy)(void *) = (void (*)(void *))neutrino_real_sym("cuEventDestroy_v2");
        if (destroy) destroy(ev2[0]);
        return -1;
    }
    return 0;
}

/* Events back to the free list: a pair whose start is NULL is an untimed launch's (take_events). */
void neutrino_writer_recycle_events(void *ctx, void *ev_start, void *ev_end) {
    pthread_mutex_lock(&ev_lock);
    if (ev_n < EV_POOL) {
        ev_free[ev_n].ctx = ctx;
        ev_free[ev_n].ev[0] = ev_start;
        ev_free[ev_n].ev[1] = ev_end;
        ev_n++;
    }
    pthread_mutex_unlock(&ev_lock);
}

/* Can `j` follow `prev` in a batch without asking the driver whether it has finished? */
static int contiguous(const nt_job *prev, const nt_job *j) {
    return j->ring && j->ring == prev->ring && j->status == 0 && j->region == prev->region + prev->region_bytes;
}

/* The jobs from `from` (finished) on that may join its batch: same context, room left, and for
 * the fast path's jobs consecutive regions of one ring. Called under `lock`; no driver call. */
static int batch_full;  /* the last batch stopped at a limit, not at the end of the queue: no nap */

static unsigned gather_candidates(node *from, node **jobs) {
    unsigned n = 0;
    uint64_t bytes = 0;
    batch_full = 0;
    for (node *nd = from; nd; nd = nd->next) {
        const nt_job *j = &nd->job;
        uint64_t b = j->ring ? j->region_bytes : staged_bytes(j);
        if (n == BATCH_JOBS || (n > 0 && bytes + b > batch_bytes())) { batch_full = 1; break; }
        if (n > 0 && (j->ctx != from->job.ctx || j->status != 0)) break;
        if (n > 0 && from->job.ring && !contiguous(&jobs[n - 1]->job, j)) break;
        if (n > 0 && !from->job.ring && j->ring) break;
        jobs[n++] = nd;
        bytes += b;
        if (j->status != 0) break;
    }
    return n;
}

/* How many of the candidates have finished (the first has). A run on one stream needs one query,
 * of its last job: a stream runs its kernels in order. Outside `lock`. */
static unsigned finished_prefix(node *const *jobs, unsigned n) {
    if (n < 2 || !ev_query) return 1;
    int one_stream = 1;
    for (unsigned i = 1; i < n; i++) one_stream &= jobs[i]->job.stream == jobs[0]->job.stream;
    if (one_stream && (wcalls++, ev_query(jobs[n - 1]->job.ev_end) == 0)) return n;
    unsigned done = 1;
    while (done < n && (wcalls++, ev_query(jobs[done]->job.ev_end) == 0)) done++;
    return done;
}

/* Wait for a job's end event without spinning in the driver: ask, then sleep a little longer
 * each time (the writer's lateness costs nothing but buffer room). */
static void wait_for(void *ev) {
    uint64_t nap = 20000;
    for (;;) {
        wcalls++;
        CUresult rc = ev_query(ev);
        if (rc != 600 /* CUDA_ERROR_NOT_READY */) return;
        struct timespec t = {0, (long)nap};
        nanosleep(&t, NULL);
        if (nap < 2000000) nap *= 2;
    }
}

/* The batch is written: the fast path gets its ring room back (one call: the batch is one run
 * of a ring) and its events (one lock), then the sequence numbers are published. */
static void finish_batch(node *const *jobs, unsigned n) {
    pthread_mutex_lock(&ev_lock);
    for (unsigned i = 0; i < n; i++) {
        const nt_job *j = &jobs[i]->job;
        if (j->fast && ev_n < EV_POOL) {
            ev_free[ev_n].ctx = j->ctx; ev_free[ev_n].ev[0] = j->ev_start; ev_free[ev_n].ev[1] = j->ev_end;
            ev_n++;
        }
    }
    pthread_mutex_unlock(&ev_lock);
    /* outside ev_lock: the launch path takes ev_lock while holding the ring's lock */
    nt_ring_done_fn rings_done = atomic_load(&ring_done);
    nt_frame_done_fn frames_done = atomic_load(&host_frame_done);
    for (unsigned i = 0; i < n; i++) {
        const nt_job *j = &jobs[i]->job;
        if (j->ring && rings_done && (i + 1 == n || jobs[i + 1]->job.ring != j->ring)) rings_done(j->ring, j->ring_end);
    }
    for (unsigned i = 0; i < n; i++) {
        node *nd = jobs[i];
        if (nd->job.host_frame && frames_done) frames_done(nd->job.frame_size);
        if (nd->job.owns_header) free((void *)nd->job.header);
        atomic_store_explicit(&neutrino_writer_completed, nd->job.seq, memory_order_release);
    }
    pthread_mutex_lock(&lock);
    for (unsigned i = 0; i < n; i++) {
        if (n_spare < SPARE_NODES) { jobs[i]->next = spare; spare = jobs[i]; n_spare++; }
        else free(jobs[i]);
    }
    pthread_mutex_unlock(&lock);
}

/* After a batch: wait NAP_NS for more jobs to gather, unless enough are queued, a launch is short
 * of ring room, someone waits for the writer, or it is stopping. Called under `lock`. */
static void nap(void) {
    if (stopping || batch_full || queued >= BATCH_JOBS || atomic_exchange(&hurry, 0)) return;
    struct timespec until = deadline_after(NAP_NS);
    napping = 1;
    while (!stopping && queued < BATCH_JOBS && !atomic_load(&hurry))
        if (pthread_cond_timedwait(&more, &lock, &until) == ETIMEDOUT) break;
    napping = 0;
    atomic_store(&hurry, 0);
}

static void *loop(void *arg) {
    (void)arg;
    void *ctx = NULL;
    node *batch[BATCH_JOBS];
    /* This thread's pinned allocation and syncs must not be refused while the program captures
     * a CUDA graph in global mode on another thread (graphs.c): relaxed capture mode, for good. */
    CUresult (*exchange_mode)(int *) = (CUresult (*)(int *))neutrino_real_sym("cuThreadExchangeStreamCaptureMode");
    int relaxed = 2; /* CU_STREAM_CAPTURE_MODE_RELAXED */
    if (exchange_mode) exchange_mode(&relaxed);
    for (;;) {
        pthread_mutex_lock(&lock);
        for (unsigned idle = 0; !head && !stopping; idle++) {
            if (idle < IDLE_POLLS) {
                struct timespec until = deadline_after(POLL_NS);
                pthread_cond_timedwait(&more, &lock, &until);
            } else {
                sleeping = 1;
                pthread_cond_wait(&more, &lock);
                sleeping = 0;
            }
        }
        node *nd = head;
        pthread_mutex_unlock(&lock);
        if (!nd) return NULL;
        if (atomic_exchange(&contexts_forgotten, 0)) ctx = NULL;  /* set the job's context again */
        /* Only this thread removes from the list; the launch path appends at the tail. `next`
         * links are read under the lock so an append in progress is never seen half-done. */
        if (nd->job.host_frame) {
            pthread_mutex_lock(&lock);
            head = nd->next;
            if (!head) tail = NULL;
            queued--;
            pthread_mutex_unlock(&lock);
            write_host_frame(&nd->job);
            finish_batch(&nd, 1);
            pthread_mutex_lock(&lock);
            pthread_cond_broadcast(&progress);  /* neutrino_writer_wait may be waiting for it */
            pthread_mutex_unlock(&lock);
            continue;
        }
        unsigned n = 1;
        batch[0] = nd;
        if (nd->job.status == 0) {
            uint64_t t0 = wnow();
            if (nd->job.ctx && ev_query) wait_for(nd->job.ev_end);  /* outside the lock */
            else if (nd->job.ctx && ev_sync) ev_sync(nd->job.ev_end);
            wstep_ns[W_WAIT_KERNEL] += wnow() - t0;
            pthread_mutex_lock(&lock);
            n = gather_candidates(nd, batch);
            pthread_mutex_unlock(&lock);
            n = finished_prefix(batch, n);  /* only this thread removes nodes: they stay valid */
            pthread_mutex_lock(&lock);
            head = batch[n - 1]->next;
            if (!head) tail = NULL;
            queued -= n;
            pthread_mutex_unlock(&lock);
        } else {
            pthread_mutex_lock(&lock);
            head = nd->next;
            if (!head) tail = NULL;
            queued--;
            pthread_mutex_unlock(&lock);
        }
        write_batch(batch, n, &ctx);
        finish_batch(batch, n);
        pthread_mutex_lock(&lock);
        pthread_cond_broadcast(&progress);
        nap();
        pthread_mutex_unlock(&lock);
    }
}

/* Start the writer thread; `fd` is result/index.bin, opened O_APPEND by Python. 0 on success. */
int neutrino_writer_start(int fd) {
    pthread_mutex_lock(&lock);
    int rc = 0;
    if (!running) {
        ev_sync = (CUresult (*)(void *))neutrino_real_sym("cuEventSynchronize");
        ev_query = (CUresult (*)(void *))neutrino_real_sym("cuEventQuery");
        ev_elapsed = (CUresult (*)(float *, void *, void *))neutrino_real_sym("cuEventElapsedTime");
        if (!ev_elapsed) ev_elapsed = (CUresult (*)(float *, void *, void *))neutrino_real_sym("cuEventElapsedTime_v2");
        stream_sync = (CUresult (*)(void *))neutrino_real_sym("cuStreamSynchronize");
        ctx_set = (CUresult (*)(void *))neutrino_real_sym("cuCtxSetCurrent");
        stream_create = (CUresult (*)(void **, unsigned))neutrino_real_sym("cuStreamCreate");
        d2h_async = (CUresult (*)(void *, uint64_t, size_t, void *))neutrino_real_sym("cuMemcpyDtoHAsync_v2");
        host_alloc = (CUresult (*)(void **, size_t, unsigned))neutrino_real_sym("cuMemHostAlloc");
        host_free = (CUresult (*)(void *))neutrino_real_sym("cuMemFreeHost");
        index_fd = fd;
        stopping = 0;
        next_seq = 1;
        atomic_store(&neutrino_writer_completed, 0);
        int have = ev_sync && stream_sync && stream_create && d2h_async && host_alloc && host_free;
        rc = have ? pthread_create(&thread, NULL, loop, NULL) : -1;
        running = rc == 0;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* Queue one job (copied) and number it. Never blocks on the GPU or the disk.
 * Returns its sequence number (launch index + 1), 0 if the writer is not running. */
uint64_t neutrino_writer_submit(const nt_job *job) {
    if (job->n_maps > NT_MAX_MAPS || (job->copy_header && job->header_len > NT_INLINE_HEADER)) return 0;
    pthread_mutex_lock(&lock);
    if (!running || stopping) { pthread_mutex_unlock(&lock); return 0; }
    node *nd = spare;
    if (nd) { spare = nd->next; n_spare--; }
    else if (!(nd = malloc(sizeof *nd))) { pthread_mutex_unlock(&lock); return 0; }
    nd->job = *job;
    nd->next = NULL;
    if (job->copy_header) {
        memcpy(nd->header, job->header, job->header_len);
        nd->job.header = nd->header;
        nd->job.owns_header = 0;
    }
    uint64_t seq = nd->job.seq = next_seq++;
    if (tail) tail->next = nd; else head = nd;
    tail = nd;
    queued++;
    if (sleeping || (napping && (queued >= BATCH_JOBS || atomic_load(&hurry)))) pthread_cond_signal(&more);
    pthread_mutex_unlock(&lock);
    neutrino_timeline_note_submit(seq);  /* cupti.c: the timeline's probe_launch of this thread's launch */
    return seq;
}

/* The sequence number the next job will get. */
uint64_t neutrino_writer_next_seq(void) {
    pthread_mutex_lock(&lock);
    uint64_t s = next_seq;
    pthread_mutex_unlock(&lock);
    return s;
}

/* Wait until job `seq` is written or `timeout_ms` passes; 1 if written. */
int neutrino_writer_wait(uint64_t seq, int64_t timeout_ms) {
    struct timespec until = deadline_after(timeout_ms > 0 ? (uint64_t)timeout_ms * 1000000ull : 0);
    pthread_mutex_lock(&lock);
    atomic_store(&hurry, 1);  /* somebody waits: no napping */
    pthread_cond_signal(&more);
    while (atomic_load(&neutrino_writer_completed) < seq && running) {
        if (pthread_cond_timedwait(&progress, &lock, &until) == ETIMEDOUT) break;
    }
    int done = atomic_load(&neutrino_writer_completed) >= seq;
    pthread_mutex_unlock(&lock);
    return done;
}

/* Write what is queued, then stop the thread. */
void neutrino_writer_stop(void) {
    pthread_mutex_lock(&lock);
    int was = running;
    stopping = 1;
    pthread_cond_broadcast(&more);
    pthread_mutex_unlock(&lock);
    if (was) pthread_join(thread, NULL);
    pthread_mutex_lock(&lock);
    running = 0;
    pthread_mutex_unlock(&lock);
}

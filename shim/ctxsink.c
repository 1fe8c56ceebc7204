/* Buffered, never-blocking writers of the context tables (context.h).
 *
 * The program's threads append records (ranges, JSON lines) into per-table chunks of memory under
 * a short mutex; a thread of ours writes full chunks to the files every 200 ms or when a chunk
 * fills. The files live in the run directory, which Python names once the trace exists
 * (neutrino_context_open): until then a table holds up to NT_SINK_EARLY_LIMIT bytes, and up to
 * NT_SINK_LIMIT while the writer is behind; it counts what it drops beyond that.
 * neutrino_context_close (the runtime's exit) and a destructor (whatever came later) write the rest.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "context.h"

typedef struct chunk {
    struct chunk *next;
    size_t used;
    char data[NT_SINK_CHUNK];
} chunk;

typedef struct {
    const char *file;
    const char *header;  /* written when the file is created */
    size_t header_len;
    pthread_mutex_t lock;     /* the chunks */
    pthread_mutex_t io_lock;  /* one writer at a time, so chunks reach the file in order */
    chunk *cur, *full, *full_tail;
    uint64_t held, dropped, written;
    int fd;
} sink_t;

static const char RANGES_HEADER[16] = {'N', 'T', 'R', 'A', 'N', 'G', 'E', '1', 1, 0, 0, 0, 40, 0, 0, 0};

static sink_t sinks[NT_SINK_COUNT] = {
    [NT_SINK_RANGE_NAMES] = {"ranges_names.txt", NULL, 0, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
                             NULL, NULL, NULL, 0, 0, 0, -1},
    [NT_SINK_RANGES] = {"ranges.bin", RANGES_HEADER, sizeof RANGES_HEADER, PTHREAD_MUTEX_INITIALIZER,
                        PTHREAD_MUTEX_INITIALIZER, NULL, NULL, NULL, 0, 0, 0, -1},
    [NT_SINK_ARGS] = {"launch_args.jsonl", NULL, 0, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
                      NULL, NULL, NULL, 0, 0, 0, -1},
};

static char run_dir[4096];
static _Atomic int have_dir, disabled;
static pthread_mutex_t flusher_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t flusher_wake = PTHREAD_COND_INITIALIZER;
static pthread_t flusher;
static int flusher_running, flusher_stop;

uint64_t nt_realtime_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static __thread uint32_t my_tid;

uint32_t nt_thread_id(void) {
    if (!my_tid) my_tid = (uint32_t)syscall(SYS_gettid);
    return my_tid;
}

int nt_sink_append(int which, const void *data, size_t n) {
    sink_t *s = &sinks[which];
    int woke = 0;
    if (n > NT_SINK_CHUNK || atomic_load_explicit(&disabled, memory_order_relaxed)) {
        pthread_mutex_lock(&s->lock);
        s->dropped++;
        pthread_mutex_unlock(&s->lock);
        return -1;
    }
    pthread_mutex_lock(&s->lock);
    if (!s->cur || s->cur->used + n > NT_SINK_CHUNK) {
        if (s->cur) {  /* full: queue it for the writer */
            if (s->full_tail) s->full_tail->next = s->cur; else s->full = s->cur;
            s->full_tail = s->cur;
            s->cur = NULL;
            woke = 1;
        }
        uint64_t limit = atomic_load_explicit(&have_dir, memory_order_relaxed) ? NT_SINK_LIMIT : NT_SINK_EARLY_LIMIT;
        chunk *c = s->held + sizeof(chunk) <= limit ? malloc(sizeof(chunk)) : NULL;
        if (!c) {
            s->dropped++;
            pthread_mutex_unlock(&s->lock);
            return -1;
        }
        c->next = NULL;
        c->used = 0;
        s->cur = c;
        s->held += sizeof(chunk);
    }
    memcpy(s->cur->data + s->cur->used, data, n);
    s->cur->used += n;
    pthread_mutex_unlock(&s->lock);
    if (woke && atomic_load_explicit(&have_dir, memory_order_acquire)) pthread_cond_signal(&flusher_wake);
    return 0;
}

static int open_table(sink_t *s) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", run_dir, s->file);
    s->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (s->fd < 0) return -1;
    struct stat st;
    if (s->header && fstat(s->fd, &st) == 0 && st.st_size == 0 && write(s->fd, s->header, s->header_len) < 0)
        return -1;
    return 0;
}

static int write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Write what the sink holds (full chunks, and the current one when `all`). */
static void flush_sink(sink_t *s, int all) {
    pthread_mutex_lock(&s->io_lock);
    pthread_mutex_lock(&s->lock);
    chunk *list = s->full;
    s->full = s->full_tail = NULL;
    if (all && s->cur && s->cur->used) {
        s->cur->next = NULL;
        if (list) { chunk *t = list; while (t->next) t = t->next; t->next = s->cur; } else list = s->cur;
        s->cur = NULL;
    }
    pthread_mutex_unlock(&s->lock);
    uint64_t freed = 0, written = 0, lost = 0;
    int ok = list && (s->fd >= 0 || open_table(s) == 0);
    for (chunk *c = list, *nx; c; c = nx) {
        nx = c->next;
        if (ok && write_all(s->fd, c->data, c->used) == 0) written += c->used; else lost++;
        freed += sizeof(chunk);
        free(c);
    }
    pthread_mutex_lock(&s->lock);
    s->held -= freed;
    s->written += written;
    s->dropped += lost;
    pthread_mutex_unlock(&s->lock);
    pthread_mutex_unlock(&s->io_lock);
}

static void flush_all(int all) {
    if (!atomic_load(&have_dir)) return;
    for (int i = 0; i < NT_SINK_COUNT; i++) flush_sink(&sinks[i], all);  /* names before the ranges naming them */
}

static void *flusher_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&flusher_lock);
    while (!flusher_stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 200 * 1000000L;
        if (until.tv_nsec >= 1000000000L) { until.tv_sec++; until.tv_nsec -= 1000000000L; }
        pthread_cond_timedwait(&flusher_wake, &flusher_lock, &until);
        pthread_mutex_unlock(&flusher_lock);
        flush_all(0);
        pthread_mutex_lock(&flusher_lock);
    }
    pthread_mutex_unlock(&flusher_lock);
    return NULL;
}

/* The run directory: the tables are written there from now on. 0 on success. */
int neutrino_context_open(const char *dir) {
    if (!dir || strlen(dir) >= sizeof run_dir || atomic_load(&disabled)) return -1;
    pthread_mutex_lock(&flusher_lock);
    if (!atomic_load(&have_dir)) {
        strcpy(run_dir, dir);
        atomic_store_explicit(&have_dir, 1, memory_order_release);
    }
    if (!flusher_running && !flusher_stop) {
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setstacksize(&a, 256 << 10);
        flusher_running = pthread_create(&flusher, &a, flusher_main, NULL) == 0;
        pthread_attr_destroy(&a);
    }
    pthread_mutex_unlock(&flusher_lock);
    return 0;
}

/* Write everything held and stop the writer thread (the runtime's exit). Later appends are written
 * by the destructor. */
void neutrino_context_close(void) {
    pthread_mutex_lock(&flusher_lock);
    int join = flusher_running;
    flusher_stop = 1;
    flusher_running = 0;
    pthread_cond_signal(&flusher_wake);
    pthread_mutex_unlock(&flusher_lock);
    if (join) pthread_join(flusher, NULL);
    flush_all(1);
}

/* Bytes written and appends dropped, per table (ranges names, ranges, launch args). */
void neutrino_context_stats(uint64_t written[NT_SINK_COUNT], uint64_t dropped[NT_SINK_COUNT]) {
    for (int i = 0; i < NT_SINK_COUNT; i++) {
        pthread_mutex_lock(&sinks[i].lock);
        written[i] = sinks[i].written;
        dropped[i] = sinks[i].dropped;
        pthread_mutex_unlock(&sinks[i].lock);
    }
}

/* A forked child has no writer thread and shares the parent's files: it records nothing. */
static void in_forked_child(void) {
    atomic_store(&disabled, 1);
    atomic_store(&have_dir, 0);
    flusher_running = 0;
    for (int i = 0; i < NT_SINK_COUNT; i++) {
        pthread_mutex_init(&sinks[i].lock, NULL);
        pthread_mutex_init(&sinks[i].io_lock, NULL);
    }
    pthread_mutex_init(&flusher_lock, NULL);
}

__attribute__((constructor)) static void context_init(void) { pthread_atfork(NULL, NULL, in_forked_child); }

__attribute__((destructor)) static void context_fini(void) {
    if (!atomic_load(&disabled)) flush_all(1);
}

/* The arguments of probed launches: launch_args.jsonl (spec/trace-format.md, "Context tables").
 *
 * Python registers each probed kernel's parameter sizes (neutrino_args_plan, from its PTX). Every
 * probed launch, from the C fast path (fastlaunch.c) or the Python path, then calls
 * neutrino_args_record: the parameter bytes are hashed with the kernel's handle and looked up in
 * the set of argument sets seen. A known set costs the hash, one compare and one use line
 * ({"launch", "argset", "tid", "host_ns"}); a new one is numbered and handed to the resolver (a
 * Python function that names tensors, run on the launching thread, while its tensors are alive),
 * which writes the set's line itself; without a resolver, or when it fails, the line is written
 * here with raw values only. Resolution thus runs once per distinct (kernel, argument bytes).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "context.h"
#include "shim.h"

#define ARG_PLANS 1024
#define ARGSET_SLOTS (1u << 17)
#define MAX_ARGSETS (1u << 16)   /* distinct sets remembered; later new ones are written as null */
#define MAX_PARAMS 256

typedef struct {
    _Atomic(void *) func;
    _Atomic(void *) ctx;  /* NULL: forgotten (neutrino_args_forget); the slot keeps its key for the chain */
    uint32_t gen;         /* numbers the plans: a handle planned again for another kernel gets new sets */
    uint32_t n_params, total;
    uint16_t sizes[MAX_PARAMS];
    char *kernel_json;  /* the kernel's name as a JSON string, quotes included */
} args_plan;

typedef struct { uint64_t hash; void *func; uint32_t gen, len; int32_t id; unsigned char *bytes; } argset_slot;

typedef int (*argset_resolver)(void *func, void *ctx, int64_t argset, const unsigned char *bytes, uint32_t len);

static args_plan plans[ARG_PLANS];
static argset_slot *argsets;
static uint32_t argset_count;
static uint32_t plan_gen;  /* under args_lock */
static _Atomic uint64_t argsets_overflow;
static pthread_mutex_t args_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(argset_resolver) resolver;
static _Atomic int args_enabled;

static unsigned plan_index(void *f) {
    return (unsigned)(((uint64_t)(uintptr_t)f * 0x9E3779B97F4A7C15ull) >> 54) & (ARG_PLANS - 1);
}

static args_plan *find_plan(void *f, void *ctx) {
    unsigned i = plan_index(f);
    for (unsigned n = 0; n < ARG_PLANS; n++, i = (i + 1) & (ARG_PLANS - 1)) {
        void *k = atomic_load_explicit(&plans[i].func, memory_order_acquire);
        if (!k) return NULL;
        if (k == f && atomic_load_explicit(&plans[i].ctx, memory_order_acquire) == ctx) return &plans[i];
    }
    return NULL;
}

/* Turn argument tracing on (or off: NULL resolver and on = 0). The resolver may be NULL. */
void neutrino_args_enable(int on, argset_resolver r) {
    atomic_store(&resolver, r);
    atomic_store(&args_enabled, on);
}

/* The parameter sizes of kernel `func` in `ctx`, and its name as a JSON string. 0 on success. */
int neutrino_args_plan(void *func, void *ctx, uint32_t n, const uint16_t *sizes, const char *kernel_json) {
    if (!func || n > MAX_PARAMS || !kernel_json) return -1;
    int rc = -1;
    pthread_mutex_lock(&args_lock);
    if (find_plan(func, ctx)) rc = 0;  /* sizes never change for a handle, until it is forgotten */
    for (unsigned i = plan_index(func), k = 0; rc != 0 && k < ARG_PLANS; i = (i + 1) & (ARG_PLANS - 1), k++) {
        void *key = atomic_load(&plans[i].func);
        int forgotten = key == func && !atomic_load(&plans[i].ctx);  /* this handle's old kernel: reused */
        if (key && !forgotten) continue;
        args_plan *p = &plans[i];
        p->gen = ++plan_gen;
        p->n_params = n;
        p->total = 0;
        for (uint32_t j = 0; j < n; j++) { p->sizes[j] = sizes[j]; p->total += sizes[j]; }
        free(p->kernel_json);  /* the old kernel's name: its module is gone, no launch reads it */
        p->kernel_json = strdup(kernel_json);
        atomic_store_explicit(&p->ctx, ctx, memory_order_release);
        atomic_store_explicit(&p->func, func, memory_order_release);
        rc = 0;
    }
    pthread_mutex_unlock(&args_lock);
    return rc;
}

/* Kernel handle `func` no longer stands for the kernel its plans were made for (its module was
 * unloaded, or the driver returned it for another kernel): its launches are not recorded until it
 * is planned again, with the new kernel's sizes and name. */
void neutrino_args_forget(void *func) {
    pthread_mutex_lock(&args_lock);
    for (unsigned i = plan_index(func), k = 0; k < ARG_PLANS; i = (i + 1) & (ARG_PLANS - 1), k++) {
        void *key = atomic_load(&plans[i].func);
        if (!key) break;  /* the end of func's probe chain */
        if (key == func) atomic_store(&plans[i].ctx, NULL);
    }
    pthread_mutex_unlock(&args_lock);
}

/* Python's resolver writes its argset line (newline included) through here. */
int neutrino_args_line(const char *line, size_t n) { return nt_sink_append(NT_SINK_ARGS, line, n); }

static uint64_t hash_params(void *f, const args_plan *p, void **params) {
    uint64_t h = (1469598103934665603ull ^ (uint64_t)(uintptr_t)f) * 1099511628211ull ^ p->gen;
    for (uint32_t j = 0; j < p->n_params; j++) {
        const unsigned char *b = params[j];
        for (uint32_t k = 0; k < p->sizes[j]; k++) h = (h ^ b[k]) * 1099511628211ull;
    }
    return h;
}

static int same_params(const argset_slot *s, const args_plan *p, void **params) {
    const unsigned char *at = s->bytes;
    for (uint32_t j = 0; j < p->n_params; j++) {
        if (memcmp(at, params[j], p->sizes[j])) return 0;
        at += p->sizes[j];
    }
    return 1;
}

/* Each thread remembers the sets it met last (direct-mapped by hash): a hit compares the bytes with
 * the set's copy, which never changes once made, and takes no lock. */
#define THREAD_CACHE 64
static __thread const argset_slot *seen[THREAD_CACHE];

/* The argset number of these parameters (-1: too many sets); *fresh = 1 and *copy = its bytes when new. */
static int32_t find_or_add(void *f, const args_plan *p, void **params, int *fresh, unsigned char **copy) {
    uint64_t h = hash_params(f, p, params);
    int32_t id = -1;
    *fresh = 0;
    const argset_slot *mine = seen[h & (THREAD_CACHE - 1)];
    if (mine && mine->hash == h && mine->func == f && mine->gen == p->gen && mine->len == p->total &&
        same_params(mine, p, params))
        return mine->id;
    pthread_mutex_lock(&args_lock);
    if (!argsets) argsets = calloc(ARGSET_SLOTS, sizeof *argsets);
    for (uint32_t i = (uint32_t)h & (ARGSET_SLOTS - 1), n = 0; argsets && n < ARGSET_SLOTS;
         i = (i + 1) & (ARGSET_SLOTS - 1), n++) {
        argset_slot *s = &argsets[i];
        if (s->bytes) {
            if (s->hash == h && s->func == f && s->gen == p->gen && s->len == p->total && same_params(s, p, params)) {
                id = s->id;
                seen[h & (THREAD_CACHE - 1)] = s;
                break;
            }
            continue;
        }
        if (argset_count >= MAX_ARGSETS || !(s->bytes = malloc(p->total ? p->total : 1))) break;
        unsigned char *at = s->bytes;
        for (uint32_t j = 0; j < p->n_params; j++) { memcpy(at, params[j], p->sizes[j]); at += p->sizes[j]; }
        s->hash = h; s->func = f; s->gen = p->gen; s->len = p->total; s->id = id = (int32_t)argset_count++;
        *fresh = 1;
        *copy = s->bytes;  /* never freed or moved: safe to read after the lock */
        seen[h & (THREAD_CACHE - 1)] = s;
        break;
    }
    pthread_mutex_unlock(&args_lock);
    if (id < 0) atomic_fetch_add(&argsets_overflow, 1);
    return id;
}

/* The argset line with raw values only (no resolver, or it failed). */
static void write_plain_argset(const args_plan *p, int32_t id, const unsigned char *bytes) {
    size_t cap = 256 + strlen(p->kernel_json) + (size_t)p->n_params * 96 + 2 * (size_t)p->total;
    char *line = malloc(cap);
    if (!line) return;
    size_t k = (size_t)snprintf(line, cap, "{\"argset\":%d,\"kernel\":%s,\"args\":[", id, p->kernel_json);
    for (uint32_t j = 0; j < p->n_params && k < cap; j++) {
        uint32_t size = p->sizes[j];
        uint64_t v = 0;
        if (size == 1 || size == 2 || size == 4 || size == 8) memcpy(&v, bytes, size);  /* little-endian */
        k += (size_t)snprintf(line + k, cap - k, "%s{\"index\":%u,\"size\":%u,\"value\":", j ? "," : "", j, size);
        int scalar = size == 1 || size == 2 || size == 4 || size == 8;
        if (scalar) k += (size_t)snprintf(line + k, cap - k, "%llu", (unsigned long long)v);
        else k += (size_t)snprintf(line + k, cap - k, "null");
        k += (size_t)snprintf(line + k, cap - k, ",\"hex\":\"");
        for (uint32_t b = 0; b < size && k + 3 < cap; b++) k += (size_t)snprintf(line + k, cap - k, "%02x", bytes[b]);
        k += (size_t)snprintf(line + k, cap - k, "\",\"tensor\":null}");
        bytes += size;
    }
    if (k + 4 < cap) {
        k += (size_t)snprintf(line + k, cap - k, "]}\n");
        nt_sink_append(NT_SINK_ARGS, line, k);
    }
    free(line);
}

static char *put_text(char *at, const char *s) {
    while (*s) *at++ = *s++;
    return at;
}

static char *put_u64(char *at, uint64_t v) {
    char digits[20];
    int n = 0;
    do { digits[n++] = (char)('0' + v % 10); v /= 10; } while (v);
    while (n) *at++ = digits[--n];
    return at;
}

/* A probed launch (index `launch` of result/index.bin) of `f` with parameters `params`. Returns its
 * argset, or -1 (no plan, tracing off, too many sets). */
int64_t neutrino_args_record(void *f, void *ctx, void **params, uint64_t launch) {
    if (!atomic_load_explicit(&args_enabled, memory_order_relaxed)) return -1;
    uint64_t host_ns = nt_realtime_ns();
    args_plan *p = find_plan(f, ctx);
    if (!p || (p->n_params && !params)) return -1;
    int fresh = 0;
    unsigned char *bytes = NULL;
    int32_t id = find_or_add(f, p, params, &fresh, &bytes);
    if (fresh) {
        argset_resolver r = atomic_load(&resolver);
        if (!r || r(f, ctx, id, bytes, p->total) != 0) write_plain_argset(p, id, bytes);
    }
    char use[160], *at = use;  /* formatted by hand: snprintf costs more than the rest of the call */
    at = put_text(at, "{\"launch\":");
    at = put_u64(at, launch);
    at = put_text(at, ",\"argset\":");
    at = id >= 0 ? put_u64(at, (uint64_t)id) : put_text(at, "null");
    at = put_text(at, ",\"tid\":");
    at = put_u64(at, nt_thread_id());
    at = put_text(at, ",\"host_ns\":");
    at = put_u64(at, host_ns);
    at = put_text(at, "}\n");
    nt_sink_append(NT_SINK_ARGS, use, (size_t)(at - use));
    return id;
}

/* A child forked while another thread held the lock must not wait for it forever. */
static void lock_in_forked_child(void) { pthread_mutex_init(&args_lock, NULL); }

__attribute__((constructor)) static void argtrace_init(void) { pthread_atfork(NULL, NULL, lock_in_forked_child); }

/* Distinct argument sets recorded, and new sets beyond MAX_ARGSETS (written as null). */
void neutrino_args_stats(uint64_t *sets, uint64_t *overflow) {
    pthread_mutex_lock(&args_lock);
    *sets = argset_count;
    pthread_mutex_unlock(&args_lock);
    *overflow = atomic_load(&argsets_overflow);
}

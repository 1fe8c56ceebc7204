/* CUPTI's own per-launch cost, without Neutrino (benchmarks/timeline_cost.py, cupti_floor_ab.py):
 * loaded into a plain workload by ctypes, it enables CONCURRENT_KERNEL with buffer callbacks that
 * only free the buffer and, with `callbacks`, subscribes to the launch/copy calls of
 * shim/cupti_abi.h with a callback that returns at once. What it costs is the floor under the
 * timeline's cost. cupti_floor_phase() switches, inside one process, between no records, kernel
 * records, and kernel records plus callbacks doing nothing, reading clock_gettime at every entry
 * (runtime and driver: the shim's first version), or reading the TSC at the outermost entry only
 * (the shim's `host` level now), each storing (tid, time) by correlation id as the shim does.
 * cupti_floor_set() (issues 22, 24) picks the activity kinds (kernel records, graph-level records
 * CUPTI_ACTIVITY_KIND_GRAPH_TRACE, copies) and which callback ids are on: every launch and copy id of
 * both domains, the driver domain's only, or the copy and graph-launch ids only (the kernel launches
 * left to the shim's own hook); cupti_floor_counts() flushes and gives the records seen per kind.
 * CUPTI_FLOOR_ATTRS (comma list, read by cupti_floor_init before any kind is on): `zeroed` (we hand
 * CUPTI zeroed buffers: CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER), `pinned` (its device buffers
 * in pinned host memory: CUPTI_ACTIVITY_ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED), `small` (1 MiB buffers
 * instead of 4 MiB).
 *   cc -O2 -shared -fPIC -Ishim -o cupti_floor.so benchmarks/cupti_floor.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cupti_abi.h"

static size_t buffer_bytes = 4u << 20;
static int zeroed_buffers;
static CUptiResult (*next_record)(uint8_t *, size_t, uint8_t **);
static _Atomic uint64_t seen[64];  /* records per activity kind, counted as buffers complete */

static void requested(uint8_t **buf, size_t *size, size_t *max_records) {
    *size = buffer_bytes;
    *buf = zeroed_buffers ? calloc(1, *size) : aligned_alloc(8, *size);
    *max_records = 0;
}

static void completed(void *ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid) {
    (void)ctx; (void)stream; (void)size;
    uint8_t *rec = NULL;
    while (next_record && buf && next_record(buf, valid, &rec) == 0) {
        uint32_t kind = nt_rd32(rec, 0);
        if (kind < 64) atomic_fetch_add_explicit(&seen[kind], 1, memory_order_relaxed);
    }
    free(buf);
}

static int mode;  /* 1 nothing, 2 clock_gettime at every entry, 3 TSC at the outermost entry */
static __thread int in_runtime;
static struct { _Atomic uint32_t corr; uint32_t tid; uint64_t t; } slots[1u << 18];

static void store(uint32_t corr, uint64_t t) {
    unsigned i = corr & ((1u << 18) - 1);
    atomic_store_explicit(&slots[i].corr, 0, memory_order_relaxed);
    slots[i].tid = 1;
    slots[i].t = t;
    atomic_store_explicit(&slots[i].corr, corr, memory_order_release);
}

static void on_call(void *userdata, int domain, uint32_t cbid, const void *data) {
    (void)userdata; (void)cbid;
    if (mode == 0) return;
    int enter = nt_rd32(data, CB_SITE) == NT_CB_SITE_ENTER;
    if (mode == 2 && enter) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        store(nt_rd32(data, CB_CORRELATION), (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec);
    } else if (mode == 3) {
        if (domain == NT_CB_DOMAIN_RUNTIME) in_runtime += enter ? 1 : -1;
        if (enter && !(domain == NT_CB_DOMAIN_DRIVER && in_runtime)) store(nt_rd32(data, CB_CORRELATION),
                                                                           __builtin_ia32_rdtsc());
    }
}

static CUptiResult (*enable_kind)(int), (*disable_kind)(int), (*enable_cb)(uint32_t, nt_subscriber_t, int, uint32_t);
static nt_subscriber_t subscriber;
static int kernels_on, callbacks_on;

static void set_callbacks(int on) {
    for (unsigned i = 0; i < sizeof NT_DRIVER_CBIDS / sizeof *NT_DRIVER_CBIDS; i++)
        enable_cb((uint32_t)on, subscriber, NT_CB_DOMAIN_DRIVER, NT_DRIVER_CBIDS[i]);
    for (unsigned i = 0; i < sizeof NT_RUNTIME_CBIDS / sizeof *NT_RUNTIME_CBIDS; i++)
        enable_cb((uint32_t)on, subscriber, NT_CB_DOMAIN_RUNTIME, NT_RUNTIME_CBIDS[i]);
    callbacks_on = on;
}

/* Which callback ids cupti_floor_set turns on: 1 all launch and copy ids (both domains), 2 the driver
 * domain's only, 3 the copy and graph-launch ids only (both domains). */
static void set_callback_ids(int which, int on) {
    for (unsigned i = 0; i < sizeof NT_DRIVER_CBIDS / sizeof *NT_DRIVER_CBIDS; i++)
        if (which != 3 || i >= 6) enable_cb((uint32_t)on, subscriber, NT_CB_DOMAIN_DRIVER, NT_DRIVER_CBIDS[i]);
    for (unsigned i = 0; which != 2 && i < sizeof NT_RUNTIME_CBIDS / sizeof *NT_RUNTIME_CBIDS; i++)
        if (which != 3 || i >= 6) enable_cb((uint32_t)on, subscriber, NT_CB_DOMAIN_RUNTIME, NT_RUNTIME_CBIDS[i]);
}

static int kinds_now, ids_now;
#define NT_ACT_GRAPH_TRACE 51

/* kinds: bit 0 CONCURRENT_KERNEL, bit 1 GRAPH_TRACE, bit 2 MEMCPY and MEMSET; ids: 0 no callbacks, else
 * set_callback_ids' choice; callbacks: on_call's mode (1 nothing, 3 TSC at the outermost entry). */
void cupti_floor_set(int kinds, int ids, int callbacks) {
    static const int kind_of_bit[3][2] = {{NT_ACT_CONCURRENT_KERNEL, -1}, {NT_ACT_GRAPH_TRACE, -1},
                                          {NT_ACT_MEMCPY, NT_ACT_MEMSET}};
    for (int b = 0; b < 3; b++) {
        int want = (kinds >> b) & 1, have = (kinds_now >> b) & 1;
        for (int k = 0; k < 2 && want != have; k++)
            if (kind_of_bit[b][k] >= 0) (want ? enable_kind : disable_kind)(kind_of_bit[b][k]);
    }
    kinds_now = kinds;
    mode = callbacks;
    if (ids != ids_now) {
        if (ids_now) set_callback_ids(ids_now, 0);
        if (ids) set_callback_ids(ids, 1);
        ids_now = ids;
    }
}

static CUptiResult (*flush_all)(uint32_t);

/* Flush (completed records only) and copy the records seen per kind into out[64]. */
void cupti_floor_counts(uint64_t *out) {
    if (flush_all) flush_all(0);
    for (int k = 0; k < 64; k++) out[k] = atomic_load(&seen[k]);
}

static void read_attrs(void *lib) {
    const char *a = getenv("CUPTI_FLOOR_ATTRS");
    CUptiResult (*set_attr)(int, size_t *, void *) = dlsym(lib, "cuptiActivitySetAttribute");
    if (!a || !set_attr) return;
    if (strstr(a, "zeroed")) {
        uint8_t one = 1;
        size_t n = sizeof one;
        zeroed_buffers = set_attr(5 /* ZEROED_OUT_ACTIVITY_BUFFER */, &n, &one) == 0;
    }
    if (strstr(a, "pinned")) {
        uint8_t one = 1;
        size_t n = sizeof one;
        set_attr(8 /* MEM_ALLOCATION_TYPE_HOST_PINNED */, &n, &one);
    }
    if (strstr(a, "small")) buffer_bytes = 1u << 20;
}

/* One process, several phases: 0 on success, else the step that failed (as cupti_floor_start). */
int cupti_floor_init(const char *path) {
    void *lib = dlopen("libcupti.so.13", RTLD_NOW | RTLD_NOLOAD);
    if (!lib) lib = dlopen(path, RTLD_NOW);
    if (!lib) return 1;
    next_record = dlsym(lib, "cuptiActivityGetNextRecord");
    flush_all = dlsym(lib, "cuptiActivityFlushAll");
    read_attrs(lib);
    CUptiResult (*reg)(nt_buffer_requested_t, nt_buffer_completed_t) = dlsym(lib, "cuptiActivityRegisterCallbacks");
    CUptiResult (*subscribe)(nt_subscriber_t *, nt_callback_t, void *) = dlsym(lib, "cuptiSubscribe");
    enable_kind = dlsym(lib, "cuptiActivityEnable");
    disable_kind = dlsym(lib, "cuptiActivityDisable");
    enable_cb = dlsym(lib, "cuptiEnableCallback");
    if (!reg || reg(requested, completed) != 0) return 2;
    if (!enable_kind || !disable_kind || !enable_cb) return 3;
    if (!subscribe || subscribe(&subscriber, on_call, NULL) != 0) return 4;
    return 0;
}

/* kernels: CONCURRENT_KERNEL records on; callbacks: 0 off, else the mode of on_call. */
void cupti_floor_phase(int kernels, int callbacks) {
    if (kernels && !kernels_on) enable_kind(NT_ACT_CONCURRENT_KERNEL);
    if (!kernels && kernels_on) disable_kind(NT_ACT_CONCURRENT_KERNEL);
    kernels_on = kernels;
    mode = callbacks;
    if (!!callbacks != callbacks_on) set_callbacks(!!callbacks);
}

/* 0 on success, else the step that failed (1 library, 2 register, 3 enable, 4 subscribe). */
int cupti_floor_start(const char *path, int callbacks) {
    void *lib = dlopen("libcupti.so.13", RTLD_NOW | RTLD_NOLOAD);
    if (!lib) lib = dlopen(path, RTLD_NOW);
    if (!lib) return 1;
    CUptiResult (*reg)(nt_buffer_requested_t, nt_buffer_completed_t) = dlsym(lib, "cuptiActivityRegisterCallbacks");
    CUptiResult (*enable)(int) = dlsym(lib, "cuptiActivityEnable");
    if (!reg || reg(requested, completed) != 0) return 2;
    if (!enable || enable(NT_ACT_CONCURRENT_KERNEL) != 0) return 3;
    if (!callbacks) return 0;
    CUptiResult (*subscribe)(nt_subscriber_t *, nt_callback_t, void *) = dlsym(lib, "cuptiSubscribe");
    CUptiResult (*on)(uint32_t, nt_subscriber_t, int, uint32_t) = dlsym(lib, "cuptiEnableCallback");
    nt_subscriber_t sub;
    if (!subscribe || !on || subscribe(&sub, on_call, NULL) != 0) return 4;
    for (unsigned i = 0; i < sizeof NT_DRIVER_CBIDS / sizeof *NT_DRIVER_CBIDS; i++)
        on(1, sub, NT_CB_DOMAIN_DRIVER, NT_DRIVER_CBIDS[i]);
    for (unsigned i = 0; i < sizeof NT_RUNTIME_CBIDS / sizeof *NT_RUNTIME_CBIDS; i++)
        on(1, sub, NT_CB_DOMAIN_RUNTIME, NT_RUNTIME_CBIDS[i]);
    return 0;
}

/* ns per call of the host clock: which 0 clock_gettime(CLOCK_REALTIME), 1 rdtsc (n calls, one thread). */
double cupti_floor_clock_ns(int which, long n) {
    struct timespec a, b, t;
    volatile uint64_t sink = 0;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++) {
        if (which == 0) clock_gettime(CLOCK_REALTIME, &t), sink += (uint64_t)t.tv_nsec;
        else sink += __builtin_ia32_rdtsc();
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    (void)sink;
    return ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / (double)n;
}

/* Kernel records on (1) or off (0) now, as a probe of what switching CONCURRENT_KERNEL costs the host: the
 * nanoseconds the call took (benchmarks/cupti_graph_states.py). */
double cupti_floor_kernel_records(int on) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    (on ? enable_kind : disable_kind)(NT_ACT_CONCURRENT_KERNEL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    kinds_now = on ? (kinds_now | 1) : (kinds_now & ~1);
    return (double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec);
}

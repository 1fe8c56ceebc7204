/* A fake libcuda.so.1 for CPU-only tests of the shim + runtime chain.
 *
 * Device memory is host memory; a launch of a probed function (its module
 * image mentions "__nt_buf") writes one record per warp into the buffer
 * passed as parameter FAKECUDA_BUFPARAM (count = 1, lstart = unit, elapse = 7,
 * smid = unit % 132), like the block_sched probe would. Every launch appends
 * a line "<name> probed=<0|1> grid=<gx>" to the file FAKECUDA_LOG.
 *
 * cuGetProcAddress resolves from a static table (never dlsym, which the shim
 * interposes).
 *
 * Like the real driver, it reuses the handles of unloaded modules and their
 * functions: cuModuleUnload / cuLibraryUnload put them on free lists (first in,
 * first out), from which the next loads and lookups take theirs. A launch of a
 * function whose module is gone logs "<unloaded> stale launch" and fails.
 * fakecuda_unload_quietly(module) unloads as cuModuleUnload does under a name
 * no profiler hooks (an unload the shim does not see).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../shim/shim.h"  /* the graph append kernel's descriptors */

typedef int CUresult;
typedef struct {
    unsigned gx, gy, gz, bx, by, bz, shmem;
    void *stream;
    void *attrs;
    unsigned nattrs;
} Config;

typedef struct Function Function;
typedef struct Module { char *image; Function *funcs; struct Module *next_free; } Module;
struct Function { Module *mod; char name[256]; int attr8; Function *next_in_module, *next_free; };

/* free lists of unloaded modules and functions, reused first in, first out */
static Module *free_modules, **free_modules_tail = &free_modules;
static Function *free_funcs, **free_funcs_tail = &free_funcs;

CUresult cuInit(unsigned f) { (void)f; return 0; }
/* FAKECUDA_LOG_CALLS=FILE, with this library built with -finstrument-functions: every driver call (an
 * exported cu* entry point; not those it makes itself) appends "<thread> <name>" to FILE, and a few calls add
 * a line " = <details>" (fake_call_detail: capture modes, instantiation flags and the graph's nodes). Who
 * calls is not told apart: the program's, the shim's and the runtime's calls all come here. */
static __thread int call_depth;
static __thread int call_thread = -1;
static int call_threads;
__attribute__((no_instrument_function)) static FILE *call_log(void) {
    const char *path = getenv("FAKECUDA_LOG_CALLS");
    return path ? fopen(path, "a") : NULL;
}
__attribute__((no_instrument_function)) static int is_entry_point(void *fn, const char **name) {
    Dl_info info;
    if (!dladdr(fn, &info) || !info.dli_sname || info.dli_saddr != fn) return 0;
    *name = info.dli_sname;
    return !strncmp(*name, "cu", 2);
}
__attribute__((no_instrument_function, visibility("hidden"))) void __cyg_profile_func_enter(void *fn, void *site) {
    (void)site;
    const char *name;
    if (!getenv("FAKECUDA_LOG_CALLS") || !is_entry_point(fn, &name)) return;
    if (call_depth++) return;
    if (call_thread < 0) call_thread = __atomic_fetch_add(&call_threads, 1, __ATOMIC_RELAXED);
    FILE *fh = call_log();
    if (fh) { fprintf(fh, "t%d %s\n", call_thread, name); fclose(fh); }
}
__attribute__((no_instrument_function, visibility("hidden"))) void __cyg_profile_func_exit(void *fn, void *site) {
    (void)site;
    const char *name;
    if (getenv("FAKECUDA_LOG_CALLS") && is_entry_point(fn, &name) && call_depth > 0) call_depth--;
}
__attribute__((no_instrument_function, format(printf, 1, 2))) static void fake_call_detail(const char *fmt, ...) {
    if (call_depth < 1) return;
    FILE *fh = call_log();
    if (!fh) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(fh, "t%d   = ", call_thread);
    vfprintf(fh, fmt, ap);
    fputc('\n', fh);
    va_end(ap);
    fclose(fh);
}


/* The fake libcupti (fakecupti.c), once the shim loaded it: told of every launch, copy and memset. */
static void *fakecupti(const char *name) {
    static void *fns[5];
    /* fakecupti_kernel, _copy, _graph_kernel, _graph_launch, _peer_copy */
    int i = name[10] == 'k' ? 0 : name[10] == 'p' ? 4 : name[10] != 'g' ? 1 : name[16] == 'k' ? 2 : 3;
    if (fns[i]) return fns[i];
    void *h = dlopen("libcupti.so.13", RTLD_NOW | RTLD_NOLOAD);
    if (!h) return NULL;
    fns[i] = dlsym(h, name);
    dlclose(h);
    return fns[i];
}
static void note_copy(int kind, int copy_kind, uint64_t bytes) {
    void (*fn)(int, int, uint64_t) = fakecupti("fakecupti_copy");
    if (fn) fn(kind, copy_kind, bytes);
}
CUresult cuGetErrorName(CUresult rc, const char **s) { *s = rc ? "CUDA_ERROR_FAKE" : "CUDA_SUCCESS"; return 0; }
/* Devices: context 0xC0 + 0x100*d is device d's (current per thread, device 0's at first);
 * FAKECUDA_CC="90,80" gives each device's compute capability (default: one sm_90). */
static __thread uintptr_t current_ctx = 0xC0;
static int device_cc(int d) {
    const char *s = getenv("FAKECUDA_CC");
    for (int i = 0; s && *s; i++) {
        if (i == d) return atoi(s);
        s = strchr(s, ',');
        if (s) s++;
    }
    return d == 0 ? 90 : -1;
}
CUresult cuCtxGetCurrent(void **c) { *c = (void *)current_ctx; return 0; }
CUresult cuCtxSetCurrent(void *c) {
    uintptr_t v = (uintptr_t)c;
    if (v < 0xC0 || (v - 0xC0) % 0x100 || device_cc((int)((v - 0xC0) / 0x100)) < 0) return 201; /* INVALID_CONTEXT */
    current_ctx = v;
    return 0;
}
CUresult cuCtxGetDevice(int *d) { *d = (int)((current_ctx - 0xC0) / 0x100); return 0; }
CUresult cuDeviceGetAttribute(int *v, int a, int d) {
    int cc = device_cc(d);
    if (cc < 0) return 101; /* INVALID_DEVICE */
    *v = a == 75 ? cc / 10 : a == 76 ? cc % 10 : a == 16 ? 132 : a == 38 ? (1 << 20) : 0;
    return 0;
}
CUresult cuDeviceGetPCIBusId(char *bus, int len, int d) { snprintf(bus, len, "0000:%02x:00.0", 0x18 + d); return 0; }

static Module *new_module(const void *image) {
    Module *m = free_modules;
    if (m) {
        free_modules = m->next_free;
        if (!free_modules) free_modules_tail = &free_modules;
        memset(m, 0, sizeof *m);
    } else {
        m = calloc(1, sizeof *m);
    }
    const char *s = image;
    int cubin = strncmp(s, "FAKECUBIN", 9) == 0;
    m->image = strdup(cubin ? s + 10 : s);
    const char *jit = getenv("FAKECUDA_JIT_DELAY_MS"); /* a PTX load takes N ms: the driver's JIT */
    if (!cubin && jit) {
        struct timespec t = {atoi(jit) / 1000, (long)(atoi(jit) % 1000) * 1000000L};
        nanosleep(&t, NULL);
    }
    return m;
}
CUresult cuModuleLoadData(void **mod, const void *image) { *mod = new_module(image); return 0; }
CUresult cuModuleLoad(void **mod, const char *fname) { /* the file's text, as cuModuleLoadData would take it */
    FILE *f = fopen(fname, "rb");
    if (!f) return 301; /* FILE_NOT_FOUND */
    char *text = calloc(1, 1 << 22);
    size_t n = fread(text, 1, (1 << 22) - 1, f);
    fclose(f);
    text[n] = 0;
    *mod = new_module(text);
    free(text);
    return 0;
}
CUresult cuModuleLoadDataEx(void **mod, const void *image, unsigned n, void *o, void **v) {
    (void)n; (void)o; (void)v;
    *mod = new_module(image);
    return 0;
}
CUresult cuLibraryLoadData(void **lib, const void *code, void *a, void **b, unsigned c, void *d, void **e, unsigned f) {
    (void)a; (void)b; (void)c; (void)d; (void)e; (void)f;
    *lib = new_module(code);
    return 0;
}
CUresult cuFuncGetName(const char **name, void *f) {
    /* FAKECUDA_OTHER_NAME=1: a name other than the one CUPTI's records carry (the shim joins by grid and block) */
    *name = getenv("FAKECUDA_OTHER_NAME") ? "another_name" : ((Function *)f)->name;
    return 0;
}
CUresult cuModuleGetFunction(void **f, void *mod, const char *name) {
    Module *m = mod;
    if (!m->image) return 400; /* unloaded */
    if (!strstr(m->image, name)) return 500;
    Function *fn = free_funcs;
    if (fn) {
        free_funcs = fn->next_free;
        if (!free_funcs) free_funcs_tail = &free_funcs;
        memset(fn, 0, sizeof *fn);
    } else {
        fn = calloc(1, sizeof *fn);
    }
    fn->mod = m;
    snprintf(fn->name, sizeof fn->name, "%s", name);
    fn->next_in_module = m->funcs;
    m->funcs = fn;
    *f = fn;
    return 0;
}
/* The module and its functions go on the free lists; their names say they are gone. (static: a call
 * from inside this library must not go through the shim's cuModuleUnload) */
static CUresult unload_module(void *mod) {
    Module *m = mod;
    if (!m || !m->image) return 400; /* CUDA_ERROR_INVALID_HANDLE */
    for (Function *fn = m->funcs, *nx; fn; fn = nx) {
        nx = fn->next_in_module;
        snprintf(fn->name, sizeof fn->name, "<unloaded>");
        fn->mod = m;
        fn->next_free = NULL;
        *free_funcs_tail = fn;
        free_funcs_tail = &fn->next_free;
    }
    free(m->image);
    m->image = NULL;
    m->funcs = NULL;
    m->next_free = NULL;
    *free_modules_tail = m;
    free_modules_tail = &m->next_free;
    return 0;
}
CUresult cuModuleUnload(void *mod) { return unload_module(mod); }
CUresult cuLibraryUnload(void *lib) { return unload_module(lib); }
CUresult fakecuda_unload_quietly(void *mod) { return unload_module(mod); }
CUresult cuLibraryGetKernel(void **k, void *lib, const char *name) { return cuModuleGetFunction(k, lib, name); }
CUresult cuKernelGetFunction(void **f, void *k) { *f = k; return 0; }
CUresult cuFuncGetAttribute(int *v, int a, void *f) { *v = a == 8 ? ((Function *)f)->attr8 : 0; return 0; }
CUresult cuFuncSetAttribute(void *f, int a, int v) { if (a == 8) ((Function *)f)->attr8 = v; return 0; }
static void order_host_wait(void *event, void *stream, int everything);  /* FAKECUDA_CHECK_ORDER */
/* ---- stream capture and graphs: nodes run in capture order at cuGraphLaunch ---- */
enum { N_MEMSET, N_D2H, N_KERNEL, N_HOST, N_ALLOC, N_REMOVED };  /* alloc: a memory alloc node (never run here) */
typedef struct Node {
    int kind;
    void *a, *b;               /* memset: ptr; d2h: host, dev; kernel: function, params; host: fn, data */
    size_t n;
    unsigned dims[6];
    int probed_params;
    int disabled;              /* cuGraphNodeSetEnabled(exec, node, 0): the exec's copy runs as an empty node */
} Node;
typedef struct {
    Node *nodes;
    unsigned n, cap;
    long launches;
    int from_clone, dead;
    int untraced;          /* instantiated while the fake CUPTI had GRAPH_TRACE off (graph_trace_now) */
    void *family;          /* the captured graph it descends from (clones, executable graphs): FAKECUDA_CHECK_ORDER */
    uint32_t last_launch;  /* an executable graph's last launch (an op of the order model) */
    uintptr_t (*edges)[3]; /* a captured graph's dependencies (from, to, edge data as a u64), node handles */
    unsigned nedges, edges_cap;
} Graph;
static void *cap_stream;       /* the one stream being captured (or NULL) */
static int cap_mode;           /* 0 global, 1 thread-local, 2 relaxed */
static Graph *cap_graph;
static unsigned long long cap_id;
static Node *cap_dep;           /* the node the next captured one depends on (NULL: none) */
static __thread int thread_mode; /* cuThreadExchangeStreamCaptureMode: 0 global (the default) */
static long live_allocations;   /* device and pinned allocations not yet freed */
static long graph_nodes_live;

long fakecuda_live_allocations(void) { return live_allocations; }
long fakecuda_graphs_live(void) { return graph_nodes_live; }

static int alloc_refused(void) { return cap_stream && cap_mode != 2 && thread_mode != 2; }

/* A new node at the end of `g` (node handles: 1-based positions). */
static Node *add_node(Graph *g, int kind) {
    if (g->n == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 8;
        g->nodes = realloc(g->nodes, g->cap * sizeof(Node));
    }
    Node *nd = &g->nodes[g->n++];
    memset(nd, 0, sizeof *nd);
    nd->kind = kind;
    return nd;
}

static void add_edge_data(Graph *g, uintptr_t from, uintptr_t to, uint64_t data) {
    if (g->nedges == g->edges_cap) {
        g->edges_cap = g->edges_cap ? 2 * g->edges_cap : 8;
        g->edges = realloc(g->edges, g->edges_cap * sizeof *g->edges);
    }
    g->edges[g->nedges][0] = from;
    g->edges[g->nedges][1] = to;
    g->edges[g->nedges++][2] = (uintptr_t)data;
}
static void add_edge(Graph *g, uintptr_t from, uintptr_t to) { add_edge_data(g, from, to, 0); }

static Node *capture(void *stream, int kind) {
    if (!cap_stream || stream != cap_stream) return NULL;
    Node *nd = add_node(cap_graph, kind);
    if (cap_dep) add_edge(cap_graph, (uintptr_t)cap_dep, cap_graph->n);
    cap_dep = (Node *)(uintptr_t)(cap_graph->n);
    return nd;
}
/* cuGraphGetEdges_v2 (edge data: all default) and the older cuGraphGetEdges; FAKECUDA_NO_EDGES=1: both fail
 * (CUDA_ERROR_NOT_SUPPORTED) */
/* cuGraphRemoveDependencies_v2 / cuGraphAddDependencies_v2 (edge data: NULL, default) */
CUresult cuGraphRemoveDependencies_v2(void *graph, void **from, void **to, const uint64_t *data, size_t n) {
    Graph *g = graph;
    for (size_t i = 0; i < n; i++) {
        unsigned j = 0;
        while (j < g->nedges && !(g->edges[j][0] == (uintptr_t)from[i] && g->edges[j][1] == (uintptr_t)to[i] &&
                                  g->edges[j][2] == (data ? data[i] : 0)))
            j++;
        if (j == g->nedges) return 1;
        memmove(g->edges[j], g->edges[j + 1], (g->nedges - j - 1) * sizeof *g->edges);
        g->nedges--;
    }
    return 0;
}
CUresult cuGraphAddDependencies_v2(void *graph, void **from, void **to, const uint64_t *data, size_t n) {
    for (size_t i = 0; i < n; i++) add_edge_data(graph, (uintptr_t)from[i], (uintptr_t)to[i], data ? data[i] : 0);
    return 0;
}
CUresult cuGraphGetEdges_v2(void *graph, void **from, void **to, void *data, size_t *n) {
    Graph *g = graph;
    if (getenv("FAKECUDA_NO_EDGES")) return 801;
    if (!from || !to) { *n = g->nedges; return 0; }
    size_t k = *n < g->nedges ? *n : g->nedges;
    for (size_t i = 0; i < k; i++) {
        from[i] = (void *)g->edges[i][0], to[i] = (void *)g->edges[i][1];
        if (data) memcpy((char *)data + 8 * i, &g->edges[i][2], 8);
        else if (g->edges[i][2]) return 217;  /* CUDA_ERROR_LOSSY_QUERY */
    }
    *n = k;
    return 0;
}
CUresult cuGraphGetEdges(void *graph, void **from, void **to, size_t *n) {
    return cuGraphGetEdges_v2(graph, from, to, NULL, n);
}

CUresult cuStreamBeginCapture_v2(void *s, int mode) {
    fake_call_detail("stream %p mode %d", s, mode);
    if (cap_stream) return 900;
    cap_stream = s; cap_mode = mode; cap_id++;
    cap_graph = calloc(1, sizeof(Graph));
    cap_graph->family = cap_graph;
    graph_nodes_live++;
    cap_dep = NULL;
    return 0;
}
static Graph *last_graph;       /* the graph the last capture built (cuGraphNodeSetParams's) */
#define MAX_CLONES 4096
static Graph *clones[MAX_CLONES];  /* clone k: clones[k] (k >= 1), its node handles k << 32 | position */
static unsigned nclones;
/* FAKECUDA_REFUSE_CLONE_EXEC_SET=1: changes to an executable graph made from a clone are refused */
static int refused_for_clone(void *exec) {
    return ((Graph *)exec)->from_clone && getenv("FAKECUDA_REFUSE_CLONE_EXEC_SET");
}
CUresult cuStreamEndCapture(void *s, void **graph) {
    if (s != cap_stream) return 901;
    *graph = last_graph = cap_graph;
    cap_stream = NULL; cap_graph = NULL;
    return 0;
}
/* The _ptsz entry points: their NULL stream is the per-thread default stream (CU_STREAM_PER_THREAD, 0x2). */
CUresult cuStreamBeginCapture_v2_ptsz(void *s, int mode) { return cuStreamBeginCapture_v2(s ? s : (void *)2, mode); }
CUresult cuStreamEndCapture_ptsz(void *s, void **graph) { return cuStreamEndCapture(s ? s : (void *)2, graph); }
static long is_capturing_calls;  /* the shim asks only while a capture it saw begin has not ended */
long fakecuda_is_capturing_calls(void) { return is_capturing_calls; }
CUresult cuStreamIsCapturing(void *s, int *st) {
    is_capturing_calls++;
    *st = (cap_stream && s == cap_stream) ? 1 : 0;
    return 0;
}
CUresult cuStreamGetCaptureInfo_v2(void *s, int *st, unsigned long long *id, void **graph, void *const **deps,
                                   size_t *n) {
    static __thread void *dep;
    *st = (cap_stream && s == cap_stream) ? 1 : 0;
    if (!*st) return 0;
    if (id) *id = cap_id;
    if (graph) *graph = cap_graph;
    dep = cap_dep;
    if (deps) *deps = &dep;
    if (n) *n = cap_dep ? 1 : 0;
    return 0;
}
CUresult cuStreamUpdateCaptureDependencies(void *s, void **deps, size_t n, unsigned flags) {
    (void)flags;
    if (!cap_stream || s != cap_stream) return 401;
    cap_dep = n ? deps[0] : NULL;
    return 0;
}
CUresult cuThreadExchangeStreamCaptureMode(int *mode) { fake_call_detail("mode %d", *mode); int old = thread_mode; thread_mode = *mode; *mode = old; return 0; }
/* FAKECUDA_LOG_SYNCS=1: each context synchronisation in the log, with the context current and whether the
 * shim's graph-pick lock was free meanwhile (another thread asks the shim about a graph; "held": it had to
 * wait more than 300 ms) */
static void *ask_the_shim(void *arg) {
    (void)arg;
    int (*has)(void *, void *) = (int (*)(void *, void *))dlsym(RTLD_DEFAULT, "neutrino_graph_pick_has");
    if (has) has(NULL, NULL);
    return NULL;
}
static const char *pick_lock_state(void) {
    pthread_t t;
    if (pthread_create(&t, NULL, ask_the_shim, NULL)) return "unknown";
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 300000000;
    if (until.tv_nsec >= 1000000000) until.tv_sec++, until.tv_nsec -= 1000000000;
    if (pthread_timedjoin_np(t, NULL, &until) == 0) return "free";
    pthread_detach(t);
    return "held";
}
static void gpu_wait(void *stream, int everything);
CUresult cuCtxSynchronize(void) {
    const char *log = getenv("FAKECUDA_LOG");
    if (log && getenv("FAKECUDA_LOG_SYNCS")) {
        const char *lock = pick_lock_state();
        FILE *fh = fopen(log, "a");
        if (fh) { fprintf(fh, "ctx-sync ctx=%p lock=%s\n", (void *)current_ctx, lock); fclose(fh); }
    }
    if (alloc_refused()) return 900;
    gpu_wait(NULL, 1);
    order_host_wait(NULL, NULL, 1);
    return 0;
}
CUresult cuLaunchHostFunc(void *s, void (*fn)(void *), void *data) {
    Node *nd = capture(s, N_HOST);
    if (nd) { nd->a = (void *)fn; nd->b = data; return 0; }
    fn(data);
    return 0;
}
/* A kernel node added after the capture (neutrino's append node): appended last, after its deps. */
typedef struct { void *func; unsigned dims[7]; void **params, **extra; void *kern, *ctx; } KernelNodeParams;
CUresult cuGraphAddKernelNode_v2(void **node, void *graph, void *const *deps, size_t n, const KernelNodeParams *p) {
    fake_call_detail("%s deps %zu dims %u,%u,%u/%u,%u,%u", p->func ? ((Function *)p->func)->name : "?", n, p->dims[0], p->dims[1],
                     p->dims[2], p->dims[3], p->dims[4], p->dims[5]);
    Graph *g = graph;
    Node *nd = add_node(g, N_KERNEL);
    nd->a = p->func; nd->b = p->params;
    memcpy(nd->dims, p->dims, sizeof nd->dims);
    for (size_t i = 0; i < n; i++) add_edge(g, (uintptr_t)deps[i], g->n);
    *node = (void *)(uintptr_t)g->n;
    return 0;
}
CUresult cuGraphAddKernelNode(void **node, void *graph, void *const *deps, size_t n, const KernelNodeParams *p) {
    return cuGraphAddKernelNode_v2(node, graph, deps, n, p);
}
/* cuGraphAddNode_v2 of a kernel node (CUgraphNodeParams: type 0, the kernel's parameters at byte 16), each
 * edge's data logged (from port / type: 1 programmatic); the node runs after its deps, as any.
 * FAKECUDA_NO_ADD_NODE=1: refused (CUDA_ERROR_NOT_SUPPORTED), as by a driver before CUDA 12.3. */
CUresult cuGraphAddNode_v2(void **node, void *graph, void *const *deps, const unsigned char (*data)[8], size_t n,
                           const int *params) {
    if (getenv("FAKECUDA_NO_ADD_NODE") || params[0] != 0) return 801;
    char said[256] = "edges (port/type)";
    for (size_t i = 0, used = strlen(said); i < n && used < sizeof said - 16; i++)
        used += (size_t)snprintf(said + used, sizeof said - used, " %u/%u", data ? data[i][0] : 0, data ? data[i][2] : 0);
    fake_call_detail("%s", said);
    Graph *g = graph;
    CUresult rc = cuGraphAddKernelNode_v2(node, graph, deps, n, (const KernelNodeParams *)(params + 4));
    for (size_t i = 0; rc == 0 && data && i < n; i++) memcpy(&g->edges[g->nedges - n + i][2], data[i], 8);
    return rc;
}
/* FAKECUDA_LOG_CALLS: what is instantiated (flags, each node: kind, kernel, dims, disabled) */
static void detail_instantiate(const Graph *g, unsigned long long flags) {
    char nodes[4096] = "";
    size_t used = 0;
    for (unsigned i = 0; i < g->n && used < sizeof nodes - 300; i++) {
        const Node *nd = &g->nodes[i];
        used += (size_t)snprintf(nodes + used, sizeof nodes - used, " [%d %s %u,%u,%u/%u,%u,%u%s]", nd->kind,
                                 nd->kind == N_KERNEL ? ((Function *)nd->a)->name : "-", nd->dims[0], nd->dims[1],
                                 nd->dims[2], nd->dims[3], nd->dims[4], nd->dims[5], nd->disabled ? " off" : "");
    }
    fake_call_detail("flags %llu nodes %u%s", flags, g->n, nodes);
}
/* FAKECUDA_REFUSE_PROGRAMMATIC_DEVICE_LAUNCH=1: a graph with a programmatic edge (type byte 2 = 1) is not
 * instantiated for device launch (CUDA_ERROR_NOT_SUPPORTED) */
static int refuses_programmatic(const Graph *g, unsigned long long flags) {
    if (!(flags & 4) || !getenv("FAKECUDA_REFUSE_PROGRAMMATIC_DEVICE_LAUNCH")) return 0;
    for (unsigned i = 0; i < g->nedges; i++)
        if ((g->edges[i][2] >> 16 & 0xff) == 1) return 1;
    return 0;
}
/* GRAPH_TRACE enabled in the fake CUPTI now (-1: no fake CUPTI loaded). CUPTI crashed (SIGSEGV in the graph
 * launch; tests/gpu/test_gpu_graphs.py::test_reduce_overhead_training_loop, H200, 2026-11-28) when a graph
 * instantiated while GRAPH_TRACE was off was launched with it on; the fake aborts so. */
static int graph_trace_now(void) {
    void *h = dlopen("libcupti.so.13", RTLD_NOW | RTLD_NOLOAD);
    int (*fn)(void) = h ? (int (*)(void))dlsym(h, "fakecupti_graph_trace_enabled") : NULL;
    if (h) dlclose(h);
    return fn ? fn() : -1;
}
CUresult cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags) {
    detail_instantiate(graph, flags);
    if (refuses_programmatic(graph, flags)) return 801;
    Graph *g = graph, *e = calloc(1, sizeof(Graph));
    e->n = e->cap = g->n;
    e->nodes = malloc((g->n ? g->n : 1) * sizeof(Node));
    memcpy(e->nodes, g->nodes, g->n * sizeof(Node));
    e->family = g->family ? g->family : g;
    graph_nodes_live++;
    for (unsigned k = 1; k <= nclones; k++) e->from_clone |= clones[k] == g;
    e->untraced = graph_trace_now() == 0;
    *exec = e;
    return 0;
}
/* The exec's copy of node `node` (a 1-based position, the same in the graph and its execs; a clone's node
 * handles carry the clone's number above bit 32, cuGraphNodeFindInClone). */
static Node *exec_node(void *exec, void *node) {
    Graph *e = exec;
    uintptr_t i = (uintptr_t)node & 0xffffffffu;
    return i >= 1 && i <= e->n ? &e->nodes[i - 1] : NULL;
}
static long exec_set_params_calls, set_enabled_calls;
long fakecuda_pick_calls(void) { return exec_set_params_calls + set_enabled_calls; }
/* FAKECUDA_FORK_IN_SWITCH=1: the program forks (from another thread, say) while the shim is in its
 * first switch, its lock held; the child asks the shim about the graph and exits. The child's exit
 * status, or -1 when it hung (killed after 5 s). */
static long fork_status = -2;
long fakecuda_fork_status(void) { return fork_status; }
static void fork_in_switch(void *exec) {
    if (fork_status != -2 || !getenv("FAKECUDA_FORK_IN_SWITCH")) return;
    int (*has)(void *, void *) = (int (*)(void *, void *))dlsym(RTLD_DEFAULT, "neutrino_graph_pick_has");
    pid_t pid = fork();
    if (pid == 0) _exit(has && has(exec, NULL) == 1 ? 0 : 3);
    int status = 0;
    for (int i = 0; i < 500 && waitpid(pid, &status, WNOHANG) == 0; i++) {
        struct timespec t = {0, 10000000};
        nanosleep(&t, NULL);
    }
    if (waitpid(pid, &status, WNOHANG) == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        fork_status = -1;
        return;
    }
    fork_status = WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}
CUresult cuGraphExecKernelNodeSetParams_v2(void *exec, void *node, const KernelNodeParams *p) {
    Node *nd = exec_node(exec, node);
    if (!nd || nd->kind != N_KERNEL || !p->func) return 1;
    if (getenv("FAKECUDA_REFUSE_SET_PARAMS") || refused_for_clone(exec)) return 1;  /* a driver that refuses it */
    fork_in_switch(exec);
    exec_set_params_calls++;
    nd->a = p->func; nd->b = p->params;  /* the driver copies the values; the shim keeps them alive here */
    memcpy(nd->dims, p->dims, sizeof nd->dims);
    return 0;
}
CUresult cuGraphNodeSetEnabled(void *exec, void *node, unsigned enabled) {
    Node *nd = exec_node(exec, node);
    if (!nd || refused_for_clone(exec)) return 1;
    set_enabled_calls++;
    nd->disabled = !enabled;
    return 0;
}
/* Offset and size of parameter `i` of `f`, read from its module's PTX (.u64/.b64/.s64/.f64: 8 bytes, else 4). */
CUresult cuFuncGetParamInfo(void *f, size_t i, size_t *offset, size_t *size) {
    Function *fn = f;
    char head[300];
    snprintf(head, sizeof head, ".entry %s(", fn->name);
    const char *at = fn->mod && fn->mod->image ? strstr(fn->mod->image, head) : NULL;
    if (!at) return 1;
    const char *end = strchr(at, ')'), *q = at + strlen(head);
    size_t off = 0;
    for (size_t k = 0;; k++) {
        const char *param = strstr(q, ".param");
        if (!param || param > end) return 1;  /* CUDA_ERROR_INVALID_VALUE: no parameter i */
        const char *comma = strchr(param, ',');
        if (!comma || comma > end) comma = end;
        size_t bytes = 4;
        for (const char *c = param; c + 2 < comma; c++)
            if (c[0] == '6' && c[1] == '4') bytes = 8;
        off = (off + bytes - 1) / bytes * bytes;
        if (k == i) { *offset = off; if (size) *size = bytes; return 0; }
        off += bytes;
        q = comma;
    }
}
/* The generic form on a node of the last captured graph (node handles are positions): a kernel node's
 * parameters (CUgraphNodeParams: type 0, CUDA_KERNEL_NODE_PARAMS_v3 at byte 16). */
CUresult cuGraphNodeSetParams(void *node, const void *p) {
    Node *nd = last_graph ? exec_node(last_graph, node) : NULL;
    const KernelNodeParams *k = (const KernelNodeParams *)((const char *)p + 16);
    if (!nd || nd->kind != N_KERNEL || *(const int *)p != 0 || !k->func) return 1;
    nd->a = k->func; nd->b = k->params;
    memcpy(nd->dims, k->dims, sizeof nd->dims);
    return 0;
}
/* The exec runs the nodes of `graph` (same topology: here, as many nodes), all enabled. */
CUresult cuGraphExecUpdate_v2(void *exec, void *graph, void *info) {
    (void)info;
    Graph *e = exec, *g = graph;
    if (e->n != g->n) return 910;  /* CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE */
    memcpy(e->nodes, g->nodes, g->n * sizeof(Node));
    return 0;
}
CUresult cuGraphClone(void **clone, void *graph) {
    Graph *g = graph;
    for (unsigned i = 0; i < g->n; i++)
        if (g->nodes[i].kind == N_ALLOC) return 801;  /* CUDA_ERROR_NOT_SUPPORTED: alloc nodes are not cloned */
    if (nclones + 1 >= MAX_CLONES) return 2;
    Graph *c = calloc(1, sizeof(Graph));
    clones[++nclones] = c;
    c->n = c->cap = g->n;
    c->nodes = malloc((g->n ? g->n : 1) * sizeof(Node));
    memcpy(c->nodes, g->nodes, g->n * sizeof(Node));
    c->family = g->family ? g->family : g;
    for (unsigned i = 0; i < g->nedges; i++)  /* the edges, between the clone's own node handles */
        add_edge_data(c, (uintptr_t)nclones << 32 | (g->edges[i][0] & 0xffffffffu),
                      (uintptr_t)nclones << 32 | (g->edges[i][1] & 0xffffffffu), g->edges[i][2]);
    graph_nodes_live++;
    *clone = c;
    return 0;
}
/* FAKECUDA_CHECK_DESTROYED=1: a destroyed graph's memory is kept, marked, so that a launch of it is seen
 * (counted, refused: fakecuda_dead_launches) rather than reading freed memory */
static long dead_launches;
long fakecuda_dead_launches(void) { return dead_launches; }
static void free_graph(Graph *g) {
    for (unsigned k = 1; k <= nclones; k++)
        if (clones[k] == g) clones[k] = NULL;
    graph_nodes_live--;
    if (getenv("FAKECUDA_CHECK_DESTROYED")) { g->dead = 1; return; }
    free(g->nodes); free(g->edges); free(g);
}
/* The clone's node of `node` (a node of the graph it was cloned from: its position). */
CUresult cuGraphNodeFindInClone(void **out, void *node, void *clone) {
    uintptr_t pos = (uintptr_t)node & 0xffffffffu;
    for (unsigned k = 1; k <= nclones; k++)
        if (clones[k] && clones[k] == clone && pos >= 1 && pos <= clones[k]->n) {
            *out = (void *)((uintptr_t)k << 32 | pos);
            return 0;
        }
    return 1;
}
/* A node of a clone (a handle from cuGraphNodeFindInClone), or of the last captured graph. */
static Node *graph_node(void *node) {
    uintptr_t k = (uintptr_t)node >> 32;
    Graph *g = k ? (k <= nclones ? clones[k] : NULL) : last_graph;
    return g ? exec_node(g, node) : NULL;
}
CUresult cuGraphDestroyNode(void *node) {
    Node *nd = graph_node(node);
    if (!nd) return 1;
    nd->kind = N_REMOVED;
    uintptr_t k = (uintptr_t)node >> 32;  /* its edges go with it */
    Graph *g = k ? clones[k] : last_graph;
    for (unsigned j = 0; j < g->nedges;)
        if (g->edges[j][0] == (uintptr_t)node || g->edges[j][1] == (uintptr_t)node)
            memmove(g->edges[j], g->edges[j + 1], (--g->nedges - j) * sizeof *g->edges);
        else
            j++;
    return 0;
}
CUresult cuGraphKernelNodeSetParams_v2(void *node, const KernelNodeParams *p) {
    Node *nd = graph_node(node);
    if (!nd || nd->kind != N_KERNEL || !p->func) return 1;
    nd->a = p->func; nd->b = p->params;  /* (the driver copies the values; the shim keeps them alive) */
    memcpy(nd->dims, p->dims, sizeof nd->dims);
    return 0;
}
/* A memory alloc node at the end of `graph` (what a capture with cudaMallocAsync makes): never run here. */
CUresult cuGraphAddMemAllocNode(void **node, void *graph, void *const *deps, size_t n, void *params) {
    (void)deps; (void)n; (void)params;
    Graph *g = graph;
    add_node(g, N_ALLOC);
    *node = (void *)(uintptr_t)g->n;
    return 0;
}
/* ---- FAKECUDA_CHECK_ORDER=1: the GPU's order of graph launches, modelled. Each stream operation of
 * interest (a graph launch, an event record, a stream wait) is an op that depends on its stream's previous
 * op; a wait also on the op its event recorded last; a graph launch also on the previous launch of the same
 * executable graph (CUDA orders those). Host waits (event, stream, context synchronisation) mark ops done.
 * At each graph launch, the previous launch of any executable graph of the same captured graph (the program's
 * and the shim's twin: one family) must be an ancestor of it, or done: else the two could overlap on a GPU
 * (fakecuda_unordered_launches). Streams: the handle; CU_STREAM_PER_THREAD (0x2) is each thread's own;
 * NULL and CU_STREAM_LEGACY (0x1) are one. FAKECUDA_LAUNCH_DELAY_US=N: a graph launch takes N us before
 * it is enqueued (a window for another thread). */
typedef struct { uint32_t dep[2]; uint8_t done; uint32_t seen; } Op;
typedef struct { void *handle; pthread_t thread; uint32_t last; } StreamTail;
typedef struct { void *family; uint32_t last; } FamilyTail;
#define ORDER_TAILS 256
static pthread_mutex_t order_lock = PTHREAD_MUTEX_INITIALIZER;
static Op *ops;  /* ops[0] unused: 0 is "none" */
static uint32_t nops, ops_cap, order_visit;
static StreamTail stream_tails[ORDER_TAILS];
static FamilyTail family_tails[ORDER_TAILS];
static long order_checks, order_unordered;
long fakecuda_unordered_launches(void) { return order_unordered; }
long fakecuda_order_checks(void) { return order_checks; }

static int order_on(void) { return getenv("FAKECUDA_CHECK_ORDER") != NULL; }

static StreamTail *stream_tail(void *s) {
    if (s == (void *)(uintptr_t)1) s = NULL;
    int per_thread = s == (void *)(uintptr_t)2;
    for (int i = 0; i < ORDER_TAILS; i++) {
        StreamTail *t = &stream_tails[i];
        if (t->last && t->handle == s && (!per_thread || pthread_equal(t->thread, pthread_self()))) return t;
    }
    for (int i = 0; i < ORDER_TAILS; i++)
        if (!stream_tails[i].last) {
            stream_tails[i].handle = s, stream_tails[i].thread = pthread_self();
            return &stream_tails[i];
        }
    return &stream_tails[ORDER_TAILS - 1];  /* (more streams than a test makes) */
}

static uint32_t new_op(uint32_t a, uint32_t b) {
    if (nops + 2 > ops_cap) {
        ops_cap = ops_cap ? 2 * ops_cap : 1024;
        ops = realloc(ops, ops_cap * sizeof(Op));
    }
    if (!nops) nops = 1;
    ops[nops] = (Op){{a, b}, 0, 0};
    return nops++;
}

/* Whether op `target` is done or an ancestor of op `from` (ops depend only on earlier ones). */
static int reaches(uint32_t from, uint32_t target) {
    if (ops[target].done) return 1;
    uint32_t *stack = malloc(sizeof(uint32_t) * (nops + 1)), n = 0;
    int found = 0;
    order_visit++;
    stack[n++] = from;
    while (n && !found) {
        uint32_t id = stack[--n];
        if (id == target) found = 1;
        if (id <= target || ops[id].seen == order_visit) continue;
        ops[id].seen = order_visit;
        for (int k = 0; k < 2; k++)
            if (ops[id].dep[k] >= target) stack[n++] = ops[id].dep[k];
    }
    free(stack);
    return found;
}

static void mark_done(uint32_t id) {  /* and its ancestors */
    uint32_t *stack = malloc(sizeof(uint32_t) * (nops + 1)), n = 0;
    if (id) stack[n++] = id;
    while (n) {
        uint32_t k = stack[--n];
        if (!k || ops[k].done) continue;
        ops[k].done = 1;
        stack[n++] = ops[k].dep[0], stack[n++] = ops[k].dep[1];
    }
    free(stack);
}

static void order_graph_launch(Graph *e, void *stream) {
    const char *delay = getenv("FAKECUDA_LAUNCH_DELAY_US");
    if (delay) usleep((useconds_t)atoi(delay));
    if (!order_on()) return;
    pthread_mutex_lock(&order_lock);
    StreamTail *t = stream_tail(stream);
    uint32_t id = new_op(t->last, e->last_launch);
    FamilyTail *f = NULL;
    for (int i = 0; i < ORDER_TAILS && !f; i++)
        if (family_tails[i].family == e->family || !family_tails[i].family) f = &family_tails[i];
    if (f && f->family && f->last) {
        order_checks++;
        if (!reaches(id, f->last)) order_unordered++;
    }
    if (f) f->family = e->family, f->last = id;
    e->last_launch = t->last = id;
    pthread_mutex_unlock(&order_lock);
}

/* An event is 16 bytes here: its record's time, then its record's op. */
static void order_record(void *event, void *stream) {
    if (!order_on()) return;
    pthread_mutex_lock(&order_lock);
    StreamTail *t = stream_tail(stream);
    ((uint64_t *)event)[1] = t->last = new_op(t->last, 0);
    pthread_mutex_unlock(&order_lock);
}

static void order_wait(void *stream, void *event) {
    if (!order_on()) return;
    pthread_mutex_lock(&order_lock);
    StreamTail *t = stream_tail(stream);
    t->last = new_op(t->last, (uint32_t)((uint64_t *)event)[1]);
    pthread_mutex_unlock(&order_lock);
}

/* The host waited: for an event (`event`), a stream (`stream`), or the whole context (neither). */
static void order_host_wait(void *event, void *stream, int everything) {
    if (!order_on()) return;
    pthread_mutex_lock(&order_lock);
    if (everything) {
        for (uint32_t i = 1; i < nops; i++) ops[i].done = 1;
    } else if (event) {
        mark_done((uint32_t)((uint64_t *)event)[1]);
    } else {
        mark_done(stream_tail(stream)->last);
    }
    pthread_mutex_unlock(&order_lock);
}

static void order_stream_gone(void *stream) {
    if (!order_on()) return;
    pthread_mutex_lock(&order_lock);
    StreamTail *t = stream_tail(stream);
    t->last = 0, t->handle = NULL;
    pthread_mutex_unlock(&order_lock);
}

/* Launches of an executable graph so far (tests: which of a probed graph and its twin ran a replay). */
long fakecuda_exec_launches(void *exec) { return ((Graph *)exec)->launches; }
static long all_graph_launches;
long fakecuda_graph_launches(void) { return all_graph_launches; }
CUresult cuGraphDestroy(void *graph) { free_graph(graph); return 0; }
CUresult cuGraphExecDestroy(void *exec) { gpu_wait(NULL, 1); free_graph(exec); return 0; }
static void run(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, void **params);
/* fakecuda_on_clone_launch(fn): fn() runs once, at the start of the first launch of an executable graph made
 * from a clone (a twin), before the fake reads it: another thread of the program acts in that window */
static void (*clone_launch_hook)(void);
void fakecuda_on_clone_launch(void (*fn)(void)) { clone_launch_hook = fn; }
/* A launch's nodes run, in order (at the launch, or on the fake GPU's thread: gpu_queue below). */
static void graph_run(Graph *e, void *stream) {
    for (unsigned i = 0; i < e->n; i++) {
        Node *nd = &e->nodes[i];
        if (nd->disabled || nd->kind == N_ALLOC || nd->kind == N_REMOVED) continue;
        if (nd->kind == N_MEMSET) memset(nd->a, (int)nd->dims[0], nd->n);
        else if (nd->kind == N_D2H) memcpy(nd->a, nd->b, nd->n);
        else if (nd->kind == N_HOST) ((void (*)(void *))nd->a)(nd->b);
        else {
            run(nd->a, nd->dims[0], nd->dims[1], nd->dims[2], nd->dims[3], nd->dims[4], nd->dims[5], nd->b);
            void (*note)(const char *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, uintptr_t, uint32_t) =
                fakecupti("fakecupti_graph_kernel");
            const char *name = ((Function *)nd->a)->name;
            if (note && strcmp(name, "__neutrino_graph_append"))
                note(name, nd->dims[0], nd->dims[1], nd->dims[2], nd->dims[3], nd->dims[4], nd->dims[5], (uintptr_t)stream,
                     (uint32_t)((uintptr_t)e >> 4) | 1u);
        }
    }
}

/* FAKECUDA_GPU_LAG_MS=M: a GPU behind its host. Graph launches return at once and run later, in launch order, on
 * a thread of the fake's: the first one M ms after it was launched, then one every FAKECUDA_GPU_REPLAY_US
 * microseconds. A wait for a stream with launches queued on it (cuStreamSynchronize; the legacy stream: all),
 * cuCtxSynchronize and cuGraphExecDestroy wait for them; other streams' copies run at once (a copy engine beside
 * the kernels). */
typedef struct Queued { Graph *e; void *stream; struct Queued *next; } Queued;
static pthread_mutex_t gpu_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gpu_more = PTHREAD_COND_INITIALIZER, gpu_done = PTHREAD_COND_INITIALIZER;
static Queued *gpu_head, *gpu_tail;
static Queued *gpu_running;
static int gpu_thread_on;

static int gpu_lags(void) { return getenv("FAKECUDA_GPU_LAG_MS") != NULL; }

static void *gpu_loop(void *arg) {
    (void)arg;
    long lag_us = 1000L * atol(getenv("FAKECUDA_GPU_LAG_MS")), each_us = 0;
    const char *each = getenv("FAKECUDA_GPU_REPLAY_US");
    if (each) each_us = atol(each);
    int first = 1;
    pthread_mutex_lock(&gpu_lock);
    for (;;) {
        while (!gpu_head) pthread_cond_wait(&gpu_more, &gpu_lock);
        Queued *q = gpu_running = gpu_head;
        gpu_head = q->next;
        if (!gpu_head) gpu_tail = NULL;
        pthread_mutex_unlock(&gpu_lock);
        if (first && lag_us) usleep((useconds_t)lag_us);
        else if (each_us) usleep((useconds_t)each_us);
        first = 0;
        graph_run(q->e, q->stream);
        pthread_mutex_lock(&gpu_lock);
        gpu_running = NULL;
        free(q);
        pthread_cond_broadcast(&gpu_done);
    }
    return NULL;
}

static void gpu_queue(Graph *e, void *stream) {
    Queued *q = calloc(1, sizeof *q);
    q->e = e, q->stream = stream;
    pthread_mutex_lock(&gpu_lock);
    if (!gpu_thread_on) {
        pthread_t t;
        gpu_thread_on = pthread_create(&t, NULL, gpu_loop, NULL) == 0;
        if (gpu_thread_on) pthread_detach(t);
    }
    if (gpu_tail) gpu_tail->next = q; else gpu_head = q;
    gpu_tail = q;
    pthread_cond_signal(&gpu_more);
    pthread_mutex_unlock(&gpu_lock);
}

/* Whether a launch queued or running is on `stream` (everything: any). */
static int gpu_pending(void *stream, int everything) {
    int legacy = stream == NULL || stream == (void *)(uintptr_t)1;
    if (gpu_running && (everything || legacy || gpu_running->stream == stream)) return 1;
    for (Queued *q = gpu_head; q; q = q->next)
        if (everything || legacy || q->stream == stream) return 1;
    return 0;
}

static void gpu_wait(void *stream, int everything) {
    if (!gpu_lags()) return;
    pthread_mutex_lock(&gpu_lock);
    while (gpu_pending(stream, everything)) pthread_cond_wait(&gpu_done, &gpu_lock);
    pthread_mutex_unlock(&gpu_lock);
}

CUresult cuGraphLaunch(void *exec, void *stream) {
    Graph *e = exec;
    if (clone_launch_hook && !e->dead && e->from_clone) {
        void (*fn)(void) = clone_launch_hook;
        clone_launch_hook = NULL;
        fn();
    }
    if (e->dead) { dead_launches++; return 400; }  /* CUDA_ERROR_INVALID_HANDLE */
    /* FAKECUDA_REFUSE_CLONE_LAUNCH=1: an executable graph of a clone is refused at launch (out of memory
     * for its first upload, say), nothing run */
    if (e->from_clone && getenv("FAKECUDA_REFUSE_CLONE_LAUNCH")) return 2;
    if (e->untraced && graph_trace_now() == 1) {
        fprintf(stderr, "fakecuda: a graph instantiated while GRAPH_TRACE was off launched with it on (CUPTI crashes)\n");
        abort();
    }
    order_graph_launch(e, stream);
    e->launches++;
    all_graph_launches++;
    void (*replay)(uintptr_t, uint32_t) = fakecupti("fakecupti_graph_launch");
    if (replay) replay((uintptr_t)stream, (uint32_t)((uintptr_t)exec >> 4) | 1u);
    if (gpu_lags()) gpu_queue(e, stream);
    else graph_run(e, stream);
    return 0;
}
CUresult cuStreamSynchronize(void *s) { gpu_wait(s, 0); order_host_wait(NULL, s, 0); return 0; }
/* A stream made gets a CUPTI id of its own from the fake CUPTI (as the driver's streams, unique for the life
 * of the process, whatever their handle: one destroyed and made again at the same address is another). */
CUresult cuStreamCreate(void **s, unsigned f) {
    (void)f;
    *s = malloc(8);
    void *h = dlopen("libcupti.so.13", RTLD_NOW | RTLD_NOLOAD);
    void (*made)(void *) = h ? (void (*)(void *))dlsym(h, "fakecupti_stream_made") : NULL;
    if (h) dlclose(h);
    if (made) made(*s);
    return 0;
}
/* In the log, in order: FAKECUDA_LOG_WAITS=1, stream waits; FAKECUDA_LOG_STREAM_OPS=1, event records and
 * stream destroys too */
static void log_stream_op(const char *what, void *s, void *e) {
    const char *log = getenv("FAKECUDA_LOG");
    if (log && getenv(strcmp(what, "wait") ? "FAKECUDA_LOG_STREAM_OPS" : "FAKECUDA_LOG_WAITS")) {
        FILE *fh = fopen(log, "a");
        if (fh) { fprintf(fh, "%s stream=%p event=%p\n", what, s, e); fclose(fh); }
    }
}
CUresult cuStreamDestroy_v2(void *s) { log_stream_op("destroy", s, NULL); order_stream_gone(s); free(s); return 0; }
CUresult cuStreamWaitEvent(void *s, void *e, unsigned f) {
    (void)f;
    log_stream_op("wait", s, e);  /* the fast path's wait for a new ring's memset; a twin's order */
    order_wait(s, e);
    return 0;
}
CUresult cuMemAllocAsync(uint64_t *p, size_t n, void *s) {
    (void)s;
    if (alloc_refused()) return 900; /* CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED */
    void *m = malloc(n); memset(m, 0xAB, n); *p = (uintptr_t)m;
    live_allocations++;
    return 0;
}
CUresult cuMemFreeAsync(uint64_t p, void *s) { (void)s; free((void *)(uintptr_t)p); live_allocations--; return 0; }
CUresult cuMemAlloc_v2(uint64_t *p, size_t n) { return cuMemAllocAsync(p, n, 0); }
CUresult cuMemFree_v2(uint64_t p) { return cuMemFreeAsync(p, 0); }
CUresult cuMemsetD8Async(uint64_t p, unsigned char v, size_t n, void *s) {
    Node *nd = capture(s, N_MEMSET);
    if (nd) { nd->a = (void *)(uintptr_t)p; nd->n = n; nd->dims[0] = v; return 0; }
    memset((void *)(uintptr_t)p, v, n);
    note_copy(2, 0, n);
    return 0;
}
CUresult cuMemcpyHtoDAsync_v2(uint64_t d, const void *h, size_t n, void *s) {
    (void)s;
    memcpy((void *)(uintptr_t)d, h, n);
    note_copy(1, 1, n);
    return 0;
}
CUresult cuMemcpyDtoHAsync_v2(void *h, uint64_t d, size_t n, void *s) {
    Node *nd = capture(s, N_D2H);
    if (nd) { nd->a = h; nd->b = (void *)(uintptr_t)d; nd->n = n; return 0; }
    memcpy(h, (void *)(uintptr_t)d, n);
    note_copy(1, 2, n);
    return 0;
}
/* A peer-to-peer copy between two contexts' memory (one address space here): the fake CUPTI's MEMCPY2 record. */
CUresult cuMemcpyPeerAsync(uint64_t dst, void *dst_ctx, uint64_t src, void *src_ctx, size_t n, void *s) {
    memcpy((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
    void (*fn)(uint64_t, uintptr_t, uint32_t, uint32_t) =
        (void (*)(uint64_t, uintptr_t, uint32_t, uint32_t))fakecupti("fakecupti_peer_copy");
    if (fn) fn(n, (uintptr_t)s, (uint32_t)(((uintptr_t)src_ctx - 0xC0) / 0x100), (uint32_t)(((uintptr_t)dst_ctx - 0xC0) / 0x100));
    return 0;
}
/* cuProfilerStart / cuProfilerStop: counted (a program marking its region of interest), nothing else. */
static int profiler_calls;
CUresult cuProfilerStart(void) { profiler_calls++; return 0; }
CUresult cuProfilerStop(void) { profiler_calls++; return 0; }
int fakecuda_profiler_calls(void) { return profiler_calls; }
/* CUDA_MEMCPY2D: host or device memory (one address space here), row by row with a pitch each side. */
typedef struct {
    size_t src_x, src_y; int src_type; const void *src_host; uint64_t src_device; void *src_array; size_t src_pitch;
    size_t dst_x, dst_y; int dst_type; void *dst_host; uint64_t dst_device; void *dst_array; size_t dst_pitch;
    size_t width, height;
} FakeCopy2D;
CUresult cuMemcpy2DAsync_v2(const FakeCopy2D *c, void *s) {
    (void)s;
    const char *src = c->src_type == 1 ? (const char *)c->src_host : (const char *)(uintptr_t)c->src_device;
    char *dst = c->dst_type == 1 ? (char *)c->dst_host : (char *)(uintptr_t)c->dst_device;
    if (c->width > c->src_pitch || c->width > c->dst_pitch) return 1; /* CUDA_ERROR_INVALID_VALUE */
    for (size_t y = 0; y < c->height; y++)
        memcpy(dst + c->dst_x + (c->dst_y + y) * c->dst_pitch, src + c->src_x + (c->src_y + y) * c->src_pitch, c->width);
    note_copy(1, 2, c->width * c->height);
    return 0;
}
CUresult cuMemHostAlloc(void **p, size_t n, unsigned f) {
    (void)f;
    if (alloc_refused()) return 900;
    *p = calloc(1, n);
    live_allocations++;
    return 0;
}
CUresult cuMemFreeHost(void *p) { free(p); live_allocations--; return 0; }
CUresult cuMemHostGetDevicePointer_v2(uint64_t *d, void *p, unsigned f) { (void)f; *d = (uintptr_t)p; return 0; }
/* An event holds the time it was recorded. FAKECUDA_EVENT_DELAY_MS=N: it completes N ms after
 * its record (a slow kernel), so a test can see what happens while launches are in flight. */
static uint64_t fake_now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}
/* An event: its record time (u64), then its creation flags (u32). FAKECUDA_LOG_STREAM_OPS=1 logs creations. */
CUresult cuEventCreate(void **e, unsigned f) {
    *e = calloc(1, 16);
    memcpy((char *)*e + 8, &f, 4);
    log_stream_op(f & 2 ? "create-untimed" : "create-timed", NULL, *e);
    return 0;
}
static unsigned event_flags(void *e) { unsigned f; memcpy(&f, (char *)e + 8, 4); return f; }
static void *records_refused_on;  /* fakecuda_refuse_records_on(s): event records on stream s fail */
void fakecuda_refuse_records_on(void *s) { records_refused_on = s; }
CUresult cuEventRecord(void *e, void *s) {
    if (s && s == records_refused_on) return 1;
    log_stream_op("record", s, e);
    *(uint64_t *)e = fake_now_ns();
    order_record(e, s);
    return 0;
}
CUresult cuEventQuery(void *e) {
    const char *d = getenv("FAKECUDA_EVENT_DELAY_MS");
    if (d && fake_now_ns() < *(uint64_t *)e + (uint64_t)atoi(d) * 1000000ull) return 600; /* NOT_READY */
    return 0;
}
CUresult cuEventSynchronize(void *e) {
    while (cuEventQuery(e) == 600) { struct timespec t = {0, 1000000}; nanosleep(&t, NULL); }
    order_host_wait(e, NULL, 0);
    return 0;
}
CUresult cuEventElapsedTime(float *ms, void *a, void *b) {
    if (!a || !b || (event_flags(a) & 2) || (event_flags(b) & 2)) return 400; /* CUDA_ERROR_INVALID_HANDLE, as CUDA */
    *ms = 0.004f;
    return 0;
}
CUresult cuEventDestroy_v2(void *e) { free(e); return 0; }

/* device dev's primary context (retained: the fake keeps no count, a release never destroys it) */
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
    if (device_cc(dev) < 0) return 101;
    *ctx = (void *)(uintptr_t)(0xC0 + 0x100 * dev);
    return 0;
}
static CUresult primary_release(int dev) {
    (void)dev;
    const char *log = getenv("FAKECUDA_LOG");
    FILE *fh = log ? fopen(log, "a") : NULL;
    if (fh) { fprintf(fh, "primary context released\n"); fclose(fh); }
    return 0;
}

CUresult cuDevicePrimaryCtxRelease_v2(int dev) { return primary_release(dev); }
/* the entry point before CUDA 11, still exported (not through the _v2 symbol, which the shim interposes) */
CUresult cuDevicePrimaryCtxRelease(int dev) { return primary_release(dev); }

/* a reset (the fake keeps the context and its streams: the shim's queues are retired all the same) */
CUresult cuDevicePrimaryCtxReset_v2(int dev) {
    const char *log = getenv("FAKECUDA_LOG");
    FILE *fh = log ? fopen(log, "a") : NULL;
    if (fh) { fprintf(fh, "primary context reset dev=%d\n", dev); fclose(fh); }
    return device_cc(dev) < 0 ? 101 : 0;
}

typedef struct { char *ptx; } Link;
CUresult cuLinkCreate_v2(unsigned n, void *o, void **v, void **state) { (void)n; (void)o; (void)v; *state = calloc(1, sizeof(Link)); return 0; }
CUresult cuLinkAddData_v2(void *st, int type, void *data, size_t size, const char *name, unsigned n, void *o, void **v) {
    (void)type; (void)name; (void)n; (void)o; (void)v;
    Link *l = st;
    l->ptx = calloc(1, size + 11);
    memcpy(l->ptx, "FAKECUBIN\0", 10);
    memcpy(l->ptx + 10, data, size);
    return 0;
}
CUresult cuLinkComplete(void *st, void **cubin, size_t *size) {
    Link *l = st;
    *cubin = l->ptx;
    *size = 10 + strlen(l->ptx + 10) + 1;
    return 0;
}
CUresult cuLinkDestroy(void *st) { Link *l = st; free(l->ptx); free(l); return 0; }

static uint64_t fake_now_ns(void);
/* The graph append kernel of neutrino/runtime/cudagraphs/ring.py, as the device runs it (all chunks of
 * a node at once), reading the descriptors and arguments laid out as shim/shim.h says
 * (nt_graph_node_desc, nt_graph_append_args; tests/test_shim_layouts.py holds ring.py's ctypes to
 * them). The node's state (u64): replays, written, dropped. A full ring drops the replay, or waits
 * for the host's poller. */
static void graph_append(void **params, unsigned nodes) {
    nt_graph_append_args a;
    uint64_t *args = (uint64_t *)&a;  /* the launch passes each argument by its own pointer */
    for (size_t i = 0; i < sizeof a / sizeof(uint64_t); i++) args[i] = *(uint64_t *)params[i];
    for (unsigned b = 0; b < nodes; b++) {
        const nt_graph_node_desc *d = (const nt_graph_node_desc *)(uintptr_t)(a.desc + sizeof *d * b);
        uint64_t *mirror = (uint64_t *)(uintptr_t)d->ring, *flags = mirror + 8, *st = (uint64_t *)(uintptr_t)d->state;
        uint64_t *consumed = (uint64_t *)(uintptr_t)d->consumed;
        uint64_t runs = st[0], r = runs + a.skip, w = st[1];  /* the replay's number: runs + replays left out */
        st[0] = runs + 1;
        mirror[0] = r + 1;
        /* the probe gate, 8 bytes before the maps: what this replay ran with, then the next one's (a
         * replay the host picked ran ungated, is selected, and leaves the gate alone) */
        uint32_t *gate = (uint32_t *)(uintptr_t)(d->src - 8), ran_gated = a.host ? 0 : *gate;
        int chosen = a.host || !(r < a.start || r >= a.stop || (r - a.start) % a.every);
        if (!a.host) *gate = (r + 1 < a.start || r + 1 >= a.stop || (r + 1 - a.start) % a.every) ? 1 : 0;
        if (ran_gated && !chosen) continue;  /* the probe wrote nothing: the maps are still zero */
        if (chosen) {
            uint64_t until = fake_now_ns() + a.wait_ns;
            while (w - __atomic_load_n(consumed, __ATOMIC_ACQUIRE) >= d->nslots && a.wait_ns && fake_now_ns() < until) {
                struct timespec t = {0, 50000};  /* --when-full=wait: the host's poller drains meanwhile */
                nanosleep(&t, NULL);
            }
            if (w - __atomic_load_n(consumed, __ATOMIC_ACQUIRE) < d->nslots) {
                uint64_t slot = w % d->nslots;
                memcpy((void *)(uintptr_t)(d->slots + slot * d->stride), (void *)(uintptr_t)d->src, d->bytes);
                __atomic_store_n(&flags[slot], r + 1, __ATOMIC_RELEASE);
                mirror[1] = st[1] = w + 1;
            } else {
                mirror[2] = ++st[2];
            }
        }
        memset((void *)(uintptr_t)d->src, 0, d->bytes);  /* the maps read zero at the next replay */
    }
}

/* The advance a graph_chain kernel's thread 0 of block 0 makes at its exit (neutrino/passes/graph_chain.py, modelled
 * by neutrino.runtime.cudagraphs.chain.device_advance; spec/runtime.md, "The chain"): the head its own head's `adv`
 * names is primed, or its launch just finished published (or counted dropped) and its next slot picked and
 * tagged. Words (u64): cur, adv, ring, geom, written, dropped (bit 32: primed), drained. */
static void chain_advance(const uint64_t *head) {
    uint64_t *h = (uint64_t *)(uintptr_t)head[1];
    if (!h) return;
    const uint64_t primed = 1ull << 32, low = 0xffffffffull;
    if (!(h[5] & primed)) { h[5] |= primed; return; }
    uint64_t written = h[4] + (h[0] != 0), dropped = h[5] + (h[0] == 0);
    uint64_t mask = h[3] & low, stride = h[3] >> 32, drained = __atomic_load_n(&h[6], __ATOMIC_ACQUIRE);
    uint64_t next = written - drained >= mask + 1 ? 0 : h[2] + (written & mask) * stride;
    if (next) *(uint64_t *)(uintptr_t)(next + stride - 16) = written + (dropped & low) + 1;
    h[0] = next;
    __atomic_store_n(&h[5], dropped, __ATOMIC_RELEASE);
    __atomic_store_n(&h[4], written, __ATOMIC_RELEASE);  /* (the host's poller reads it: the slot is whole) */
}

static void run_probed(Function *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       void **params);

static void run(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, void **params) {
    Function *fn = f;
    if (!strcmp(fn->name, "__neutrino_graph_append")) { graph_append(params, gy); return; }
    run_probed(fn, gx, gy, gz, bx, by, bz, params);
    /* the graph_chain variant (its PTX names the advance's register): the first buffer parameter, tagged, is the
     * node's head; the kernel writes at its `cur` (run_probed), then advances the head its `adv` names */
    const char *bp = getenv("FAKECUDA_BUFPARAM");
    if (bp && params && strstr(fn->mod->image, "__nt_buf") && strstr(fn->mod->image, "%nt_ch_adv")) {
        uint64_t tagged = *(uint64_t *)params[atoi(bp)];
        if (tagged & 1) chain_advance((const uint64_t *)(uintptr_t)(tagged & ~1ull));
    }
}

static void run_probed(Function *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       void **params) {
    int probed = strstr(fn->mod->image, "__nt_buf") != NULL;
    const char *log = getenv("FAKECUDA_LOG");
    if (log) {
        FILE *fh = fopen(log, "a");
        if (fh) { fprintf(fh, "%s probed=%d grid=%u\n", fn->name, probed, gx); fclose(fh); }
    }
    const char *bp = getenv("FAKECUDA_BUFPARAM");
    if (!probed || !bp || !params) return;
    uint64_t buf = *(uint64_t *)params[atoi(bp)];
    if ((buf & 1) && strstr(fn->mod->image, "%nt_ch_adv")) { /* the chain's head: write at its cur (0: nowhere) */
        buf = *(uint64_t *)(uintptr_t)(buf & ~1ull);
        if (!buf) return;
    } else if (buf & 1) { /* a graph node's pointer: its probe gate is the u32 8 bytes before (passes/buffers.py) */
        buf &= ~1ull;
        if (*(uint32_t *)(uintptr_t)(buf - 8)) return;
    }
    const char *ring = getenv("FAKECUDA_RING");
    if (ring) { /* a count-sized thread map's ring (passes/ring.py): each thread tries FAKECUDA_RING records,
                 * u64 1000 * unit + j, reserved round by round from the head; slots past cap are lost */
        uint32_t cap = *(uint32_t *)params[atoi(bp) + 1];
        unsigned threads = gx * gy * gz * bx * by * bz, tries = (unsigned)atoi(ring);
        uint64_t *head = (uint64_t *)(uintptr_t)buf;
        uint32_t *tags = (uint32_t *)(uintptr_t)(buf + 16);
        uint64_t *rrecs = (uint64_t *)(uintptr_t)(buf + (16 + 4 * (uint64_t)cap + 15) / 16 * 16);
        for (unsigned j = 0; j < tries; j++)
            for (unsigned u = 0; u < threads; u++) {
                uint64_t slot = (*head)++;
                if (slot < cap) { tags[slot] = u; rrecs[slot] = 1000ull * u + j; }
            }
        return;
    }
    unsigned warps = (bx * by * bz + 31) / 32, units = gx * gy * gz * warps;
    uint32_t *counts = (uint32_t *)(uintptr_t)buf;
    char *recs = (char *)(uintptr_t)buf + ((4 * units + 15) / 16) * 16;
    static unsigned probed_runs;
    /* FAKECUDA_ALTERNATE: every other probed launch only the first half of the warps save a record,
     * like warps that exit early: their counts must read 0, not the last launch's */
    unsigned saving = (getenv("FAKECUDA_ALTERNATE") && probed_runs++ % 2) ? units / 2 : units;
    for (unsigned u = 0; u < saving; u++) {
        counts[u] = 1;
        *(uint64_t *)(recs + 16 * u) = u;
        *(uint32_t *)(recs + 16 * u + 8) = 7;
        *(uint32_t *)(recs + 16 * u + 12) = u % 132;
    }
}

static int stale(void *f) {
    Function *fn = f;
    if (fn->mod && fn->mod->image) return 0;
    const char *log = getenv("FAKECUDA_LOG");
    FILE *fh = log ? fopen(log, "a") : NULL;
    if (fh) { fprintf(fh, "%s stale launch\n", fn->name); fclose(fh); }
    return 1;
}

/* The launch itself; the _ptsz entry points call it directly (a call of the exported cuLaunchKernel from
 * here would reach the shim's hook a second time, which the real driver never does). */
static CUresult launch_kernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                              unsigned sh, void *s, void **p, void **e) {
    (void)sh; (void)e;
    fake_call_detail("%s stream %p%s grid %u", ((Function *)f)->name, s, cap_stream && s == cap_stream ? " (captured)" : "",
                     gx);
    if (!gx || !gy || !gz) return 1; /* CUDA_ERROR_INVALID_VALUE, as the real driver: no record */
    if (stale(f)) return 400; /* the real driver: an invalid handle, or another kernel's code */
    /* FAKECUDA_REFUSE_PROBED=1: an instrumented kernel's launch is refused (too many resources requested) */
    if (getenv("FAKECUDA_REFUSE_PROBED") && strstr(((Function *)f)->mod->image, "__nt_buf")) return 701;
    Node *nd = capture(s, N_KERNEL);
    if (nd) { /* the argument arrays are kept alive by their owners in these tests */
        unsigned d[6] = {gx, gy, gz, bx, by, bz};
        nd->a = f; nd->b = p; memcpy(nd->dims, d, sizeof d);
        return 0;
    }
    run(f, gx, gy, gz, bx, by, bz, p);
    void (*note)(const char *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, uintptr_t) =
        fakecupti("fakecupti_kernel");
    if (note && strcmp(((Function *)f)->name, "__neutrino_graph_append")) note(((Function *)f)->name, gx, gy, gz, bx, by, bz, sh, (uintptr_t)s);
    return 0;
}
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned sh, void *s, void **p, void **e) {
    return launch_kernel(f, gx, gy, gz, bx, by, bz, sh, s, p, e);
}
/* A _ptsz entry point's NULL stream is the calling thread's per-thread default stream (CU_STREAM_PER_THREAD). */
#define PER_THREAD_NULL(s) ((s) ? (s) : (void *)(uintptr_t)2)
CUresult cuLaunchKernel_ptsz(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                             unsigned sh, void *s, void **p, void **e) {
    return launch_kernel(f, gx, gy, gz, bx, by, bz, sh, PER_THREAD_NULL(s), p, e);
}
CUresult cuLaunchKernelEx(const Config *c, void *f, void **p, void **e) {
    return cuLaunchKernel(f, c->gx, c->gy, c->gz, c->bx, c->by, c->bz, c->shmem, c->stream, p, e);
}
CUresult cuLaunchKernelEx_ptsz(const Config *c, void *f, void **p, void **e) {
    return launch_kernel(f, c->gx, c->gy, c->gz, c->bx, c->by, c->bz, c->shmem, PER_THREAD_NULL(c->stream), p, e);
}
CUresult cuLaunchCooperativeKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                   unsigned bz, unsigned sh, void *s, void **p) {
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, sh, s, p, 0);
}
CUresult cuLaunchCooperativeKernel_ptsz(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                        unsigned bz, unsigned sh, void *s, void **p) {
    return launch_kernel(f, gx, gy, gz, bx, by, bz, sh, PER_THREAD_NULL(s), p, 0);
}

CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, unsigned long long flags, void *status);
CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, unsigned long long flags) {
    return cuGetProcAddress_v2(sym, pfn, ver, flags, NULL);
}

#define E(n) {#n, (void *)n}
static const struct { const char *name; void *fn; } table[] = {
    E(cuInit), E(cuModuleLoad), E(cuModuleLoadData), E(cuModuleLoadDataEx), E(cuModuleGetFunction), E(cuLibraryLoadData),
    E(cuLibraryGetKernel), E(cuKernelGetFunction), E(cuLaunchKernel), E(cuLaunchKernelEx),
    E(cuLaunchCooperativeKernel), E(cuLinkComplete), E(cuModuleUnload), E(cuLibraryUnload), E(cuCtxGetCurrent), E(cuGraphInstantiateWithFlags),
    E(cuGraphLaunch), E(cuGraphDestroy), E(cuGraphExecDestroy), E(cuLaunchHostFunc),
    {"cuStreamBeginCapture", (void *)cuStreamBeginCapture_v2}, E(cuStreamEndCapture),
    {"cuStreamDestroy", (void *)cuStreamDestroy_v2},
    {"cuDevicePrimaryCtxRelease", (void *)cuDevicePrimaryCtxRelease_v2}, E(cuDevicePrimaryCtxRetain),
    {"cuDevicePrimaryCtxReset", (void *)cuDevicePrimaryCtxReset_v2},
};
static const struct { const char *name; void *fn; } ptsz[] = {
    {"cuLaunchKernel", (void *)cuLaunchKernel_ptsz}, {"cuLaunchKernelEx", (void *)cuLaunchKernelEx_ptsz},
    {"cuLaunchCooperativeKernel", (void *)cuLaunchCooperativeKernel_ptsz},
};

CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, unsigned long long flags, void *status) {
    (void)status;
    *pfn = NULL;
    if (!strcmp(sym, "cuGetProcAddress")) {
        *pfn = ver >= 12000 ? (void *)cuGetProcAddress_v2 : (void *)cuGetProcAddress;
        return 0;
    }
    if (!strcmp(sym, "cuLinkAddData")) { *pfn = (void *)cuLinkAddData_v2; return 0; }
    if (flags & 2)
        for (unsigned i = 0; i < sizeof ptsz / sizeof *ptsz; i++)
            if (!strcmp(sym, ptsz[i].name)) { *pfn = ptsz[i].fn; return 0; }
    for (unsigned i = 0; i < sizeof table / sizeof *table; i++)
        if (!strcmp(sym, table[i].name)) { *pfn = table[i].fn; return 0; }
    return 500;
}

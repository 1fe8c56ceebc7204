/* Neutrino's LD_PRELOAD shim.
 *
 * It sees the CUDA driver calls Neutrino cares about by every route a
 * program takes to the driver (see shared notes, cuda-hooking.md):
 *   1. exported symbols (programs linked against libcuda),
 *   2. dlsym() on a libcuda handle (PyTorch, Triton): dlsym is interposed,
 *   3. cuGetProcAddress / cuGetProcAddress_v2, including the lookup of
 *      "cuGetProcAddress" itself (how libcudart 13 reaches everything).
 * Everything else goes to the driver untouched: there is no forwarder per
 * driver symbol, only the ~20 functions below.
 *
 * Module loads and function lookups are forwarded to the driver first, then
 * reported to Python callbacks (registered through ctypes with
 * neutrino_register_callbacks). Module and library unloads are reported
 * before the driver's (neutrino_register_unload_callback): the driver reuses
 * the handles of an unloaded module for the next ones, so Python forgets
 * every handle of the module first (neutrino_forget_function). Launches of functions that Python marked as
 * probed go to the Python launch callback; any other launch costs one
 * lock-free hash lookup and goes straight to the driver.
 *
 * In a process without a Python interpreter (an nvcc-built program) the shim
 * embeds one: at the first intercepted driver call it dlopen()s the libpython
 * named by NEUTRINO_LIBPYTHON and runs neutrino.runtime.start.bootstrap.
 *
 * The shim includes no CUDA header: the few types it needs are declared here,
 * so header changes (versioned-API macros) cannot break its build.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shim.h"

typedef int CUresult;
typedef unsigned long long cuuint64_t;
#define CUDA_SUCCESS 0
#define CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM 0x2

typedef struct {
    unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    void *hStream;
    void *attrs;
    unsigned numAttrs;
} CUlaunchConfig;

/* ------------------------------------------------------------------ hooks */

enum {
    H_GPA, H_GPA_V2,
    H_MODULE_LOAD, H_MODULE_LOAD_DATA, H_MODULE_LOAD_DATA_EX, H_MODULE_LOAD_FATBIN,
    H_LIBRARY_LOAD_DATA, H_LIBRARY_LOAD_FILE, H_LINK_ADD_DATA, H_LINK_COMPLETE,
    H_MODULE_GET_FUNCTION, H_LIBRARY_GET_KERNEL, H_KERNEL_GET_FUNCTION, H_LIBRARY_GET_MODULE,
    H_MODULE_UNLOAD, H_LIBRARY_UNLOAD,
    H_LAUNCH, H_LAUNCH_PTSZ, H_LAUNCH_EX, H_LAUNCH_EX_PTSZ, H_LAUNCH_COOP, H_LAUNCH_COOP_PTSZ,
    H_CTX_DESTROY, H_PRIMARY_RELEASE, H_PRIMARY_RESET, H_STREAM_DESTROY, H_PRIMARY_RETAIN, H_PRIMARY_RELEASE_V1,
    H_COUNT
};

/* exported name of each hooked driver function (the real one has the same name) */
static const char *const hook_names[H_COUNT] = {
    "cuGetProcAddress", "cuGetProcAddress_v2",
    "cuModuleLoad", "cuModuleLoadData", "cuModuleLoadDataEx", "cuModuleLoadFatBinary",
    "cuLibraryLoadData", "cuLibraryLoadFromFile", "cuLinkAddData_v2", "cuLinkComplete",
    "cuModuleGetFunction", "cuLibraryGetKernel", "cuKernelGetFunction", "cuLibraryGetModule",
    "cuModuleUnload", "cuLibraryUnload",
    "cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz",
    "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel_ptsz",
    "cuCtxDestroy_v2", "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxReset_v2", "cuStreamDestroy_v2",
    "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease",
};

static void *hook_fns[H_COUNT]; /* our wrappers, filled in by init_hook_table */
static void *_Atomic real_fns[H_COUNT];

/* ------------------------------------------------------------------ real dlsym / libcuda */

static nt_dlsym_fn real_dlsym;  /* realsym.c's, kept here: our dlsym calls it on every lookup */

static void init_real_dlsym(void) {
    if (!real_dlsym) real_dlsym = neutrino_real_dlsym();
}

static void *real(int slot) {
    void *p = atomic_load_explicit(&real_fns[slot], memory_order_acquire);
    if (p) return p;
    p = neutrino_real_sym(hook_names[slot]);
    atomic_store_explicit(&real_fns[slot], p, memory_order_release);
    return p;
}

#define CU_NOT_FOUND 500 /* CUDA_ERROR_NOT_FOUND */
#define REAL(slot, type) ((type)real(slot))

/* ------------------------------------------------------------------ probed set */

/* Open addressing, never shrinks. Keys are CUfunction/CUkernel handles.
 * Readers take no lock; writers (rare: one per probed function) hold add_lock. */
#define SET_BITS 16
#define SET_SIZE (1u << SET_BITS)
typedef struct {
    _Atomic uintptr_t key;
    _Atomic int live;
    _Atomic uint64_t launches;
} entry_t;
static entry_t probed[SET_SIZE];
static _Atomic int probed_count;
static pthread_mutex_t add_lock = PTHREAD_MUTEX_INITIALIZER;

static inline unsigned slot_of(uintptr_t k) {
    return (unsigned)(((uint64_t)k * 0x9E3779B97F4A7C15ull) >> (64 - SET_BITS));
}

static entry_t *find(uintptr_t k) {
    unsigned i = slot_of(k);
    for (unsigned n = 0; n < SET_SIZE; n++, i = (i + 1) & (SET_SIZE - 1)) {
        uintptr_t key = atomic_load_explicit(&probed[i].key, memory_order_acquire);
        if (key == k) return &probed[i];
        if (key == 0) return NULL;
    }
    return NULL;
}

/* Returns 1 on success, 0 if the set is full. */
int neutrino_probe_add(void *handle) {
    uintptr_t k = (uintptr_t)handle;
    if (!k) return 0;
    int ok = 0;
    pthread_mutex_lock(&add_lock);
    entry_t *e = find(k);
    if (e) {
        atomic_store(&e->live, 1);
        ok = 1;
    } else if (atomic_load(&probed_count) < (int)(SET_SIZE * 3 / 4)) {
        unsigned i = slot_of(k);
        while (atomic_load(&probed[i].key) != 0) i = (i + 1) & (SET_SIZE - 1);
        atomic_store(&probed[i].live, 1);
        atomic_store_explicit(&probed[i].key, k, memory_order_release);
        atomic_fetch_add(&probed_count, 1);
        ok = 1;
    }
    pthread_mutex_unlock(&add_lock);
    return ok;
}

void neutrino_probe_remove(void *handle) {
    entry_t *e = find((uintptr_t)handle);
    if (e) atomic_store(&e->live, 0);
}

/* The handle no longer stands for the kernel it was probed as (its module was unloaded, or the
 * driver returned it for another kernel): its launches go straight to the driver, and its launch
 * count restarts, for the kernel the handle is looked up as next (--launches counts per kernel). */
void neutrino_forget_function(void *handle) {
    entry_t *e = find((uintptr_t)handle);
    if (!e) return;
    atomic_store(&e->live, 0);
    atomic_store(&e->launches, 0);
}

int neutrino_probe_contains(void *handle) {
    entry_t *e = find((uintptr_t)handle);
    return e && atomic_load(&e->live);
}

/* which launches of a probed function go to Python: start <= i < stop, every `every`-th */
static _Atomic uint64_t sel_start = 0, sel_stop = UINT64_MAX, sel_every = 1;

void neutrino_set_launch_filter(uint64_t start, uint64_t stop, uint64_t every) {
    atomic_store(&sel_start, start);
    atomic_store(&sel_stop, stop);
    atomic_store(&sel_every, every ? every : 1);
}

/* While a framework compiles (XLA autotuning its GEMMs, say), the launches it makes are candidates
 * it times, not the program's computation: probed, they would run slower and another candidate
 * could win, changing the program's results. Python opens a window around each compile
 * (runtime/modules/frameworks.py); launches of probed kernels inside it run the original kernel and are
 * counted. A count, not a flag: compiles on two threads overlap. */
static _Atomic int suspended_windows;
static _Atomic uint64_t suspended_launches;

void neutrino_suspend_probing(int open) {
    atomic_fetch_add(&suspended_windows, open ? 1 : -1);
}

uint64_t neutrino_suspended_launches(void) {
    return atomic_load(&suspended_launches);
}

/* ------------------------------------------------------------------ callbacks */

typedef void (*cb_module_t)(int kind, void *handle, const void *image, const char *path);
typedef int (*cb_function_t)(int kind, void *owner, const char *name, void *out);
typedef int (*cb_launch_t)(int kind, void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                           unsigned bz, unsigned shmem, void *stream, void **params, void **extra, void *config,
                           uint64_t index);
typedef void (*cb_link_t)(int kind, void *state, int type, const void *data, size_t size);
typedef void (*cb_exit_t)(void);
typedef void (*cb_teardown_t)(void);

static cb_module_t _Atomic cb_module;
static cb_function_t _Atomic cb_function;
static cb_launch_t _Atomic cb_launch;
static cb_link_t _Atomic cb_link;
static cb_exit_t _Atomic cb_exit;
static cb_teardown_t _Atomic cb_teardown;
static __thread int in_callback; /* our own driver calls never come back to us */

void neutrino_register_callbacks(cb_module_t m, cb_function_t f, cb_launch_t l, cb_link_t k, cb_exit_t x,
                                 cb_teardown_t t) {
    atomic_store(&cb_teardown, t);
    atomic_store(&cb_module, m);
    atomic_store(&cb_function, f);
    atomic_store(&cb_launch, l);
    atomic_store(&cb_link, k);
    atomic_store(&cb_exit, x);
}

/* ------------------------------------------------------------------ embedded Python */

static pthread_once_t embed_once = PTHREAD_ONCE_INIT;

static void run_exit_callback(void) {
    cb_exit_t x = atomic_load(&cb_exit);
    if (x) x();
}

static void embed_python(void) {
    const char *lib = getenv("NEUTRINO_LIBPYTHON");
    if (!getenv("NEUTRINO_OPTIONS")) return;
    init_real_dlsym();
    if (real_dlsym(RTLD_DEFAULT, "Py_IsInitialized")) return; /* a Python process: sitecustomize starts us */
    if (!lib || !*lib) {
        fprintf(stderr, "neutrino: no shared libpython to embed in this program (Python built without "
                        "--enable-shared); its kernels run unprobed\n");
        return;
    }
    void *py = dlopen(lib, RTLD_NOW | RTLD_GLOBAL);
    if (!py) {
        fprintf(stderr, "neutrino: cannot load %s (%s); kernels run unprobed\n", lib, dlerror());
        return;
    }
    void (*init)(int) = real_dlsym(py, "Py_InitializeEx");
    int (*run)(const char *) = real_dlsym(py, "PyRun_SimpleString");
    void *(*save)(void) = real_dlsym(py, "PyEval_SaveThread");
    if (!init || !run || !save) return;
    setenv("NEUTRINO_EMBEDDED", "1", 1);
    init(0);
    run("import neutrino.runtime.start.bootstrap as _nb; _nb.start(embedded=True)");
    save(); /* release the GIL: callbacks take it from any thread */
}

/* The exit callback (harvest what is in flight, write the summary) must run before the
 * driver's and cudart's own exit handlers tear the context down. atexit handlers run in
 * reverse order of registration, so it is registered at the first probed launch, which
 * comes after cuInit and cudart's initialisation. */
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
static void register_exit(void) { atexit(run_exit_callback); }

static void embed_python_guarded(void) {
    in_callback = 1; /* driver lookups made while Python starts are not ours to report */
    embed_python();
    in_callback = 0;
}

static inline void ensure_runtime(void) {
    if (!in_callback && !atomic_load_explicit(&cb_launch, memory_order_relaxed))
        pthread_once(&embed_once, embed_python_guarded);
}

/* ------------------------------------------------------------------ module loads */

enum { M_LOAD, M_LOAD_DATA, M_LOAD_DATA_EX, M_LOAD_FATBIN, M_LIB_DATA, M_LIB_FILE };

/* The driver's own time in the program's module loads (spec/runtime.md, "Start-up and exit phases":
 * `module_jit`, `module_driver`): a PTX text image is JIT-compiled inside the load call (CuPy's kernels
 * under CUPY_COMPILE_WITH_PTX, which the launcher sets), and so is PTX given to cuLinkComplete; no phase
 * of ours covers that time, so the hooks clock the real call. Summed here from the first load on (the
 * runtime is built after the first load returns) and read by Python at exit (neutrino_module_load_stats).
 * The runtime's own loads of probed code call the driver directly and are not counted. */
enum { LOAD_JIT, LOAD_OTHER, LOAD_KINDS };
static _Atomic uint64_t load_ns[LOAD_KINDS], load_count[LOAD_KINDS], load_max_ns[LOAD_KINDS];

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* PTX text: no ELF magic, no fatbin (0xBA55ED50) or fatbin-wrapper (0x466243B1) magic, and a first byte
 * a PTX file can begin with (a directive, a comment, white space). Reads at most 2 bytes of the image. */
static int is_ptx_text(const void *image) {
    const unsigned char *b = image;
    if (!b) return 0;
    if (b[0] == 0x7f || (b[0] == 0x50 && b[1] == 0xED) || (b[0] == 0xB1 && b[1] == 0x43)) return 0;
    return b[0] == '.' || b[0] == '/' || b[0] == ' ' || b[0] == '\t' || b[0] == '\n' || b[0] == '\r';
}

/* A file load of PTX (CuPy's RawModule(path="k.ptx") is a cuModuleLoad): by its name, as the driver
 * cannot be asked what it JIT-compiled. */
static int is_ptx_path(const char *path) {
    size_t n = path ? strlen(path) : 0;
    return n >= 4 && strcmp(path + n - 4, ".ptx") == 0;
}

static void count_load(int kind, uint64_t started) {
    if (in_callback) return; /* a load of ours, made inside a callback: not the program's */
    uint64_t ns = now_ns() - started;
    atomic_fetch_add(&load_ns[kind], ns);
    atomic_fetch_add(&load_count[kind], 1);
    uint64_t seen = atomic_load(&load_max_ns[kind]);
    while (ns > seen && !atomic_compare_exchange_weak(&load_max_ns[kind], &seen, ns)) {
    }
}

/* out[0..2]: the PTX JIT loads' (and cuLinkComplete's) nanoseconds, count, longest; out[3..5]: every
 * other module load's. */
void neutrino_module_load_stats(uint64_t out[6]) {
    for (int k = 0; k < LOAD_KINDS; k++) {
        out[3 * k] = atomic_load(&load_ns[k]);
        out[3 * k + 1] = atomic_load(&load_count[k]);
        out[3 * k + 2] = atomic_load(&load_max_ns[k]);
    }
}

static void report_module(int kind, void *handle, const void *image, const char *path) {
    cb_module_t cb = atomic_load(&cb_module);
    if (!cb || in_callback) return;
    in_callback = 1;
    cb(kind, handle, image, path);
    in_callback = 0;
}

CUresult cuModuleLoad(void **module, const char *fname) {
    ensure_runtime();
    CUresult (*fn)(void **, const char *) = REAL(H_MODULE_LOAD, CUresult(*)(void **, const char *));
    if (!fn) return CU_NOT_FOUND;
    uint64_t started = now_ns();
    CUresult rc = fn(module, fname);
    count_load(is_ptx_path(fname) ? LOAD_JIT : LOAD_OTHER, started);
    if (rc == CUDA_SUCCESS) report_module(M_LOAD, *module, NULL, fname);
    return rc;
}

CUresult cuModuleLoadData(void **module, const void *image) {
    ensure_runtime();
    CUresult (*fn)(void **, const void *) = REAL(H_MODULE_LOAD_DATA, CUresult(*)(void **, const void *));
    if (!fn) return CU_NOT_FOUND;
    uint64_t started = now_ns();
    CUresult rc = fn(module, image);
    count_load(is_ptx_text(image) ? LOAD_JIT : LOAD_OTHER, started);
    if (rc == CUDA_SUCCESS) report_module(M_LOAD_DATA, *module, image, NULL);
    return rc;
}

CUresult cuModuleLoadDataEx(void **module, const void *image, unsigned n, void *opts, void **vals) {
    ensure_runtime();
    CUresult (*fn)(void **, const void *, unsigned, void *, void **) =
        REAL(H_MODULE_LOAD_DATA_EX, CUresult(*)(void **, const void *, unsigned, void *, void **));
    if (!fn) return CU_NOT_FOUND;
    uint64_t started = now_ns();
    CUresult rc = fn(module, image, n, opts, vals);
    count_load(is_ptx_text(image) ? LOAD_JIT : LOAD_OTHER, started);
    if (rc == CUDA_SUCCESS) report_module(M_LOAD_DATA_EX, *module, image, NULL);
    return rc;
}

CUresult cuModuleLoadFatBinary(void **module, const void *fatbin) {
    ensure_runtime();
    CUresult (*fn)(void **, const void *) = REAL(H_MODULE_LOAD_FATBIN, CUresult(*)(void **, const void *));
    if (!fn) return CU_NOT_FOUND;
    uint64_t started = now_ns();
    CUresult rc = fn(module, fatbin);
    count_load(LOAD_OTHER, started);
    if (rc == CUDA_SUCCESS) report_module(M_LOAD_FATBIN, *module, fatbin, NULL);
    return rc;
}

typedef CUresult (*lib_data_t)(void **, const void *, void *, void **, unsigned, void *, void **, unsigned);
CUresult cuLibraryLoadData(void **lib, const void *code, void *jo, void **jv, unsigned jn, void *lo, void **lv,
                           unsigned ln) {
    ensure_runtime();
    lib_data_t fn = REAL(H_LIBRARY_LOAD_DATA, lib_data_t);
    if (!fn) return CU_NOT_FOUND;
    uint64_t started = now_ns();
    CUresult rc = fn(lib, code, jo, jv, jn, lo, lv, ln);
    count_load(is_ptx_text(code) ? LOAD_JIT : LOAD_OTHER, started);
    if (rc == CUDA_SUCCESS) report_module(M_LIB_DATA, *lib, code, NULL);
    return rc;
}

typedef CUresult (*lib_file_t)(void **, const char *, void *, void **, unsigned, void *, void **, unsigned);
CUresult cuLibraryLoadFromFile(void **lib, const char *file, void *jo, void **jv, unsigned jn, void *lo, void **lv,
                               unsigned ln) {
    ensure_runtime();
    lib_file_t fn = REAL(H_LIBRARY_LOAD_FILE, lib_file_t);
    if (!fn) return CU_NOT_FOUND;
    uint64_t started = now_ns();
    CUresult rc = fn(lib, file, jo, jv, jn, lo, lv, ln);
    count_load(is_ptx_path(file) ? LOAD_JIT : LOAD_OTHER, started);
    if (rc == CUDA_SUCCESS) report_module(M_LIB_FILE, *lib, NULL, file);
    return rc;
}

/* ------------------------------------------------------------------ linker */

typedef CUresult (*link_add_t)(void *, int, void *, size_t, const char *, unsigned, void *, void **);
CUresult cuLinkAddData_v2(void *state, int type, void *data, size_t size, const char *name, unsigned n, void *o,
                          void **v) {
    link_add_t fn = REAL(H_LINK_ADD_DATA, link_add_t);
    if (!fn) return CU_NOT_FOUND;
    CUresult rc = fn(state, type, data, size, name, n, o, v);
    cb_link_t cb = atomic_load(&cb_link);
    if (rc == CUDA_SUCCESS && cb && !in_callback) {
        in_callback = 1;
        cb(0, state, type, data, size);
        in_callback = 0;
    }
    return rc;
}

CUresult cuLinkComplete(void *state, void **cubin, size_t *size) {
    CUresult (*fn)(void *, void **, size_t *) = REAL(H_LINK_COMPLETE, CUresult(*)(void *, void **, size_t *));
    if (!fn) return CU_NOT_FOUND;
    uint64_t started = now_ns();
    CUresult rc = fn(state, cubin, size);
    count_load(LOAD_JIT, started);
    cb_link_t cb = atomic_load(&cb_link);
    if (rc == CUDA_SUCCESS && cb && !in_callback) {
        in_callback = 1;
        cb(1, state, 0, cubin ? *cubin : NULL, size ? *size : 0);
        in_callback = 0;
    }
    return rc;
}

/* ------------------------------------------------------------------ function lookups */

enum { F_MODULE_FUNCTION, F_LIBRARY_KERNEL, F_KERNEL_FUNCTION, F_LIBRARY_MODULE };

/* The program's kernel lookups in our Python callback (the `lookup` phase: no Python phase covers
 * them), summed from the first; read at exit with the constructor's clock (neutrino_process_stats). */
static _Atomic uint64_t lookup_ns, lookup_count, lookup_max_ns;

static void report_function(int kind, void *owner, const char *name, void *out) {
    cb_function_t cb = atomic_load(&cb_function);
    if (!cb || in_callback || !out) return;
    in_callback = 1;
    uint64_t started = now_ns();
    int probe = cb(kind, owner, name, out);
    uint64_t ns = now_ns() - started;
    in_callback = 0;
    atomic_fetch_add(&lookup_ns, ns);
    atomic_fetch_add(&lookup_count, 1);
    uint64_t seen = atomic_load(&lookup_max_ns);
    while (ns > seen && !atomic_compare_exchange_weak(&lookup_max_ns, &seen, ns)) {
    }
    if (probe == 1) neutrino_probe_add(out);
}

CUresult cuModuleGetFunction(void **f, void *module, const char *name) {
    CUresult (*fn)(void **, void *, const char *) = REAL(H_MODULE_GET_FUNCTION, CUresult(*)(void **, void *, const char *));
    if (!fn) return CU_NOT_FOUND;
    CUresult rc = fn(f, module, name);
    if (rc == CUDA_SUCCESS) report_function(F_MODULE_FUNCTION, module, name, *f);
    return rc;
}

CUresult cuLibraryGetKernel(void **k, void *lib, const char *name) {
    CUresult (*fn)(void **, void *, const char *) = REAL(H_LIBRARY_GET_KERNEL, CUresult(*)(void **, void *, const char *));
    if (!fn) return CU_NOT_FOUND;
    CUresult rc = fn(k, lib, name);
    if (rc == CUDA_SUCCESS) report_function(F_LIBRARY_KERNEL, lib, name, *k);
    return rc;
}

CUresult cuKernelGetFunction(void **f, void *kernel) {
    CUresult (*fn)(void **, void *) = REAL(H_KERNEL_GET_FUNCTION, CUresult(*)(void **, void *));
    if (!fn) return CU_NOT_FOUND;
    CUresult rc = fn(f, kernel);
    if (rc == CUDA_SUCCESS) report_function(F_KERNEL_FUNCTION, kernel, NULL, *f);
    return rc;
}

CUresult cuLibraryGetModule(void **m, void *lib) {
    CUresult (*fn)(void **, void *) = REAL(H_LIBRARY_GET_MODULE, CUresult(*)(void **, void *));
    if (!fn) return CU_NOT_FOUND;
    CUresult rc = fn(m, lib);
    if (rc == CUDA_SUCCESS) report_function(F_LIBRARY_MODULE, lib, NULL, *m);
    return rc;
}

/* ------------------------------------------------------------------ unloads */

typedef void (*cb_unload_t)(int kind, void *handle);
static cb_unload_t _Atomic cb_unload;

void neutrino_register_unload_callback(cb_unload_t cb) { atomic_store(&cb_unload, cb); }

enum { U_MODULE, U_LIBRARY };

/* Before the driver unloads: Python forgets the module's handles (the next load may get them) and
 * lets go of the probed code it built for its kernels. */
static void report_unload(int kind, void *handle) {
    cb_unload_t cb = atomic_load(&cb_unload);
    if (!cb || in_callback || !handle) return;
    in_callback = 1;
    cb(kind, handle);
    in_callback = 0;
}

CUresult cuModuleUnload(void *module) {
    report_unload(U_MODULE, module);
    CUresult (*fn)(void *) = REAL(H_MODULE_UNLOAD, CUresult(*)(void *));
    return fn ? fn(module) : CU_NOT_FOUND;
}

CUresult cuLibraryUnload(void *lib) {
    report_unload(U_LIBRARY, lib);
    CUresult (*fn)(void *) = REAL(H_LIBRARY_UNLOAD, CUresult(*)(void *));
    return fn ? fn(lib) : CU_NOT_FOUND;
}

/* ------------------------------------------------------------------ launches */

enum { L_KERNEL, L_KERNEL_PTSZ, L_EX, L_EX_PTSZ, L_COOP, L_COOP_PTSZ };

typedef CUresult (*launch_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                             void **, void **);
typedef CUresult (*launch_ex_t)(const CUlaunchConfig *, void *, void **, void **);
typedef CUresult (*launch_coop_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  void *, void **);

/* 1 when this launch of f goes to Python (f probed and selected by the launch filter) */
static inline uint64_t selected(void *f, int *yes) {
    *yes = 0;
    if (!atomic_load_explicit(&probed_count, memory_order_relaxed) || in_callback) return 0;
    entry_t *e = find((uintptr_t)f);
    if (!e || !atomic_load_explicit(&e->live, memory_order_relaxed)) return 0;
    if (!atomic_load_explicit(&cb_launch, memory_order_acquire)) return 0;
    if (atomic_load_explicit(&suspended_windows, memory_order_relaxed)) { /* a compile's launch: the original */
        atomic_fetch_add_explicit(&suspended_launches, 1, memory_order_relaxed); /* kernel, not one --launches counts */
        return 0;
    }
    uint64_t i = atomic_fetch_add_explicit(&e->launches, 1, memory_order_relaxed);
    uint64_t start = atomic_load(&sel_start), stop = atomic_load(&sel_stop), every = atomic_load(&sel_every);
    if (i < start || i >= stop || (i - start) % every) {
        *yes = -1; /* probed, not selected: unless it is being captured (see captured_anyway) */
        return i;
    }
    *yes = 1;
    return i;
}

/* A launch the filter skips still goes to Python when its stream is being captured into a
 * graph: --launches selects among the graph's replays (graphs.c), not among captures. */
static inline int captured_anyway(int yes, void *stream, int ptsz) {
    return yes >= 0 ? yes : neutrino_graph_stream_capturing(stream, ptsz);
}

static int to_python(int kind, void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                     unsigned shmem, void *stream, void **params, void **extra, const CUlaunchConfig *cfg,
                     uint64_t index) {
    cb_launch_t cb = atomic_load(&cb_launch);
    if (atomic_load(&cb_exit)) pthread_once(&exit_once, register_exit);
    in_callback = 1;
    int rc = cb(kind, f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra, (void *)cfg, index);
    in_callback = 0;
    return rc; /* < 0: not handled, run the original */
}

/* The timeline's record of a program's launch (cupti.c, level `hooks`): not of ours, nor of one captured. */
static inline void *timeline_enter(void *f, void *stream, int ptsz, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                   unsigned by, unsigned bz) {
    neutrino_timeline_kernel_launch_begin();  /* kernel records on if a quiet graph replay turned them off */
    if (in_callback || neutrino_graph_stream_capturing(stream, ptsz)) return NULL;
    const unsigned dims[6] = {gx, gy, gz, bx, by, bz};
    return neutrino_timeline_launch_enter(f, stream, ptsz, dims);
}

static CUresult launch_common_inner(int kind, int slot, void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                    unsigned by, unsigned bz, unsigned shmem, void *stream, void **params,
                                    void **extra);

static CUresult launch_common(int kind, int slot, void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                              unsigned by, unsigned bz, unsigned shmem, void *stream, void **params, void **extra) {
    void *entry = timeline_enter(f, stream, kind == L_KERNEL_PTSZ, gx, gy, gz, bx, by, bz);
    CUresult rc = launch_common_inner(kind, slot, f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra);
    neutrino_timeline_launch_exit(entry, rc);
    return rc;
}

static CUresult launch_common_inner(int kind, int slot, void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                    unsigned by, unsigned bz, unsigned shmem, void *stream, void **params,
                                    void **extra) {
    int yes;
    uint64_t i = selected(f, &yes);
    yes = captured_anyway(yes, stream, kind == L_KERNEL_PTSZ);
    if (yes && !extra) { /* a kernel with a registered plan: probed in C (fastlaunch.c) */
        in_callback = 1;
        int rc = neutrino_fast_launch(kind == L_KERNEL_PTSZ, NULL, f, gx, gy, gz, bx, by, bz, shmem, stream, params, i);
        in_callback = 0;
        if (rc >= 0) return rc;
        if (rc == -2) yes = 0; /* dropped for lack of budget: runs unprobed, counted there */
    }
    if (yes) {
        int rc = to_python(kind, f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra, NULL, i);
        if (rc >= 0) return rc;
    }
    launch_t fn = REAL(slot, launch_t);
    return fn ? fn(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra) : CU_NOT_FOUND;
}

CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shmem, void *stream, void **params, void **extra) {
    return launch_common(L_KERNEL, H_LAUNCH, f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra);
}

CUresult cuLaunchKernel_ptsz(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                             unsigned shmem, void *stream, void **params, void **extra) {
    return launch_common(L_KERNEL_PTSZ, H_LAUNCH_PTSZ, f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra);
}

static CUresult launch_ex_inner(int kind, int slot, const CUlaunchConfig *c, void *f, void **params, void **extra);

static CUresult launch_ex_common(int kind, int slot, const CUlaunchConfig *c, void *f, void **params, void **extra) {
    void *entry = c ? timeline_enter(f, c->hStream, kind == L_EX_PTSZ, c->gridDimX, c->gridDimY, c->gridDimZ,
                                     c->blockDimX, c->blockDimY, c->blockDimZ) : NULL;
    CUresult rc = launch_ex_inner(kind, slot, c, f, params, extra);
    neutrino_timeline_launch_exit(entry, rc);
    return rc;
}

static CUresult launch_ex_inner(int kind, int slot, const CUlaunchConfig *c, void *f, void **params, void **extra) {
    int yes;
    uint64_t i = selected(f, &yes);
    yes = c ? captured_anyway(yes, c->hStream, kind == L_EX_PTSZ) : (yes > 0);
    if (yes && c && !extra) { /* probed in C when the kernel has a plan (fastlaunch.c) */
        in_callback = 1;
        int rc = neutrino_fast_launch(kind == L_EX_PTSZ, c, f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX,
                                      c->blockDimY, c->blockDimZ, c->sharedMemBytes, c->hStream, params, i);
        in_callback = 0;
        if (rc >= 0) return rc;
        if (rc == -2) yes = 0;
    }
    if (yes && c) {
        int rc = to_python(kind, f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ,
                           c->sharedMemBytes, c->hStream, params, extra, c, i);
        if (rc >= 0) return rc;
    }
    launch_ex_t fn = REAL(slot, launch_ex_t);
    return fn ? fn(c, f, params, extra) : CU_NOT_FOUND;
}

CUresult cuLaunchKernelEx(const CUlaunchConfig *c, void *f, void **params, void **extra) {
    return launch_ex_common(L_EX, H_LAUNCH_EX, c, f, params, extra);
}

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, void *f, void **params, void **extra) {
    return launch_ex_common(L_EX_PTSZ, H_LAUNCH_EX_PTSZ, c, f, params, extra);
}

static CUresult launch_coop_inner(int kind, int slot, void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                  unsigned by, unsigned bz, unsigned shmem, void *stream, void **params);

static CUresult launch_coop_common(int kind, int slot, void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                   unsigned by, unsigned bz, unsigned shmem, void *stream, void **params) {
    void *entry = timeline_enter(f, stream, kind == L_COOP_PTSZ, gx, gy, gz, bx, by, bz);
    CUresult rc = launch_coop_inner(kind, slot, f, gx, gy, gz, bx, by, bz, shmem, stream, params);
    neutrino_timeline_launch_exit(entry, rc);
    return rc;
}

static CUresult launch_coop_inner(int kind, int slot, void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                  unsigned by, unsigned bz, unsigned shmem, void *stream, void **params) {
    int yes;
    uint64_t i = selected(f, &yes);
    yes = captured_anyway(yes, stream, kind == L_COOP_PTSZ);
    if (yes) {
        int rc = to_python(kind, f, gx, gy, gz, bx, by, bz, shmem, stream, params, NULL, NULL, i);
        if (rc >= 0) return rc;
    }
    launch_coop_t fn = REAL(slot, launch_coop_t);
    return fn ? fn(f, gx, gy, gz, bx, by, bz, shmem, stream, params) : CU_NOT_FOUND;
}

CUresult cuLaunchCooperativeKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                   unsigned bz, unsigned shmem, void *stream, void **params) {
    return launch_coop_common(L_COOP, H_LAUNCH_COOP, f, gx, gy, gz, bx, by, bz, shmem, stream, params);
}

CUresult cuLaunchCooperativeKernel_ptsz(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                        unsigned bz, unsigned shmem, void *stream, void **params) {
    return launch_coop_common(L_COOP_PTSZ, H_LAUNCH_COOP_PTSZ, f, gx, gy, gz, bx, by, bz, shmem, stream, params);
}

/* ------------------------------------------------------------------ context teardown */

/* Before a context goes away (cudart's exit handler releases the primary context), the
 * results of probed launches still in flight must be harvested: their pinned host
 * buffers and events belong to the context. */
static void before_teardown(void) {
    cb_teardown_t cb = atomic_load(&cb_teardown);
    if (!cb || in_callback) return;
    in_callback = 1;
    cb();
    in_callback = 0;
}

CUresult cuCtxDestroy_v2(void *ctx) {
    before_teardown();
    neutrino_timeline_streams_gone(ctx, NULL);  /* the timeline's launch queues of its streams (cupti.c) */
    CUresult (*fn)(void *) = REAL(H_CTX_DESTROY, CUresult(*)(void *));
    return fn ? fn(ctx) : CU_NOT_FOUND;
}

/* The timeline's launch queue of the stream is retired (cupti.c): a stream made later at its address is
 * another one. */
CUresult cuStreamDestroy_v2(void *stream) {
    neutrino_timeline_streams_gone(NULL, stream);
    neutrino_graph_pick_stream_event(stream);  /* a twin's launch there is fenced first (graphpick.c) */
    CUresult (*fn)(void *) = REAL(H_STREAM_DESTROY, CUresult(*)(void *));
    return fn ? fn(stream) : CU_NOT_FOUND;
}

/* Whether device dev's primary context is still there (1 when the driver cannot say). */
static int primary_ctx_active(int dev) {
    static CUresult (*_Atomic get_state)(int, unsigned *, int *);
    CUresult (*fn)(int, unsigned *, int *) = atomic_load(&get_state);
    if (!fn) atomic_store(&get_state, fn = (CUresult(*)(int, unsigned *, int *))neutrino_real_sym("cuDevicePrimaryCtxGetState"));
    unsigned flags = 0;
    int active = 1;
    return !fn || fn(dev, &flags, &active) != 0 || active;
}

/* The primary contexts' retains the shim has seen, less their releases, per device: a release with more than
 * one left does not destroy the context (a library's retain/release pair while cudart holds it). A retain
 * made where the shim does not see it only makes a release look like the last (the teardown then runs as
 * for a destroyed context: safe); a reset counts none. */
#define PRIMARY_DEVICES 64
static _Atomic long primary_refs[PRIMARY_DEVICES];
static __thread int release_keeps_context;  /* the teardown in progress is of a release that keeps it */

CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
    CUresult (*fn)(void **, int) = REAL(H_PRIMARY_RETAIN, CUresult(*)(void **, int));
    CUresult rc = fn ? fn(ctx, dev) : CU_NOT_FOUND;
    if (rc == 0 && dev >= 0 && dev < PRIMARY_DEVICES) atomic_fetch_add(&primary_refs[dev], 1);
    return rc;
}

/* 1 while the teardown callback runs for a primary-context release that leaves the context alive: what
 * lives as long as the context (graphs' plans and rings: neutrino/runtime/cudagraphs) is kept. */
int neutrino_teardown_keeps_context(void) { return release_keeps_context; }

/* This release's share of device dev's count, taken at once (compare and swap): the count before it, 0 when
 * none was seen. Two threads releasing together each see their own count (read first and lowered after
 * the teardown, both saw 2 and both kept the context that the second release destroyed), and the count
 * never goes below 0. */
static long claim_release(int dev) {
    long seen = atomic_load(&primary_refs[dev]);
    while (seen > 0 && !atomic_compare_exchange_weak(&primary_refs[dev], &seen, seen - 1)) {
    }
    return seen;
}

/* A primary context destroyed (its last release, or a reset) may be made again with the same handle: every
 * queue of the timeline's is retired (a stream's next launch asks CUPTI its id again). A release that leaves
 * it alive (a library's retain/release pair) retires nothing. `slot`: the driver's entry point called. */
static CUresult primary_release(int dev, int slot) {
    long seen = dev >= 0 && dev < PRIMARY_DEVICES ? claim_release(dev) : 0;
    release_keeps_context = seen > 1;
    before_teardown();
    release_keeps_context = 0;
    CUresult (*fn)(int) = REAL(slot, CUresult(*)(int));
    CUresult rc = fn ? fn(dev) : CU_NOT_FOUND;
    if (rc != 0 && seen > 0) atomic_fetch_add(&primary_refs[dev], 1);  /* not released: the share goes back */
    if (rc == 0 && !primary_ctx_active(dev)) neutrino_timeline_streams_gone(NULL, NULL);
    return rc;
}

CUresult cuDevicePrimaryCtxRelease_v2(int dev) { return primary_release(dev, H_PRIMARY_RELEASE); }

/* The entry point before CUDA 11 (still exported; reached by dlsym or by cuGetProcAddress for an older
 * version): counted too, else a release made through it left the count high, and the last release
 * looked like one that keeps the context (its plans and rings kept after it was destroyed). */
CUresult cuDevicePrimaryCtxRelease(int dev) { return primary_release(dev, H_PRIMARY_RELEASE_V1); }

CUresult cuDevicePrimaryCtxReset_v2(int dev) {
    if (dev >= 0 && dev < PRIMARY_DEVICES) atomic_store(&primary_refs[dev], 0);
    before_teardown();
    neutrino_timeline_streams_gone(NULL, NULL);
    CUresult (*fn)(int) = REAL(H_PRIMARY_RESET, CUresult(*)(int));
    return fn ? fn(dev) : CU_NOT_FOUND;
}

/* ------------------------------------------------------------------ cuGetProcAddress */

/* Our wrapper for driver function `symbol` as asked through cuGetProcAddress, or NULL. */
static void *wrapper_for(const char *symbol, int version, cuuint64_t flags) {
    void *graph_hook = neutrino_graph_wrapper_for(symbol, version, flags);
    if (graph_hook) return graph_hook;
    int ptsz = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    if (!strcmp(symbol, "cuGetProcAddress")) return hook_fns[version >= 12000 ? H_GPA_V2 : H_GPA];
    if (!strcmp(symbol, "cuLaunchKernel")) return hook_fns[ptsz ? H_LAUNCH_PTSZ : H_LAUNCH];
    if (!strcmp(symbol, "cuLaunchKernelEx")) return hook_fns[ptsz ? H_LAUNCH_EX_PTSZ : H_LAUNCH_EX];
    if (!strcmp(symbol, "cuLaunchCooperativeKernel")) return hook_fns[ptsz ? H_LAUNCH_COOP_PTSZ : H_LAUNCH_COOP];
    if (!strcmp(symbol, "cuLinkAddData")) return version >= 6050 ? hook_fns[H_LINK_ADD_DATA] : NULL;
    if (!strcmp(symbol, "cuCtxDestroy")) return version >= 4000 ? hook_fns[H_CTX_DESTROY] : NULL;
    if (!strcmp(symbol, "cuStreamDestroy")) return version >= 4000 ? hook_fns[H_STREAM_DESTROY] : NULL;
    if (!strcmp(symbol, "cuDevicePrimaryCtxRelease"))
        return hook_fns[version >= 11000 ? H_PRIMARY_RELEASE : H_PRIMARY_RELEASE_V1];
    if (!strcmp(symbol, "cuDevicePrimaryCtxReset")) return version >= 11000 ? hook_fns[H_PRIMARY_RESET] : NULL;
    if (!strcmp(symbol, "cuDevicePrimaryCtxRetain")) return hook_fns[H_PRIMARY_RETAIN];
    for (int i = H_MODULE_LOAD; i < H_COUNT; i++)
        if (!strcmp(symbol, hook_names[i])) return hook_fns[i];
    return NULL;
}

typedef CUresult (*gpa_t)(const char *, void **, int, cuuint64_t);
typedef CUresult (*gpa2_t)(const char *, void **, int, cuuint64_t, void *);

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags, void *status) {
    ensure_runtime();
    gpa2_t fn = REAL(H_GPA_V2, gpa2_t);
    if (!fn) return CU_NOT_FOUND;
    CUresult rc = fn(symbol, pfn, version, flags, status);
    if (rc == CUDA_SUCCESS && symbol && pfn && *pfn) {
        void *w = wrapper_for(symbol, version, flags);
        if (w) *pfn = w;
    }
    return rc;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags) {
    ensure_runtime();
    gpa_t fn = REAL(H_GPA, gpa_t);
    if (!fn) return CU_NOT_FOUND;
    CUresult rc = fn(symbol, pfn, version, flags);
    if (rc == CUDA_SUCCESS && symbol && pfn && *pfn) {
        void *w = wrapper_for(symbol, version, flags);
        if (w) *pfn = w;
    }
    return rc;
}

/* ------------------------------------------------------------------ dlsym */

static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void init_hook_table(void) {
    void *t[H_COUNT] = {
        (void *)cuGetProcAddress, (void *)cuGetProcAddress_v2,
        (void *)cuModuleLoad, (void *)cuModuleLoadData, (void *)cuModuleLoadDataEx, (void *)cuModuleLoadFatBinary,
        (void *)cuLibraryLoadData, (void *)cuLibraryLoadFromFile, (void *)cuLinkAddData_v2, (void *)cuLinkComplete,
        (void *)cuModuleGetFunction, (void *)cuLibraryGetKernel, (void *)cuKernelGetFunction, (void *)cuLibraryGetModule,
        (void *)cuModuleUnload, (void *)cuLibraryUnload,
        (void *)cuLaunchKernel, (void *)cuLaunchKernel_ptsz, (void *)cuLaunchKernelEx, (void *)cuLaunchKernelEx_ptsz,
        (void *)cuLaunchCooperativeKernel, (void *)cuLaunchCooperativeKernel_ptsz,
        (void *)cuCtxDestroy_v2, (void *)cuDevicePrimaryCtxRelease_v2, (void *)cuDevicePrimaryCtxReset_v2,
        (void *)cuStreamDestroy_v2, (void *)cuDevicePrimaryCtxRetain, (void *)cuDevicePrimaryCtxRelease,
    };
    memcpy(hook_fns, t, sizeof t);
}

/* When the dynamic linker ran our constructor (wall clock, ns) and how long it took: the start of the
 * profiled process as far as our code sees it (spec/runtime.md, "Start-up and exit phases": `exec`
 * before it, `interpreter` after it up to sitecustomize). */
static uint64_t ctor_at_ns, ctor_ns;

__attribute__((constructor)) static void neutrino_shim_init(void) {
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    uint64_t started = now_ns();
    init_real_dlsym();
    pthread_once(&table_once, init_hook_table);
    ctor_at_ns = (uint64_t)wall.tv_sec * 1000000000ull + (uint64_t)wall.tv_nsec;
    ctor_ns = now_ns() - started;
}

/* out[0]: the constructor's entry (wall clock, ns since the epoch); out[1]: its duration (ns);
 * out[2..4]: the kernel lookups' callbacks: ns, count, longest ns. */
void neutrino_process_stats(uint64_t out[5]) {
    out[0] = ctor_at_ns;
    out[1] = ctor_ns;
    out[2] = atomic_load(&lookup_ns);
    out[3] = atomic_load(&lookup_count);
    out[4] = atomic_load(&lookup_max_ns);
}

static int from_libcuda(void *p) {
    Dl_info info;
    return dladdr(p, &info) && info.dli_fname && strstr(info.dli_fname, "libcuda.so");
}

void *dlsym(void *handle, const char *name) {
    init_real_dlsym();
    if (!real_dlsym) return NULL;
    void *p = real_dlsym(handle, name);
    if (p && (name[0] == 'n' || name[0] == '_')) return neutrino_compiler_tap(name, p); /* compilers.c: nvJitLink */
    if (!p || name[0] != 'c' || name[1] != 'u') return p;
    pthread_once(&table_once, init_hook_table);
    for (int i = 0; i < H_COUNT; i++) {
        if (strcmp(name, hook_names[i])) continue;
        if (!from_libcuda(p)) return p; /* ours already, or some other library's */
        ensure_runtime();
        return hook_fns[i];
    }
    if (name[2] == 'p' && !strncmp(name, "cupti", 5)) { /* a profiler reaching libcupti by dlsym: cupti.c */
        void *w = neutrino_cupti_wrapper_named(name);
        return w ? w : p;
    }
    void *graph_hook = neutrino_graph_wrapper_named(name);
    if (graph_hook && from_libcuda(p)) return graph_hook;
    return p;
}

/* ------------------------------------------------------------------ introspection for tests/benchmarks */

int neutrino_shim_version(void) { return 1; }

/* Time `n` calls of the unprobed launch path's bookkeeping for handle f (no driver call). */
uint64_t neutrino_bench_lookup(void *f, uint64_t n) {
    uint64_t hits = 0;
    for (uint64_t i = 0; i < n; i++) {
        int yes;
        selected((char *)f + (i & 1), &yes);
        hits += yes > 0;
    }
    return hits;
}

/* Neutrino's HIP hook (AMD), a shim of its own: libneutrino_hip.so, LD_PRELOADed.
 *
 * It sees the HIP module API a program uses to load and launch GPU code:
 *   hipModuleLoadData, hipModuleLoad        code objects (ELF) or clang offload bundles
 *   hipModuleGetFunction                    which kernel a handle names
 *   hipModuleLaunchKernel                   launches Python may probe
 *   hipLaunchKernel                         launches of kernels registered by the HIP runtime
 *                                           itself (hipcc fat binaries): counted and reported, not probed
 * Each call goes to the real HIP runtime first (dlsym RTLD_NEXT); loads and
 * lookups are then reported to the Python callbacks registered with
 * neutrino_hip_register. A launch of a function Python marked as probed goes
 * to the Python launch callback, which runs the probed copy through the real
 * functions (neutrino_hip_real) or answers -1 to run the original unchanged.
 * Any other launch costs one hash lookup.
 *
 * No HIP header is included: the few types needed are declared here.
 * Untested on AMD hardware; tests run it against a fake HIP runtime.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef int hipError_t;
typedef struct { unsigned x, y, z; } dim3;

typedef int (*load_cb_t)(void *module, const void *image, const char *path);
typedef int (*getfn_cb_t)(void *function, void *module, const char *name);
typedef int (*launch_cb_t)(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                           unsigned shared, void *stream, void **params, void **extra);
typedef void (*seen_cb_t)(const void *host_function, unsigned gx, unsigned bx);

static load_cb_t _Atomic on_load;
static getfn_cb_t _Atomic on_get_function;
static launch_cb_t _Atomic on_launch;
static seen_cb_t _Atomic on_runtime_launch;

void neutrino_hip_register(load_cb_t load, getfn_cb_t getfn, launch_cb_t launch, seen_cb_t seen) {
    on_load = load;
    on_get_function = getfn;
    on_launch = launch;
    on_runtime_launch = seen;
}

/* The real HIP function `name` (what Python calls to load and launch probed code without re-entering us):
 * the next definition after this shim, or the one in an already loaded libamdhip64 (a program that
 * dlopen()ed it after us). */
void *neutrino_hip_real(const char *name) {
    void *fn = dlsym(RTLD_NEXT, name);
    if (fn) return fn;
    void *lib = dlopen("libamdhip64.so", RTLD_LAZY | RTLD_NOLOAD);
    return lib ? dlsym(lib, name) : NULL;
}

typedef hipError_t (*load_data_fn)(void **, const void *);
typedef hipError_t (*load_file_fn)(void **, const char *);
typedef hipError_t (*get_function_fn)(void **, void *, const char *);
typedef hipError_t (*module_launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                                       void **, void **);
typedef hipError_t (*runtime_launch_fn)(const void *, dim3, dim3, void **, size_t, void *);

#define REAL(type, name) \
    static type real_fn; \
    if (!real_fn) real_fn = (type)neutrino_hip_real(name); \
    if (!real_fn) return 98 /* hipErrorInvalidDeviceFunction: no HIP runtime below us */

/* ------------------------------------------------------------------ probed functions: an open-addressing set */

#define SLOTS 4096
static void *_Atomic probed[SLOTS];
static pthread_mutex_t probed_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t slot_of(const void *f) { return ((uintptr_t)f >> 4) * 0x9E3779B97F4A7C15ull >> 52; }

static void mark_probed(void *f) {
    pthread_mutex_lock(&probed_lock);
    for (size_t i = slot_of(f), n = 0; n < SLOTS; i = (i + 1) % SLOTS, n++) {
        void *seen = atomic_load(&probed[i]);
        if (seen == f) break;
        if (!seen) { atomic_store(&probed[i], f); break; }
    }
    pthread_mutex_unlock(&probed_lock);
}

static int is_probed(const void *f) {
    for (size_t i = slot_of(f), n = 0; n < SLOTS; i = (i + 1) % SLOTS, n++) {
        void *seen = atomic_load_explicit(&probed[i], memory_order_acquire);
        if (seen == f) return 1;
        if (!seen) return 0;
    }
    return 0;
}

/* ------------------------------------------------------------------ hooks */

hipError_t hipModuleLoadData(void **module, const void *image) {
    REAL(load_data_fn, "hipModuleLoadData");
    hipError_t rc = real_fn(module, image);
    load_cb_t cb = on_load;
    if (rc == 0 && cb) cb(*module, image, NULL);
    return rc;
}

hipError_t hipModuleLoad(void **module, const char *path) {
    REAL(load_file_fn, "hipModuleLoad");
    hipError_t rc = real_fn(module, path);
    load_cb_t cb = on_load;
    if (rc == 0 && cb) cb(*module, NULL, path);
    return rc;
}

hipError_t hipModuleGetFunction(void **function, void *module, const char *name) {
    REAL(get_function_fn, "hipModuleGetFunction");
    hipError_t rc = real_fn(function, module, name);
    getfn_cb_t cb = on_get_function;
    if (rc == 0 && cb && cb(*function, module, name) == 1) mark_probed(*function);
    return rc;
}

hipError_t hipModuleLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                                 unsigned shared, void *stream, void **params, void **extra) {
    REAL(module_launch_fn, "hipModuleLaunchKernel");
    launch_cb_t cb = on_launch;
    if (cb && is_probed(f)) {
        int rc = cb(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra);
        if (rc != -1) return rc; /* -1: not probed after all (filtered, or a fallback): run the original */
    }
    return real_fn(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra);
}

hipError_t hipLaunchKernel(const void *host_function, dim3 grid, dim3 block, void **args, size_t shared, void *stream) {
    REAL(runtime_launch_fn, "hipLaunchKernel");
    seen_cb_t cb = on_runtime_launch;
    if (cb) cb(host_function, grid.x, block.x);
    return real_fn(host_function, grid, block, args, shared, stream);
}

/* Taps on in-process PTX compilers: what PTX became which cubin.
 *
 * XLA (JAX), and any program using cuda-python's linker, compile PTX to SASS
 * inside the process with libnvJitLink, then hand the driver a SASS-only cubin:
 * the PTX never reaches cuModuleLoadData. libnvJitLink is dlopen()ed and its
 * functions found with dlsym(), which the shim interposes (preload.c asks
 * neutrino_compiler_tap for every nvJitLink name). We answer with wrappers
 * that call the real function and then tell Python what went in (PTX) and
 * what came out (the cubin). Python remembers cubin content -> PTX; when the
 * program later loads that cubin, the module has PTX after all and its kernels
 * are probed the usual way (instrument the PTX, JIT it with the driver).
 * Nothing is changed in what the library returns: the program's own cubins,
 * and XLA's compilation and autotuning, stay as they were.
 *
 * The versioned names the nvJitLink header maps calls to (__nvJitLinkAddData_13_0)
 * are tapped like the plain ones. Each function keeps the first real pointer it
 * was asked for; a different library's function of the same name is returned
 * untapped (two nvJitLink copies in one process: only the first is seen).
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

#include "shim.h"

typedef int nvJitLinkResult;
typedef void *nvJitLinkHandle;

/* what the callback is told; `data`/`size` per kind */
enum {
    TAP_INPUT_DATA = 0,  /* AddData succeeded: type, the bytes */
    TAP_INPUT_FILE = 1,  /* AddFile succeeded: type, the path (NUL-terminated) */
    TAP_OUTPUT_CUBIN = 2, /* GetLinkedCubin succeeded: the caller's buffer holding the cubin */
    TAP_DESTROY = 3,     /* Destroy is about to run: forget the handle */
};

typedef void (*cb_compiled_t)(int kind, void *handle, int type, const void *data, size_t size);
static cb_compiled_t _Atomic cb_compiled;
static __thread int in_tap; /* Python's own use of the library (if any) is not reported */

void neutrino_register_compiler_callback(cb_compiled_t cb) { atomic_store(&cb_compiled, cb); }

static void report(int kind, void *handle, int type, const void *data, size_t size) {
    cb_compiled_t cb = atomic_load(&cb_compiled);
    if (!cb || in_tap) return;
    in_tap = 1;
    cb(kind, handle, type, data, size);
    in_tap = 0;
}

enum { T_ADD_DATA, T_ADD_FILE, T_GET_CUBIN, T_DESTROY, T_COUNT };
static const char *const tap_names[T_COUNT] = {"AddData", "AddFile", "GetLinkedCubin", "Destroy"};
static void *_Atomic tap_real[T_COUNT];

typedef nvJitLinkResult (*add_data_t)(nvJitLinkHandle, int, const void *, size_t, const char *);
typedef nvJitLinkResult (*add_file_t)(nvJitLinkHandle, int, const char *);
typedef nvJitLinkResult (*get_cubin_t)(nvJitLinkHandle, void *);
typedef nvJitLinkResult (*destroy_t)(nvJitLinkHandle *);

static nvJitLinkResult tap_add_data(nvJitLinkHandle h, int type, const void *data, size_t size, const char *name) {
    add_data_t fn = (add_data_t)atomic_load(&tap_real[T_ADD_DATA]);
    nvJitLinkResult rc = fn(h, type, data, size, name);
    if (rc == 0) report(TAP_INPUT_DATA, h, type, data, size);
    return rc;
}

static nvJitLinkResult tap_add_file(nvJitLinkHandle h, int type, const char *path) {
    add_file_t fn = (add_file_t)atomic_load(&tap_real[T_ADD_FILE]);
    nvJitLinkResult rc = fn(h, type, path);
    if (rc == 0) report(TAP_INPUT_FILE, h, type, path, path ? strlen(path) : 0);
    return rc;
}

static nvJitLinkResult tap_get_cubin(nvJitLinkHandle h, void *buffer) {
    get_cubin_t fn = (get_cubin_t)atomic_load(&tap_real[T_GET_CUBIN]);
    nvJitLinkResult rc = fn(h, buffer);
    if (rc == 0 && buffer) report(TAP_OUTPUT_CUBIN, h, 0, buffer, 0); /* sized from its ELF headers */
    return rc;
}

static nvJitLinkResult tap_destroy(nvJitLinkHandle *h) {
    destroy_t fn = (destroy_t)atomic_load(&tap_real[T_DESTROY]);
    if (h && *h) report(TAP_DESTROY, *h, 0, NULL, 0);
    return fn(h);
}

static void *const tap_fns[T_COUNT] = {(void *)tap_add_data, (void *)tap_add_file, (void *)tap_get_cubin,
                                       (void *)tap_destroy};

/* "nvJitLinkAddData" and "__nvJitLinkAddData_13_0" both name AddData. */
static int tap_slot(const char *name) {
    const char *rest = NULL;
    if (!strncmp(name, "nvJitLink", 9)) rest = name + 9;
    else if (!strncmp(name, "__nvJitLink", 11)) rest = name + 11;
    if (!rest) return -1;
    for (int i = 0; i < T_COUNT; i++) {
        size_t n = strlen(tap_names[i]);
        if (strncmp(rest, tap_names[i], n)) continue;
        if (rest[n] == '\0' || (rest[n] == '_' && rest[n + 1] >= '0' && rest[n + 1] <= '9')) return i;
    }
    return -1;
}

/* Called by the shim's dlsym for names starting with "nvJitLink" or "__nvJitLink":
 * the wrapper to hand out instead of `real`, or `real` itself. */
void *neutrino_compiler_tap(const char *name, void *real) {
    int slot = tap_slot(name);
    if (slot < 0 || !real) return real;
    void *expected = NULL;
    if (!atomic_compare_exchange_strong(&tap_real[slot], &expected, real) && expected != real) return real;
    return tap_fns[slot];
}

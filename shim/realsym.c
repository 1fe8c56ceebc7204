/* The driver's own entry points, and the real dlsym: the bottom of the shim. Every other file may
 * call these; this file calls none of theirs (shim.h, "one header for shared declarations").
 *
 * preload.c interposes `dlsym` and the driver's entry points, so neither may be reached by its
 * usual name: the real dlsym comes from the next object by symbol version, and the driver's
 * functions from libcuda's handle through it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stddef.h>

#include "shim.h"

static nt_dlsym_fn real_dlsym;
static void *_Atomic libcuda;

nt_dlsym_fn neutrino_real_dlsym(void) {
    if (!real_dlsym) {
        real_dlsym = (nt_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
        if (!real_dlsym) real_dlsym = (nt_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    }
    return real_dlsym;
}

static void *cuda_handle(void) {
    void *h = atomic_load(&libcuda);
    if (h) return h;
    h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!h) h = dlopen("libcuda.so", RTLD_NOW | RTLD_GLOBAL);
    if (h) atomic_store(&libcuda, h);
    return h;
}

/* The real driver function `name` (exported name), never one of our wrappers. */
void *neutrino_real_sym(const char *name) {
    nt_dlsym_fn sym = neutrino_real_dlsym();
    void *h = cuda_handle();
    return (h && sym) ? sym(h, name) : NULL;
}

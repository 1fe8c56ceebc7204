/* A stand-in for one NVTX v3 instance (what the header-only NVTX compiles into a library), for
 * tests without NVIDIA's headers: its own function-pointer slots for the core and core2 modules,
 * an export table with GetModuleFunctionTable, and the loader's step at the first call: dlopen
 * NVTX_INJECTION64_PATH, call its InitializeInjectionNvtx2 with our export-table getter. Slots
 * the injection leaves empty stay no-ops, as in NVTX.
 *
 * fake_nvtx_* wrap the calls a program makes (nvtxRangePushA, nvtxDomainRangePushEx, ...). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

typedef void (*fn_t)(void);
typedef struct {
    uint16_t version, size;
    uint32_t category;
    int32_t color_type;
    uint32_t color;
    int32_t payload_type, reserved0;
    uint64_t payload;
    int32_t message_type;
    const void *message;
} attributes_t;

static fn_t core[16], core2[16];
static fn_t *core_table[16], *core2_table[16];
static int initialized, attached;

static int get_module_table(int module, fn_t ***out, unsigned *size) {
    if (module == 1) { *out = core_table; *size = 16; return 1; }
    if (module == 5) { *out = core2_table; *size = 16; return 1; }
    return 0;
}

static const struct { size_t size; int (*get)(int, fn_t ***, unsigned *); } callbacks = {sizeof callbacks,
                                                                                         get_module_table};

static const void *export_table(uint32_t id) { return id == 1 ? (const void *)&callbacks : NULL; }

static void init_once(void) {
    if (initialized) return;
    initialized = 1;
    for (int i = 0; i < 16; i++) { core_table[i] = &core[i]; core2_table[i] = &core2[i]; }
    const char *path = getenv("NVTX_INJECTION64_PATH");
    void *lib = path ? dlopen(path, RTLD_LAZY) : NULL;
    int (*init)(const void *(*)(uint32_t)) = lib ? (int (*)(const void *(*)(uint32_t)))dlsym(lib, "InitializeInjectionNvtx2") : NULL;
    attached = init ? init(export_table) : 0;
}

int fake_nvtx_attached(void) { init_once(); return attached; }

int fake_nvtx_push(const char *m) { init_once(); return core[9] ? ((int (*)(const char *))core[9])(m) : -1; }
int fake_nvtx_push_w(const wchar_t *m) { init_once(); return core[10] ? ((int (*)(const wchar_t *))core[10])(m) : -1; }
int fake_nvtx_pop(void) { init_once(); return core[11] ? ((int (*)(void))core[11])() : -1; }

int fake_nvtx_push_ex(const char *m) {
    init_once();
    attributes_t a = {2, sizeof a, 0, 0, 0, 0, 0, 0, 1, m};
    return core[8] ? ((int (*)(const attributes_t *))core[8])(&a) : -1;
}

uint64_t fake_nvtx_start(const char *m) { init_once(); return core[5] ? ((uint64_t (*)(const char *))core[5])(m) : 0; }
void fake_nvtx_end(uint64_t id) { init_once(); if (core[7]) ((void (*)(uint64_t))core[7])(id); }

void *fake_nvtx_domain(const char *name) { init_once(); return core2[12] ? ((void *(*)(const char *))core2[12])(name) : NULL; }

void *fake_nvtx_register(void *domain, const char *s) {
    init_once();
    return core2[10] ? ((void *(*)(void *, const char *))core2[10])(domain, s) : NULL;
}

/* a domain push with a registered string (registered != NULL) or an ASCII message */
int fake_nvtx_domain_push(void *domain, void *registered, const char *ascii) {
    init_once();
    attributes_t a = {2, sizeof a, 0, 0, 0, 0, 0, 0, registered ? 3 : 1, registered ? registered : (const void *)ascii};
    return core2[4] ? ((int (*)(void *, const attributes_t *))core2[4])(domain, &a) : -1;
}

int fake_nvtx_domain_pop(void *domain) { init_once(); return core2[5] ? ((int (*)(void *))core2[5])(domain) : -1; }

/* CUPTI's own per-launch cost, without Neutrino (benchmarks/timeline_cost.py): loaded into a plain
 * workload by ctypes, it enables CONCURRENT_KERNEL with buffer callbacks that only free the buffer
 * and, with `callbacks`, subscribes to the launch/copy calls of shim/cupti_abi.h with a callback
 * that returns at once. What it costs is the floor under the timeline's cost.
 *   cc -O2 -shared -fPIC -Ishim -o cupti_floor.so benchmarks/cupti_floor.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>

#include "cupti_abi.h"

static void requested(uint8_t **buf, size_t *size, size_t *max_records) {
    *size = 4u << 20;
    *buf = aligned_alloc(8, *size);
    *max_records = 0;
}

static void completed(void *ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid) {
    (void)ctx; (void)stream; (void)size; (void)valid;
    free(buf);
}

static void on_call(void *userdata, int domain, uint32_t cbid, const void *data) {
    (void)userdata; (void)domain; (void)cbid; (void)data;
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

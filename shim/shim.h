/* The shim's shared declarations: every function one file of shim/ defines and another calls, and the
 * fast path's plan, which neutrino/runtime/launch_path/fastpath.py mirrors in ctypes (tests/test_shim_layouts.py
 * holds the two against each other). A file includes this header instead of declaring by hand. */
#ifndef NEUTRINO_SHIM_H
#define NEUTRINO_SHIM_H
#include <stdint.h>

#include "writer.h"

/* preload.c: the driver's own entry point for `name` (not ours). */
void *neutrino_real_sym(const char *name);

/* fastlaunch.c: the probed launch in C (see there for the return values), the trace budget, the rings. */
int neutrino_fast_launch(int ptsz, const void *config, void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                         unsigned by, unsigned bz, unsigned shmem, void *stream, void **params, uint64_t kernel_launch);
int neutrino_trace_reserve(uint64_t n);
void neutrino_trace_give_back(uint64_t n);

/* graphs.c: launches captured into CUDA graphs. */
int neutrino_graph_stream_capturing(void *stream, int ptsz);
void *neutrino_graph_wrapper_for(const char *symbol, int version, unsigned long long flags);
void *neutrino_graph_wrapper_named(const char *name);

/* cupti.c: a probed launch's place on the timeline. */
uint64_t neutrino_timeline_begin_probed(void);
void neutrino_timeline_end_probed(uint64_t token);

/* argtrace.c: the arguments of a probed launch (launch_args.jsonl). */
int64_t neutrino_args_record(void *f, void *ctx, void **params, uint64_t launch);

/* fastlaunch.c's plan of one probed kernel, set from Python (neutrino/runtime/launch_path/fastpath.py, NtPlan). */
typedef struct {
    void *orig_func, *ctx, *probed_func;
    uint32_t n_params, n_maps, n_extra, max_shared;
    uint32_t units_mode[NT_MAX_MAPS];   /* 0 thread, 1 warp, 2 block, 3 fixed (sum/hist maps) */
    uint64_t fixed_units[NT_MAX_MAPS];
    uint64_t fixed_size[NT_MAX_MAPS];   /* mode 3: the buffer's bytes */
    uint32_t record_bytes[NT_MAX_MAPS], cap[NT_MAX_MAPS];
    uint32_t map_header_pos[NT_MAX_MAPS]; /* byte offset of each map header in the frame header */
    uint32_t extra_map[2 * NT_MAX_MAPS], extra_is_buffer[2 * NT_MAX_MAPS];
    int32_t fd;
    uint32_t kernel_id;
    const void *header_template;
    uint64_t header_len;
} nt_plan;

typedef struct {
    uint64_t launches, dropped_buffer, dropped_trace, handed_back;
} nt_plan_stats;
#endif

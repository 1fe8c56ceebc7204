/* The shim's shared declarations: every function one file of shim/ defines and another calls, and the
 * fast path's plan, which neutrino/runtime/launch_path/fastpath.py mirrors in ctypes (tests/test_shim_layouts.py
 * holds the two against each other). A file includes this header instead of declaring by hand. */
#ifndef NEUTRINO_SHIM_H
#define NEUTRINO_SHIM_H
#include <stdint.h>

#include "writer.h"

/* realsym.c: the driver's own entry point for `name` (not ours); the real dlsym (preload.c interposes it). */
void *neutrino_real_sym(const char *name);
typedef void *(*nt_dlsym_fn)(void *handle, const char *name);
nt_dlsym_fn neutrino_real_dlsym(void);

/* compilers.c: our tap on an nvJitLink function found by dlsym (or `real` itself). */
void *neutrino_compiler_tap(const char *name, void *real);

/* fastlaunch.c: the probed launch in C (see there for the return values), the trace budget, the rings. */
int neutrino_fast_launch(int ptsz, const void *config, void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                         unsigned by, unsigned bz, unsigned shmem, void *stream, void **params, uint64_t kernel_launch);
int neutrino_trace_reserve(uint64_t n);
void neutrino_trace_give_back(uint64_t n);

/* graphs.c: launches captured into CUDA graphs. */
int neutrino_graph_stream_capturing(void *stream, int ptsz);
void *neutrino_graph_wrapper_for(const char *symbol, int version, unsigned long long flags);
void *neutrino_graph_wrapper_named(const char *name);

/* graphpick.c: the replays of a probed graph chosen on the host (cuGraphLaunch, in graphs.c). */
enum { NT_PICK_CAPTURED = 1, NT_PICK_FAILED = 2, NT_PICK_UPDATE = 3, NT_PICK_SET_PARAMS = 4 };  /* why a plan is given up */
enum { NT_PICK_TWIN_LOST = 6 };  /* not given up: its twin is, the plan switches nodes from now on */
typedef int (*nt_graph_launch_fn)(void *exec, void *stream);  /* the driver's cuGraphLaunch */
int neutrino_graph_pick_launch(void *exec, void *stream, void *where, int capturing, int as_is,
                               nt_graph_launch_fn launch, int *rc);
void neutrino_graph_pick_stream_event(void *stream);
int neutrino_graph_pick_mirror(void *exec, void *node, int (*apply)(void *twin, void *node, void *arg), void *arg);
int neutrino_graph_pick_has(void *exec, void *node);
void neutrino_graph_pick_forget(void *exec);
int neutrino_graph_pick_keeps(void *graph);

/* cupti.c: a probed launch's place on the timeline; our wrapper of a libcupti function reached by dlsym. */
uint64_t neutrino_timeline_begin_probed(void);
void neutrino_timeline_end_probed(uint64_t token);
int neutrino_timeline_flags_probed(void);  /* a probed launch now gets a flagged kernel record */
void neutrino_timeline_cancel_probed(uint64_t token);
void neutrino_timeline_note_submit(uint64_t seq);
void *neutrino_cupti_wrapper_named(const char *name);
/* cupti.c, level `hooks`: a kernel launch's entry (thread, host time) in its stream's queue, and its result. */
void *neutrino_timeline_launch_enter(void *func, void *stream, int ptsz, const unsigned dims[6]);
void neutrino_timeline_launch_exit(void *entry, int rc);
void neutrino_timeline_kernel_launch_begin(void);
/* cupti.c: a stream (or every stream of a context; of every context with ctx NULL) is about to be destroyed. */
void neutrino_timeline_streams_gone(void *ctx, void *stream);
/* cupti.c: a graph replay about to be launched (graphs.c, before the driver's cuGraphLaunch): per-node records
 * for an executable graph's first replays, one graph-level record for the later ones; then its result. An
 * executable graph destroyed or updated: forgotten (an update's next replays are sampled again). */
void neutrino_timeline_graph_launch_enter(void *exec);
void neutrino_timeline_graph_launch_exit(void);
void neutrino_timeline_graph_exec_gone(void *exec);
void neutrino_timeline_graph_instantiate_enter(void);
void neutrino_timeline_graph_instantiated(void *exec);

/* argtrace.c: the arguments of a probed launch (launch_args.jsonl). */
int64_t neutrino_args_record(void *f, void *ctx, void **params, uint64_t launch);

/* fastlaunch.c's plan of one probed kernel, set from Python (neutrino/runtime/launch_path/fastpath.py, NtPlan). */
typedef struct {
    void *orig_func, *ctx, *probed_func;
    uint32_t n_params, n_maps, n_extra, max_shared;
    uint32_t units_mode[NT_MAX_MAPS];   /* 0 thread, 1 warp, 2 block, 3 fixed (sum/hist maps), 4 + level: a ring
                                         * (cap = slots per unit, fixed_units = most slots: neutrino.maps.ring_slots) */
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

/* graphs.c's description of one probed graph node's ring, from Python
 * (neutrino/runtime/cudagraphs/sinks.py, NtGraphDesc). */
typedef struct {
    uint32_t graph_id, node_id, kernel_id;
    int32_t fd;
    void *ring;           /* pinned, mapped: counters, flags, slots (cudagraphs/ring.py, RingLayout) */
    uint64_t frame_size;
    uint64_t stream;
    uint32_t grid[3], block[3];
    uint32_t shared_bytes, frame_id;
    uint64_t nslots, stride, slots;  /* host ring: slot count, bytes per slot, offset of slot 0 */
    void *ctx, *copy_stream;         /* the node's context; a stream of ours in it */
    uint64_t device_slots, device_stride, device_state;  /* device ring: slot 0, bytes per slot; the state */
    uint64_t data_off, span;         /* where in a frame the maps start; their bytes */
    uint64_t nstage;                 /* host slots (device slot i is copied into host slot i % nstage) */
} nt_graph_desc;

/* graphs.c's description of one executable graph's chain (neutrino/runtime/cudagraphs/sinks.py, NtChainDesc;
 * the memory is chain.py's ChainRings). The arrays are Python's: graphs.c copies them. */
typedef struct {
    void *ctx, *copy_stream;         /* the heads' context; a stream of ours in it */
    uint64_t heads;                  /* device: node i's head at heads + 128 i */
    void *host;                      /* pinned: the heads' copy (128 n), the drained words (8 n), the staging */
    uint64_t staging_bytes;          /* at least one node's whole ring */
    uint32_t n, k;                   /* probed nodes; slots per ring (a power of 2) */
    const uint64_t *rings, *strides; /* per node: its slot 0 (device), its slot's bytes */
    const uint64_t *sinks;           /* per node: 1 for a probed sink (the host publishes its last launch) */
    void **records;                  /* per node: its nt_graph_node (neutrino_graph_node_new): header, counts */
    const void *zeros;               /* pinned: staging_bytes of zeroes, copied over the slots drained (no memset) */
} nt_chain_desc;

/* What Python gives graphpick.c per probed kernel node and per append node of a plan
 * (neutrino/runtime/cudagraphs/replay_select.py, PickKernelDesc, PickAppendDesc). */
typedef struct {
    void *node, *probed, *original, *args;  /* the graph's node, the two functions, neutrino_graph_pick_args */
    uint32_t grid[3], block[3], shared_bytes, pad;
} nt_pick_kernel_desc;

typedef struct {
    void *node, *func;
    uint32_t grid[3], block[3];
    uint64_t args[7];                /* nt_graph_append_args, as captured */
} nt_pick_append_desc;

/* What the graph append kernel (neutrino/runtime/cudagraphs/ring.py, NodeDesc, AppendParams) reads in
 * device memory: one descriptor per probed node, and the kernel's arguments. No C of the shim reads
 * them (the kernel is PTX); tests/fakecuda/fakecuda.c runs the kernel on the host with them. */
typedef struct {
    uint64_t src, bytes;      /* the node's maps, their bytes */
    uint64_t ring;            /* the host ring (mapped): counters, flags */
    uint64_t nslots, slots, stride;  /* the ring's slots (device, or mapped host memory) */
    uint64_t state;           /* the node's device state: replays, written, dropped */
    uint64_t consumed;        /* where the host's consumed count is read */
} nt_graph_node_desc;

typedef struct {
    uint64_t desc;                   /* the nodes' descriptors (grid row b: node b) */
    uint64_t start, stop, every;     /* --launches: the replays selected */
    uint64_t wait_ns;                /* how long a full ring is waited on before the replay is dropped */
    uint64_t skip;                   /* replay number = the state's append runs + skip (replays the host left out) */
    uint64_t host;                   /* 1: the host picked this replay (selected, probed ungated; the gate is kept) */
} nt_graph_append_args;
#endif

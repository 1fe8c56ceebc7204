/* The few CUPTI declarations the timeline uses (shim/cupti.c, tests/fakecuda/fakecupti.c).
 *
 * Written by us from the CUPTI 13.0 headers (CUPTI_API_VERSION 130001, CUDA 13.0):
 * cupti_activity.h, cupti_result.h, cupti_driver_cbid.h, cupti_runtime_cbid.h. The shim
 * includes no CUDA header (CI has none) and links no libcupti: it dlopen()s the library at run
 * time. Activity records are read at byte offsets, not through copied structs, so that only
 * the fields we use are tied to the layout. The offsets below were printed with offsetof()
 * against the real headers (tests/test_timeline_shim.py checks them wherever the headers are).
 */
#ifndef NEUTRINO_CUPTI_ABI_H
#define NEUTRINO_CUPTI_ABI_H
#include <stddef.h>
#include <stdint.h>

#ifndef NT_WITH_REAL_CUPTI_HEADERS /* tests/fakecuda/cupti_offsets.c compares with the real ones */
typedef int CUptiResult;  /* CUPTI_SUCCESS 0 */
#endif
#define NT_CUPTI_SUCCESS 0
#define NT_CUPTI_ERROR_MAX_LIMIT_REACHED 12
#define NT_CUPTI_ERROR_INVALID_KIND 19  /* not used to decide anything: for messages */
#define NT_CUPTI_ERROR_NOT_SUPPORTED 27  /* e.g. cuptiActivityEnableHWTrace before Blackwell */

/* CUpti_ActivityAttribute values (cuptiActivitySetAttribute/GetAttribute; value type in the comment) */
#define NT_ATTR_DEVICE_BUFFER_SIZE 0               /* size_t: bytes per device buffer of a context */
#define NT_ATTR_DEVICE_BUFFER_POOL_LIMIT 2         /* size_t: device buffers per context at most */
#define NT_ATTR_ZEROED_OUT_ACTIVITY_BUFFER 5       /* uint8_t: our buffers come zeroed, CUPTI does not zero them */
#define NT_ATTR_DEVICE_BUFFER_PRE_ALLOCATE_VALUE 6 /* size_t: device buffers allocated up front per context */
#define NT_ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED 8  /* uint8_t: those buffers in pinned host memory, not device */
#define NT_ATTR_PER_THREAD_ACTIVITY_BUFFER 9       /* uint8_t: activity buffers per thread (set before registering) */

/* CUpti_ActivityKind values */
enum {
    NT_ACT_MEMCPY = 1,
    NT_ACT_MEMSET = 2,
    NT_ACT_KERNEL = 3,
    NT_ACT_DRIVER = 4,
    NT_ACT_RUNTIME = 5,
    NT_ACT_CONCURRENT_KERNEL = 10,
    NT_ACT_MEMCPY2 = 22, /* peer-to-peer copies (between two devices' memory) */
    NT_ACT_EXTERNAL_CORRELATION = 39,
    NT_ACT_GRAPH_TRACE = 51,
};

/* CUpti_ExternalCorrelationKind: CUSTOM0/1 are Kineto's; ours is CUSTOM2 */
#define NT_EXT_CORRELATION_KIND 5
#define NT_ACTIVITY_FLAG_FLUSH_FORCED 1
#define NT_THREAD_ID_TYPE_SYSTEM 1 /* CUpti_ActivityThreadIdType: Linux tid in API records */

/* CUpti_ActivityKernel10 (CONCURRENT_KERNEL and KERNEL records in CUPTI 13), 216 bytes */
#define K_START 16        /* u64 */
#define K_END 24          /* u64 */
#define K_DEVICE 40       /* u32 */
#define K_STREAM 48       /* u32 */
#define K_GRID 52         /* i32[3] */
#define K_BLOCK 64        /* i32[3] */
#define K_DYN_SHARED 80   /* i32 */
#define K_CORRELATION 92  /* u32 */
#define K_NAME 104        /* const char * */
#define K_GRAPH_ID 156    /* u32 */
#define K_SIZE 216

/* CUpti_ActivityMemcpy6 (96 bytes) and CUpti_ActivityMemset4 (88 bytes) share these */
#define C_COPY_KIND 4     /* u8, memcpy only */
#define C_BYTES 8         /* u64 */
#define C_START 16
#define C_END 24
#define C_DEVICE 32       /* u32 */
#define C_STREAM 40       /* u32 */
#define C_CORRELATION 44  /* u32 */
#define C_GRAPH_ID 72     /* u32 */
#define MEMCPY_SIZE 96

/* CUpti_ActivityMemcpyPtoP4 (MEMCPY2: a peer-to-peer copy), 96 bytes: copyKind, bytes, start, end, deviceId and
 * streamId where CUpti_ActivityMemcpy6 has them (C_*); then the devices and these */
#define P_SRC_DEVICE 44   /* u32 */
#define P_DST_DEVICE 52   /* u32 */
#define P_CORRELATION 60  /* u32 */
#define P_GRAPH_ID 80     /* u32 */
#define MEMCPY2_SIZE 96
#define MEMSET_SIZE 88

/* CUpti_ActivityAPI (DRIVER and RUNTIME records), 40 bytes */
#define A_CBID 4
#define A_THREAD 28       /* u32 */
#define A_CORRELATION 32  /* u32 */
#define API_SIZE 40

/* CUpti_ActivityGraphTrace2 (GRAPH_TRACE: one record per graph replay, its nodes not traced), 56 bytes */
#define GT_CORRELATION 4  /* u32: the cuGraphLaunch call's */
#define GT_START 8        /* u64 */
#define GT_END 16         /* u64 */
#define GT_DEVICE 24      /* u32 */
#define GT_GRAPH_ID 28    /* u32 */
#define GT_STREAM 36      /* u32 */
#define GRAPHTRACE_SIZE 56

/* CUpti_ActivityExternalCorrelation, 24 bytes */
#define X_KIND 4          /* u32 */
#define X_ID 8            /* u64 */
#define X_CORRELATION 16  /* u32 */
#define EXTCORR_SIZE 24

/* Launch and copy APIs whose records tell the launching thread (cupti_*_cbid.h). Only these
 * are enabled (cuptiActivityEnableDriverApi/RuntimeApi), not every API call. */
static const uint32_t NT_DRIVER_CBIDS[] = {
    307, /* cuLaunchKernel */ 442, /* cuLaunchKernel_ptsz */ 652, /* cuLaunchKernelEx */
    653, /* cuLaunchKernelEx_ptsz */ 477, /* cuLaunchCooperativeKernel */ 478, /* ..._ptsz */
    514, /* cuGraphLaunch */ 515, /* cuGraphLaunch_ptsz */
    306, /* cuMemcpyAsync */ 418, /* cuMemcpyAsync_ptsz */ 276, /* cuMemcpyHtoD_v2 */
    277, /* cuMemcpyHtoDAsync_v2 */ 278, /* cuMemcpyDtoH_v2 */ 279, /* cuMemcpyDtoHAsync_v2 */
    281, /* cuMemcpyDtoDAsync_v2 */ 216, /* cuMemsetD8Async */ 220, /* cuMemsetD32Async */
    305, /* cuMemcpy */ 408, /* cuMemcpy_ptds */ 318, /* cuMemcpyPeer */ 319, /* cuMemcpyPeerAsync */
    409, /* cuMemcpyPeer_ptds */ 426, /* cuMemcpyPeerAsync_ptsz */
};
#define NT_DRIVER_CBID_SIZE 807   /* CUPTI_DRIVER_TRACE_CBID_SIZE */
#define NT_RUNTIME_CBID_SIZE 523  /* CUPTI_RUNTIME_TRACE_CBID_SIZE */
static const uint32_t NT_RUNTIME_CBIDS[] = {
    211, /* cudaLaunchKernel_v7000 */ 214, /* cudaLaunchKernel_ptsz_v7000 */
    430, /* cudaLaunchKernelExC_v11060 */ 431, /* ..._ptsz */ 269, /* cudaLaunchCooperativeKernel_v9000 */
    270, /* ..._ptsz */ 311, /* cudaGraphLaunch_v10000 */ 312, /* ..._ptsz */
    31, /* cudaMemcpy_v3020 */ 41, /* cudaMemcpyAsync_v3020 */ 215, /* cudaMemcpy_ptds_v7000 */
    225, /* cudaMemcpyAsync_ptsz_v7000 */ 49, /* cudaMemset_v3020 */ 51, /* cudaMemsetAsync_v3020 */
    235, /* cudaMemsetAsync_ptsz_v7000 */ 160, /* cudaMemcpyPeer_v4000 */ 161, /* cudaMemcpyPeerAsync_v4000 */
};

/* The callback API (cupti_callbacks.h): CUpti_CallbackDomain values, CUpti_ApiCallbackSite ENTER,
 * and the fields of CUpti_CallbackData (72 bytes) the launch callbacks read. */
#define NT_CB_DOMAIN_DRIVER 1
#define NT_CB_DOMAIN_RUNTIME 2
#define NT_CB_SITE_ENTER 0
#define CB_SITE 0          /* u32 */
#define CB_CORRELATION 64  /* u32 */
#define CB_DATA_SIZE 72
#define NT_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS 39
typedef void (*nt_callback_t)(void *userdata, int domain, uint32_t cbid, const void *cbdata);
typedef void *nt_subscriber_t;

typedef void (*nt_buffer_requested_t)(uint8_t **buffer, size_t *size, size_t *max_records);
typedef void (*nt_buffer_completed_t)(void *ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid);

static inline uint64_t nt_rd64(const uint8_t *p, size_t off) { uint64_t v; __builtin_memcpy(&v, p + off, 8); return v; }
static inline uint32_t nt_rd32(const uint8_t *p, size_t off) { uint32_t v; __builtin_memcpy(&v, p + off, 4); return v; }
static inline void nt_wr64(uint8_t *p, size_t off, uint64_t v) { __builtin_memcpy(p + off, &v, 8); }
static inline void nt_wr32(uint8_t *p, size_t off, uint32_t v) { __builtin_memcpy(p + off, &v, 4); }

/* One record of timeline.bin (spec/trace-format.md, "Context tables"), 96 bytes */
typedef struct {
    uint8_t kind, copy_kind;
    uint16_t flags;
    uint32_t device, stream, tid;
    uint64_t start_ns, end_ns, correlation, bytes;
    uint32_t name_id;
    int32_t probe_launch;
    uint32_t grid[3], block[3];
    uint64_t host_ns; /* appended field (record size 88): host time of the launch or copy call, 0 unknown */
    /* appended fields (record size 96): a graph replay's executable graph (the shim's number, 1 up, in the
     * order of their first launch) and the replay's number among that graph's (1 up); 0 unknown / no graph */
    uint32_t graph_exec, graph_replay;
} nt_timeline_record;
_Static_assert(sizeof(nt_timeline_record) == 96, "timeline.bin record layout");
#endif

/* Prints each shim/cupti_abi.h offset and size next to the real one, from the CUPTI headers
 * (compiled by tests/test_timeline_shim.py wherever the headers are: -I<cuda>/include). */
#include <stddef.h>
#include <stdio.h>
#include <cupti.h>
#define NT_WITH_REAL_CUPTI_HEADERS
#include "cupti_abi.h"

#define CHECK(ours, type, field) printf("%-16s %4d %4zu\n", #ours, (int)(ours), offsetof(type, field))
#define SIZE(ours, type) printf("%-16s %4d %4zu\n", #ours, (int)(ours), sizeof(type))

int main(void) {
    CHECK(K_START, CUpti_ActivityKernel10, start); CHECK(K_END, CUpti_ActivityKernel10, end);
    CHECK(K_DEVICE, CUpti_ActivityKernel10, deviceId); CHECK(K_STREAM, CUpti_ActivityKernel10, streamId);
    CHECK(K_GRID, CUpti_ActivityKernel10, gridX); CHECK(K_BLOCK, CUpti_ActivityKernel10, blockX);
    CHECK(K_DYN_SHARED, CUpti_ActivityKernel10, dynamicSharedMemory);
    CHECK(GT_CORRELATION, CUpti_ActivityGraphTrace2, correlationId); CHECK(GT_START, CUpti_ActivityGraphTrace2, start);
    CHECK(GT_END, CUpti_ActivityGraphTrace2, end); CHECK(GT_DEVICE, CUpti_ActivityGraphTrace2, deviceId);
    CHECK(GT_GRAPH_ID, CUpti_ActivityGraphTrace2, graphId); CHECK(GT_STREAM, CUpti_ActivityGraphTrace2, streamId);
    SIZE(GRAPHTRACE_SIZE, CUpti_ActivityGraphTrace2); printf("%-16s %4d %4d\n", "ACT_GRAPH_TRACE", NT_ACT_GRAPH_TRACE,
                                                            (int)CUPTI_ACTIVITY_KIND_GRAPH_TRACE);
    CHECK(K_CORRELATION, CUpti_ActivityKernel10, correlationId); CHECK(K_NAME, CUpti_ActivityKernel10, name);
    CHECK(K_GRAPH_ID, CUpti_ActivityKernel10, graphId); SIZE(K_SIZE, CUpti_ActivityKernel10);
    CHECK(C_COPY_KIND, CUpti_ActivityMemcpy6, copyKind); CHECK(C_BYTES, CUpti_ActivityMemcpy6, bytes);
    CHECK(C_START, CUpti_ActivityMemcpy6, start); CHECK(C_END, CUpti_ActivityMemcpy6, end);
    CHECK(C_DEVICE, CUpti_ActivityMemcpy6, deviceId); CHECK(C_STREAM, CUpti_ActivityMemcpy6, streamId);
    CHECK(C_CORRELATION, CUpti_ActivityMemcpy6, correlationId); CHECK(C_GRAPH_ID, CUpti_ActivityMemcpy6, graphId);
    SIZE(MEMCPY_SIZE, CUpti_ActivityMemcpy6);
    CHECK(C_COPY_KIND, CUpti_ActivityMemcpyPtoP4, copyKind); CHECK(C_BYTES, CUpti_ActivityMemcpyPtoP4, bytes);
    CHECK(C_START, CUpti_ActivityMemcpyPtoP4, start); CHECK(C_END, CUpti_ActivityMemcpyPtoP4, end);
    CHECK(C_DEVICE, CUpti_ActivityMemcpyPtoP4, deviceId); CHECK(C_STREAM, CUpti_ActivityMemcpyPtoP4, streamId);
    CHECK(P_SRC_DEVICE, CUpti_ActivityMemcpyPtoP4, srcDeviceId); CHECK(P_DST_DEVICE, CUpti_ActivityMemcpyPtoP4, dstDeviceId);
    CHECK(P_CORRELATION, CUpti_ActivityMemcpyPtoP4, correlationId); CHECK(P_GRAPH_ID, CUpti_ActivityMemcpyPtoP4, graphId);
    SIZE(MEMCPY2_SIZE, CUpti_ActivityMemcpyPtoP4);
    printf("%-16s %4d %4d\n", "KIND_MEMCPY2", NT_ACT_MEMCPY2, (int)CUPTI_ACTIVITY_KIND_MEMCPY2);
    printf("%-16s %4d %4d\n", "CBID_MEMCPY", 305, (int)CUPTI_DRIVER_TRACE_CBID_cuMemcpy);
    printf("%-16s %4d %4d\n", "CBID_PEER", 318, (int)CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeer);
    printf("%-16s %4d %4d\n", "CBID_PEER_ASYNC", 319, (int)CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeerAsync);
    printf("%-16s %4d %4d\n", "CBID_PEER_PTDS", 409, (int)CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeer_ptds);
    printf("%-16s %4d %4d\n", "CBID_PEER_A_PTSZ", 426, (int)CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeerAsync_ptsz);
    printf("%-16s %4d %4d\n", "CBID_MEMCPY_PTDS", 408, (int)CUPTI_DRIVER_TRACE_CBID_cuMemcpy_ptds);
    printf("%-16s %4d %4d\n", "RT_PEER", 160, (int)CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyPeer_v4000);
    printf("%-16s %4d %4d\n", "RT_PEER_ASYNC", 161, (int)CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyPeerAsync_v4000);
    printf("%-16s %4d %4d\n", "RT_MEMCPY_ASYNC", 41, (int)CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020);
    CHECK(C_BYTES, CUpti_ActivityMemset4, bytes); CHECK(C_START, CUpti_ActivityMemset4, start);
    CHECK(C_END, CUpti_ActivityMemset4, end); CHECK(C_DEVICE, CUpti_ActivityMemset4, deviceId);
    CHECK(C_STREAM, CUpti_ActivityMemset4, streamId); CHECK(C_CORRELATION, CUpti_ActivityMemset4, correlationId);
    CHECK(C_GRAPH_ID, CUpti_ActivityMemset4, graphId); SIZE(MEMSET_SIZE, CUpti_ActivityMemset4);
    CHECK(A_CBID, CUpti_ActivityAPI, cbid); CHECK(A_THREAD, CUpti_ActivityAPI, threadId);
    CHECK(A_CORRELATION, CUpti_ActivityAPI, correlationId); SIZE(API_SIZE, CUpti_ActivityAPI);
    CHECK(X_KIND, CUpti_ActivityExternalCorrelation, externalKind);
    CHECK(X_ID, CUpti_ActivityExternalCorrelation, externalId);
    CHECK(X_CORRELATION, CUpti_ActivityExternalCorrelation, correlationId);
    SIZE(EXTCORR_SIZE, CUpti_ActivityExternalCorrelation);
    CHECK(CB_SITE, CUpti_CallbackData, callbackSite); CHECK(CB_CORRELATION, CUpti_CallbackData, correlationId);
    SIZE(CB_DATA_SIZE, CUpti_CallbackData);
    printf("%-16s %4d %4d\n", "CB_DRIVER", NT_CB_DOMAIN_DRIVER, (int)CUPTI_CB_DOMAIN_DRIVER_API);
    printf("%-16s %4d %4d\n", "CB_RUNTIME", NT_CB_DOMAIN_RUNTIME, (int)CUPTI_CB_DOMAIN_RUNTIME_API);
    printf("%-16s %4d %4d\n", "MULTI_SUBSCR", NT_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS,
           (int)CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
    printf("%-16s %4d %4d\n", "KIND_CONC_KERNEL", NT_ACT_CONCURRENT_KERNEL, (int)CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    printf("%-16s %4d %4d\n", "KIND_EXT_CORR", NT_ACT_EXTERNAL_CORRELATION, (int)CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
    printf("%-16s %4d %4d\n", "EXT_CUSTOM2", NT_EXT_CORRELATION_KIND, (int)CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2);
    printf("%-16s %4d %4d\n", "CBID_LAUNCH", 307, (int)CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel);
    printf("%-16s %4d %4d\n", "CBID_LAUNCH_EX", 652, (int)CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx);
    printf("%-16s %4d %4d\n", "RT_LAUNCH", 211, (int)CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000);
    printf("%-16s %4d %4d\n", "DRIVER_CBIDS", NT_DRIVER_CBID_SIZE, (int)CUPTI_DRIVER_TRACE_CBID_SIZE);
    printf("%-16s %4d %4d\n", "RUNTIME_CBIDS", NT_RUNTIME_CBID_SIZE, (int)CUPTI_RUNTIME_TRACE_CBID_SIZE);
    printf("%-16s %4d %4d\n", "KIND_KERNEL", NT_ACT_KERNEL, (int)CUPTI_ACTIVITY_KIND_KERNEL);
    printf("%-16s %4d %4d\n", "NOT_SUPPORTED", NT_CUPTI_ERROR_NOT_SUPPORTED, (int)CUPTI_ERROR_NOT_SUPPORTED);
    printf("%-16s %4d %4d\n", "ATTR_DEVBUF", NT_ATTR_DEVICE_BUFFER_SIZE, (int)CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE);
    printf("%-16s %4d %4d\n", "ATTR_POOL_LIMIT", NT_ATTR_DEVICE_BUFFER_POOL_LIMIT,
           (int)CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_POOL_LIMIT);
    printf("%-16s %4d %4d\n", "ATTR_ZEROED", NT_ATTR_ZEROED_OUT_ACTIVITY_BUFFER,
           (int)CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER);
    printf("%-16s %4d %4d\n", "ATTR_PREALLOC", NT_ATTR_DEVICE_BUFFER_PRE_ALLOCATE_VALUE,
           (int)CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_PRE_ALLOCATE_VALUE);
    printf("%-16s %4d %4d\n", "ATTR_PINNED", NT_ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED,
           (int)CUPTI_ACTIVITY_ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED);
    printf("%-16s %4d %4d\n", "ATTR_PER_THREAD", NT_ATTR_PER_THREAD_ACTIVITY_BUFFER,
           (int)CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER);
    return 0;
}

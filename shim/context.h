/* The context tables the shim writes beside the results (spec/trace-format.md, "Context tables"):
 * ranges.bin and ranges_names.txt (nvtx.c: NVTX ranges and neutrino.annotate), launch_args.jsonl
 * (argtrace.c: the arguments of probed launches). Both go through ctxsink.c: bytes appended by the
 * program's threads into memory, written to files by one thread of ours, never on the program's path. */
#ifndef NEUTRINO_CONTEXT_H
#define NEUTRINO_CONTEXT_H
#include <stddef.h>
#include <stdint.h>

enum { NT_SINK_RANGE_NAMES, NT_SINK_RANGES, NT_SINK_ARGS, NT_SINK_COUNT };

#define NT_SINK_CHUNK (128u << 10)      /* bytes per buffer; one append never exceeds it */
#define NT_SINK_LIMIT (64ull << 20)     /* bytes a sink holds while its writer is behind */
#define NT_SINK_EARLY_LIMIT (8ull << 20) /* ... and before the run directory is known (it may never be:
                                          * a process that loads no CUDA module, a child without the runtime) */

/* Append n bytes to a sink: 0, or -1 when dropped (no room, too long, a forked child). Never blocks on I/O. */
int nt_sink_append(int sink, const void *data, size_t n);
/* Unix-epoch nanoseconds (CLOCK_REALTIME) and the Linux thread id of the caller. */
uint64_t nt_realtime_ns(void);
uint32_t nt_thread_id(void);
#endif

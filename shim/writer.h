/* The result writer's job and the calls the fast launch path makes into it (writer.c). */
#ifndef NEUTRINO_WRITER_H
#define NEUTRINO_WRITER_H
#include <stdint.h>

#define NT_MAX_MAPS 16
#define NT_ALIGN 64
#define NT_MAX_HEADER 65536
#define NT_INLINE_HEADER 1024  /* a frame header this small travels inside the writer's queue node */

typedef struct {
    uint64_t seq;            /* submission number (assigned by neutrino_writer_submit): launch index + 1 */
    void *ctx;
    void *ev_start, *ev_end;  /* timing events around the probed kernel on the program's stream */
    void *stream;
    int32_t fd;              /* the kernel's result file, opened O_APPEND by Python */
    uint32_t status;         /* 0: results copied back; else the launch path failed after the launch */
    uint32_t kernel_id, frame_id;
    uint32_t grid[3], block[3];
    uint32_t shared_bytes, n_maps;
    uint64_t kernel_launch;
    const void *header;
    uint64_t header_len;
    uint64_t frame_size;     /* header, sections and padding: what the frame occupies */
    uint64_t offsets[NT_MAX_MAPS];  /* section offsets from the frame start */
    uint64_t device[NT_MAX_MAPS];   /* the map buffers: copied back, then zeroed, by the writer */
    uint64_t sizes[NT_MAX_MAPS];
    uint64_t zero_bytes[NT_MAX_MAPS]; /* what the next launch needs zeroed (the counts, or all) */
    /* fast path: the job's region of its context's device ring (fastlaunch.c), given back when
     * written; consecutive jobs of one ring are copied back and zeroed together */
    void *ring;
    uint64_t ring_end;              /* the ring position after the region */
    uint64_t region, region_bytes;  /* its device address and length */
    uint32_t fast;                  /* 1: from fastlaunch.c (slots and events go back there) */
    uint32_t owns_header;           /* 1: free(header) when written */
    uint32_t untimed;               /* 1: ev_start was not recorded (the kernel's time is not measured) */
    /* CUDA graph replays (graphs.c): the whole frame is already on the host, in `header`
     * (header_len = frame_size); nothing to wait for, copy or zero */
    uint32_t host_frame;
    uint64_t graph;                 /* graph id << 32 | node id (the index record's graph word); 0: not a graph */
    uint32_t copy_header;           /* 1: `header` is the caller's (its stack): submit copies it */
} nt_job;

/* Called on the writer's thread once jobs are written, for what their submitters take back: the fast
 * path's ring regions (fastlaunch.c, consecutive jobs of one ring at once, up to `ring_end`) and the
 * bytes of graph frames waiting (graphs.c). Each registers before submitting such a job, so the
 * writer calls no other file of the shim by name. */
typedef void (*nt_ring_done_fn)(void *ring, uint64_t ring_end);
typedef void (*nt_frame_done_fn)(uint64_t frame_size);
void neutrino_writer_on_ring_done(nt_ring_done_fn fn);
void neutrino_writer_on_host_frame_done(nt_frame_done_fn fn);

/* NEUTRINO_MEASURE's switches (writer.c): for benchmarks only, 0 when unset */
#define NT_MEASURE_NO_COPY 1
#define NT_MEASURE_NO_ZERO 2
#define NT_MEASURE_NO_END_EVENT 4
#define NT_MEASURE_TIMED_END 8
#define NT_MEASURE_ZERO_BY_COPY 16
#define NT_MEASURE_ZERO_BY_MEMSET 32
int neutrino_measure(void);
/* Zero `bytes` of device memory at `device` on `stream` by copies of pinned zeros (a copy engine; a driver memset
 * only where those cannot be made). 0 on success. */
int neutrino_zero_async(uint64_t device, uint64_t bytes, void *stream);

uint64_t neutrino_writer_submit(const nt_job *job);
int neutrino_writer_take_events(void *ctx, void **ev2, int timed);
void neutrino_writer_recycle_events(void *ctx, void *ev_start, void *ev_end);
void neutrino_writer_hurry(void);
int neutrino_writer_wait(uint64_t seq, int64_t timeout_ms);
uint64_t neutrino_writer_next_seq(void);
void neutrino_writer_print_profile(void);
/* Stream work of ours (a copy, memset, event record or wait on any stream) done while a capture of the program
 * is open, counted by who did it (issue 24: such work slows every later graph replay of the process); graphs.c
 * tells when captures open (+1) and end (-1), and asks how many are open. Kept here, at the bottom of the shim, so every file can count. */
enum { NT_WORK_WRITER, NT_WORK_POLLER, NT_WORK_LAUNCH, NT_WORK_PICK, NT_WORK_RUNTIME, NT_WORK_SITES };
void neutrino_note_stream_work(int site);
void neutrino_captures_opened(int delta);
long neutrino_captures_open(void);
void neutrino_graph_capture_stats(uint64_t *out);
#endif

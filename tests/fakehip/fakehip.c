/* A fake libamdhip64.so for CPU-only tests of the HIP hook (shim/hip.c + neutrino/runtime/hip).
 *
 * Device memory is host memory. Modules keep a copy of their image (an ELF
 * code object or a clang offload bundle); a function exists when its name is
 * in the image. A launch of a probed function (its image names "nt_map_")
 * plays the block_sched probe: for every wave (64 lanes, FAKEHIP_LANES) of the grid it writes,
 * into the map buffer passed as kernel parameter FAKEHIP_BUFPARAM, count = 1
 * and the record {lstart = unit, elapse = 7, cuid = unit % 104}, in the buffer
 * layout of spec/kernel-json.md (with an `extra` argument buffer: the pointer at
 * byte FAKEHIP_BUFOFFSET of it). Every launch appends
 * "<name> probed=<0|1> grid=<gx> arg0=<first u64 parameter>" to FAKEHIP_LOG.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int hipError_t;
typedef struct { unsigned x, y, z; } dim3;
typedef struct { char *image; size_t size; } Module;
typedef struct { Module *mod; char name[256]; } Function;

static size_t image_size(const unsigned char *p) {
    if (memcmp(p, "\x7f" "ELF", 4) == 0) {
        uint64_t shoff; uint16_t shentsize, shnum;
        memcpy(&shoff, p + 0x28, 8); memcpy(&shentsize, p + 0x3A, 2); memcpy(&shnum, p + 0x3C, 2);
        return shoff + (size_t)shentsize * shnum;
    }
    if (memcmp(p, "__CLANG_OFFLOAD_BUNDLE__", 24) == 0) {
        uint64_t n, end = 32, pos = 32;
        memcpy(&n, p + 24, 8);
        for (uint64_t i = 0; i < n; i++) {
            uint64_t off, size, tlen;
            memcpy(&off, p + pos, 8); memcpy(&size, p + pos + 8, 8); memcpy(&tlen, p + pos + 16, 8);
            pos += 24 + tlen;
            if (off + size > end) end = off + size;
            if (pos > end) end = pos;
        }
        return end;
    }
    return 0;
}

static void log_line(const char *fmt, const char *name, int probed, unsigned gx, unsigned long long arg0) {
    const char *log = getenv("FAKEHIP_LOG");
    FILE *fh = log ? fopen(log, "a") : NULL;
    if (!fh) return;
    fprintf(fh, fmt, name, probed, gx, arg0);
    fclose(fh);
}

hipError_t hipModuleLoadData(void **module, const void *image) {
    size_t n = image_size(image);
    if (!n) return 200; /* hipErrorInvalidImage */
    Module *m = calloc(1, sizeof *m);
    m->image = malloc(n);
    memcpy(m->image, image, n);
    m->size = n;
    *module = m;
    return 0;
}

hipError_t hipModuleLoad(void **module, const char *path) {
    FILE *fh = fopen(path, "rb");
    if (!fh) return 301; /* hipErrorFileNotFound */
    fseek(fh, 0, SEEK_END);
    long n = ftell(fh);
    fseek(fh, 0, SEEK_SET);
    char *buf = malloc(n);
    size_t got = fread(buf, 1, n, fh);
    fclose(fh);
    hipError_t rc = got == (size_t)n ? hipModuleLoadData(module, buf) : 200;
    free(buf);
    return rc;
}

hipError_t hipModuleUnload(void *module) { Module *m = module; free(m->image); free(m); return 0; }

hipError_t hipModuleGetFunction(void **function, void *module, const char *name) {
    Module *m = module;
    if (!memmem(m->image, m->size, name, strlen(name))) return 500; /* hipErrorNotFound */
    Function *f = calloc(1, sizeof *f);
    f->mod = m;
    snprintf(f->name, sizeof f->name, "%s", name);
    *function = f;
    return 0;
}

static void play_block_sched(void *buffer, unsigned blocks, unsigned threads) {
    const char *lanes_env = getenv("FAKEHIP_LANES");  /* 32 for an RDNA (wave32) device */
    unsigned lanes = lanes_env ? (unsigned)atoi(lanes_env) : 64;
    unsigned waves = (threads + lanes - 1) / lanes, units = blocks * waves;
    unsigned char *base = buffer;
    size_t records = ((size_t)4 * units + 15) / 16 * 16;
    for (unsigned u = 0; u < units; u++) {
        uint32_t one = 1, elapse = 7, cuid = u % 104;
        uint64_t lstart = u;
        memcpy(base + 4 * (size_t)u, &one, 4);
        unsigned char *rec = base + records + 16 * (size_t)u;
        memcpy(rec, &lstart, 8); memcpy(rec + 8, &elapse, 4); memcpy(rec + 12, &cuid, 4);
    }
}

hipError_t hipModuleLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                                 unsigned shared, void *stream, void **params, void **extra) {
    (void)shared; (void)stream;
    Function *fn = f;
    int probed = memmem(fn->mod->image, fn->mod->size, "nt_map_", 7) != NULL;
    unsigned char *args = NULL;
    size_t args_size = 0;
    for (int i = 0; !params && extra && extra[i] != (void *)3; i += 2) { /* HIP_LAUNCH_PARAM_{BUFFER_POINTER,SIZE,END} */
        if (extra[i] == (void *)1) args = extra[i + 1];
        if (extra[i] == (void *)2) args_size = *(size_t *)extra[i + 1];
    }
    unsigned long long arg0 = params && params[0] ? *(unsigned long long *)params[0] : 0;
    if (args && args_size >= 8) memcpy(&arg0, args, 8);
    log_line("%s probed=%d grid=%u arg0=%llu\n", fn->name, probed, gx, arg0);
    const char *which = getenv("FAKEHIP_BUFPARAM"), *at = getenv("FAKEHIP_BUFOFFSET");
    void *buffer = NULL;
    if (probed && which && params) buffer = *(void **)params[atoi(which)];
    if (probed && at && args && (size_t)atoi(at) + 8 <= args_size) memcpy(&buffer, args + atoi(at), 8);
    if (buffer) play_block_sched(buffer, gx * gy * gz, bx * by * bz);
    return 0;
}

hipError_t hipLaunchKernel(const void *host_function, dim3 grid, dim3 block, void **args, size_t shared, void *stream) {
    (void)host_function; (void)block; (void)args; (void)shared; (void)stream;
    log_line("%s probed=%d grid=%u arg0=%llu\n", "runtime-registered", 0, grid.x, 0);
    return 0;
}

hipError_t hipMalloc(void **p, size_t n) { *p = malloc(n ? n : 1); memset(*p, 0xAB, n); return 0; }
hipError_t hipFree(void *p) { free(p); return 0; }
hipError_t hipMemset(void *p, int v, size_t n) { memset(p, v, n); return 0; }
hipError_t hipMemcpy(void *dst, const void *src, size_t n, int kind) { (void)kind; memcpy(dst, src, n); return 0; }
hipError_t hipStreamSynchronize(void *s) { (void)s; return 0; }
hipError_t hipDeviceSynchronize(void) { return 0; }

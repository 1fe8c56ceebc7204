/* NVTX ranges through NVTX's injection interface, and neutrino.annotate's ranges.
 *
 * The launcher sets NVTX_INJECTION64_PATH to this shim. Every NVTX instance in the process (each
 * library built with the header-only NVTX v3 has its own: torch's, the program's, libcudart's)
 * loads it at its first NVTX call and calls InitializeInjectionNvtx2 with its export-table getter;
 * we put our functions into that instance's core (push/pop, start/end, marks) and core2 (domains,
 * registered strings) tables. Functions we leave unset become no-ops in NVTX.
 *
 * A push opens a range on the calling thread's stack (thread-local, no lock); its pop writes one
 * 40-byte ranges.bin record (spec/trace-format.md) through ctxsink.c. Start/end ranges may end on
 * another thread: they are kept in a small table under a lock. Names (messages, domains) are
 * interned once into ranges_names.txt; a push costs two clock reads, a name lookup (one hash of
 * the message under a mutex) and a record append.
 *
 * The NVTX types are declared here (no NVTX header): the event attributes of NVTX v2/v3,
 * whose layout is fixed by NVTX's ABI.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#include "context.h"

typedef uint64_t nvtx_range_id;
typedef void (*nvtx_fn)(void);
typedef const void *(*nvtx_get_export_table)(uint32_t id);
typedef struct {
    size_t struct_size;
    int (*get_module_function_table)(int module, nvtx_fn ***out_table, unsigned *out_size);
} nvtx_callbacks_table;

enum { ETID_CALLBACKS = 1, MODULE_CORE = 1, MODULE_CORE2 = 5 };
enum { CORE_MarkEx = 1, CORE_MarkA, CORE_MarkW, CORE_RangeStartEx, CORE_RangeStartA, CORE_RangeStartW, CORE_RangeEnd,
       CORE_RangePushEx, CORE_RangePushA, CORE_RangePushW, CORE_RangePop };
enum { CORE2_DomainMarkEx = 1, CORE2_DomainRangeStartEx, CORE2_DomainRangeEnd, CORE2_DomainRangePushEx,
       CORE2_DomainRangePop, CORE2_DomainRegisterStringA = 10, CORE2_DomainRegisterStringW, CORE2_DomainCreateA,
       CORE2_DomainCreateW };
enum { MESSAGE_ASCII = 1, MESSAGE_UNICODE = 2, MESSAGE_REGISTERED = 3 };

typedef struct {  /* nvtxEventAttributes_v2 */
    uint16_t version, size;
    uint32_t category;
    int32_t color_type;
    uint32_t color;
    int32_t payload_type, reserved0;
    uint64_t payload;
    int32_t message_type;
    const void *message;  /* const char *, const wchar_t * or a registered string handle */
} nvtx_attributes;

enum { SOURCE_PUSH = 1, SOURCE_START = 2, SOURCE_ANNOTATE = 3 };
#define NO_DOMAIN 0xFFFFFFFFu
#define UNNAMED_ID 0xFFFFFFFEu  /* the name could not be interned (table full): written as "" */

typedef struct {  /* one ranges.bin record (spec/trace-format.md) */
    uint64_t start_ns, end_ns;
    uint32_t tid;
    uint16_t depth;
    uint8_t source, reserved0;
    uint32_t name_id, domain_id;
    uint64_t reserved1;
} range_record;
_Static_assert(sizeof(range_record) == 40, "ranges.bin record layout");

/* A domain handle and a registered-string handle both point at one of these. */
typedef struct { uint32_t name_id; } named;

/* ------------------------------------------------------------------ names */

#define NAME_SLOTS (1u << 16)
typedef struct { uint64_t hash; char *text; uint32_t id; } name_slot;
static name_slot *name_table;
static uint32_t names_used;
static pthread_mutex_t names_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t hash_bytes(const char *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h;
}

/* ranges_names.txt's line: newlines written as the two characters \n (spec/trace-format.md). */
static void write_name_line(const char *text, size_t n) {
    char buf[4096 + 2];
    size_t k = 0;
    for (size_t i = 0; i < n && k < sizeof buf - 3; i++) {
        if (text[i] == '\n') { buf[k++] = '\\'; buf[k++] = 'n'; }
        else buf[k++] = text[i];
    }
    buf[k++] = '\n';
    nt_sink_append(NT_SINK_RANGE_NAMES, buf, k);
}

/* Each thread remembers the names it met last (direct-mapped by hash): a hit compares with the
 * table's copy of the name, which never changes once made, and takes no lock. */
#define THREAD_NAMES 64
static __thread const name_slot *recent[THREAD_NAMES];

/* The line of ranges_names.txt holding `text` (interned on first sight). */
static uint32_t intern(const char *text, size_t n) {
    if (n > 4000) n = 4000;
    uint64_t h = hash_bytes(text, n);
    const name_slot *mine = recent[h & (THREAD_NAMES - 1)];
    if (mine && mine->hash == h && !strncmp(mine->text, text, n) && mine->text[n] == 0) return mine->id;
    uint32_t id = UNNAMED_ID;
    pthread_mutex_lock(&names_lock);
    if (!name_table) name_table = calloc(NAME_SLOTS, sizeof *name_table);
    for (uint32_t i = (uint32_t)h & (NAME_SLOTS - 1), probes = 0; name_table && probes < NAME_SLOTS;
         i = (i + 1) & (NAME_SLOTS - 1), probes++) {
        name_slot *s = &name_table[i];
        if (s->text && s->hash == h && strlen(s->text) == n && !memcmp(s->text, text, n)) {
            id = s->id;
            recent[h & (THREAD_NAMES - 1)] = s;
            break;
        }
        if (s->text) continue;
        if (names_used >= NAME_SLOTS * 3 / 4 || !(s->text = malloc(n + 1))) break;
        memcpy(s->text, text, n);
        s->text[n] = 0;
        s->hash = h;
        s->id = id = names_used++;
        recent[h & (THREAD_NAMES - 1)] = s;
        write_name_line(text, n);  /* under names_lock: lines in id order */
        break;
    }
    pthread_mutex_unlock(&names_lock);
    return id;
}

static uint32_t intern_wide(const wchar_t *w) {
    char buf[4096];
    size_t k = 0;
    for (; w && *w && k < sizeof buf - 4; w++) {  /* UTF-8 of each code point */
        uint32_t c = (uint32_t)*w;
        if (c < 0x80) buf[k++] = (char)c;
        else if (c < 0x800) { buf[k++] = (char)(0xC0 | c >> 6); buf[k++] = (char)(0x80 | (c & 0x3F)); }
        else if (c < 0x10000) { buf[k++] = (char)(0xE0 | c >> 12); buf[k++] = (char)(0x80 | ((c >> 6) & 0x3F));
                                buf[k++] = (char)(0x80 | (c & 0x3F)); }
        else { buf[k++] = (char)(0xF0 | c >> 18); buf[k++] = (char)(0x80 | ((c >> 12) & 0x3F));
               buf[k++] = (char)(0x80 | ((c >> 6) & 0x3F)); buf[k++] = (char)(0x80 | (c & 0x3F)); }
    }
    return intern(buf, k);
}

static uint32_t intern_c(const char *s) { return s ? intern(s, strlen(s)) : intern("", 0); }

static uint32_t attributes_name(const nvtx_attributes *a) {
    if (!a || !a->message) return intern("", 0);
    switch (a->message_type) {
    case MESSAGE_ASCII: return intern_c(a->message);
    case MESSAGE_UNICODE: return intern_wide(a->message);
    case MESSAGE_REGISTERED: return ((const named *)a->message)->name_id;
    default: return intern("", 0);
    }
}

static uint32_t domain_id(const void *domain) { return domain ? ((const named *)domain)->name_id : NO_DOMAIN; }

/* ------------------------------------------------------------------ thread stacks (push/pop) */

#define MAX_DEPTH 64
typedef struct { uint64_t start_ns; uint32_t name_id, domain_id; uint16_t level; uint8_t source; } open_range;
static __thread open_range stack[MAX_DEPTH];
static __thread int depth;  /* may exceed MAX_DEPTH: those levels are counted, not recorded */
static _Atomic uint64_t nvtx_instances, ranges_closed;

static void emit(uint64_t start, uint32_t tid, int at_depth, int source, uint32_t name, uint32_t domain) {
    range_record r = {start, nt_realtime_ns(), tid, (uint16_t)at_depth, (uint8_t)source, 0, name, domain, 0};
    if (nt_sink_append(NT_SINK_RANGES, &r, sizeof r) == 0)
        atomic_fetch_add_explicit(&ranges_closed, 1, memory_order_relaxed);
}

static int push(int source, uint32_t name, uint32_t domain) {
    int level = depth++;
    if (level < MAX_DEPTH)
        stack[level] = (open_range){nt_realtime_ns(), name, domain, (uint16_t)level, (uint8_t)source};
    return level;
}

/* Close the innermost open range of this source and domain (NVTX nests per thread and domain). */
static int pop(int source, uint32_t domain) {
    int top = depth < MAX_DEPTH ? depth : MAX_DEPTH;
    if (depth > MAX_DEPTH) return --depth;
    for (int i = top - 1; i >= 0; i--) {
        open_range *r = &stack[i];
        if (r->source != source || r->domain_id != domain) continue;
        int level = r->level;
        emit(r->start_ns, nt_thread_id(), level, source, r->name_id, r->domain_id);
        memmove(&stack[i], &stack[i + 1], (size_t)(top - 1 - i) * sizeof *r);
        depth--;
        return level;
    }
    return -1;  /* a pop without its push */
}

static int range_push_a(const char *m) { return push(SOURCE_PUSH, intern_c(m), NO_DOMAIN); }
static int range_push_w(const wchar_t *m) { return push(SOURCE_PUSH, intern_wide(m), NO_DOMAIN); }
static int range_push_ex(const nvtx_attributes *a) { return push(SOURCE_PUSH, attributes_name(a), NO_DOMAIN); }
static int range_pop(void) { return pop(SOURCE_PUSH, NO_DOMAIN); }
static int domain_push_ex(const void *d, const nvtx_attributes *a) {
    return push(SOURCE_PUSH, attributes_name(a), domain_id(d));
}
static int domain_pop(const void *d) { return pop(SOURCE_PUSH, domain_id(d)); }

/* neutrino.annotate (Python, through ctypes): its own source, nested with the NVTX ranges. */
int neutrino_annotate_push(const char *name) { return push(SOURCE_ANNOTATE, intern_c(name), NO_DOMAIN); }
int neutrino_annotate_pop(void) { return pop(SOURCE_ANNOTATE, NO_DOMAIN); }

/* ------------------------------------------------------------------ start/end ranges */

#define OPEN_SLOTS 4096
typedef struct { nvtx_range_id id; uint64_t start_ns; uint32_t tid, name_id, domain_id; uint16_t depth; } started;
static started open_ranges[OPEN_SLOTS];
static nvtx_range_id next_range_id = 1;
static pthread_mutex_t started_lock = PTHREAD_MUTEX_INITIALIZER;

static nvtx_range_id range_start(uint32_t name, uint32_t domain) {
    uint64_t now = nt_realtime_ns();
    nvtx_range_id id = 0;
    pthread_mutex_lock(&started_lock);
    for (unsigned n = 0; n < OPEN_SLOTS; n++) {
        started *s = &open_ranges[(next_range_id + n) % OPEN_SLOTS];
        if (s->id) continue;
        id = next_range_id + n;
        *s = (started){id, now, nt_thread_id(), name, domain, (uint16_t)(depth < 0xFFFF ? depth : 0xFFFF)};
        next_range_id = id + 1;
        break;
    }
    pthread_mutex_unlock(&started_lock);
    return id;  /* 0: too many open at once, not recorded */
}

static void range_end(nvtx_range_id id) {
    if (!id) return;
    started s = {0};
    pthread_mutex_lock(&started_lock);
    started *slot = &open_ranges[id % OPEN_SLOTS];
    if (slot->id == id) { s = *slot; slot->id = 0; }
    pthread_mutex_unlock(&started_lock);
    if (s.id) emit(s.start_ns, s.tid, s.depth, SOURCE_START, s.name_id, s.domain_id);
}

static nvtx_range_id range_start_a(const char *m) { return range_start(intern_c(m), NO_DOMAIN); }
static nvtx_range_id range_start_w(const wchar_t *m) { return range_start(intern_wide(m), NO_DOMAIN); }
static nvtx_range_id range_start_ex(const nvtx_attributes *a) { return range_start(attributes_name(a), NO_DOMAIN); }
static nvtx_range_id domain_start_ex(const void *d, const nvtx_attributes *a) {
    return range_start(attributes_name(a), domain_id(d));
}
static void domain_end(const void *d, nvtx_range_id id) { (void)d; range_end(id); }

/* ------------------------------------------------------------------ domains, registered strings */

static void *new_named(uint32_t name_id) {
    named *n = malloc(sizeof *n);
    if (n) n->name_id = name_id;
    return n;
}

static void *domain_create_a(const char *name) { return new_named(intern_c(name)); }
static void *domain_create_w(const wchar_t *name) { return new_named(intern_wide(name)); }
static void *register_string_a(const void *d, const char *s) { (void)d; return new_named(intern_c(s)); }
static void *register_string_w(const void *d, const wchar_t *s) { (void)d; return new_named(intern_wide(s)); }

/* ------------------------------------------------------------------ injection */

static int fill(nvtx_get_export_table get, int module, const int *ids, nvtx_fn const *fns, int n) {
    const nvtx_callbacks_table *cb = get(ETID_CALLBACKS);
    nvtx_fn **table = NULL;
    unsigned size = 0;
    if (!cb || !cb->get_module_function_table || !cb->get_module_function_table(module, &table, &size) || !table)
        return 0;
    for (int i = 0; i < n; i++)
        if ((unsigned)ids[i] < size && table[ids[i]]) *table[ids[i]] = fns[i];
    return 1;
}

/* Called by each NVTX instance at its first NVTX call (NVTX_INJECTION64_PATH names this library).
 * Returns 1 (attached) when the core table took our functions. */
int InitializeInjectionNvtx2(nvtx_get_export_table get) {
    if (!get) return 0;
    static const int core_ids[] = {CORE_RangePushA, CORE_RangePushW, CORE_RangePushEx, CORE_RangePop,
                                   CORE_RangeStartA, CORE_RangeStartW, CORE_RangeStartEx, CORE_RangeEnd};
    nvtx_fn const core_fns[] = {(nvtx_fn)range_push_a, (nvtx_fn)range_push_w, (nvtx_fn)range_push_ex,
                                (nvtx_fn)range_pop, (nvtx_fn)range_start_a, (nvtx_fn)range_start_w,
                                (nvtx_fn)range_start_ex, (nvtx_fn)range_end};
    static const int core2_ids[] = {CORE2_DomainRangePushEx, CORE2_DomainRangePop, CORE2_DomainRangeStartEx,
                                    CORE2_DomainRangeEnd, CORE2_DomainCreateA, CORE2_DomainCreateW,
                                    CORE2_DomainRegisterStringA, CORE2_DomainRegisterStringW};
    nvtx_fn const core2_fns[] = {(nvtx_fn)domain_push_ex, (nvtx_fn)domain_pop, (nvtx_fn)domain_start_ex,
                                 (nvtx_fn)domain_end, (nvtx_fn)domain_create_a, (nvtx_fn)domain_create_w,
                                 (nvtx_fn)register_string_a, (nvtx_fn)register_string_w};
    if (!fill(get, MODULE_CORE, core_ids, core_fns, 8)) return 0;
    fill(get, MODULE_CORE2, core2_ids, core2_fns, 8);  /* an NVTX v1 instance has no core2 */
    atomic_fetch_add(&nvtx_instances, 1);
    return 1;
}

/* A child forked while another thread held one of these locks must not wait for it forever. */
static void locks_in_forked_child(void) {
    pthread_mutex_init(&names_lock, NULL);
    pthread_mutex_init(&started_lock, NULL);
}

__attribute__((constructor)) static void nvtx_init(void) { pthread_atfork(NULL, NULL, locks_in_forked_child); }

/* NVTX instances attached, ranges recorded (closed and appended). */
void neutrino_ranges_stats(uint64_t *instances, uint64_t *closed) {
    *instances = atomic_load(&nvtx_instances);
    *closed = atomic_load(&ranges_closed);
}

/* A fake libnvJitLink.so.13 for CPU tests of the compiler taps (shim/compilers.c).
 *
 * "Compiling" PTX makes a fake cubin: "FAKECUBIN\n" followed by the PTX, so the
 * result holds no PTX we would recognise (it does not start with .version) while
 * the fake driver (fakecuda.c) still finds kernel names in it. A link of several
 * inputs concatenates them.
 */
#include <stdlib.h>
#include <string.h>

typedef struct { char *out; size_t len; } Link;

int nvJitLinkCreate(void **h, unsigned n, const char **opts) {
    (void)n; (void)opts;
    Link *l = calloc(1, sizeof *l);
    l->out = strdup("FAKECUBIN\n");
    l->len = strlen(l->out);
    *h = l;
    return 0;
}

int nvJitLinkAddData(void *h, int type, const void *data, size_t size, const char *name) {
    (void)type; (void)name;
    Link *l = h;
    l->out = realloc(l->out, l->len + size + 1);
    memcpy(l->out + l->len, data, size);
    l->out[l->len + size] = '\0';
    l->len = strlen(l->out);
    return 0;
}

int nvJitLinkComplete(void *h) { (void)h; return 0; }
int nvJitLinkGetLinkedCubinSize(void *h, size_t *size) { *size = ((Link *)h)->len + 1; return 0; }
int nvJitLinkGetLinkedCubin(void *h, void *buf) { memcpy(buf, ((Link *)h)->out, ((Link *)h)->len + 1); return 0; }
int nvJitLinkDestroy(void **h) {
    Link *l = *h;
    free(l->out);
    free(l);
    *h = NULL;
    return 0;
}

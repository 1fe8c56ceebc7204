/* Reaches the (fake) driver the way libcudart 13 does: dlsym(cuGetProcAddress_v2),
 * then cuGetProcAddress("cuGetProcAddress"), then everything through it.
 * usage: app PTXFILE KERNEL LAUNCHES */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef int (*gpa2_t)(const char *, void **, int, unsigned long long, void *);
typedef int (*load_t)(void **, const void *);
typedef int (*getf_t)(void **, void *, const char *);
typedef int (*launch_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **, void **);

int main(int argc, char **argv) {
    if (argc < 4) return 2;
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) { fprintf(stderr, "no libcuda: %s\n", dlerror()); return 3; }
    gpa2_t gpa0 = (gpa2_t)dlsym(h, "cuGetProcAddress_v2"), gpa;
    if (gpa0("cuGetProcAddress", (void **)&gpa, 12000, 0, NULL)) return 4;
    load_t load; getf_t getf; launch_t launch;
    gpa("cuModuleLoadData", (void **)&load, 12000, 0, NULL);
    gpa("cuModuleGetFunction", (void **)&getf, 12000, 0, NULL);
    gpa("cuLaunchKernel", (void **)&launch, 12000, 0, NULL);
    FILE *f = fopen(argv[1], "rb");
    if (!f) return 5;
    char *ptx = calloc(1, 1 << 22);
    fread(ptx, 1, (1 << 22) - 1, f);
    fclose(f);
    void *mod, *fn;
    if (load(&mod, ptx)) return 6;
    if (getf(&fn, mod, argv[2])) return 7;
    uint64_t a = 1, b = 2, c = 3, d = 4;
    void *params[] = {&a, &b, &c, &d};
    for (int i = 0; i < atoi(argv[3]); i++)
        if (launch(fn, 4, 1, 1, 64, 1, 1, 0, NULL, params, NULL)) return 8;
    int (*release)(int);
    if (gpa("cuDevicePrimaryCtxRelease", (void **)&release, 12000, 0, NULL) == 0) release(0);  /* as cudart does at exit */
    printf("app done\n");
    return 0;
}

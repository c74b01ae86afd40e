/* What the launch benchmarks share: the driver opened, a context current, an empty kernel
 * loaded, and the preloaded library's own entry points, or a message and a non-zero return. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>

typedef int (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         unsigned, void *, void **, void **);

struct bench {
    void *cuda;                  /* libcuda.so.1's handle */
    void *f;                     /* the empty kernel */
    launch_fn hooked;            /* cuLaunchKernel as the program finds it: the interposed one */
    launch_fn driver;            /* the driver's own, behind it */
    int (*probes)(int);          /* egpu_preload_probes: pause (0) or run (1) the probes */
    void *(*real_launch)(void);  /* egpu_preload_real_launch: the hook's real function */
    int (*sync)(void);           /* cuCtxSynchronize */
    int (*sites)(int);           /* egpu_preload_sites: capture launch sites, 1 in N (0: none) */
    uint64_t (*tag)(uint64_t);   /* egpu_tag_set: the thread's tag (0: none) */
};

static const char EMPTY_PTX[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                                ".visible .entry empty()\n{\n\tret;\n}\n";

#define NEED(f) if (!(f)) { fprintf(stderr, "missing: %s\n", #f); return 1; }
#define CHECK(call) do { int r_ = (call); if (r_) { fprintf(stderr, "%s: %d\n", #call, r_); return 1; } } while (0)

static int set_up(struct bench *b) {
    b->cuda = dlopen("libcuda.so.1", RTLD_NOW);
    NEED(b->cuda);
    int (*init)(unsigned) = dlsym(b->cuda, "cuInit");
    int (*device_get)(int *, int) = dlsym(b->cuda, "cuDeviceGet");
    int (*retain)(void **, int) = dlsym(b->cuda, "cuDevicePrimaryCtxRetain");
    int (*set_current)(void *) = dlsym(b->cuda, "cuCtxSetCurrent");
    int (*load)(void **, const void *) = dlsym(b->cuda, "cuModuleLoadData");
    int (*get_function)(void **, void *, const char *) = dlsym(b->cuda, "cuModuleGetFunction");
    b->sync = dlsym(b->cuda, "cuCtxSynchronize");
    b->hooked = (launch_fn)dlsym(b->cuda, "cuLaunchKernel");
    b->probes = (int (*)(int))dlsym(RTLD_DEFAULT, "egpu_preload_probes");
    b->real_launch = (void *(*)(void))dlsym(RTLD_DEFAULT, "egpu_preload_real_launch");
    b->sites = (int (*)(int))dlsym(RTLD_DEFAULT, "egpu_preload_sites");
    b->tag = (uint64_t (*)(uint64_t))dlsym(RTLD_DEFAULT, "egpu_tag_set");
    NEED(init && device_get && retain && set_current && load && get_function && b->sync && b->hooked);
    if (!b->probes || !b->real_launch || !b->sites || !b->tag) { fprintf(stderr, "not under egpu's preloaded library\n"); return 2; }
    int dev;
    void *ctx, *module;
    CHECK(init(0));
    CHECK(device_get(&dev, 0));
    CHECK(retain(&ctx, dev));
    CHECK(set_current(ctx));
    CHECK(load(&module, EMPTY_PTX));
    CHECK(get_function(&b->f, module, "empty"));
    b->driver = (launch_fn)b->real_launch();
    NEED(b->driver && b->driver != b->hooked);
    return 0;
}

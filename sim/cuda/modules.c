/* CUDA driver simulator: modules, libraries, functions and kernels (images are
 * accepted without being parsed; every name exists). */
#include "cuda/internal.h"

/* ---- modules, libraries, functions ---- */


static struct cu_module *modules; /* every loaded module and library, under cu_lock */

static CUresult module_new(bool library, struct cu_module **ret) {
        struct cu_module *m = calloc(1, sizeof(*m));
        if (!m)
                return CUDA_ERROR_OUT_OF_MEMORY;
        m->magic = MAGIC_MODULE;
        m->ctx = cu_current();
        m->library = library;
        pthread_mutex_lock(&cu_lock);
        m->next = modules;
        modules = m;
        pthread_mutex_unlock(&cu_lock);
        *ret = m;
        return CUDA_SUCCESS;
}

static CUresult module_load(CUmodule *module, const void *image) {
        struct cu_ctx *c;
        struct cu_module *m;
        CUresult r = cu_ctx_or_current(NULL, &c);
        if (r != CUDA_SUCCESS)
                return r;
        if (!module || !image)
                return CUDA_ERROR_INVALID_VALUE;
        r = module_new(false, &m);
        if (r == CUDA_SUCCESS)
                *module = (CUmodule) m;
        return r;
}

CU_EXPORT CUresult cuModuleLoad(CUmodule *module, const char *fname) {
        if (!fname)
                return CUDA_ERROR_INVALID_VALUE;
        if (access(fname, R_OK) != 0)
                return CUDA_ERROR_FILE_NOT_FOUND;
        return module_load(module, fname);
}

CU_EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image) {
        return module_load(module, image);
}

CU_EXPORT CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                      CUjit_option *options, void **optionValues) {
        (void) numOptions;
        (void) options;
        (void) optionValues;
        return module_load(module, image);
}

CU_EXPORT CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin) {
        return module_load(module, fatCubin);
}

static void module_free(struct cu_module *m) {
        for (struct cu_module **p = &modules; *p; p = &(*p)->next)
                if (*p == m) {
                        *p = m->next;
                        break;
                }
        while (m->funcs) {
                struct cu_func *f = m->funcs;
                m->funcs = f->next;
                f->magic = 0;
                free(f->name);
                free(f);
        }
        while (m->globals) {
                struct cu_global *g = m->globals;
                m->globals = g->next;
                free(g->name);
                free(g);
        }
        m->magic = 0;
        free(m);
}

CU_EXPORT CUresult cuModuleUnload(CUmodule hmod) {
        struct cu_module *m = (struct cu_module *) hmod;
        if (!m || m->magic != MAGIC_MODULE || m->library)
                return CUDA_ERROR_INVALID_HANDLE;
        pthread_mutex_lock(&cu_lock);
        module_free(m);
        pthread_mutex_unlock(&cu_lock);
        return CUDA_SUCCESS;
}

static CUresult func_get(struct cu_module *m, const char *name, struct cu_func **ret) {
        if (!m || m->magic != MAGIC_MODULE)
                return CUDA_ERROR_INVALID_HANDLE;
        if (!name || !*name)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&cu_lock);
        struct cu_func *f;
        for (f = m->funcs; f; f = f->next)
                if (streq(f->name, name))
                        break;
        if (!f) {
                f = calloc(1, sizeof(*f));
                if (f)
                        f->name = strndup(name, 4096);
                if (!f || !f->name) {
                        if (f)
                                free(f);
                        pthread_mutex_unlock(&cu_lock);
                        return CUDA_ERROR_OUT_OF_MEMORY;
                }
                f->magic = MAGIC_FUNC;
                f->mod = m;
                f->attrs[CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES] = 0;
                f->attrs[CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT] = -1;
                f->next = m->funcs;
                m->funcs = f;
        }
        pthread_mutex_unlock(&cu_lock);
        *ret = f;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
        struct cu_func *f;
        if (!hfunc)
                return CUDA_ERROR_INVALID_VALUE;
        CUresult r = func_get((struct cu_module *) hmod, name, &f);
        if (r == CUDA_SUCCESS)
                *hfunc = (CUfunction) f;
        return r;
}

static CUresult global_get(struct cu_module *m, const char *name, CUdeviceptr *dptr, size_t *bytes) {
        if (!m || m->magic != MAGIC_MODULE)
                return CUDA_ERROR_INVALID_HANDLE;
        if (!name)
                return CUDA_ERROR_INVALID_VALUE;
        struct cu_global *g;
        pthread_mutex_lock(&cu_lock);
        for (g = m->globals; g; g = g->next)
                if (streq(g->name, name))
                        break;
        pthread_mutex_unlock(&cu_lock);
        if (!g) {
                /* Images are not parsed: every global is a 64 KiB zeroed block. */
                CUdeviceptr p;
                CUresult r = cu_alloc_global(65536, cu_current(), &p);
                if (r != CUDA_SUCCESS)
                        return r;
                g = calloc(1, sizeof(*g));
                if (!g || !(g->name = strndup(name, 4096))) {
                        free(g);
                        return CUDA_ERROR_OUT_OF_MEMORY;
                }
                g->ptr = (void *) p;
                g->size = 65536;
                pthread_mutex_lock(&cu_lock);
                g->next = m->globals;
                m->globals = g;
                pthread_mutex_unlock(&cu_lock);
        }
        if (dptr)
                *dptr = (CUdeviceptr) g->ptr;
        if (bytes)
                *bytes = g->size;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name) {
        return global_get((struct cu_module *) hmod, name, dptr, bytes);
}

CU_EXPORT CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode *mode) {
        if (!mode)
                return CUDA_ERROR_INVALID_VALUE;
        *mode = CU_MODULE_LAZY_LOADING;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuModuleGetFunctionCount(unsigned int *count, CUmodule mod) {
        struct cu_module *m = (struct cu_module *) mod;
        if (!m || m->magic != MAGIC_MODULE || !count)
                return CUDA_ERROR_INVALID_VALUE;
        unsigned n = 0;
        for (struct cu_func *f = m->funcs; f; f = f->next)
                n++;
        *count = n;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
                                     void **jitOptionsValues, unsigned int numJitOptions,
                                     CUlibraryOption *libraryOptions, void **libraryOptionValues,
                                     unsigned int numLibraryOptions) {
        struct cu_module *m;
        (void) jitOptions;
        (void) jitOptionsValues;
        (void) numJitOptions;
        (void) libraryOptions;
        (void) libraryOptionValues;
        (void) numLibraryOptions;
        CUresult r = cu_check_init();
        if (r != CUDA_SUCCESS)
                return r;
        if (!library || !code)
                return CUDA_ERROR_INVALID_VALUE;
        r = module_new(true, &m);
        if (r == CUDA_SUCCESS)
                *library = (CUlibrary) m;
        return r;
}

CU_EXPORT CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fileName, CUjit_option *jitOptions,
                                         void **jitOptionsValues, unsigned int numJitOptions,
                                         CUlibraryOption *libraryOptions, void **libraryOptionValues,
                                         unsigned int numLibraryOptions) {
        if (!fileName)
                return CUDA_ERROR_INVALID_VALUE;
        if (access(fileName, R_OK) != 0)
                return CUDA_ERROR_FILE_NOT_FOUND;
        return cuLibraryLoadData(library, fileName, jitOptions, jitOptionsValues, numJitOptions, libraryOptions,
                                 libraryOptionValues, numLibraryOptions);
}

CU_EXPORT CUresult cuLibraryUnload(CUlibrary library) {
        struct cu_module *m = (struct cu_module *) library;
        if (!m || m->magic != MAGIC_MODULE || !m->library)
                return CUDA_ERROR_INVALID_HANDLE;
        pthread_mutex_lock(&cu_lock);
        module_free(m);
        pthread_mutex_unlock(&cu_lock);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name) {
        struct cu_func *f;
        if (!pKernel)
                return CUDA_ERROR_INVALID_VALUE;
        CUresult r = func_get((struct cu_module *) library, name, &f);
        if (r == CUDA_SUCCESS)
                *pKernel = (CUkernel) f;
        return r;
}

CU_EXPORT CUresult cuLibraryGetModule(CUmodule *pMod, CUlibrary library) {
        struct cu_module *m = (struct cu_module *) library;
        if (!pMod)
                return CUDA_ERROR_INVALID_VALUE;
        if (!m || m->magic != MAGIC_MODULE)
                return CUDA_ERROR_INVALID_HANDLE;
        *pMod = (CUmodule) m;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name) {
        return global_get((struct cu_module *) library, name, dptr, bytes);
}

CU_EXPORT CUresult cuLibraryGetManaged(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name) {
        return global_get((struct cu_module *) library, name, dptr, bytes);
}

CU_EXPORT CUresult cuLibraryGetKernelCount(unsigned int *count, CUlibrary lib) {
        return cuModuleGetFunctionCount(count, (CUmodule) lib);
}

CU_EXPORT CUresult cuLibraryGetUnifiedFunction(void **fptr, CUlibrary library, const char *symbol) {
        (void) library;
        (void) symbol;
        if (fptr)
                *fptr = NULL;
        return CUDA_ERROR_NOT_FOUND;
}

struct cu_func *cu_as_func(const void *h) {
        struct cu_func *f = (struct cu_func *) h;
        return f && f->magic == MAGIC_FUNC ? f : NULL;
}

CU_EXPORT CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel) {
        struct cu_func *f = cu_as_func(kernel);
        if (!pFunc)
                return CUDA_ERROR_INVALID_VALUE;
        if (!f)
                return CUDA_ERROR_INVALID_HANDLE;
        *pFunc = (CUfunction) f;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuKernelGetLibrary(CUlibrary *pLib, CUkernel kernel) {
        struct cu_func *f = cu_as_func(kernel);
        if (!pLib)
                return CUDA_ERROR_INVALID_VALUE;
        if (!f)
                return CUDA_ERROR_INVALID_HANDLE;
        *pLib = (CUlibrary) f->mod;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuKernelGetName(const char **name, CUkernel hfunc) {
        struct cu_func *f = cu_as_func(hfunc);
        if (!name)
                return CUDA_ERROR_INVALID_VALUE;
        if (!f)
                return CUDA_ERROR_INVALID_HANDLE;
        *name = f->name;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuFuncGetName(const char **name, CUfunction hfunc) {
        return cuKernelGetName(name, (CUkernel) hfunc);
}

CU_EXPORT CUresult cuFuncGetModule(CUmodule *hmod, CUfunction hfunc) {
        struct cu_func *f = cu_as_func(hfunc);
        if (!hmod)
                return CUDA_ERROR_INVALID_VALUE;
        if (!f)
                return CUDA_ERROR_INVALID_HANDLE;
        *hmod = (CUmodule) f->mod;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuFuncIsLoaded(CUfunctionLoadingState *state, CUfunction function) {
        if (!state)
                return CUDA_ERROR_INVALID_VALUE;
        if (!cu_as_func(function))
                return CUDA_ERROR_INVALID_HANDLE;
        *state = CU_FUNCTION_LOADING_STATE_LOADED;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuFuncLoad(CUfunction function) {
        return cu_as_func(function) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult func_attr(int *pi, CUfunction_attribute attrib, struct cu_func *f, int major) {
        if (!pi)
                return CUDA_ERROR_INVALID_VALUE;
        if (!f)
                return CUDA_ERROR_INVALID_HANDLE;
        switch (attrib) {
        case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
        case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = 32; break;
        case CU_FUNC_ATTRIBUTE_PTX_VERSION:
        case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = major * 10; break;
        default:
                if ((unsigned) attrib < ELEMENTSOF(f->attrs))
                        *pi = f->attrs[attrib];
                else
                        *pi = 0;
        }
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc) {
        struct cu_ctx *c = cu_current();
        int major = cu_ctx_valid(c) ? cu_devs[c->dev].model->cc_major : 8;
        return func_attr(pi, attrib, cu_as_func(hfunc), major);
}

CU_EXPORT CUresult cuKernelGetAttribute(int *pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev) {
        struct cu_dev *d;
        CUresult r = cu_dev_get(dev, &d);
        if (r != CUDA_SUCCESS)
                return r;
        return func_attr(pi, attrib, cu_as_func(kernel), d->model->cc_major);
}

CU_EXPORT CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
        struct cu_func *f = cu_as_func(hfunc);
        if (!f)
                return CUDA_ERROR_INVALID_HANDLE;
        if ((unsigned) attrib < ELEMENTSOF(f->attrs))
                f->attrs[attrib] = value;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev) {
        (void) dev;
        return cuFuncSetAttribute((CUfunction) kernel, attrib, val);
}

CU_EXPORT CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config) {
        (void) config;
        return cu_as_func(hfunc) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CU_EXPORT CUresult cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev) {
        (void) config;
        (void) dev;
        return cu_as_func(kernel) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CU_EXPORT CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset, size_t *paramSize) {
        (void) func;
        (void) paramIndex;
        (void) paramOffset;
        (void) paramSize;
        return CUDA_ERROR_NOT_SUPPORTED; /* images are not parsed */
}

CU_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, CUfunction func,
                                                                        int blockSize, size_t dynamicSMemSize,
                                                                        unsigned int flags) {
        (void) dynamicSMemSize;
        (void) flags;
        if (!numBlocks || blockSize <= 0)
                return CUDA_ERROR_INVALID_VALUE;
        if (!cu_as_func(func))
                return CUDA_ERROR_INVALID_HANDLE;
        *numBlocks = MIN(32, 2048 / blockSize);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func, int blockSize,
                                                               size_t dynamicSMemSize) {
        return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize, dynamicSMemSize, 0);
}

CU_EXPORT CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int *minGridSize, int *blockSize, CUfunction func,
                                                             CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                             size_t dynamicSMemSize, int blockSizeLimit,
                                                             unsigned int flags) {
        struct cu_ctx *c;
        (void) blockSizeToDynamicSMemSize;
        (void) dynamicSMemSize;
        (void) flags;
        CUresult r = cu_ctx_or_current(NULL, &c);
        if (r != CUDA_SUCCESS)
                return r;
        if (!minGridSize || !blockSize)
                return CUDA_ERROR_INVALID_VALUE;
        if (!cu_as_func(func))
                return CUDA_ERROR_INVALID_HANDLE;
        *blockSize = blockSizeLimit > 0 ? MIN(blockSizeLimit, 1024) : 1024;
        *minGridSize = (int) cu_devs[c->dev].sms * (2048 / *blockSize);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuOccupancyMaxPotentialBlockSize(int *minGridSize, int *blockSize, CUfunction func,
                                                    CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                    size_t dynamicSMemSize, int blockSizeLimit) {
        return cuOccupancyMaxPotentialBlockSizeWithFlags(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
                                                         dynamicSMemSize, blockSizeLimit, 0);
}

CU_EXPORT CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize, CUfunction func, int numBlocks,
                                                           int blockSize) {
        (void) numBlocks;
        (void) blockSize;
        if (!dynamicSmemSize)
                return CUDA_ERROR_INVALID_VALUE;
        if (!cu_as_func(func))
                return CUDA_ERROR_INVALID_HANDLE;
        *dynamicSmemSize = 49152;
        return CUDA_SUCCESS;
}

/* Thread block clusters (compute capability 9.0 on): at most 8 blocks a
 * cluster, 16 when the function allows non-portable sizes; as many clusters
 * at once as the device (a MIG device: its compute instance) has SMs per
 * cluster. */
static CUresult cluster_config(const CUlaunchConfig *config, struct cu_func **f, CUfunction func, int *size,
                               struct cu_dev **d) {
        struct cu_ctx *c;
        CUresult r;
        *f = cu_as_func(func);
        if (!*f)
                return CUDA_ERROR_INVALID_HANDLE;
        if (!config || config->numAttrs > 64 || (config->numAttrs && !config->attrs))
                return CUDA_ERROR_INVALID_VALUE;
        if (config->hStream ? !cu_stream_resolve(config->hStream, &c, &r) : (r = cu_ctx_or_current(NULL, &c)) != 0)
                return r;
        *d = &cu_devs[c->dev];
        if ((*d)->model->cc_major < 9)
                return CUDA_ERROR_INVALID_CLUSTER_SIZE;
        *size = 1;
        for (unsigned i = 0; i < config->numAttrs; i++)
                if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
                        const unsigned *dim = &config->attrs[i].value.clusterDim.x;
                        if (!dim[0] || !dim[1] || !dim[2])
                                return CUDA_ERROR_INVALID_CLUSTER_SIZE;
                        *size = (int) (dim[0] * dim[1] * dim[2]);
                }
        return CUDA_SUCCESS;
}

static int cluster_max(const struct cu_func *f) {
        return f->attrs[CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED] ? 16 : 8;
}

CU_EXPORT CUresult cuOccupancyMaxActiveClusters(int *numClusters, CUfunction func, const CUlaunchConfig *config) {
        struct cu_func *f;
        struct cu_dev *d;
        int size;
        if (!numClusters)
                return CUDA_ERROR_INVALID_VALUE;
        CUresult r = cluster_config(config, &f, func, &size, &d);
        if (r != CUDA_SUCCESS)
                return r;
        if (size > cluster_max(f))
                return CUDA_ERROR_INVALID_CLUSTER_SIZE;
        *numClusters = (int) d->sms / size;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuOccupancyMaxPotentialClusterSize(int *clusterSize, CUfunction func, const CUlaunchConfig *config) {
        struct cu_func *f;
        struct cu_dev *d;
        int size;
        if (!clusterSize)
                return CUDA_ERROR_INVALID_VALUE;
        CUresult r = cluster_config(config, &f, func, &size, &d);
        if (r != CUDA_SUCCESS)
                return r;
        *clusterSize = MIN(cluster_max(f), (int) d->sms);
        return CUDA_SUCCESS;
}

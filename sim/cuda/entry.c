/* CUDA driver simulator: how programs reach the driver besides linking.
 *
 * cuGetProcAddress/_v2 resolve a plain name ("cuMemAlloc") for a CUDA version
 * to the entry point of that version (cuMemAlloc_v2 from 3.2 on), and to the
 * _ptds/_ptsz variant when asked for per-thread default stream semantics; the
 * table (procs.inc) is generated from the toolkit's cudaTypedefs.h. The
 * private tables of cuGetExportTable are in export-tables.c. */
#include "cuda/internal.h"

/* ---- per-thread default stream entry points (generated wrappers) ---- */
#define PROCS_WRAPPERS
#include "cuda/procs.inc"
#undef PROCS_WRAPPERS

/* ---- cuGetProcAddress ---- */

struct proc {
        const char *name;
        int version;
        int per_thread;
        void *fn;
};

static const struct proc procs[] = {
#define P(name, version, per_thread, fn) { name, version, per_thread, (void *) fn },
#include "cuda/procs.inc"
        /* cuda.h renames cuGraphInstantiate to cuGraphInstantiateWithFlags (CUDA 12). */
        P("cuGraphInstantiate", 12000, 0, cuGraphInstantiateWithFlags)
#undef P
};

static CUresult get_proc(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                         CUdriverProcAddressQueryResult *status) {
        const struct proc *best = NULL, *best_pt = NULL;
        bool known = false;

        if (!symbol || !pfn)
                return CUDA_ERROR_INVALID_VALUE;
        *pfn = NULL;
        for (size_t i = 0; i < ELEMENTSOF(procs); i++) {
                const struct proc *p = &procs[i];
                if (!streq(p->name, symbol))
                        continue;
                known = true;
                if (p->version > cudaVersion)
                        continue;
                const struct proc **slot = p->per_thread ? &best_pt : &best;
                if (!*slot || (*slot)->version < p->version)
                        *slot = p;
        }
        if ((flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && best_pt)
                best = best_pt;
        if (!best) {
                if (status)
                        *status = known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                                        : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
                cu_log("cuGetProcAddress(%s, %d): %s", symbol, cudaVersion, known ? "version not sufficient"
                                                                                  : "not found");
                return CUDA_ERROR_NOT_FOUND;
        }
        *pfn = best->fn;
        if (status)
                *status = CU_GET_PROC_ADDRESS_SUCCESS;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *symbolStatus) {
        return get_proc(symbol, pfn, cudaVersion, flags, symbolStatus);
}

CU_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) {
        return get_proc(symbol, pfn, cudaVersion, flags, NULL);
}

/* ---- odds and ends ---- */

CU_EXPORT CUresult cuProfilerStart(void) {
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuProfilerStop(void) {
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags) {
        (void) peerContext;
        (void) Flags;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuCtxDisablePeerAccess(CUcontext peerContext) {
        (void) peerContext;
        return CUDA_SUCCESS;
}

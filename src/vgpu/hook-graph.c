/* libmigkit-vgpu.so: CUDA graphs' memory (graph.h; hook.h lists the
 * interposer's files and their order: this one calls charging and contexts,
 * hook-memory.c and hook-launch.c call it).
 *
 * The driver takes a graph's allocations from the device's graph pool when
 * an instantiated graph is launched or uploaded (an allocation node only
 * reserves an address), and the pool keeps what it reserved until
 * cuDeviceGraphMemTrim, past the graph's frees and its destruction. So the
 * process is charged, per device, what the graph pool reserves
 * (CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), settled after each launch,
 * upload and trim. Before a launch or upload of a graph with allocation
 * nodes, what the pool will need, max(reserved, in use + the graph's
 * allocations), is charged first: past the cap the call is refused with
 * CUDA_ERROR_OUT_OF_MEMORY, as the driver refuses a launch it cannot back.
 * A graph's allocations are read at instantiation: its allocation nodes and
 * those of its child graphs, at any depth (cuGraphChildGraphNodeGetGraph;
 * the driver embeds a graph with allocation nodes only by moving it into
 * the node, and refuses to copy one). Launches and uploads of such graphs on one
 * device are serialised by graph_lock so that two threads do not both count
 * on the same reserve. (hook-launch.c's cuGraphLaunch takes the compute
 * share, then calls vgpu_graph_run.) */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "vgpu/graph.h"
#include "vgpu/hook.h"

#define VGPU_GRAPH_DEFINE(name, ret, params, args) HIDDEN _Atomic(name##_fn) real_##name;
VGPU_GRAPH_HOOKS(VGPU_GRAPH_DEFINE)
VGPU_HOOK_TABLE(graph, VGPU_GRAPH_HOOKS(VGPU_HOOK_ENTRY));

bool vgpu_graph_capturing(CUstream st) {
        cuStreamIsCapturing_fn f = real_cuStreamIsCapturing;
        int status = CU_STREAM_CAPTURE_STATUS_NONE;
        return f && f(st, &status) == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* ---- what each instantiated graph allocates ---- */

#define GRAPH_EXECS 256
struct exec_use {
        CUgraphExec x; /* NULL: free entry */
        uint64_t bytes[VGPU_MAX_DEVICES];
};
static pthread_mutex_t graph_lock = PTHREAD_MUTEX_INITIALIZER;
static struct exec_use execs[GRAPH_EXECS];           /* under graph_lock */
static uint64_t charged[VGPU_MAX_DEVICES];           /* the graph pools' charge, under graph_lock */
static _Atomic unsigned n_execs;                     /* entries in use: launches of other graphs skip the lock */

#define GRAPH_DEPTH 16 /* child graphs inside child graphs, at most */

/* The bytes of g's allocation nodes, per device, with those of its child
 * graphs at any depth (the driver lets a graph with allocation nodes be a
 * child graph when it is moved into its node, CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE).
 * False when they cannot be read, or nest deeper than GRAPH_DEPTH. */
static bool graph_allocs(CUgraph g, uint64_t bytes[VGPU_MAX_DEVICES], unsigned depth) {
        cuGraphGetNodes_fn nodes_of = real_cuGraphGetNodes;
        cuGraphNodeGetType_fn type_of = real_cuGraphNodeGetType;
        cuGraphMemAllocNodeGetParams_fn params_of = real_cuGraphMemAllocNodeGetParams;
        cuGraphChildGraphNodeGetGraph_fn child_of = real_cuGraphChildGraphNodeGetGraph;
        size_t n = 0;
        if (depth > GRAPH_DEPTH || !nodes_of || !type_of || !params_of || nodes_of(g, NULL, &n) != CUDA_SUCCESS)
                return false;
        if (n == 0)
                return true;
        CUgraphNode *nodes = calloc(n, sizeof(*nodes));
        if (!nodes)
                return false;
        size_t got = n;
        bool ok = nodes_of(g, nodes, &got) == CUDA_SUCCESS;
        for (size_t i = 0; ok && i < got && i < n; i++) {
                int type = -1;
                CUDA_MEM_ALLOC_NODE_PARAMS p;
                CUgraph child = NULL;
                if (type_of(nodes[i], &type) != CUDA_SUCCESS)
                        continue;
                if (type == CU_GRAPH_NODE_TYPE_GRAPH) {
                        /* no way to read it: not counted, as before child graphs were */
                        if (child_of && child_of(nodes[i], &child) == CUDA_SUCCESS && child)
                                ok = graph_allocs(child, bytes, depth + 1);
                        continue;
                }
                if (type != CU_GRAPH_NODE_TYPE_MEM_ALLOC)
                        continue;
                if (params_of(nodes[i], &p) != CUDA_SUCCESS || p.poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
                    p.poolProps.location.id < 0 || p.poolProps.location.id >= VGPU_MAX_DEVICES)
                        continue;
                uint64_t *b = &bytes[p.poolProps.location.id];
                *b = *b + p.bytesize < *b ? UINT64_MAX : *b + p.bytesize;
        }
        free(nodes);
        return ok;
}

/* After a successful instantiation: remember x's allocations, if any. */
static void exec_record(CUgraphExec x, CUgraph g) {
        uint64_t bytes[VGPU_MAX_DEVICES] = { 0 };
        bool any = false;
        if (!vgpu_active() || !graph_allocs(g, bytes, 0))
                return;
        for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++)
                any |= bytes[d] != 0;
        if (!any)
                return;
        pthread_mutex_lock(&graph_lock);
        struct exec_use *e = NULL;
        for (unsigned i = 0; i < GRAPH_EXECS && !e; i++)
                if (!execs[i].x || execs[i].x == x)
                        e = &execs[i];
        if (e) {
                if (!e->x)
                        atomic_fetch_add(&n_execs, 1);
                e->x = x;
                memcpy(e->bytes, bytes, sizeof(bytes));
        } else
                vgpu_log(VGPU_LOG_WARNING, "more than %d instantiated graphs with allocations: charged after their launches",
                         GRAPH_EXECS);
        pthread_mutex_unlock(&graph_lock);
}

/* Under graph_lock: x's entry, or NULL. */
static struct exec_use *exec_find(CUgraphExec x) {
        for (unsigned i = 0; i < GRAPH_EXECS; i++)
                if (execs[i].x == x)
                        return &execs[i];
        return NULL;
}

/* ---- the graph pools' charge ---- */

static bool pool_attr(unsigned dev, int attr, uint64_t *ret) {
        cuDeviceGetGraphMemAttribute_fn f = real_cuDeviceGetGraphMemAttribute;
        cuuint64_t v = 0;
        if (!f || f((CUdevice) dev, attr, &v) != CUDA_SUCCESS)
                return false;
        *ret = v;
        return true;
}

/* Under graph_lock: dev's charge brought to what its graph pool reserves. */
static void settle(unsigned dev) {
        uint64_t reserved;
        int s = vgpu_my_slot();
        if (s < 0 || !pool_attr(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved))
                return;
        if (charged[dev] > reserved) {
                vgpu_uncharge(s, dev, charged[dev] - reserved);
                charged[dev] = reserved;
        } else if (reserved > charged[dev]) {
                if (vgpu_charge_raw(dev, reserved - charged[dev], &s) == CUDA_SUCCESS)
                        charged[dev] = reserved;
                else
                        vgpu_log(VGPU_LOG_WARNING, "the graph pool of device %u reserves %llu bytes past the cap (%llu charged)",
                                 dev, (unsigned long long) reserved, (unsigned long long) charged[dev]);
        }
}

/* Under graph_lock: charges, per device, what the pool will hold once bytes
 * more are in use; undoes it all when one device refuses. */
static CUresult reserve(const uint64_t bytes[VGPU_MAX_DEVICES]) {
        uint64_t added[VGPU_MAX_DEVICES] = { 0 };
        CUresult r = CUDA_SUCCESS;
        for (unsigned d = 0; d < VGPU_MAX_DEVICES && r == CUDA_SUCCESS; d++) {
                uint64_t used = 0, reserved = 0;
                int s;
                if (!bytes[d])
                        continue;
                if (!pool_attr(d, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used) ||
                    !pool_attr(d, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved))
                        continue; /* no graph pool to ask: charged after the launch */
                uint64_t need = used + bytes[d] < used ? UINT64_MAX : used + bytes[d];
                if (need < reserved)
                        need = reserved;
                if (need <= charged[d])
                        continue;
                r = vgpu_charge(d, need - charged[d], &s);
                if (r == CUDA_SUCCESS) {
                        added[d] = need - charged[d];
                        charged[d] = need;
                }
        }
        if (r != CUDA_SUCCESS)
                for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++)
                        if (added[d]) {
                                vgpu_uncharge(vgpu_my_slot(), d, added[d]);
                                charged[d] -= added[d];
                        }
        return r;
}

/* A launch or upload: x's allocations charged first (refused past the cap),
 * the real call, then the charge settled on what the pools reserve. */
CUresult vgpu_graph_run(CUgraphExec x, CUstream st, CUresult (*real)(CUgraphExec, CUstream)) {
        if (!vgpu_active() || atomic_load(&n_execs) == 0)
                return real(x, st);
        pthread_mutex_lock(&graph_lock);
        struct exec_use *e = exec_find(x);
        if (!e) {
                pthread_mutex_unlock(&graph_lock);
                return real(x, st);
        }
        uint64_t bytes[VGPU_MAX_DEVICES];
        memcpy(bytes, e->bytes, sizeof(bytes));
        CUresult r = reserve(bytes);
        if (r == CUDA_SUCCESS)
                r = real(x, st);
        for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++)
                if (bytes[d])
                        settle(d);
        pthread_mutex_unlock(&graph_lock);
        return r;
}

/* ---- hooks ---- */

#define INSTANTIATE_HOOK(name, params, args)                                                                 \
        EXPORT CUresult name params {                                                                        \
                vgpu_init();                                                                                 \
                REAL(name);                                                                          \
                CUresult r = real args;                                                                      \
                if (r == CUDA_SUCCESS && x)                                                                  \
                        exec_record(*x, g);                                                                  \
                return r;                                                                                    \
        }
INSTANTIATE_HOOK(cuGraphInstantiate, VGPU_GRAPH_INST_PARAMS, VGPU_GRAPH_INST_ARGS)
INSTANTIATE_HOOK(cuGraphInstantiate_v2, VGPU_GRAPH_INST_PARAMS, VGPU_GRAPH_INST_ARGS)
INSTANTIATE_HOOK(cuGraphInstantiateWithFlags, (CUgraphExec * x, CUgraph g, unsigned long long flags), (x, g, flags))
INSTANTIATE_HOOK(cuGraphInstantiateWithParams, (CUgraphExec * x, CUgraph g, void *params), (x, g, params))
INSTANTIATE_HOOK(cuGraphInstantiateWithParams_ptsz, (CUgraphExec * x, CUgraph g, void *params), (x, g, params))

EXPORT CUresult cuGraphExecDestroy(CUgraphExec x) {
        vgpu_init();
        REAL(cuGraphExecDestroy);
        CUresult r = real(x);
        if (r == CUDA_SUCCESS && atomic_load(&n_execs) > 0) {
                pthread_mutex_lock(&graph_lock);
                struct exec_use *e = exec_find(x);
                if (e) {
                        *e = (struct exec_use) { 0 };
                        atomic_fetch_sub(&n_execs, 1);
                }
                pthread_mutex_unlock(&graph_lock);
        }
        return r;
}

/* An upload reserves the graph's memory as a launch does. */
#define UPLOAD_HOOK(name)                                                                                    \
        EXPORT CUresult name(CUgraphExec x, CUstream st) {                                                   \
                vgpu_init();                                                                                 \
                REAL(name);                                                                                  \
                return vgpu_graph_run(x, st, real);                                                          \
        }
UPLOAD_HOOK(cuGraphUpload)
UPLOAD_HOOK(cuGraphUpload_ptsz)

EXPORT CUresult cuDeviceGraphMemTrim(CUdevice dev) {
        vgpu_init();
        REAL(cuDeviceGraphMemTrim);
        CUresult r = real(dev);
        if (r == CUDA_SUCCESS && vgpu_active() && dev >= 0 && dev < VGPU_MAX_DEVICES) {
                pthread_mutex_lock(&graph_lock);
                settle((unsigned) dev);
                pthread_mutex_unlock(&graph_lock);
        }
        return r;
}

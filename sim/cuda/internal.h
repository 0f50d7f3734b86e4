/* Internals of the CUDA driver simulator (libcuda.so.1). See docs/simulator.md,
 * "CUDA driver simulator", for what is modelled. The ABI comes from the
 * toolkit's public cuda.h; the simulator is a test and demo part of migkit,
 * never linked into the product.
 *
 * Layers (each file calls only files of the layers below it, and within layer
 * 2 and 3 only the files listed before it; tests/integration/test-cuda-sim.sh
 * checks this on the object files, so no call circle can creep in):
 *   0  core.c      cuInit, the device list, tracing, the thread's context stack,
 *                  charging device memory to the live region, error names
 *      devices.c   device queries
 *   1  arena.c     address arena, allocation table, VMM mapping table,
 *                  checked copies and sets
 *      sched.c     stream objects, the time model, kernel booking, graph node
 *                  lists (what capture appends to)
 *      graphmem.c  graph memory: allocation and free nodes, the graph pools
 *   2  context.c   contexts and primary contexts (charge a context's size)
 *      streams.c   stream and event API
 *      memory.c    allocations, memory info, host memory, pointer attributes
 *      copy.c      copies, sets, prefetch and advice
 *      pools.c     stream-ordered allocation, memory pools
 *      vmm.c       cuMemCreate, reserve, map, access
 *      modules.c   modules, libraries, functions, kernels
 *      link.c      JIT linking (accepted, not compiled)
 *   3  launch.c    launch API
 *      memops.c    stream memory operations (write, wait, batch)
 *      ipc.c       IPC memory and event handles
 *      userobj.c   user objects and the references graphs hold
 *      arrays.c    CUDA arrays and mipmapped arrays (sized, charged)
 *      graphs.c    graphs, instantiation, launch, capture API
 *      graph-nodes.c  kernel node parameters, exec update, CUDA 10/11 forms
 *   4  stubs.c     generated (gen-procs.py): per-thread-stream forms, older
 *                  versions, CUDA_ERROR_NOT_SUPPORTED stubs for the rest
 *      export-tables.c  private export tables of cuGetExportTable
 *      entry.c     cuGetProcAddress (procs.inc, generated)
 */
#pragma once

#include <cuda.h>
#include <cudaProfiler.h>
#include "cuda/nomacro.h" /* every version is defined under its own exported name */
#include "cuda/procs.h"   /* and declared with the prototype of its version */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "lib/catalog.h"
#include "lib/live.h"
#include "lib/util.h"

#define CU_EXPORT __attribute__((visibility("default")))
#define CUSIM_DRIVER_VERSION 13000 /* cuDriverGetVersion: CUDA 13.0 */
#define CUSIM_MAX_DEVICES 64
#define CUSIM_CTX_STACK 32

enum cu_magic {
        MAGIC_CTX = 0x43545831,
        MAGIC_STREAM = 0x53545231,
        MAGIC_EVENT = 0x45564e31,
        MAGIC_MODULE = 0x4d4f4431,
        MAGIC_FUNC = 0x46554e31,
        MAGIC_LIBRARY = 0x4c494231,
        MAGIC_POOL = 0x504f4f31,
        MAGIC_GRAPH = 0x47525031,
        MAGIC_GEXEC = 0x47455831,
        MAGIC_NODE = 0x4e4f4431,
        MAGIC_HANDLE = 0x484e4431,
};

struct cu_pool;

struct cu_dev {
        unsigned gpu, gi, ci;    /* gi/ci SIM_ID_NONE: the whole GPU */
        bool mig;
        const struct sim_model *model;
        char name[256];
        CUuuid uuid;             /* MIG UUID for MIG devices */
        CUuuid gpu_uuid;         /* the physical GPU's */
        unsigned bus;
        uint64_t total_bytes;
        unsigned sms;
        int clock_khz, mem_clock_khz, bus_width, l2_bytes;
        uint64_t ctx_bytes;            /* a context's size on this model (MIGKIT_SIM_CUDA_CTX_MIB overrides) */
        struct sim_live_device *mem;   /* memory domain */
        struct sim_live_device *comp;  /* compute domain */
        struct sim_live_slot *slot;    /* this process's slot, NULL until used */
        uint64_t static_bytes;         /* NVML-level processes (migkit-sim process add) */
        struct cu_ctx *primary;
        unsigned primary_flags;
        int primary_refs;
        struct cu_pool *default_pool, *current_pool;
        /* the graph memory pool (graphmem.c): in use by graph allocations, reserved (charged) */
        uint64_t gmem_used, gmem_used_high, gmem_reserved, gmem_reserved_high;
};

struct cu_stream;

struct cu_ctx {
        uint32_t magic;
        int dev;
        unsigned flags;
        bool primary;
        bool active;             /* exists on the device (primary contexts: retained or made current) */
        uint64_t charged;        /* its size, charged while active */
        unsigned long long id;
        struct cu_stream *null_stream;
        uint64_t limits[16];
        CUfunc_cache cache_config;
};

struct cu_graph;

struct cu_stream {
        uint32_t magic;
        struct cu_ctx *ctx;
        unsigned flags;
        int priority;
        unsigned long long id;
        uint64_t tail_ns;            /* when the last queued work ends */
        struct cu_graph *capture;    /* capturing into this graph */
        CUstreamCaptureMode capture_mode;
        unsigned long long capture_id;
        struct cu_stream *next;      /* ctx's streams (global list) */
};

struct cu_event {
        uint32_t magic;
        unsigned flags;
        bool recorded;
        uint64_t time_ns;
        struct cu_graph *capture;        /* recorded in a capturing stream: a stream waiting on it joins */
        unsigned long long capture_id;
        CUstreamCaptureMode capture_mode;
};

struct cu_module {
        uint32_t magic;
        struct cu_ctx *ctx;
        struct cu_func *funcs;       /* list */
        struct cu_global *globals;
        bool library;
        struct cu_module *next;      /* all modules (exec.c) */
};

struct cu_func {
        uint32_t magic;
        struct cu_module *mod;
        char *name;
        struct cu_func *next;
        int attrs[16];
};

struct cu_global {
        char *name;
        void *ptr;
        size_t size;
        struct cu_global *next;
};

/* A memory pool reserves device memory (charged to its device) and hands it
 * out; freed memory stays reserved up to the release threshold. */
struct cu_pool {
        uint32_t magic;
        int dev;
        uint64_t release_threshold;
        uint64_t used, high;              /* in live allocations; its high-water mark */
        uint64_t reserved, reserved_high; /* held from the device (used + cached) */
};

enum cu_node_kind {
        NODE_KERNEL, NODE_MEMSET, NODE_MEMCPY, NODE_EMPTY, NODE_HOST, NODE_EVENT_RECORD, NODE_WAIT_EVENT,
        NODE_MEM_ALLOC, NODE_MEM_FREE, NODE_CHILD,
};

struct cu_node {
        uint32_t magic;
        enum cu_node_kind kind;
        struct cu_graph *graph;
        /* kernels */
        struct cu_func *func;
        uint64_t duration_ns;
        unsigned grid[3], block[3];
        /* memset */
        CUdeviceptr dst;
        unsigned value, element, pitch_unused;
        size_t width, height, pitch;
        /* memcpy */
        const void *src;
        size_t bytes;
        /* host */
        CUhostFn fn;
        void *user;
        struct cu_event *event;
        CUDA_KERNEL_NODE_PARAMS kparams; /* kernels: as set (parameter pointers as given) */
        struct cu_node *orig;            /* in an instantiated copy: the graph's node */
        struct cu_alloc *alloc;          /* memory nodes: the graph allocation (dst, bytes: its address, size) */
        struct cu_graph *child;          /* child graph nodes: the graph it embeds and owns */
};

struct cu_user_ref; /* userobj.c */

struct cu_graph {
        uint32_t magic;
        struct cu_node **nodes;
        size_t n_nodes, cap;
        struct cu_user_ref *urefs; /* user objects it holds references to */
        size_t n_alloc_nodes;      /* in an instantiated copy: its allocation nodes (graphmem.c) */
        struct cu_graph *parent;   /* a child graph: the graph whose node embeds it */
        bool moved;                /* a child graph moved into its node (CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE) */
};

struct cu_gexec {
        uint32_t magic;
        struct cu_graph *graph;      /* a copy of the node list at instantiation */
};

/* Global driver state, under cu_lock. */
extern pthread_mutex_t cu_lock;
extern bool cu_initialized;
extern struct cu_dev cu_devs[CUSIM_MAX_DEVICES];
extern int cu_ndevs;
extern struct sim_live *cu_live;
extern uint64_t cu_self;

/* Per-thread current context stack (core.c). */
extern __thread struct cu_ctx *cu_ctx_stack[CUSIM_CTX_STACK];
extern __thread int cu_ctx_depth;
struct cu_ctx *cu_current(void);

CUresult cu_check_init(void);
#define CHECK_INIT()                           \
        do {                                   \
                CUresult _r = cu_check_init(); \
                if (_r != CUDA_SUCCESS)        \
                        return _r;             \
        } while (0)
CUresult cu_ctx_or_current(struct cu_ctx *ctx, struct cu_ctx **ret);
bool cu_ctx_valid(struct cu_ctx *ctx);
CUresult cu_dev_get(CUdevice d, struct cu_dev **ret);
CUresult cu_primary_get(CUdevice dev, CUcontext *pctx); /* the object, not activated */

/* Memory charging against the device's memory domain (exact; see live.h). */
CUresult cu_charge(struct cu_dev *d, uint64_t bytes);
void cu_uncharge(struct cu_dev *d, uint64_t bytes);
struct sim_live_slot *cu_slot(struct cu_dev *d);
uint64_t cu_dev_used(struct cu_dev *d); /* exact, all processes, static ones included */

/* Streams and time (sched.c). */
struct cu_stream *cu_stream_new(struct cu_ctx *ctx, unsigned flags, int prio);
void cu_ctx_free_streams(struct cu_ctx *ctx);
void cu_stream_free(struct cu_stream *s); /* unlinks and frees; under cu_lock */
bool cu_capture_active(const struct cu_graph *g, unsigned long long id); /* a stream still captures it */
void cu_capture_end_all(const struct cu_graph *g);                     /* every stream that joined it */
struct cu_stream *cu_stream_resolve(CUstream s, struct cu_ctx **ret_ctx, CUresult *ret_err);
uint64_t cu_stream_ready(struct cu_stream *s); /* when new work on s may start */
void cu_sleep_until(uint64_t t_ns);
void cu_queue_room(struct cu_stream *s); /* waits for room in the stream's queue; without cu_lock */
void *cu_extra_buffer(void **extra);     /* CU_LAUNCH_PARAM_BUFFER_POINTER of a launch's extra */
CUresult cu_ctx_sync(struct cu_ctx *ctx);
/* Runs (or, while capturing, records) a kernel on a stream. */
CUresult cu_launch(struct cu_func *f, const unsigned grid[3], const unsigned block[3], void **params,
                   struct cu_stream *s, struct cu_ctx *ctx);
uint64_t cu_kernel_duration(const struct cu_func *f, const unsigned grid[3], void **params, const struct cu_dev *d);
/* Books [start, start+dur) on the device's compute domain after `ready`; returns the end. */
uint64_t cu_book(struct cu_dev *d, uint64_t ready, uint64_t dur);

/* Allocation table. */
enum cu_alloc_kind { ALLOC_DEVICE, ALLOC_HOST, ALLOC_MANAGED, ALLOC_REGISTERED, ALLOC_VMM_RESERVE };
struct cu_alloc {
        uintptr_t base;
        size_t size;
        enum cu_alloc_kind kind;
        int dev;
        uint64_t charged;
        struct cu_ctx *ctx;
        struct cu_pool *pool;
        unsigned flags;
        bool touched; /* written through the driver: pages to give back on free */
        bool ipc;     /* opened from another process's IPC handle (ipc.c) */
        /* managed memory: advice and prefetches (cuMemRangeGetAttribute) */
        bool read_mostly;
        CUmemLocation preferred, last_prefetch;
        /* graph allocations (graphmem.c): the address lives while nodes hold it or the memory is in use */
        bool graph, glive, gfreed_own, gfreed_other;
        unsigned grefs;
        const struct cu_graph *gowner;
};
#define CU_PAGE 4096ULL
#define VMM_GRANULARITY (2ULL << 20)
static inline uint64_t cu_round_up(uint64_t v, uint64_t a) {
        return (v + a - 1) / a * a;
}
/* Arena (arena.c), under cu_lock unless said. */
struct cu_alloc *cu_alloc_find(uintptr_t p); /* containing range */
bool cu_in_arena(uintptr_t p);
CUresult cu_arena_alloc(size_t size, size_t align, enum cu_alloc_kind kind, int dev, uint64_t charge,
                        struct cu_ctx *ctx, struct cu_alloc **ret);
void cu_arena_free(struct cu_alloc *a);
bool cu_table_add(struct cu_alloc *a);    /* host ranges outside the arena */
void cu_table_remove(struct cu_alloc *a);
void cu_arena_free_pool(struct cu_pool *p);
CUresult cu_pool_take(struct cu_pool *p, uint64_t bytes); /* from the cache, else charged */
void cu_pool_trim(struct cu_pool *p, uint64_t keep);      /* gives back reserved bytes above max(keep, used) */
void cu_ctx_free_resources(struct cu_ctx *ctx);
bool cu_range_ok_w(uintptr_t p, size_t n, bool write);
bool cu_range_ok(uintptr_t p, size_t n);
CUresult cu_alloc_global(size_t size, struct cu_ctx *ctx, CUdeviceptr *ret); /* takes cu_lock */
/* VMM: a physical allocation (cuMemCreate) and where it is mapped. */
struct cu_mem_handle {
        uint32_t magic;
        int fd;
        size_t size;
        int dev;
        unsigned maps;           /* mappings of it */
        unsigned refs;           /* handles: cuMemCreate or import 1, each retain 1 more, release 1 less */
        uint64_t charged;        /* to cu_devs[dev]; 0 when imported (the exporter is charged) */
        CUmemAllocationProp prop;
        struct cu_mem_handle *next; /* live handles (vmm.c) */
};
struct cu_mapping {
        uintptr_t base;
        size_t size;
        struct cu_mem_handle *h;
        unsigned long long access; /* CUmemAccess_flags set by cuMemSetAccess */
        struct cu_mapping *next;
};
extern struct cu_mapping *cu_mappings;

/* memory.c */
CUresult cu_mem_alloc(CUdeviceptr *dptr, size_t bytes, enum cu_alloc_kind kind, struct cu_pool *pool);
CUresult cu_mem_free(CUdeviceptr dptr, bool async);
/* modules.c */
struct cu_func *cu_as_func(const void *h);
CUresult cu_memcpy_checked(void *dst, const void *src, size_t n);
CUresult cu_memset_checked(CUdeviceptr dst, unsigned value, unsigned elem, size_t width, size_t height,
                           size_t pitch);

/* User objects (userobj.c): a graph's references, released with it, copied at instantiation. */
void cu_graph_release_user_objects(struct cu_graph *g); /* without cu_lock */
CUresult cu_graph_copy_user_objects(struct cu_graph *dst, const struct cu_graph *src);
/* Graphs: captured operations (sched.c); graphs.c: */
CUresult cu_graph_instantiate(CUgraphExec *phGraphExec, CUgraph hGraph);
/* A child graph node of hGraph: childGraph copied or moved (graphs.c). */
CUresult cu_graph_add_child(CUgraphNode *phGraphNode, CUgraph hGraph, CUgraph childGraph,
                            CUgraphChildGraphNodeOwnership ownership);
CUresult cu_graph_add(struct cu_graph *g, struct cu_node *n);
struct cu_node *cu_node_new(enum cu_node_kind kind);

/* Graph memory (graphmem.c). Nodes: */
CUresult cu_gmem_alloc_node(struct cu_graph *g, int dev, size_t bytes, struct cu_node **ret);
CUresult cu_gmem_free_node(struct cu_graph *g, CUdeviceptr dptr, struct cu_node **ret);
/* Under cu_lock: */
void cu_gmem_hold(struct cu_alloc *a);                            /* one more node refers to it */
void cu_gmem_drop(struct cu_alloc *a);                            /* one less; the address goes with the last */
CUresult cu_gmem_reserve(struct cu_node *const *nodes, size_t n); /* a launch's allocations from the pools */
void cu_gmem_take(struct cu_alloc *a);                            /* an allocation node runs */
CUresult cu_gmem_release(struct cu_alloc *a, bool outside);       /* freed (outside: not by a free node) */

/* Tracing: MIGKIT_SIM_CUDA_TRACE=1 logs unknown symbols, export tables and stubs to stderr. */
extern int cu_trace;
void cu_log(const char *fmt, ...) _printf_(1, 2);
/* What a generated stub (stubs.c) returns: CUDA_ERROR_NOT_SUPPORTED, traced with its name. */
CUresult cu_unsupported(const char *symbol);

uint64_t cu_env_u64(const char *name, uint64_t def);
/* Read once by cuInit (launches need it): MIGKIT_SIM_KERNEL_NS, ns per wave of
 * blocks (default 10000), and MIGKIT_SIM_QUEUE_AHEAD_MS as ns (default 50 ms). */
extern uint64_t cu_wave_ns, cu_queue_ahead_ns;

/* CUDA driver simulator: graphs, child graph nodes, their instantiation and launch, stream capture. */
#include "cuda/internal.h"

static unsigned long long next_capture_id = 1;

static struct cu_graph *graph_new(void) {
        struct cu_graph *g = calloc(1, sizeof(*g));
        if (g)
                g->magic = MAGIC_GRAPH;
        return g;
}

static void graph_free(struct cu_graph *g) {
        cu_graph_release_user_objects(g);
        pthread_mutex_lock(&cu_lock);
        for (size_t i = 0; i < g->n_nodes; i++)
                if (g->nodes[i]->alloc)
                        cu_gmem_drop(g->nodes[i]->alloc);
        pthread_mutex_unlock(&cu_lock);
        for (size_t i = 0; i < g->n_nodes; i++) {
                if (g->nodes[i]->child) /* a child graph node owns its graph */
                        graph_free(g->nodes[i]->child);
                g->nodes[i]->magic = 0;
                free(g->nodes[i]);
        }
        free(g->nodes);
        g->magic = 0;
        free(g);
}

static struct cu_graph *as_graph(CUgraph h) {
        struct cu_graph *g = (struct cu_graph *) h;
        return g && g->magic == MAGIC_GRAPH ? g : NULL;
}

CU_EXPORT CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags) {
        CUresult r = cu_check_init();
        if (r != CUDA_SUCCESS)
                return r;
        if (!phGraph || flags != 0)
                return CUDA_ERROR_INVALID_VALUE;
        struct cu_graph *g = graph_new();
        if (!g)
                return CUDA_ERROR_OUT_OF_MEMORY;
        *phGraph = (CUgraph) g;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuGraphDestroy(CUgraph hGraph) {
        struct cu_graph *g = as_graph(hGraph);
        if (!g || g->parent) /* a child graph goes with its node */
                return CUDA_ERROR_INVALID_VALUE;
        graph_free(g);
        return CUDA_SUCCESS;
}

static CUresult add_node(CUgraphNode *phNode, CUgraph hGraph, struct cu_node *n) {
        struct cu_graph *g = as_graph(hGraph);
        if (!g || !phNode) {
                free(n);
                return CUDA_ERROR_INVALID_VALUE;
        }
        CUresult r = cu_graph_add(g, n);
        if (r == CUDA_SUCCESS)
                *phNode = (CUgraphNode) n;
        return r;
}

CU_EXPORT CUresult cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                                           const CUgraphNode *dependencies, size_t numDependencies,
                                           const CUDA_KERNEL_NODE_PARAMS *nodeParams) {
        struct cu_ctx *c;
        (void) dependencies;
        (void) numDependencies;
        CUresult r = cu_ctx_or_current(NULL, &c);
        if (r != CUDA_SUCCESS)
                return r;
        if (!nodeParams)
                return CUDA_ERROR_INVALID_VALUE;
        struct cu_func *f = cu_as_func(nodeParams->func ? (void *) nodeParams->func : (void *) nodeParams->kern);
        if (!f)
                return CUDA_ERROR_INVALID_HANDLE;
        struct cu_node *n = cu_node_new(NODE_KERNEL);
        if (!n)
                return CUDA_ERROR_OUT_OF_MEMORY;
        n->func = f;
        unsigned grid[3] = { nodeParams->gridDimX, nodeParams->gridDimY, nodeParams->gridDimZ };
        memcpy(n->grid, grid, sizeof(grid));
        n->block[0] = nodeParams->blockDimX;
        n->block[1] = nodeParams->blockDimY;
        n->block[2] = nodeParams->blockDimZ;
        void *xparams[1] = { cu_extra_buffer(nodeParams->extra) };
        n->duration_ns = cu_kernel_duration(f, grid, nodeParams->kernelParams ? nodeParams->kernelParams : xparams,
                                            &cu_devs[c->dev]);
        n->kparams = *nodeParams;
        return add_node(phGraphNode, hGraph, n);
}

CU_EXPORT CUresult cuGraphAddMemsetNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                        size_t numDependencies, const CUDA_MEMSET_NODE_PARAMS *memsetParams,
                                        CUcontext ctx) {
        (void) dependencies;
        (void) numDependencies;
        (void) ctx;
        if (!memsetParams || (memsetParams->elementSize != 1 && memsetParams->elementSize != 2 &&
                              memsetParams->elementSize != 4))
                return CUDA_ERROR_INVALID_VALUE;
        struct cu_node *n = cu_node_new(NODE_MEMSET);
        if (!n)
                return CUDA_ERROR_OUT_OF_MEMORY;
        n->dst = memsetParams->dst;
        n->value = memsetParams->value;
        n->element = memsetParams->elementSize;
        n->width = memsetParams->width;
        n->height = memsetParams->height;
        n->pitch = memsetParams->height > 1 ? memsetParams->pitch : memsetParams->width * memsetParams->elementSize;
        return add_node(phGraphNode, hGraph, n);
}

CU_EXPORT CUresult cuGraphAddEmptyNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                       size_t numDependencies) {
        (void) dependencies;
        (void) numDependencies;
        struct cu_node *n = cu_node_new(NODE_EMPTY);
        if (!n)
                return CUDA_ERROR_OUT_OF_MEMORY;
        return add_node(phGraphNode, hGraph, n);
}

CU_EXPORT CUresult cuGraphAddHostNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                      size_t numDependencies, const CUDA_HOST_NODE_PARAMS *nodeParams) {
        (void) dependencies;
        (void) numDependencies;
        if (!nodeParams || !nodeParams->fn)
                return CUDA_ERROR_INVALID_VALUE;
        struct cu_node *n = cu_node_new(NODE_HOST);
        if (!n)
                return CUDA_ERROR_OUT_OF_MEMORY;
        n->fn = nodeParams->fn;
        n->user = nodeParams->userData;
        return add_node(phGraphNode, hGraph, n);
}

/* ---- child graph nodes ----
 * A child graph node embeds a graph: a copy of it (cuGraphAddChildGraphNode,
 * or cuGraphAddNode with CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE) or the graph
 * itself (OWNERSHIP_MOVE). As cuda.h 13.0 documents the driver: a graph
 * with allocation or free nodes, at any depth, can only be moved, never copied
 * (CUDA_ERROR_INVALID_VALUE); no allocation or free node can be added to an
 * embedded graph (one moved, or one cuGraphChildGraphNodeGetGraph returned);
 * a moved graph cannot be destroyed, instantiated or embedded again on its
 * own. Instantiation puts the child graphs' nodes in line, so a launch
 * reserves their allocations from the graph pools with the parent's. */

static bool graph_has_mem_nodes(const struct cu_graph *g) {
        for (size_t i = 0; i < g->n_nodes; i++) {
                const struct cu_node *n = g->nodes[i];
                if (n->kind == NODE_MEM_ALLOC || n->kind == NODE_MEM_FREE || (n->child && graph_has_mem_nodes(n->child)))
                        return true;
        }
        return false;
}

/* A copy of src (no memory nodes: graph_has_mem_nodes() said so), its child graphs copied too. */
static struct cu_graph *graph_copy(const struct cu_graph *src) {
        struct cu_graph *g = graph_new();
        if (!g)
                return NULL;
        for (size_t i = 0; i < src->n_nodes; i++) {
                struct cu_node *n = cu_node_new(src->nodes[i]->kind);
                if (!n)
                        goto fail;
                *n = *src->nodes[i];
                n->orig = NULL;
                n->child = NULL;
                if (src->nodes[i]->child) {
                        n->child = graph_copy(src->nodes[i]->child);
                        if (!n->child) {
                                free(n);
                                goto fail;
                        }
                        n->child->parent = g;
                }
                struct cu_graph *child = n->child;
                if (cu_graph_add(g, n) != CUDA_SUCCESS) { /* frees n */
                        if (child)
                                graph_free(child);
                        goto fail;
                }
        }
        if (cu_graph_copy_user_objects(g, src) == CUDA_SUCCESS)
                return g;
fail:
        graph_free(g);
        return NULL;
}

CUresult cu_graph_add_child(CUgraphNode *phGraphNode, CUgraph hGraph, CUgraph childGraph,
                            CUgraphChildGraphNodeOwnership ownership) {
        struct cu_graph *g = as_graph(hGraph), *c = as_graph(childGraph);
        if (!g || !c || !phGraphNode || c->moved ||
            (ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE && ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE))
                return CUDA_ERROR_INVALID_VALUE;
        bool move = ownership == CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE;
        if (!move && graph_has_mem_nodes(c))
                return CUDA_ERROR_INVALID_VALUE; /* allocation or free nodes: moved only */
        if (move) {
                if (c->parent)
                        return CUDA_ERROR_INVALID_VALUE;
                for (const struct cu_graph *a = g; a; a = a->parent)
                        if (a == c)
                                return CUDA_ERROR_INVALID_VALUE; /* a graph inside itself */
        }
        struct cu_graph *child = move ? c : graph_copy(c);
        struct cu_node *n = cu_node_new(NODE_CHILD);
        if (!child || !n) {
                if (child && !move)
                        graph_free(child);
                free(n);
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        n->child = child;
        CUresult r = cu_graph_add(g, n); /* frees n on failure */
        if (r != CUDA_SUCCESS) {
                if (!move)
                        graph_free(child);
                return r;
        }
        child->parent = g;
        child->moved = move;
        *phGraphNode = (CUgraphNode) n;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuGraphAddChildGraphNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                            size_t numDependencies, CUgraph childGraph) {
        if (numDependencies && !dependencies)
                return CUDA_ERROR_INVALID_VALUE;
        return cu_graph_add_child(phGraphNode, hGraph, childGraph, CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE);
}

CU_EXPORT CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode hNode, CUgraph *phGraph) {
        struct cu_node *n = (struct cu_node *) hNode;
        if (!n || n->magic != MAGIC_NODE || n->kind != NODE_CHILD || !phGraph)
                return CUDA_ERROR_INVALID_VALUE;
        *phGraph = (CUgraph) n->child;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes) {
        struct cu_graph *g = as_graph(hGraph);
        if (!g || !numNodes)
                return CUDA_ERROR_INVALID_VALUE;
        if (nodes)
                for (size_t i = 0; i < MIN(*numNodes, g->n_nodes); i++)
                        nodes[i] = (CUgraphNode) g->nodes[i];
        *numNodes = g->n_nodes;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type) {
        struct cu_node *n = (struct cu_node *) hNode;
        if (!n || n->magic != MAGIC_NODE || !type)
                return CUDA_ERROR_INVALID_VALUE;
        static const CUgraphNodeType map[] = {
                [NODE_KERNEL] = CU_GRAPH_NODE_TYPE_KERNEL,  [NODE_MEMSET] = CU_GRAPH_NODE_TYPE_MEMSET,
                [NODE_MEMCPY] = CU_GRAPH_NODE_TYPE_MEMCPY,  [NODE_EMPTY] = CU_GRAPH_NODE_TYPE_EMPTY,
                [NODE_HOST] = CU_GRAPH_NODE_TYPE_HOST,      [NODE_EVENT_RECORD] = CU_GRAPH_NODE_TYPE_EVENT_RECORD,
                [NODE_WAIT_EVENT] = CU_GRAPH_NODE_TYPE_WAIT_EVENT, [NODE_MEM_ALLOC] = CU_GRAPH_NODE_TYPE_MEM_ALLOC,
                [NODE_MEM_FREE] = CU_GRAPH_NODE_TYPE_MEM_FREE,     [NODE_CHILD] = CU_GRAPH_NODE_TYPE_GRAPH,
        };
        *type = map[n->kind];
        return CUDA_SUCCESS;
}

/* g's nodes appended to an instantiated copy, its child graphs' in their place. */
static CUresult instantiate_nodes(struct cu_graph *copy, const struct cu_graph *g) {
        for (size_t i = 0; i < g->n_nodes; i++) {
                if (g->nodes[i]->child) {
                        CUresult r = instantiate_nodes(copy, g->nodes[i]->child);
                        if (r != CUDA_SUCCESS)
                                return r;
                        continue;
                }
                struct cu_node *n = cu_node_new(g->nodes[i]->kind);
                if (!n)
                        return CUDA_ERROR_OUT_OF_MEMORY;
                *n = *g->nodes[i];
                n->orig = g->nodes[i];
                copy->n_alloc_nodes += n->kind == NODE_MEM_ALLOC;
                if (n->alloc) {
                        pthread_mutex_lock(&cu_lock);
                        cu_gmem_hold(n->alloc);
                        pthread_mutex_unlock(&cu_lock);
                }
                if (cu_graph_add(copy, n) != CUDA_SUCCESS) {
                        if (n->alloc) { /* cu_graph_add freed n: the hold is dropped here */
                                pthread_mutex_lock(&cu_lock);
                                cu_gmem_drop(g->nodes[i]->alloc);
                                pthread_mutex_unlock(&cu_lock);
                        }
                        return CUDA_ERROR_OUT_OF_MEMORY;
                }
        }
        return cu_graph_copy_user_objects(copy, g);
}

CUresult cu_graph_instantiate(CUgraphExec *phGraphExec, CUgraph hGraph) {
        struct cu_graph *g = as_graph(hGraph);
        if (!g || !phGraphExec || g->moved)
                return CUDA_ERROR_INVALID_VALUE;
        struct cu_gexec *x = calloc(1, sizeof(*x));
        struct cu_graph *copy = graph_new();
        if (!x || !copy) {
                free(x);
                free(copy);
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        if (instantiate_nodes(copy, g) != CUDA_SUCCESS) {
                graph_free(copy);
                free(x);
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        x->magic = MAGIC_GEXEC;
        x->graph = copy;
        *phGraphExec = (CUgraphExec) x;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags) {
        (void) flags;
        return cu_graph_instantiate(phGraphExec, hGraph);
}

CU_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams) {
        CUresult r = cu_graph_instantiate(phGraphExec, hGraph);
        if (instantiateParams)
                instantiateParams->result_out = r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS
                                                                  : CUDA_GRAPH_INSTANTIATE_ERROR;
        return r;
}

CU_EXPORT CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) {
        struct cu_gexec *x = (struct cu_gexec *) hGraphExec;
        if (!x || x->magic != MAGIC_GEXEC)
                return CUDA_ERROR_INVALID_VALUE;
        graph_free(x->graph);
        x->magic = 0;
        free(x);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream) {
        struct cu_gexec *x = (struct cu_gexec *) hGraphExec;
        struct cu_ctx *c;
        CUresult r;
        if (!x || x->magic != MAGIC_GEXEC)
                return CUDA_ERROR_INVALID_VALUE;
        if (!cu_stream_resolve(hStream, &c, &r))
                return r;
        /* The graph's memory is reserved from the graph pools now, as by a launch. */
        if (!x->graph->n_alloc_nodes)
                return CUDA_SUCCESS;
        pthread_mutex_lock(&cu_lock);
        r = cu_gmem_reserve(x->graph->nodes, x->graph->n_nodes);
        pthread_mutex_unlock(&cu_lock);
        return r;
}

CU_EXPORT CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
        struct cu_gexec *x = (struct cu_gexec *) hGraphExec;
        struct cu_ctx *c;
        CUresult r;
        struct cu_stream *s = cu_stream_resolve(hStream, &c, &r);
        if (!s)
                return r;
        if (!x || x->magic != MAGIC_GEXEC)
                return CUDA_ERROR_INVALID_VALUE;
        struct cu_dev *d = &cu_devs[c->dev];
        /* Before any node runs: the graph's allocations from the graph pools. */
        if (x->graph->n_alloc_nodes) {
                pthread_mutex_lock(&cu_lock);
                r = cu_gmem_reserve(x->graph->nodes, x->graph->n_nodes);
                pthread_mutex_unlock(&cu_lock);
                if (r != CUDA_SUCCESS)
                        return r;
        }
        for (size_t i = 0; i < x->graph->n_nodes; i++) {
                struct cu_node *n = x->graph->nodes[i];
                switch (n->kind) {
                case NODE_KERNEL:
                        cu_queue_room(s);
                        pthread_mutex_lock(&cu_lock);
                        s->tail_ns = cu_book(d, cu_stream_ready(s), n->duration_ns);
                        pthread_mutex_unlock(&cu_lock);
                        break;
                case NODE_MEMSET:
                        r = cu_memset_checked(n->dst, n->value, n->element, n->width, n->height, n->pitch);
                        break;
                case NODE_MEMCPY:
                        r = cu_memcpy_checked((void *) n->dst, n->src, n->bytes);
                        break;
                case NODE_HOST:
                        pthread_mutex_lock(&cu_lock);
                        uint64_t t = cu_stream_ready(s);
                        pthread_mutex_unlock(&cu_lock);
                        cu_sleep_until(t);
                        n->fn(n->user);
                        break;
                case NODE_EVENT_RECORD:
                        if (n->event && n->event->magic == MAGIC_EVENT) {
                                pthread_mutex_lock(&cu_lock);
                                n->event->time_ns = MAX(cu_stream_ready(s), sim_live_now_ns());
                                n->event->recorded = true;
                                pthread_mutex_unlock(&cu_lock);
                        }
                        break;
                case NODE_MEM_ALLOC:
                        pthread_mutex_lock(&cu_lock);
                        cu_gmem_take(n->alloc);
                        pthread_mutex_unlock(&cu_lock);
                        break;
                case NODE_MEM_FREE:
                        pthread_mutex_lock(&cu_lock);
                        r = cu_gmem_release(n->alloc, false);
                        pthread_mutex_unlock(&cu_lock);
                        break;
                default:
                        break;
                }
                if (r != CUDA_SUCCESS)
                        return r;
        }
        return CUDA_SUCCESS;
}

/* ---- memory nodes (graphmem.c) ---- */

CU_EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                          size_t numDependencies, CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams) {
        struct cu_graph *g = as_graph(hGraph);
        struct cu_node *n;
        CUresult r = cu_check_init();
        if (r != CUDA_SUCCESS)
                return r;
        if (!g || g->parent || !phGraphNode || !nodeParams || (numDependencies && !dependencies) ||
            nodeParams->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
            nodeParams->poolProps.handleTypes != CU_MEM_HANDLE_TYPE_NONE ||
            nodeParams->accessDescCount > (size_t) cu_ndevs || (nodeParams->accessDescCount && !nodeParams->accessDescs))
                return CUDA_ERROR_INVALID_VALUE;
        r = cu_gmem_alloc_node(g, nodeParams->poolProps.location.id, nodeParams->bytesize, &n);
        if (r != CUDA_SUCCESS)
                return r;
        nodeParams->dptr = n->dst;
        *phGraphNode = (CUgraphNode) n;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuGraphAddMemFreeNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                         size_t numDependencies, CUdeviceptr dptr) {
        struct cu_graph *g = as_graph(hGraph);
        struct cu_node *n;
        CUresult r = cu_check_init();
        if (r != CUDA_SUCCESS)
                return r;
        if (!g || g->parent || !phGraphNode || (numDependencies && !dependencies))
                return CUDA_ERROR_INVALID_VALUE; /* none added to a child graph */
        r = cu_gmem_free_node(g, dptr, &n);
        if (r == CUDA_SUCCESS)
                *phGraphNode = (CUgraphNode) n;
        return r;
}

CU_EXPORT CUresult cuGraphMemAllocNodeGetParams(CUgraphNode hNode, CUDA_MEM_ALLOC_NODE_PARAMS *params_out) {
        struct cu_node *n = (struct cu_node *) hNode;
        if (!n || n->magic != MAGIC_NODE || n->kind != NODE_MEM_ALLOC || !params_out)
                return CUDA_ERROR_INVALID_VALUE;
        memset(params_out, 0, sizeof(*params_out));
        params_out->poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        params_out->poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        params_out->poolProps.location.id = n->alloc->dev;
        params_out->bytesize = n->bytes;
        params_out->dptr = n->dst;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuGraphMemFreeNodeGetParams(CUgraphNode hNode, CUdeviceptr *dptr_out) {
        struct cu_node *n = (struct cu_node *) hNode;
        if (!n || n->magic != MAGIC_NODE || n->kind != NODE_MEM_FREE || !dptr_out)
                return CUDA_ERROR_INVALID_VALUE;
        *dptr_out = n->dst;
        return CUDA_SUCCESS;
}

/* ---- stream capture ---- */

CU_EXPORT CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) {
        struct cu_ctx *c;
        CUresult r;
        struct cu_stream *s = cu_stream_resolve(hStream, &c, &r);
        if (!s)
                return r;
        if (s == c->null_stream)
                return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        if (s->capture)
                return CUDA_ERROR_ILLEGAL_STATE;
        struct cu_graph *g = graph_new();
        if (!g)
                return CUDA_ERROR_OUT_OF_MEMORY;
        pthread_mutex_lock(&cu_lock);
        s->capture = g;
        s->capture_mode = mode;
        s->capture_id = next_capture_id++;
        pthread_mutex_unlock(&cu_lock);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuStreamBeginCapture(CUstream hStream) {
        return cuStreamBeginCapture_v2(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

CU_EXPORT CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) {
        struct cu_ctx *c;
        CUresult r;
        struct cu_stream *s = cu_stream_resolve(hStream, &c, &r);
        if (!s)
                return r;
        if (!phGraph)
                return CUDA_ERROR_INVALID_VALUE;
        if (!s->capture)
                return CUDA_ERROR_ILLEGAL_STATE;
        pthread_mutex_lock(&cu_lock);
        *phGraph = (CUgraph) s->capture;
        cu_capture_end_all(s->capture); /* this stream and every stream that joined it */
        pthread_mutex_unlock(&cu_lock);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus) {
        struct cu_ctx *c;
        CUresult r;
        struct cu_stream *s = cu_stream_resolve(hStream, &c, &r);
        if (!s)
                return r;
        if (!captureStatus)
                return CUDA_ERROR_INVALID_VALUE;
        *captureStatus = s->capture ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                             cuuint64_t *id_out, CUgraph *graph_out,
                                             const CUgraphNode **dependencies_out, size_t *numDependencies_out) {
        struct cu_ctx *c;
        CUresult r;
        struct cu_stream *s = cu_stream_resolve(hStream, &c, &r);
        if (!s)
                return r;
        if (captureStatus_out)
                *captureStatus_out = s->capture ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
        if (id_out)
                *id_out = s->capture ? s->capture_id : 0;
        if (graph_out)
                *graph_out = (CUgraph) s->capture;
        if (dependencies_out)
                *dependencies_out = NULL;
        if (numDependencies_out)
                *numDependencies_out = 0;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                             cuuint64_t *id_out, CUgraph *graph_out,
                                             const CUgraphNode **dependencies_out, const CUgraphEdgeData **edgeData_out,
                                             size_t *numDependencies_out) {
        if (edgeData_out)
                *edgeData_out = NULL;
        return cuStreamGetCaptureInfo_v2(hStream, captureStatus_out, id_out, graph_out, dependencies_out,
                                         numDependencies_out);
}

CU_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode) {
        if (!mode)
                return CUDA_ERROR_INVALID_VALUE;
        return CUDA_SUCCESS;
}

/* CUDA 10.1 form: status and id only. */
CU_EXPORT CUresult cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                          cuuint64_t *id_out) {
        return cuStreamGetCaptureInfo_v2(hStream, captureStatus_out, id_out, NULL, NULL, NULL);
}

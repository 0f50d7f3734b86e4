/* CUDA driver simulator: kernel node parameters (get, set, in an instantiated
 * graph too), executable graph update, and the CUDA 10/11 forms of
 * instantiation and kernel nodes (CUDA_KERNEL_NODE_PARAMS_v1: the v2 struct
 * without kern and ctx). Parameter pointers are kept as given: images are not
 * parsed, so the simulator cannot know the parameters' sizes to copy them. */
#include "cuda/internal.h"

static struct cu_node *as_node(CUgraphNode h) {
        struct cu_node *n = (struct cu_node *) h;
        return n && n->magic == MAGIC_NODE ? n : NULL;
}

static struct cu_gexec *as_gexec(CUgraphExec h) {
        struct cu_gexec *x = (struct cu_gexec *) h;
        return x && x->magic == MAGIC_GEXEC ? x : NULL;
}

static CUDA_KERNEL_NODE_PARAMS from_v1(const CUDA_KERNEL_NODE_PARAMS_v1 *p) {
        return (CUDA_KERNEL_NODE_PARAMS) {
                .func = p->func,
                .gridDimX = p->gridDimX,
                .gridDimY = p->gridDimY,
                .gridDimZ = p->gridDimZ,
                .blockDimX = p->blockDimX,
                .blockDimY = p->blockDimY,
                .blockDimZ = p->blockDimZ,
                .sharedMemBytes = p->sharedMemBytes,
                .kernelParams = p->kernelParams,
                .extra = p->extra,
        };
}

static void to_v1(const CUDA_KERNEL_NODE_PARAMS *p, CUDA_KERNEL_NODE_PARAMS_v1 *out) {
        *out = (CUDA_KERNEL_NODE_PARAMS_v1) {
                .func = p->func ? p->func : (CUfunction) p->kern,
                .gridDimX = p->gridDimX,
                .gridDimY = p->gridDimY,
                .gridDimZ = p->gridDimZ,
                .blockDimX = p->blockDimX,
                .blockDimY = p->blockDimY,
                .blockDimZ = p->blockDimZ,
                .sharedMemBytes = p->sharedMemBytes,
                .kernelParams = p->kernelParams,
                .extra = p->extra,
        };
}

/* A kernel node takes new parameters: function, shape and duration. */
static CUresult kernel_set(struct cu_node *n, const CUDA_KERNEL_NODE_PARAMS *p) {
        struct cu_ctx *c;
        CUresult r = cu_ctx_or_current(NULL, &c);
        if (r != CUDA_SUCCESS)
                return r;
        if (!n || n->kind != NODE_KERNEL || !p)
                return CUDA_ERROR_INVALID_VALUE;
        struct cu_func *f = cu_as_func(p->func ? (void *) p->func : (void *) p->kern);
        if (!f)
                return CUDA_ERROR_INVALID_HANDLE;
        unsigned grid[3] = { p->gridDimX, p->gridDimY, p->gridDimZ };
        if (!grid[0] || !grid[1] || !grid[2] || !p->blockDimX || !p->blockDimY || !p->blockDimZ)
                return CUDA_ERROR_INVALID_VALUE;
        void *xparams[1] = { cu_extra_buffer(p->extra) };
        pthread_mutex_lock(&cu_lock);
        n->func = f;
        memcpy(n->grid, grid, sizeof(grid));
        n->block[0] = p->blockDimX;
        n->block[1] = p->blockDimY;
        n->block[2] = p->blockDimZ;
        n->duration_ns = cu_kernel_duration(f, grid, p->kernelParams ? p->kernelParams : xparams, &cu_devs[c->dev]);
        n->kparams = *p;
        pthread_mutex_unlock(&cu_lock);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                        size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams) {
        if (!nodeParams)
                return CUDA_ERROR_INVALID_VALUE;
        CUDA_KERNEL_NODE_PARAMS p = from_v1(nodeParams);
        return cuGraphAddKernelNode_v2(phGraphNode, hGraph, dependencies, numDependencies, &p);
}

CU_EXPORT CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS *nodeParams) {
        struct cu_node *n = as_node(hNode);
        if (!n || n->kind != NODE_KERNEL || !nodeParams)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&cu_lock);
        *nodeParams = n->kparams;
        pthread_mutex_unlock(&cu_lock);
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuGraphKernelNodeGetParams(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams) {
        CUDA_KERNEL_NODE_PARAMS p;
        if (!nodeParams)
                return CUDA_ERROR_INVALID_VALUE;
        CUresult r = cuGraphKernelNodeGetParams_v2(hNode, &p);
        if (r == CUDA_SUCCESS)
                to_v1(&p, nodeParams);
        return r;
}

CU_EXPORT CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS *nodeParams) {
        return kernel_set(as_node(hNode), nodeParams);
}

CU_EXPORT CUresult cuGraphKernelNodeSetParams(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams) {
        if (!nodeParams)
                return CUDA_ERROR_INVALID_VALUE;
        CUDA_KERNEL_NODE_PARAMS p = from_v1(nodeParams);
        return kernel_set(as_node(hNode), &p);
}

/* The instantiated copy of a graph's node. */
static struct cu_node *exec_node(struct cu_gexec *x, CUgraphNode hNode) {
        if (!x || !hNode)
                return NULL;
        for (size_t i = 0; i < x->graph->n_nodes; i++)
                if (x->graph->nodes[i]->orig == (struct cu_node *) hNode)
                        return x->graph->nodes[i];
        return NULL;
}

CU_EXPORT CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                     const CUDA_KERNEL_NODE_PARAMS *nodeParams) {
        return kernel_set(exec_node(as_gexec(hGraphExec), hNode), nodeParams);
}

CU_EXPORT CUresult cuGraphExecKernelNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                  const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams) {
        if (!nodeParams)
                return CUDA_ERROR_INVALID_VALUE;
        CUDA_KERNEL_NODE_PARAMS p = from_v1(nodeParams);
        return kernel_set(exec_node(as_gexec(hGraphExec), hNode), &p);
}

/* CUDA 10 and 11: an error node and a log buffer. */
static CUresult instantiate_logged(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                                   char *logBuffer, size_t bufferSize) {
        if (phErrorNode)
                *phErrorNode = NULL;
        if (logBuffer && bufferSize > 0)
                logBuffer[0] = '\0';
        return cu_graph_instantiate(phGraphExec, hGraph);
}

CU_EXPORT CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                                      char *logBuffer, size_t bufferSize) {
        return instantiate_logged(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

CU_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                                         char *logBuffer, size_t bufferSize) {
        return instantiate_logged(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

/* An executable graph takes the parameters of a graph of the same topology
 * (same number and kinds of nodes, in order); else nothing changes. */
static CUresult exec_update(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphExecUpdateResult *result,
                            CUgraphNode *error_node) {
        struct cu_gexec *x = as_gexec(hGraphExec);
        struct cu_graph *g = (struct cu_graph *) hGraph;
        *result = CU_GRAPH_EXEC_UPDATE_ERROR;
        *error_node = NULL;
        if (!x || !g || g->magic != MAGIC_GRAPH || g->moved) /* a moved child graph is not an argument here */
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&cu_lock);
        CUresult r = CUDA_SUCCESS;
        if (g->n_nodes != x->graph->n_nodes) {
                *result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
                r = CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
        }
        for (size_t i = 0; r == CUDA_SUCCESS && i < g->n_nodes; i++)
                if (g->nodes[i]->kind != x->graph->nodes[i]->kind) {
                        *result = CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
                        *error_node = (CUgraphNode) g->nodes[i];
                        r = CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
                } else if (g->nodes[i]->alloc != x->graph->nodes[i]->alloc) {
                        /* A memory node's allocation is fixed at instantiation. */
                        *result = CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED;
                        *error_node = (CUgraphNode) g->nodes[i];
                        r = CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
                }
        for (size_t i = 0; r == CUDA_SUCCESS && i < g->n_nodes; i++) {
                struct cu_node *dst = x->graph->nodes[i];
                struct cu_graph *owner = dst->graph;
                *dst = *g->nodes[i];
                dst->graph = owner;
                dst->orig = g->nodes[i];
        }
        if (r == CUDA_SUCCESS)
                *result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
        pthread_mutex_unlock(&cu_lock);
        return r;
}

CU_EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphExecUpdateResultInfo *resultInfo) {
        CUgraphExecUpdateResult res;
        CUgraphNode err;
        CUresult r = exec_update(hGraphExec, hGraph, &res, &err);
        if (resultInfo) {
                resultInfo->result = res;
                resultInfo->errorNode = err;
                resultInfo->errorFromNode = NULL;
        }
        return r;
}

CU_EXPORT CUresult cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphNode *hErrorNode_out,
                                     CUgraphExecUpdateResult *updateResult_out) {
        CUgraphExecUpdateResult res;
        CUgraphNode err;
        CUresult r = exec_update(hGraphExec, hGraph, &res, &err);
        if (hErrorNode_out)
                *hErrorNode_out = err;
        if (updateResult_out)
                *updateResult_out = res;
        return r;
}

/* cuGraphAddNode: the generic form, for the node kinds the simulator runs. */
CU_EXPORT CUresult cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                     const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                     CUgraphNodeParams *nodeParams) {
        (void) dependencyData;
        if (!nodeParams || !phGraphNode || (numDependencies && !dependencies))
                return CUDA_ERROR_INVALID_VALUE;
        switch (nodeParams->type) {
        case CU_GRAPH_NODE_TYPE_KERNEL: {
                CUDA_KERNEL_NODE_PARAMS p;
                _Static_assert(sizeof(p) == sizeof(nodeParams->kernel), "kernel node parameters v2 = v3");
                memcpy(&p, &nodeParams->kernel, sizeof(p));
                return cuGraphAddKernelNode_v2(phGraphNode, hGraph, dependencies, numDependencies, &p);
        }
        case CU_GRAPH_NODE_TYPE_MEMSET: {
                const CUDA_MEMSET_NODE_PARAMS_v2 *m = &nodeParams->memset;
                CUDA_MEMSET_NODE_PARAMS p = { .dst = m->dst, .pitch = m->pitch, .value = m->value,
                                              .elementSize = m->elementSize, .width = m->width, .height = m->height };
                return cuGraphAddMemsetNode(phGraphNode, hGraph, dependencies, numDependencies, &p, m->ctx);
        }
        case CU_GRAPH_NODE_TYPE_HOST: {
                CUDA_HOST_NODE_PARAMS p = { .fn = nodeParams->host.fn, .userData = nodeParams->host.userData };
                return cuGraphAddHostNode(phGraphNode, hGraph, dependencies, numDependencies, &p);
        }
        case CU_GRAPH_NODE_TYPE_EMPTY: return cuGraphAddEmptyNode(phGraphNode, hGraph, dependencies, numDependencies);
        case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
                CUDA_MEM_ALLOC_NODE_PARAMS p = { .poolProps = nodeParams->alloc.poolProps,
                                                 .accessDescs = nodeParams->alloc.accessDescs,
                                                 .accessDescCount = nodeParams->alloc.accessDescCount,
                                                 .bytesize = nodeParams->alloc.bytesize };
                CUresult r = cuGraphAddMemAllocNode(phGraphNode, hGraph, dependencies, numDependencies, &p);
                if (r == CUDA_SUCCESS)
                        nodeParams->alloc.dptr = p.dptr;
                return r;
        }
        case CU_GRAPH_NODE_TYPE_MEM_FREE:
                return cuGraphAddMemFreeNode(phGraphNode, hGraph, dependencies, numDependencies, nodeParams->free.dptr);
        case CU_GRAPH_NODE_TYPE_GRAPH:
                return cu_graph_add_child(phGraphNode, hGraph, nodeParams->graph.graph, nodeParams->graph.ownership);
        case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        case CU_GRAPH_NODE_TYPE_WAIT_EVENT: {
                struct cu_graph *g = (struct cu_graph *) hGraph;
                CUevent ev = nodeParams->type == CU_GRAPH_NODE_TYPE_EVENT_RECORD ? nodeParams->eventRecord.event
                                                                              : nodeParams->eventWait.event;
                if (!g || g->magic != MAGIC_GRAPH || !ev)
                        return CUDA_ERROR_INVALID_VALUE;
                struct cu_node *n = cu_node_new(nodeParams->type == CU_GRAPH_NODE_TYPE_EVENT_RECORD ? NODE_EVENT_RECORD
                                                                                                 : NODE_WAIT_EVENT);
                if (!n)
                        return CUDA_ERROR_OUT_OF_MEMORY;
                n->event = (struct cu_event *) ev;
                CUresult r = cu_graph_add(g, n);
                if (r == CUDA_SUCCESS)
                        *phGraphNode = (CUgraphNode) n;
                return r;
        }
        default:
                cu_log("cuGraphAddNode: node type %d not simulated", (int) nodeParams->type);
                return CUDA_ERROR_NOT_SUPPORTED;
        }
}

CU_EXPORT CUresult cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                  size_t numDependencies, CUgraphNodeParams *nodeParams) {
        return cuGraphAddNode_v2(phGraphNode, hGraph, dependencies, NULL, numDependencies, nodeParams);
}

/* Nodes run in the order added: a capture's dependency set is checked and accepted. */
CU_EXPORT CUresult cuStreamUpdateCaptureDependencies_v2(CUstream hStream, CUgraphNode *dependencies,
                                                        const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                                        unsigned int flags) {
        struct cu_ctx *c;
        CUresult r;
        (void) dependencyData;
        struct cu_stream *s = cu_stream_resolve(hStream, &c, &r);
        if (!s)
                return r;
        if ((flags != CU_STREAM_ADD_CAPTURE_DEPENDENCIES && flags != CU_STREAM_SET_CAPTURE_DEPENDENCIES) ||
            (numDependencies && !dependencies))
                return CUDA_ERROR_INVALID_VALUE;
        if (!s->capture)
                return CUDA_ERROR_ILLEGAL_STATE;
        for (size_t i = 0; i < numDependencies; i++)
                if (!as_node(dependencies[i]) || as_node(dependencies[i])->graph != s->capture)
                        return CUDA_ERROR_INVALID_VALUE;
        return CUDA_SUCCESS;
}

CU_EXPORT CUresult cuStreamUpdateCaptureDependencies(CUstream hStream, CUgraphNode *dependencies,
                                                     size_t numDependencies, unsigned int flags) {
        return cuStreamUpdateCaptureDependencies_v2(hStream, dependencies, NULL, numDependencies, flags);
}

static CUresult add_event_node(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                               size_t numDependencies, CUevent event, CUgraphNodeType type) {
        CUgraphNodeParams p;
        memset(&p, 0, sizeof(p));
        p.type = type;
        if (type == CU_GRAPH_NODE_TYPE_EVENT_RECORD)
                p.eventRecord.event = event;
        else
                p.eventWait.event = event;
        return cuGraphAddNode_v2(phGraphNode, hGraph, dependencies, NULL, numDependencies, &p);
}

CU_EXPORT CUresult cuGraphAddEventRecordNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                             size_t numDependencies, CUevent event) {
        return add_event_node(phGraphNode, hGraph, dependencies, numDependencies, event,
                              CU_GRAPH_NODE_TYPE_EVENT_RECORD);
}

CU_EXPORT CUresult cuGraphAddEventWaitNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                           size_t numDependencies, CUevent event) {
        return add_event_node(phGraphNode, hGraph, dependencies, numDependencies, event, CU_GRAPH_NODE_TYPE_WAIT_EVENT);
}

/* libmigkit-vgpu.so: CUDA graphs' memory (hook-graph.c). A graph's allocation
 * nodes take memory from the device's graph pool when an instantiated graph
 * is launched or uploaded; the pool keeps it reserved past the frees until
 * cuDeviceGraphMemTrim. The process is charged what the pool reserves,
 * refused with CUDA_ERROR_OUT_OF_MEMORY before a launch or upload that would
 * take the pool past the cap. hook-graph.c puts these hooks in the hook
 * table; hook-memory.c and hook-launch.c call the functions below. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "vgpu/cuda-abi.h"

#define VGPU_GRAPH_INST_PARAMS (CUgraphExec * x, CUgraph g, CUgraphNode * err, char *log, size_t log_size)
#define VGPU_GRAPH_INST_ARGS (x, g, err, log, log_size)

/* Every graph function we hook: name, return type, parameters, arguments. */
#define VGPU_GRAPH_HOOKS(X)                                                                                   \
        X(cuGraphInstantiate, CUresult, VGPU_GRAPH_INST_PARAMS, VGPU_GRAPH_INST_ARGS)                         \
        X(cuGraphInstantiate_v2, CUresult, VGPU_GRAPH_INST_PARAMS, VGPU_GRAPH_INST_ARGS)                      \
        X(cuGraphInstantiateWithFlags, CUresult, (CUgraphExec * x, CUgraph g, unsigned long long flags),      \
          (x, g, flags))                                                                                     \
        X(cuGraphInstantiateWithParams, CUresult, (CUgraphExec * x, CUgraph g, void *params), (x, g, params))  \
        X(cuGraphInstantiateWithParams_ptsz, CUresult, (CUgraphExec * x, CUgraph g, void *params),            \
          (x, g, params))                                                                                    \
        X(cuGraphExecDestroy, CUresult, (CUgraphExec x), (x))                                                \
        X(cuGraphUpload, CUresult, (CUgraphExec x, CUstream s), (x, s))                                      \
        X(cuGraphUpload_ptsz, CUresult, (CUgraphExec x, CUstream s), (x, s))                                 \
        X(cuDeviceGraphMemTrim, CUresult, (CUdevice dev), (dev))

#define VGPU_GRAPH_DECLARE(name, ret, params, args)                                                          \
        typedef ret(*name##_fn) params;                                                                      \
        extern __attribute__((visibility("hidden"))) _Atomic(name##_fn) real_##name;                         \
        __attribute__((visibility("default"))) ret name params;
VGPU_GRAPH_HOOKS(VGPU_GRAPH_DECLARE)

/* A launch of x on st by real (the compute share taken): x's allocations
 * charged first, refused past the cap with CUDA_ERROR_OUT_OF_MEMORY. */
__attribute__((visibility("hidden"))) CUresult vgpu_graph_run(CUgraphExec x, CUstream st, CUresult (*real)(CUgraphExec, CUstream));

/* True when st is capturing: an allocation on it is a graph node, charged at the graph's launches. */
__attribute__((visibility("hidden"))) bool vgpu_graph_capturing(CUstream st);

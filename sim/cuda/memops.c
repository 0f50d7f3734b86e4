/* CUDA driver simulator: stream memory operations (cuStreamWriteValue32/64,
 * cuStreamWaitValue32/64, cuStreamBatchMemOp). Like copies, they act when
 * called: a write stores the value at once, a wait polls the simulated memory
 * until its condition holds (another thread, process or stream writes it) or
 * MIGKIT_SIM_WAIT_VALUE_MS (default 10000) passes, then fails with
 * CUDA_ERROR_LAUNCH_TIMEOUT instead of hanging. Not recorded by stream
 * capture (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED). */
#include <time.h>

#include "cuda/internal.h"

static CUresult stream_of(CUstream hStream) {
        struct cu_ctx *c;
        CUresult r;
        struct cu_stream *s = cu_stream_resolve(hStream, &c, &r);
        if (!s)
                return r;
        return s->capture ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

static bool addr_ok(CUdeviceptr addr, size_t n, bool write) {
        if (!addr || addr % n != 0)
                return false;
        pthread_mutex_lock(&cu_lock);
        bool ok = cu_range_ok_w(addr, n, write);
        pthread_mutex_unlock(&cu_lock);
        return ok;
}

static CUresult write_value(CUdeviceptr addr, uint64_t value, bool is64) {
        if (!addr_ok(addr, is64 ? 8 : 4, true))
                return CUDA_ERROR_INVALID_VALUE;
        if (is64)
                __atomic_store_n((uint64_t *) (uintptr_t) addr, value, __ATOMIC_SEQ_CST);
        else
                __atomic_store_n((uint32_t *) (uintptr_t) addr, (uint32_t) value, __ATOMIC_SEQ_CST);
        return CUDA_SUCCESS;
}

static bool condition(uint64_t have, uint64_t want, unsigned flags, bool is64) {
        switch (flags & 0xF) {
        case CU_STREAM_WAIT_VALUE_GEQ:
                return is64 ? (int64_t) (have - want) >= 0 : (int32_t) (uint32_t) (have - want) >= 0;
        case CU_STREAM_WAIT_VALUE_EQ: return have == want;
        case CU_STREAM_WAIT_VALUE_AND: return (have & want) != 0;
        case CU_STREAM_WAIT_VALUE_NOR: return (is64 ? ~(have | want) : (uint32_t) ~(have | want)) != 0;
        default: return false;
        }
}

static CUresult wait_value(CUdeviceptr addr, uint64_t value, unsigned flags, bool is64) {
        if ((flags & 0xF) > CU_STREAM_WAIT_VALUE_NOR)
                return CUDA_ERROR_INVALID_VALUE;
        if (!addr_ok(addr, is64 ? 8 : 4, false))
                return CUDA_ERROR_INVALID_VALUE;
        uint64_t limit = sim_live_now_ns() + cu_env_u64("MIGKIT_SIM_WAIT_VALUE_MS", 10000) * 1000000ULL;
        for (;;) {
                uint64_t have = is64 ? __atomic_load_n((uint64_t *) (uintptr_t) addr, __ATOMIC_SEQ_CST)
                                     : __atomic_load_n((uint32_t *) (uintptr_t) addr, __ATOMIC_SEQ_CST);
                if (condition(have, is64 ? value : (uint32_t) value, flags, is64))
                        return CUDA_SUCCESS;
                if (sim_live_now_ns() >= limit) {
                        cu_log("stream wait on %#llx: condition not met in time", (unsigned long long) addr);
                        return CUDA_ERROR_LAUNCH_TIMEOUT;
                }
                struct timespec ts = { 0, 100000 };
                nanosleep(&ts, NULL);
        }
}

CU_EXPORT CUresult cuStreamWriteValue32_v2(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
        CUresult r = stream_of(stream);
        if (r != CUDA_SUCCESS || (flags & ~(unsigned) CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER))
                return r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE;
        return write_value(addr, value, false);
}

CU_EXPORT CUresult cuStreamWriteValue64_v2(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
        CUresult r = stream_of(stream);
        if (r != CUDA_SUCCESS || (flags & ~(unsigned) CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER))
                return r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE;
        return write_value(addr, value, true);
}

CU_EXPORT CUresult cuStreamWaitValue32_v2(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
        CUresult r = stream_of(stream);
        return r != CUDA_SUCCESS ? r : wait_value(addr, value, flags, false);
}

CU_EXPORT CUresult cuStreamWaitValue64_v2(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
        CUresult r = stream_of(stream);
        return r != CUDA_SUCCESS ? r : wait_value(addr, value, flags, true);
}

CU_EXPORT CUresult cuStreamBatchMemOp_v2(CUstream stream, unsigned int count, CUstreamBatchMemOpParams *paramArray,
                                         unsigned int flags) {
        CUresult r = stream_of(stream);
        if (r != CUDA_SUCCESS)
                return r;
        if (flags != 0 || (count && !paramArray) || count > 256)
                return CUDA_ERROR_INVALID_VALUE;
        for (unsigned i = 0; i < count && r == CUDA_SUCCESS; i++) {
                const CUstreamBatchMemOpParams *p = &paramArray[i];
                switch (p->operation) {
                case CU_STREAM_MEM_OP_WAIT_VALUE_32:
                        r = wait_value(p->waitValue.address, p->waitValue.value, p->waitValue.flags, false);
                        break;
                case CU_STREAM_MEM_OP_WAIT_VALUE_64:
                        r = wait_value(p->waitValue.address, p->waitValue.value64, p->waitValue.flags, true);
                        break;
                case CU_STREAM_MEM_OP_WRITE_VALUE_32:
                        r = write_value(p->writeValue.address, p->writeValue.value, false);
                        break;
                case CU_STREAM_MEM_OP_WRITE_VALUE_64:
                        r = write_value(p->writeValue.address, p->writeValue.value64, true);
                        break;
                case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
                case CU_STREAM_MEM_OP_BARRIER: __atomic_thread_fence(__ATOMIC_SEQ_CST); break;
                default: r = CUDA_ERROR_INVALID_VALUE; break;
                }
        }
        return r;
}

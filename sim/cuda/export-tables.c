/* CUDA driver simulator: the private export tables (cuGetExportTable).
 *
 * NVIDIA's runtime and libraries reach parts of the driver through tables of
 * function pointers identified by a UUID. Each table starts with its size in
 * bytes (slot 0; the context local storage table has none), then the
 * functions. The simulator serves the tables without which the CUDA runtime or
 * a toolkit library refuses to work, with the least behaviour that makes it
 * work; docs/simulator.md ("NVIDIA's libraries on the simulator") lists each
 * table, who asks for it and what the simulator answers. UUIDs and slot
 * meanings: ZLUDA's reverse-engineered dark_api definitions
 * (github.com/vosen/ZLUDA dark_api/src/lib.rs) and traces of the toolkit's
 * libraries on the simulator.
 *
 * Every slot the simulator does not implement is a tracing stub: it fails with
 * CUDA_ERROR_NOT_SUPPORTED and, under MIGKIT_SIM_CUDA_TRACE=1, names its table
 * and slot and shows its first six arguments, so a library that starts to use
 * a new slot says so. Unknown tables are refused with CUDA_ERROR_NOT_SUPPORTED
 * (success without a table would make the caller jump through garbage). */
#include <inttypes.h>

#include "cuda/internal.h"

enum {
        T_CUDART,
        T_HOOKS,
        T_TLS,
        T_CLS,
        T_CHECKS,
        T_INTEGRITY,
        T_TOOLS_CTX,
        T_TOOLS_MODULE,
        T_LT_1734,
        T_CUDA13,
        N_TABLES
};

struct table_def {
        const char *name;
        unsigned char uuid[16];
        unsigned slots; /* entries, the size header included; 0: refused */
};

static const struct table_def defs[N_TABLES] = {
        [T_CUDART] = { "cudart-interface",
                       { 0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9 },
                       13 },
        [T_HOOKS] = { "tools-runtime-callback-hooks",
                      { 0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66 },
                      7 },
        [T_TLS] = { "tools-tls",
                    { 0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc },
                    4 },
        [T_CLS] = { "context-local-storage",
                    { 0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93 },
                    4 },
        [T_CHECKS] = { "context-checks",
                       { 0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e },
                       4 },
        [T_INTEGRITY] = { "integrity-check",
                          { 0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1,
                            0xf2 },
                          3 },
        [T_TOOLS_CTX] = { "tools-context",
                          { 0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8,
                            0xf2 },
                          95 },
        [T_TOOLS_MODULE] = { "tools-module",
                             { 0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d, 0x83, 0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99,
                               0x1e },
                             56 },
        [T_LT_1734] = { "cublaslt-1734dc26",
                        { 0x17, 0x34, 0xdc, 0x26, 0x80, 0x0d, 0x47, 0x45, 0x87, 0x26, 0xc0, 0xf1, 0xe7, 0xdd, 0x8b,
                          0xca },
                        5 },
        [T_CUDA13] = { "cuda13-requirements",
                       { 0xf8, 0xcf, 0xf9, 0x51, 0x21, 0x46, 0x8b, 0x4e, 0xb9, 0xe2, 0xfb, 0x46, 0x9e, 0x7c, 0x0d, 0xd9 },
                       0 },
};

#define MAX_SLOTS 100

/* ---- tracing stubs: one per (table, slot) ---- */

typedef uint64_t u64;
#define STUB(t, d1, d0)                                                                                         \
        static CUresult stub_##t##_##d1##d0(u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5) {                  \
                cu_log("export table %s slot %d called (%#" PRIx64 ", %#" PRIx64 ", %#" PRIx64 ", %#" PRIx64   \
                       ", %#" PRIx64 ", %#" PRIx64 "): not simulated",                                          \
                       defs[t].name, d1 * 10 + d0, a0, a1, a2, a3, a4, a5);                                     \
                return CUDA_ERROR_NOT_SUPPORTED;                                                                \
        }
#define STUBS10(t, d1)                                                                                          \
        STUB(t, d1, 0) STUB(t, d1, 1) STUB(t, d1, 2) STUB(t, d1, 3) STUB(t, d1, 4) STUB(t, d1, 5)               \
        STUB(t, d1, 6) STUB(t, d1, 7) STUB(t, d1, 8) STUB(t, d1, 9)
#define STUBS(t)                                                                                                \
        STUBS10(t, 0) STUBS10(t, 1) STUBS10(t, 2) STUBS10(t, 3) STUBS10(t, 4) STUBS10(t, 5) STUBS10(t, 6)      \
        STUBS10(t, 7) STUBS10(t, 8) STUBS10(t, 9)
#define REF10(t, d1)                                                                                            \
        (void *) stub_##t##_##d1##0, (void *) stub_##t##_##d1##1, (void *) stub_##t##_##d1##2,                 \
        (void *) stub_##t##_##d1##3, (void *) stub_##t##_##d1##4, (void *) stub_##t##_##d1##5,                 \
        (void *) stub_##t##_##d1##6, (void *) stub_##t##_##d1##7, (void *) stub_##t##_##d1##8,                 \
        (void *) stub_##t##_##d1##9
#define REFS(t)                                                                                                 \
        { REF10(t, 0), REF10(t, 1), REF10(t, 2), REF10(t, 3), REF10(t, 4), REF10(t, 5), REF10(t, 6),         \
          REF10(t, 7), REF10(t, 8), REF10(t, 9) }

/* Table numbers spelt out: the stubs' names are pasted from them. */
STUBS(0) STUBS(1) STUBS(2) STUBS(3) STUBS(4) STUBS(5) STUBS(6) STUBS(7) STUBS(8) STUBS(9)
_Static_assert(N_TABLES == 10, "one STUBS() per table");
static void *const stubs[N_TABLES][MAX_SLOTS] = { REFS(0), REFS(1), REFS(2), REFS(3),
                                                   REFS(4), REFS(5), REFS(6), REFS(7), REFS(8), REFS(9) };

/* The tables handed out; filled once. */
static void *tables[N_TABLES][MAX_SLOTS];

/* CUDART interface. */
static CUresult cudart_module_from_fatbin(CUmodule *module, const void *wrapper) {
        cu_log("cudart-interface: module from fat binary");
        return cuModuleLoadData(module, wrapper);
}

static CUresult cudart_primary_ctx(CUcontext *pctx, CUdevice dev) {
        cu_log("cudart-interface: primary context of device %d", dev);
        return cu_primary_get(dev, pctx);
}

static CUresult cudart_module_ext1(CUmodule *module, const void *wrapper, void *a3, void *a4, unsigned a5) {
        (void) a3;
        (void) a4;
        (void) a5;
        return cuModuleLoadData(module, wrapper);
}

static CUresult cudart_fn7(size_t a1) {
        (void) a1;
        return CUDA_SUCCESS;
}

static CUresult cudart_module_ext2(const void *header, CUmodule *module, void *a3, void *a4, unsigned a5) {
        (void) a3;
        (void) a4;
        (void) a5;
        return cuModuleLoadData(module, header);
}

/* Tools runtime callback hooks: two buffers the runtime writes into. */
static uint32_t hook_buffer1[1024], hook_buffer2[14];

static void hooks_buffer1(void **ptr, size_t *size) {
        *ptr = hook_buffer1;
        *size = sizeof(hook_buffer1);
}

static void hooks_buffer2(void **ptr, size_t *size) {
        *ptr = hook_buffer2;
        *size = sizeof(hook_buffer2);
}

/* Context local storage: a value per (context, key). */
typedef void (*cls_dtor)(CUcontext, void *, void *);
struct cls_entry {
        CUcontext ctx;
        void *key, *value;
        cls_dtor dtor;
        struct cls_entry *next;
};
static struct cls_entry *cls_list;
static pthread_mutex_t cls_lock = PTHREAD_MUTEX_INITIALIZER;

static CUresult cls_put(CUcontext ctx, void *key, void *value, cls_dtor dtor) {
        struct cu_ctx *c;
        CUresult r = cu_ctx_or_current((struct cu_ctx *) ctx, &c);
        if (r != CUDA_SUCCESS)
                return r;
        pthread_mutex_lock(&cls_lock);
        struct cls_entry *e;
        for (e = cls_list; e; e = e->next)
                if (e->ctx == (CUcontext) c && e->key == key)
                        break;
        if (!e) {
                e = calloc(1, sizeof(*e));
                if (!e) {
                        pthread_mutex_unlock(&cls_lock);
                        return CUDA_ERROR_OUT_OF_MEMORY;
                }
                e->ctx = (CUcontext) c;
                e->key = key;
                e->next = cls_list;
                cls_list = e;
        }
        e->value = value;
        e->dtor = dtor;
        pthread_mutex_unlock(&cls_lock);
        return CUDA_SUCCESS;
}

static CUresult cls_delete(void *key, void *value) {
        pthread_mutex_lock(&cls_lock);
        for (struct cls_entry **p = &cls_list; *p; p = &(*p)->next)
                if ((*p)->key == key && (!value || (*p)->value == value)) {
                        struct cls_entry *e = *p;
                        *p = e->next;
                        free(e);
                        break;
                }
        pthread_mutex_unlock(&cls_lock);
        return CUDA_SUCCESS;
}

static CUresult cls_get(void **value, CUcontext ctx, void *key) {
        struct cu_ctx *c;
        CUresult r = cu_ctx_or_current((struct cu_ctx *) ctx, &c);
        if (r != CUDA_SUCCESS)
                return r;
        pthread_mutex_lock(&cls_lock);
        r = CUDA_ERROR_INVALID_HANDLE;
        for (struct cls_entry *e = cls_list; e; e = e->next)
                if (e->ctx == (CUcontext) c && e->key == key) {
                        *value = e->value;
                        r = CUDA_SUCCESS;
                        break;
                }
        pthread_mutex_unlock(&cls_lock);
        return r;
}

/* Context checks. */
static CUresult checks_context(CUcontext ctx, uint32_t *result1, const void **result2) {
        (void) ctx;
        if (result1)
                *result1 = 0;
        if (result2)
                *result2 = NULL;
        return CUDA_SUCCESS;
}

static uint32_t checks_fn3(void) {
        return 0;
}

/* Integrity check: the runtime hands the driver a version and a time and
 * compares the answer with its own HMAC-MD2 (key: a fixed 16 bytes) over the
 * driver version, the process and thread, the addresses of this table, of the
 * CUDART table and of this function, the time, and per device its UUID and
 * PCI domain, bus and device. Algorithm: ZLUDA dark_api integrity_check; MD2:
 * RFC 1319. */
static const unsigned char md2_s[256] = {
        0x29, 0x2E, 0x43, 0xC9, 0xA2, 0xD8, 0x7C, 0x01, 0x3D, 0x36, 0x54, 0xA1, 0xEC, 0xF0, 0x06, 0x13,
        0x62, 0xA7, 0x05, 0xF3, 0xC0, 0xC7, 0x73, 0x8C, 0x98, 0x93, 0x2B, 0xD9, 0xBC, 0x4C, 0x82, 0xCA,
        0x1E, 0x9B, 0x57, 0x3C, 0xFD, 0xD4, 0xE0, 0x16, 0x67, 0x42, 0x6F, 0x18, 0x8A, 0x17, 0xE5, 0x12,
        0xBE, 0x4E, 0xC4, 0xD6, 0xDA, 0x9E, 0xDE, 0x49, 0xA0, 0xFB, 0xF5, 0x8E, 0xBB, 0x2F, 0xEE, 0x7A,
        0xA9, 0x68, 0x79, 0x91, 0x15, 0xB2, 0x07, 0x3F, 0x94, 0xC2, 0x10, 0x89, 0x0B, 0x22, 0x5F, 0x21,
        0x80, 0x7F, 0x5D, 0x9A, 0x5A, 0x90, 0x32, 0x27, 0x35, 0x3E, 0xCC, 0xE7, 0xBF, 0xF7, 0x97, 0x03,
        0xFF, 0x19, 0x30, 0xB3, 0x48, 0xA5, 0xB5, 0xD1, 0xD7, 0x5E, 0x92, 0x2A, 0xAC, 0x56, 0xAA, 0xC6,
        0x4F, 0xB8, 0x38, 0xD2, 0x96, 0xA4, 0x7D, 0xB6, 0x76, 0xFC, 0x6B, 0xE2, 0x9C, 0x74, 0x04, 0xF1,
        0x45, 0x9D, 0x70, 0x59, 0x64, 0x71, 0x87, 0x20, 0x86, 0x5B, 0xCF, 0x65, 0xE6, 0x2D, 0xA8, 0x02,
        0x1B, 0x60, 0x25, 0xAD, 0xAE, 0xB0, 0xB9, 0xF6, 0x1C, 0x46, 0x61, 0x69, 0x34, 0x40, 0x7E, 0x0F,
        0x55, 0x47, 0xA3, 0x23, 0xDD, 0x51, 0xAF, 0x3A, 0xC3, 0x5C, 0xF9, 0xCE, 0xBA, 0xC5, 0xEA, 0x26,
        0x2C, 0x53, 0x0D, 0x6E, 0x85, 0x28, 0x84, 0x09, 0xD3, 0xDF, 0xCD, 0xF4, 0x41, 0x81, 0x4D, 0x52,
        0x6A, 0xDC, 0x37, 0xC8, 0x6C, 0xC1, 0xAB, 0xFA, 0x24, 0xE1, 0x7B, 0x08, 0x0C, 0xBD, 0xB1, 0x4A,
        0x78, 0x88, 0x95, 0x8B, 0xE3, 0x63, 0xE8, 0x6D, 0xE9, 0xCB, 0xD5, 0xFE, 0x3B, 0x00, 0x1D, 0x39,
        0xF2, 0xEF, 0xB7, 0x0E, 0x66, 0x58, 0xD0, 0xE4, 0xA6, 0x77, 0x72, 0xF8, 0xEB, 0x75, 0x4B, 0x0A,
        0x31, 0x44, 0x50, 0xB4, 0x8F, 0xED, 0x1F, 0x1A, 0xDB, 0x99, 0x8D, 0x33, 0x9F, 0x11, 0x83, 0x14,
};

/* MD2 state: X[48] at 0, block at 16, checksum at 48, count at 64, L at 65. */
struct md2 {
        unsigned char b[66];
};

static void md2_byte(struct md2 *m, unsigned char c) {
        unsigned char *a = m->b;
        unsigned n = a[0x40];
        a[n + 0x10] = c;
        a[n + 0x20] = a[n] ^ c;
        unsigned char t = md2_s[c ^ a[0x41]] ^ a[n + 0x30];
        a[n + 0x30] = t;
        a[0x41] = t;
        a[0x40] = (unsigned char) ((n + 1) & 0xF);
        if (a[0x40] != 0)
                return;
        unsigned char x = 0x29;
        for (unsigned round = 0;; round++) {
                x ^= a[0];
                a[0] = x;
                for (unsigned i = 1; i < 0x30; i++) {
                        x = a[i] ^ md2_s[x];
                        a[i] = x;
                }
                x = (unsigned char) (x + round);
                if (round + 1 == 0x12)
                        break;
                x = md2_s[x];
        }
}

static void md2_bytes(struct md2 *m, const void *p, size_t n, unsigned char mask) {
        for (size_t i = 0; i < n; i++)
                md2_byte(m, ((const unsigned char *) p)[i] ^ mask);
}

static void md2_final(struct md2 *m, uint64_t out[2]) {
        unsigned char pad = (unsigned char) (16 - m->b[0x40]);
        for (unsigned i = 0; i < pad; i++)
                md2_byte(m, pad);
        for (unsigned i = 0x30; i < 0x40; i++)
                md2_byte(m, m->b[i]);
        memcpy(out, m->b, 16);
}

struct integrity_input {
        uint32_t driver_version, version, process, thread;
        const void *cudart_table, *integrity_table, *fn_address;
        uint64_t unix_seconds;
};
_Static_assert(sizeof(struct integrity_input) == 48, "integrity input layout");

struct integrity_device {
        CUuuid uuid;
        int32_t pci_domain, pci_bus, pci_device;
};
_Static_assert(sizeof(struct integrity_device) == 28, "integrity device layout");



static CUresult integrity_check(uint32_t version, uint64_t unix_seconds, uint64_t result[2]) {
        static const unsigned char key[16] = { 0x14, 0x6A, 0xDD, 0xAE, 0x53, 0xA9, 0xA7, 0x52,
                                               0xAA, 0x08, 0x41, 0x36, 0x0B, 0xF5, 0x5A, 0x9F };
        int drv, n;

        if (!result)
                return CUDA_ERROR_INVALID_VALUE;
        cu_log("integrity check, version %u", version);
        if (version % 10 == 0) {
                result[0] = 0x3341181C03CB675CULL;
                result[1] = 0x8ED383AA1F4CD1E8ULL;
                return CUDA_SUCCESS;
        }
        if (version % 10 == 1) {
                result[0] = 0x1841181C03CB675CULL;
                result[1] = 0x8ED383AA1F4CD1E8ULL;
                return CUDA_SUCCESS;
        }
        if (cuDriverGetVersion(&drv) != CUDA_SUCCESS || cuDeviceGetCount(&n) != CUDA_SUCCESS)
                return CUDA_ERROR_NOT_INITIALIZED;
        struct integrity_input in = {
                .driver_version = (uint32_t) drv,
                .version = version,
                .process = (uint32_t) getpid(),
                .thread = (uint32_t) pthread_self(),
                .cudart_table = tables[T_CUDART],
                .integrity_table = tables[T_INTEGRITY],
                .fn_address = tables[T_INTEGRITY][1],
                .unix_seconds = unix_seconds,
        };
        struct md2 m = { { 0 } };
        uint64_t inner[2];
        md2_bytes(&m, key, sizeof(key), 0x36);
        md2_bytes(&m, &in, sizeof(in), 0);
        for (int i = 0; i < n; i++) {
                struct integrity_device dv;
                memset(&dv, 0, sizeof(dv));
                cuDeviceGetUuid(&dv.uuid, i);
                cuDeviceGetAttribute(&dv.pci_domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, i);
                cuDeviceGetAttribute(&dv.pci_bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, i);
                cuDeviceGetAttribute(&dv.pci_device, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, i);
                md2_bytes(&m, &dv, sizeof(dv), 0);
        }
        md2_final(&m, inner);
        memset(m.b, 0, 16);
        memset(m.b + 48, 0, 18);
        md2_bytes(&m, key, sizeof(key), 0x5c);
        md2_bytes(&m, inner, sizeof(inner), 0);
        md2_final(&m, result);
        return CUDA_SUCCESS;
}


/* ---- tools context (21318c60-...): asked for by cuFFT and cuBLAS ---- */

/* ---- tools TLS (42d85a81-...) ---- */

/* Slot 2: the calling thread's current context (NULL when it has none).
 * cuBLASLt's heuristics ask it, then the context's number (tools context
 * slot 4); the CUDA runtime asks it too. */
static CUresult tls_thread_context(CUcontext *pctx) {
        if (!pctx)
                return CUDA_ERROR_INVALID_VALUE;
        return cuCtxGetCurrent(pctx);
}

/* ---- tools context (21318c60-...) ---- */

/* Slot 4: a context's unique number (cuCtxGetId's). cuFFT asks it. */
static CUresult context_number(CUcontext ctx, unsigned long long *id) {
        return cuCtxGetId(ctx, id);
}

/* Slots 51 and 39: cuBLAS asks, before each GEMM, slot 51 for an object of
 * the current context (arguments: context, a kind, where to put it; kind 0
 * seen), then slot 39 for that object's number (context, object, where to put
 * it), and keeps its kernel choices per number. The simulator has no green
 * contexts or partitions: the object is one zeroed block (callers may read
 * it) and its number is 0, the whole device. */
static const uint64_t context_resource[64];

static CUresult context_get_resource(CUcontext ctx, uint64_t kind, const void **obj) {
        struct cu_ctx *c;
        if (!obj)
                return CUDA_ERROR_INVALID_VALUE;
        CUresult r = cu_ctx_or_current((struct cu_ctx *) ctx, &c);
        if (r != CUDA_SUCCESS)
                return r;
        cu_log("tools-context: resource %" PRIu64 " of context %p", kind, (void *) c);
        *obj = context_resource;
        return CUDA_SUCCESS;
}

static CUresult context_resource_number(CUcontext ctx, const void *obj, uint64_t *number) {
        (void) ctx;
        if (obj != context_resource || !number)
                return CUDA_ERROR_INVALID_VALUE;
        *number = 0;
        return CUDA_SUCCESS;
}

/* ---- tools module (6e163fbe-...) ---- */

/* Slot 7: calls fn(user, function) for the functions of a module and returns
 * 1 (not CUDA_SUCCESS: cuFFT takes 1 as success and anything else as failure)
 * - cuFFT loads single-kernel modules and takes the kernel this way, without
 * its name. The simulator does not parse images, so the module's function is
 * the one cuModuleGetFunction gives for a fixed name. */
#define MODULE_FUNCTION_NAME "(the module's function)"

static CUresult module_functions(CUcontext ctx, CUmodule mod, void (*fn)(void *, CUfunction), void *user) {
        CUfunction f;
        (void) ctx;
        if (!fn)
                return CUDA_ERROR_INVALID_VALUE;
        CUresult r = cuModuleGetFunction(&f, mod, MODULE_FUNCTION_NAME);
        cu_log("tools-module: functions of module %p: %d", (void *) mod, (int) r);
        if (r != CUDA_SUCCESS) /* an error, never the 1 of success */
                return r == (CUresult) 1 ? CUDA_ERROR_INVALID_HANDLE : r;
        fn(user, f);
        return (CUresult) 1;
}

/* ---- the registry ---- */

static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void tables_init(void) {
        for (int t = 0; t < N_TABLES; t++) {
                for (int s = 0; s < MAX_SLOTS; s++)
                        tables[t][s] = stubs[t][s];
                tables[t][0] = (void *) (uintptr_t) (defs[t].slots * sizeof(void *));
        }
        tables[T_CUDART][1] = (void *) cudart_module_from_fatbin;
        tables[T_CUDART][2] = (void *) cudart_primary_ctx;
        tables[T_CUDART][6] = (void *) cudart_module_ext1;
        tables[T_CUDART][7] = (void *) cudart_fn7;
        tables[T_CUDART][8] = (void *) cudart_module_ext2;
        tables[T_HOOKS][2] = (void *) hooks_buffer1;
        tables[T_HOOKS][6] = (void *) hooks_buffer2;
        /* No size header in this one. */
        tables[T_CLS][0] = (void *) cls_put;
        tables[T_CLS][1] = (void *) cls_delete;
        tables[T_CLS][2] = (void *) cls_get;
        tables[T_CHECKS][2] = (void *) checks_context;
        tables[T_CHECKS][3] = (void *) checks_fn3;
        tables[T_INTEGRITY][1] = (void *) integrity_check;
        tables[T_TLS][2] = (void *) tls_thread_context;
        tables[T_TOOLS_CTX][4] = (void *) context_number;
        tables[T_TOOLS_CTX][39] = (void *) context_resource_number;
        tables[T_TOOLS_CTX][51] = (void *) context_get_resource;
        tables[T_TOOLS_MODULE][7] = (void *) module_functions;
}

static char *uuid_hex(const CUuuid *id, char *buf) {
        for (int i = 0; i < 16; i++)
                snprintf(buf + 2 * i, 3, "%02x", (unsigned char) id->bytes[i]);
        return buf;
}

CU_EXPORT CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId) {
        char hex[40];

        if (!ppExportTable || !pExportTableId)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_once(&tables_once, tables_init);
        for (int t = 0; t < N_TABLES; t++) {
                if (memcmp(defs[t].uuid, pExportTableId->bytes, 16) != 0)
                        continue;
                if (defs[t].slots == 0) {
                        cu_log("export table %s (%s): not supported", defs[t].name, uuid_hex(pExportTableId, hex));
                        return CUDA_ERROR_NOT_SUPPORTED;
                }
                cu_log("export table %s (%s)", defs[t].name, uuid_hex(pExportTableId, hex));
                *ppExportTable = tables[t];
                return CUDA_SUCCESS;
        }
        cu_log("export table %s: unknown", uuid_hex(pExportTableId, hex));
        return CUDA_ERROR_NOT_SUPPORTED;
}

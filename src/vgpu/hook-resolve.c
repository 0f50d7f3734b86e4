/* libmigkit-vgpu.so: start-up, the real entry points, and the interposition
 * of dlsym and cuGetProcAddress (hook.h: how programs reach our hooks, the
 * interposer's files and their order). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vgpu/hook.h"

HIDDEN dlsym_fn vgpu_real_dlsym;  /* glibc's; the trampoline below jumps through it */
static __thread int in_init __attribute__((tls_model("initial-exec")));     /* dlsym calls made while we initialise go straight through */

/* ---- the hook table: every file's entries (VGPU_HOOK_TABLE) ---- */

extern HIDDEN const struct vgpu_hook __start_vgpu_hooks[];
extern HIDDEN const struct vgpu_hook __stop_vgpu_hooks[];
#define HOOKS_FOR(h) for (const struct vgpu_hook *h = __start_vgpu_hooks; h < __stop_vgpu_hooks; h++)

VGPU_HOOK_TABLE(resolve, VGPU_RESOLVE_HOOKS(VGPU_HOOK_ENTRY));

static const struct vgpu_hook *hook_by_name(const char *name) {
        if (!name || (name[0] != 'c' && name[0] != 'n'))
                return NULL;
        HOOKS_FOR(h)
                if (strcmp(h->name, name) == 0)
                        return h;
        return NULL;
}

static const struct vgpu_hook *hook_by_real(void *p) {
        if (!p)
                return NULL;
        HOOKS_FOR(h)
                if (atomic_load(h->real) == p)
                        return h;
        return NULL;
}

static void resolve_real_dlsym(void) {
        static const char *const versions[] = { "GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17", "GLIBC_2.0" };
        if (vgpu_real_dlsym)
                return;
        for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]) && !vgpu_real_dlsym; i++)
                vgpu_real_dlsym = (dlsym_fn) dlvsym(RTLD_NEXT, "dlsym", versions[i]);
}

/* The next definition after us, else the one in an already loaded lib. */
static void *find_real(void *lib, const char *name) {
        void *p = vgpu_real_dlsym(RTLD_NEXT, name);
        if (!p && lib)
                p = vgpu_real_dlsym(lib, name);
        return p;
}

static const char *env_get(const char *name, void *userdata) {
        return secure_getenv(name);
}

static void env_warn(const char *msg, void *userdata) {
        vgpu_log(VGPU_LOG_ERROR, "%s", msg);
}

void vgpu_adopt_nvml(void *lib, void *(*look)(void *, const char *)) {
        HOOKS_FOR(h) {
                if (!h->nvml)
                        continue;
                void *p = look(lib, h->name), *expect = NULL;
                if (p && p != h->fn)
                        atomic_compare_exchange_strong(h->real, &expect, p);
        }
        nvmlDeviceGetUUID_fn u = NULL;
        nvmlDeviceGetIndex_fn ix = NULL;
        atomic_compare_exchange_strong(&real_nvmlDeviceGetUUID, &u, (nvmlDeviceGetUUID_fn) look(lib, "nvmlDeviceGetUUID"));
        atomic_compare_exchange_strong(&real_nvmlDeviceGetIndex, &ix,
                                       (nvmlDeviceGetIndex_fn) look(lib, "nvmlDeviceGetIndex"));
}

/* The driver functions we call but do not hook, looked up in lib by look
 * (find_real at start-up, the real dlsym on a library dlopen'ed later). */
static void resolve_cuda_helpers(void *(*look)(void *lib, const char *name), void *lib) {
        real_cuCtxGetDevice = (cuCtxGetDevice_fn) look(lib, "cuCtxGetDevice");
        real_cuDevicePrimaryCtxGetState = (cuDevicePrimaryCtxGetState_fn) look(lib, "cuDevicePrimaryCtxGetState");
        real_cuDeviceGetCount = (cuDeviceGetCount_fn) look(lib, "cuDeviceGetCount");
        real_cuDeviceGet = (cuDeviceGet_fn) look(lib, "cuDeviceGet");
        real_cuDeviceGetUuid = (cuDeviceGetUuid_fn) look(lib, "cuDeviceGetUuid_v2");
        if (!real_cuDeviceGetUuid)
                real_cuDeviceGetUuid = (cuDeviceGetUuid_fn) look(lib, "cuDeviceGetUuid");
        real_cuDeviceGetAttribute = (cuDeviceGetAttribute_fn) look(lib, "cuDeviceGetAttribute");
        real_cuDeviceGetMemPool = (cuDeviceGetMemPool_fn) look(lib, "cuDeviceGetMemPool");
        real_cuMemPoolGetAttribute = (cuMemPoolGetAttribute_fn) look(lib, "cuMemPoolGetAttribute");
        real_cuDeviceGetGraphMemAttribute =
                (cuDeviceGetGraphMemAttribute_fn) look(lib, "cuDeviceGetGraphMemAttribute");
        real_cuGraphGetNodes = (cuGraphGetNodes_fn) look(lib, "cuGraphGetNodes");
        real_cuGraphNodeGetType = (cuGraphNodeGetType_fn) look(lib, "cuGraphNodeGetType");
        real_cuGraphMemAllocNodeGetParams =
                (cuGraphMemAllocNodeGetParams_fn) look(lib, "cuGraphMemAllocNodeGetParams");
        real_cuGraphChildGraphNodeGetGraph =
                (cuGraphChildGraphNodeGetGraph_fn) look(lib, "cuGraphChildGraphNodeGetGraph");
        real_cuStreamIsCapturing = (cuStreamIsCapturing_fn) look(lib, "cuStreamIsCapturing");
}

/* One line at start: each capped device's cap as read, the text it was read
 * from (HAMi-core's reading can surprise: "1.5g" is 1 GiB), SM limits. */
static void log_limits(void) {
        char line[1200];
        size_t n = 0;
#define ADD(...)                                                                                             \
        do {                                                                                                 \
                int w_ = snprintf(line + n, sizeof(line) - n, __VA_ARGS__);                                  \
                if (w_ > 0)                                                                                  \
                        n += (size_t) w_ < sizeof(line) - n ? (size_t) w_ : sizeof(line) - n - 1;             \
        } while (0)
        for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++)
                if (vgpu_cfg.mem_from[d] == VGPU_FROM_ALL) {
                        uint64_t v = vgpu_cfg.mem_limit[d];
                        if (v == VGPU_UNLIMITED)
                                ADD("no cap on the other devices (CUDA_DEVICE_MEMORY_LIMIT='%s')",
                                    vgpu_cfg.mem_text_all);
                        else
                                ADD("the other devices %llu bytes (%llu MiB) from CUDA_DEVICE_MEMORY_LIMIT='%s'",
                                    (unsigned long long) v, (unsigned long long) (v >> 20), vgpu_cfg.mem_text_all);
                        break;
                }
        for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++)
                if (vgpu_cfg.mem_from[d] == VGPU_FROM_DEVICE)
                        ADD("%sdevice %u %llu bytes (%llu MiB) from CUDA_DEVICE_MEMORY_LIMIT_%u='%s'", n ? ", " : "", d,
                            (unsigned long long) vgpu_cfg.mem_limit[d],
                            (unsigned long long) (vgpu_cfg.mem_limit[d] >> 20), d, vgpu_cfg.mem_text[d]);
        for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++)
                if (vgpu_cfg.sm_limit[d] < 100)
                        ADD("%sdevice %u compute %u%%", n ? ", " : "", d, vgpu_cfg.sm_limit[d]);
#undef ADD
        vgpu_log_notice("limits read: %s", n ? line : "none");
}

void vgpu_do_init(void) {
        in_init++;
        resolve_real_dlsym();
        vgpu_pid = getpid();
        vgpu_config_load(&vgpu_cfg, env_get, NULL, env_warn);
        vgpu_cvd_load();
        for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++) {
                vgpu_share_estimate[d].factor = 1.0;
                atomic_store(&vgpu_share_factor[d], 1.0);
                if (vgpu_cfg.mem_limit[d] != VGPU_UNLIMITED || vgpu_cfg.sm_limit[d] < 100)
                        vgpu_on = true;
                if (vgpu_cfg.sm_limit[d] < 100)
                        vgpu_any_sm_limit = true;
        }
        if (vgpu_cfg.disabled)
                vgpu_on = false;

        void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_NOLOAD);
        HOOKS_FOR(h) {
                void *p = find_real(h->nvml ? nvml : cuda, h->name);
                if (p && p != h->fn)
                        atomic_store(h->real, p);
        }
        resolve_cuda_helpers(find_real, cuda);
        atomic_store(&real_nvmlDeviceGetUUID, (nvmlDeviceGetUUID_fn) find_real(nvml, "nvmlDeviceGetUUID"));
        atomic_store(&real_nvmlDeviceGetIndex, (nvmlDeviceGetIndex_fn) find_real(nvml, "nvmlDeviceGetIndex"));
        if (cuda)
                dlclose(cuda);  /* drops the reference NOLOAD took; the library stays */
        if (nvml)
                dlclose(nvml);

        if (vgpu_on) {
                char err[256];
                int r = vgpu_region_open(vgpu_cfg.region_path, &vgpu_cfg, &vgpu_reg, err, sizeof(err));
                if (r < 0) {
                        vgpu_log(VGPU_LOG_ERROR,
                                  "region file '%s' %s; refusing to share it: limits hold per process only. "
                                  "Remove the file when no process of the container runs.",
                                  vgpu_cfg.region_path, err);
                        if (vgpu_region_new_private(&vgpu_cfg, &vgpu_reg) < 0)
                                vgpu_reg = NULL;
                } else {
                        for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++)
                                if (vgpu_reg->mem_limit[d] != vgpu_cfg.mem_limit[d] ||
                                    vgpu_reg->sm_limit[d] != vgpu_cfg.sm_limit[d]) {
                                        vgpu_log(VGPU_LOG_INFO,
                                                  "device %u: the region's limits (%llu bytes, %u%%) differ from this "
                                                  "process's environment; the region's apply",
                                                  d, (unsigned long long) vgpu_reg->mem_limit[d], vgpu_reg->sm_limit[d]);
                                        break;
                                }
                }
                if (!vgpu_reg)
                        vgpu_on = false;
                pthread_atfork(vgpu_track_atfork_prepare, vgpu_track_atfork_parent, vgpu_atfork_child);
                log_limits();
        }
        in_init--;
}

/* ---- the dlsym hook ---- */

/* Called by the dlsym trampoline: our hook for (handle, name), or NULL to
 * let glibc's dlsym answer. */
HIDDEN void *vgpu_dlsym_pick(void *handle, const char *name);
HIDDEN void *vgpu_dlsym_pick(void *handle, const char *name) {
        resolve_real_dlsym();
        if (in_init || handle == RTLD_NEXT)
                return NULL;
        const struct vgpu_hook *h = hook_by_name(name);
        if (!h)
                return NULL;
        vgpu_init();
        void *p = vgpu_real_dlsym(handle, name);
        if (!p || p == h->fn)
                return NULL;
        void *expect = NULL;
        /* First sight of the library (dlopen'ed by path, say): adopt it. */
        if (atomic_compare_exchange_strong(h->real, &expect, p) || expect == p) {
                if (h->nvml) {
                        vgpu_adopt_nvml(handle, vgpu_real_dlsym);
                } else if (!real_cuCtxGetDevice) {
                        resolve_cuda_helpers(vgpu_real_dlsym, handle);
                }
                return h->fn;
        }
        return NULL;  /* another library's function of that name */
}

#if defined(__x86_64__)
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym,@function\n"
        "dlsym:\n"
        "  .cfi_startproc\n"
        "  endbr64\n"
        "  push %rdi\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  push %rsi\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  sub $8, %rsp\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  call vgpu_dlsym_pick\n"
        "  add $8, %rsp\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  pop %rsi\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  pop %rdi\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  test %rax, %rax\n"
        "  jz 1f\n"
        "  ret\n"
        "1:\n"
        "  jmp *vgpu_real_dlsym(%rip)\n"
        "  .cfi_endproc\n"
        ".size dlsym, .-dlsym\n");
#elif defined(__aarch64__)
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym,%function\n"
        "dlsym:\n"
        "  stp x29, x30, [sp, #-32]!\n"
        "  mov x29, sp\n"
        "  stp x0, x1, [sp, #16]\n"
        "  bl vgpu_dlsym_pick\n"
        "  mov x2, x0\n"
        "  ldp x0, x1, [sp, #16]\n"
        "  ldp x29, x30, [sp], #32\n"
        "  cbz x2, 1f\n"
        "  mov x0, x2\n"
        "  ret\n"
        "1:\n"
        "  adrp x16, vgpu_real_dlsym\n"
        "  ldr x16, [x16, #:lo12:vgpu_real_dlsym]\n"
        "  br x16\n"
        ".size dlsym, .-dlsym\n");
#else
/* No tail-jump trampoline for this architecture: RTLD_NEXT look-ups are
 * answered relative to this library, not the caller. */
EXPORT void *dlsym(void *handle, const char *name) {
        void *p = vgpu_dlsym_pick(handle, name);
        return p ? p : vgpu_real_dlsym(handle, name);
}
#endif

/* ---- cuGetProcAddress ---- */

static void *swap_for_hook(void *p) {
        const struct vgpu_hook *h = hook_by_real(p);
        return h ? h->fn : p;
}

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int ver, cuuint64_t flags) {
        vgpu_init();
        REAL(cuGetProcAddress);
        CUresult r = real(symbol, pfn, ver, flags);
        if (r == CUDA_SUCCESS && pfn)
                *pfn = swap_for_hook(*pfn);
        return r;
}

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int ver, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *st) {
        vgpu_init();
        REAL(cuGetProcAddress_v2);
        CUresult r = real(symbol, pfn, ver, flags, st);
        if (r == CUDA_SUCCESS && pfn)
                *pfn = swap_for_hook(*pfn);
        return r;
}

/* libmigkit-vgpu.so: which device is which (hook.h lists the interposer's
 * files and their order).
 *
 * The caps are per CUDA device (CUDA's index in the container). An NVML
 * device is CUDA device i when its UUID is the one a CUDA process of the
 * container recorded for i (compared on the 16 bytes: NVML says "MIG-..."
 * of a MIG device whose CUDA UUID we print as "GPU-..."). Before any CUDA
 * process recorded them, CUDA_VISIBLE_DEVICES says it (indices, UUIDs or
 * their unique prefixes, MIG UUIDs; the list stops at the first entry that
 * names nothing, as CUDA's). Only without CUDA_VISIBLE_DEVICES is NVML's
 * index taken for CUDA's (all devices visible, in PCI order). */
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vgpu/hook.h"

HIDDEN struct vgpu_cvd vgpu_cvd;
HIDDEN char vgpu_own_uuid[VGPU_MAX_DEVICES][VGPU_UUID_LEN];
HIDDEN _Atomic bool vgpu_own_uuid_set[VGPU_MAX_DEVICES];
HIDDEN uint64_t vgpu_full_threads[VGPU_MAX_DEVICES];

/* The hex digits of a UUID after its "GPU-"/"MIG-" prefix (dashes dropped),
 * at most 32; the count, 0 when the text is not one. */
static size_t uuid_hex(const char *u, char out[33]) {
        size_t n = 0;
        if (strncmp(u, "GPU-", 4) != 0 && strncmp(u, "MIG-", 4) != 0)
                return 0;
        for (u += 4; *u && *u != ',' && n < 32; u++) {
                char c = *u;
                if (c == '-')
                        continue;
                if (c >= 'A' && c <= 'F')
                        c = (char) (c - 'A' + 'a');
                if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
                        return 0;
                out[n++] = c;
        }
        out[n] = 0;
        return n;
}

void vgpu_cvd_load(void) {
        const char *v = secure_getenv("CUDA_VISIBLE_DEVICES");
        vgpu_cvd.set = v != NULL;
        vgpu_cvd.n = 0;
        for (const char *p = v; p && *p && vgpu_cvd.n < VGPU_CVD_MAX;) {
                while (*p == ' ')
                        p++;
                const char *e = strchr(p, ',');
                size_t len = e ? (size_t) (e - p) : strlen(p);
                unsigned i = vgpu_cvd.n;
                if (len > 0 && p[0] >= '0' && p[0] <= '9') {
                        int x = vgpu_parse_int(p);
                        size_t k = 0;
                        while (k < len && p[k] >= '0' && p[k] <= '9')
                                k++;
                        if (k != len && p[k] != ' ')
                                break;
                        vgpu_cvd.index[i] = x;
                } else if (uuid_hex(p, vgpu_cvd.hex[i]) > 0) {
                        vgpu_cvd.index[i] = -1;
                } else
                        break;  /* CUDA ignores the rest of the list */
                vgpu_cvd.n++;
                p = e ? e + 1 : p + len;
        }
}

bool vgpu_cuda_uuid(unsigned dev, const char *prefix, char *out, size_t n) {
        CUdevice d;
        CUuuid u;
        if (!real_cuDeviceGet || !real_cuDeviceGetUuid || real_cuDeviceGet(&d, (int) dev) != CUDA_SUCCESS ||
            real_cuDeviceGetUuid(&u, d) != CUDA_SUCCESS)
                return false;
        const unsigned char *b = (const unsigned char *) u.bytes;
        snprintf(out, n, "%s%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", prefix, b[0], b[1],
                 b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
        return true;
}

int vgpu_nvml_dev_index(nvmlDevice_t d) {
        nvmlDeviceGetUUID_fn u = atomic_load(&real_nvmlDeviceGetUUID);
        char uuid[96], hex[33];
        size_t nh = 0;
        if (u && u(d, uuid, sizeof(uuid)) == NVML_SUCCESS)
                nh = uuid_hex(uuid, hex);
        if (nh == 32) {
                for (unsigned i = 0; i < VGPU_MAX_DEVICES; i++) {
                        char rh[33];
                        if (atomic_load(&vgpu_reg->uuid_set[i]) == 2 && uuid_hex(vgpu_reg->uuid[i], rh) == 32 &&
                            strcmp(rh, hex) == 0)
                                return (int) i;
                }
        }
        /* Recorded by a CUDA process, and not among them: not the container's. */
        if (atomic_load(&vgpu_reg->uuid_set[0]) == 2)
                return -ENODEV;
        nvmlDeviceGetIndex_fn ix = atomic_load(&real_nvmlDeviceGetIndex);
        unsigned idx;
        bool have_idx = ix && ix(d, &idx) == NVML_SUCCESS;
        if (vgpu_cvd.set) {
                for (unsigned i = 0; i < vgpu_cvd.n; i++) {
                        if (vgpu_cvd.index[i] >= 0
                                    ? have_idx && (unsigned) vgpu_cvd.index[i] == idx
                                    : nh == 32 && strncmp(hex, vgpu_cvd.hex[i], strlen(vgpu_cvd.hex[i])) == 0)
                                return (int) i;
                }
                return -ENODEV;
        }
        if (have_idx && idx < VGPU_MAX_DEVICES)
                return (int) idx;
        return -ENODEV;
}

/* Hold a slot from the start: the watchers of the container's other
 * processes tell its own pids from other GPU users by the slots. Each
 * device's size (for the compute share's kernel cost) and UUID (for the
 * watcher and the NVML views) as this process's driver says. */
void vgpu_devices_record(void) {
        int n = 0;
        if (!vgpu_on)
                return;
        (void) vgpu_slot();
        if (!real_cuDeviceGetCount || real_cuDeviceGetCount(&n) != CUDA_SUCCESS)
                return;
        for (int i = 0; i < n && i < VGPU_MAX_DEVICES; i++) {
                CUdevice d;
                CUuuid u;
                int sms = 0, tpm = 0;
                if (!real_cuDeviceGet || real_cuDeviceGet(&d, i) != CUDA_SUCCESS)
                        continue;
                if (real_cuDeviceGetAttribute &&
                    real_cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d) == CUDA_SUCCESS &&
                    real_cuDeviceGetAttribute(&tpm, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, d) ==
                            CUDA_SUCCESS &&
                    sms > 0 && tpm > 0)
                        vgpu_full_threads[i] = (uint64_t) sms * (uint64_t) tpm;
                if (real_cuDeviceGetUuid && real_cuDeviceGetUuid(&u, d) == CUDA_SUCCESS) {
                        char s[VGPU_UUID_LEN];
                        const unsigned char *b = (const unsigned char *) u.bytes;
                        snprintf(s, sizeof(s),
                                 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                                 b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                                 b[15]);
                        memcpy(vgpu_own_uuid[i], s, sizeof(vgpu_own_uuid[i]));
                        atomic_store(&vgpu_own_uuid_set[i], true);
                        vgpu_region_set_uuid(vgpu_reg, (unsigned) i, s);
                        if (atomic_load(&vgpu_reg->uuid_set[i]) == 2 &&
                            strncmp(vgpu_reg->uuid[i], s, VGPU_UUID_LEN) != 0)
                                vgpu_log(VGPU_LOG_WARNING, "the region records CUDA device %d as %.*s, this process's "
                                          "driver says %s: the container's processes disagree on CUDA_VISIBLE_DEVICES",
                                          i, VGPU_UUID_LEN, vgpu_reg->uuid[i], s);
                }
        }
}

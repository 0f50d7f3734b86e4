/* libFuzzer target for libmigkit-vgpu's untrusted inputs: the limit
 * variables (HAMi-core syntax) and the shared region file, which any
 * process of the container can write. Input: "NAME=VALUE" lines, then a
 * NUL, then bytes laid over a region. The parsers must never crash; a
 * region that validates must survive every operation (sums saturate,
 * uncharge never goes below zero, charges never exceed the cap). */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vgpu/config.h"
#include "vgpu/region.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct env {
        char buf[4096];
        const char *name[64], *value[64];
        size_t n;
};

static const char *lookup(const char *name, void *userdata) {
        struct env *e = userdata;
        for (size_t i = 0; i < e->n; i++)
                if (strcmp(e->name[i], name) == 0)
                        return e->value[i];
        return NULL;
}

static bool odd_pids_dead(pid_t pid, uint64_t st) {
        return (pid & 1) == 0;
}

static struct vgpu_region region;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct env e = { .n = 0 };
        size_t envlen = 0;
        while (envlen < size && data[envlen] != 0)
                envlen++;
        if (envlen >= sizeof(e.buf))
                envlen = sizeof(e.buf) - 1;
        memcpy(e.buf, data, envlen);
        e.buf[envlen] = 0;
        for (char *line = e.buf, *next; line && *line && e.n < 64; line = next) {
                next = strchr(line, '\n');
                if (next)
                        *next++ = 0;
                char *eq = strchr(line, '=');
                if (!eq)
                        continue;
                *eq = 0;
                e.name[e.n] = line;
                e.value[e.n++] = eq + 1;
        }
        struct vgpu_config c;
        vgpu_config_load(&c, lookup, &e, NULL);
        for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++)
                if (c.sm_limit[d] == 0 || c.sm_limit[d] > 100)
                        abort();
        if (c.policy < 0 || c.policy >= _VGPU_POLICY_MAX || c.log_level < 0 || c.log_level > 4 ||
            strnlen(c.region_path, sizeof(c.region_path)) >= sizeof(c.region_path))
                abort();
        uint64_t v;
        if (vgpu_parse_size(e.n ? e.value[0] : "", &v) == 0 && e.n && strlen(e.value[0]) == 0)
                abort();

        /* The region: our own header, then the fuzzer's bytes over it. */
        memset(&region, 0, sizeof(region));
        vgpu_region_init(&region, &c);
        size_t off = envlen < size ? envlen + 1 : size;
        size_t n = size - off;
        if (n > sizeof(region))
                n = sizeof(region);
        /* Keep the header valid half the time so the operations run. */
        size_t skip = (n > 0 && (data[off] & 1)) ? offsetof(struct vgpu_region, mem_limit) : 0;
        if (n > skip)
                memcpy((char *) &region + skip, data + off + skip, n - skip);
        char err[256];
        if (vgpu_region_validate(&region, sizeof(region), err, sizeof(err)) < 0) {
                if (err[0] == 0)
                        abort();
                return 0;
        }
        /* Announcements of live processes would make charges wait: the
         * fuzzer's slots are all dead or idle. */
        unsigned hwm = atomic_load(&region.slot_hwm);
        for (unsigned i = 0; i < VGPU_MAX_SLOTS; i++)
                for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++)
                        atomic_store(&region.slots[i].dev[d].pending, 0);
        for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++)
                (void) vgpu_region_used(&region, d);
        (void) vgpu_region_find_uuid(&region, "GPU-00000000-0000-0000-0000-000000000000");
        (void) vgpu_region_live(&region, odd_pids_dead);
        vgpu_region_reclaim(&region, odd_pids_dead);
        int s = vgpu_region_claim(&region, 2, 0, odd_pids_dead);
        if (s < 0)
                return 0;
        for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++) {
                uint64_t before = vgpu_region_slot_used(&region, s, d);
                if (vgpu_region_charge(&region, s, d, 4096, odd_pids_dead) == 0) {
                        uint64_t lim = region.mem_limit[d];
                        if (lim != VGPU_UNLIMITED && vgpu_region_used(&region, d) > lim && before == 0 && hwm <= 1)
                                abort();
                        vgpu_region_uncharge(&region, s, d, 4096);
                }
                vgpu_region_uncharge(&region, s, d, UINT64_MAX);
                if (vgpu_region_slot_used(&region, s, d) != 0)
                        abort();
        }
        vgpu_region_release(&region, s);
        return 0;
}

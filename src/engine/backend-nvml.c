/* The NVML mode backend: the driver is loaded. Modes and instances through
 * NVML; resets with nvidia-smi or sysfs (mk_engine_reset_gpus), with our
 * NVML session closed meanwhile so that it does not hold the GPUs. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/macro.h"
#include "engine/backend.h"
#include "engine/engine.h"
#include "nvml/nvml.h"

struct nvml_backend {
        struct mk_nvml *n;
        unsigned long mutations;   /* of sessions already closed */
};

static struct mk_nvml *nv(struct mk_backend *b) {
        return ((struct nvml_backend *) b->data)->n;
}

static int nvml_detect(struct mk_backend *b, struct mk_error *e) {
        struct nvml_backend *x = calloc(1, sizeof(*x));
        if (!x)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        int r = mk_nvml_open(NULL, &x->n, e);
        if (r < 0) {
                free(x);
                return r;
        }
        b->data = x;
        return 0;
}

static void nvml_close(struct mk_backend *b) {
        struct nvml_backend *x = b->data;
        if (!x)
                return;
        mk_nvml_close(x->n);
        free(x);
        b->data = NULL;
}

static int nvml_snapshot(struct mk_backend *b, struct mk_snapshot **ret, struct mk_error *e) {
        return mk_nvml_snapshot(nv(b), ret, e);
}

static int nvml_set_mode(struct mk_backend *b, const struct mk_gpu *g, bool enabled, bool *ret_pending,
                         struct mk_error *e) {
        return mk_nvml_set_mig_mode(nv(b), g->index, enabled, ret_pending, e);
}

static int nvml_reset(struct mk_backend *b, const struct mk_gpu *const *gpus, size_t n, bool *ret_reboot_needed,
                      struct mk_error *e) {
        struct nvml_backend *x = b->data;
        _cleanup_free_ const char **ids = calloc(n ? n : 1, sizeof(char *));
        _cleanup_free_ char *lib = strdup(mk_nvml_path(x->n));
        if (!ids || !lib)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        for (size_t i = 0; i < n; i++)
                ids[i] = gpus[i]->bus_id;
        /* Our NVML session must not hold the GPUs while they reset. */
        x->mutations += mk_nvml_mutations(x->n);
        x->n = mk_nvml_close(x->n);
        /* Not counted as a mutation: the count is of NVML calls (a reset is nvidia-smi's). */
        int r = mk_engine_reset_gpus(ids, n, ret_reboot_needed, e);
        struct mk_error e2 = {0};
        int q = mk_nvml_open(lib, &x->n, &e2);
        if (q < 0 && r >= 0) {
                if (e)
                        *e = e2;
                r = q;
        }
        return r;
}

static int nvml_destroy_ci(struct mk_backend *b, unsigned gpu, unsigned gi_id, unsigned ci_id, struct mk_error *e) {
        return mk_nvml_destroy_ci(nv(b), gpu, gi_id, ci_id, e);
}

static int nvml_destroy_gi(struct mk_backend *b, unsigned gpu, unsigned gi_id, struct mk_error *e) {
        return mk_nvml_destroy_gi(nv(b), gpu, gi_id, e);
}

static int nvml_create_gi(struct mk_backend *b, unsigned gpu, unsigned profile_id, struct mk_placement placement,
                          unsigned *ret_gi_id, struct mk_error *e) {
        return mk_nvml_create_gi(nv(b), gpu, profile_id, placement, ret_gi_id, e);
}

static int nvml_create_ci(struct mk_backend *b, unsigned gpu, unsigned gi_id, int ci_profile_id, unsigned ci_enum,
                          struct mk_placement placement, unsigned *ret_ci_id, struct mk_error *e) {
        unsigned id = (unsigned) ci_profile_id;
        if (ci_profile_id < 0) {
                int r = mk_nvml_ci_profile_id(nv(b), gpu, gi_id, ci_enum, &id, e);
                if (r < 0)
                        return r;
        }
        return mk_nvml_create_ci(nv(b), gpu, gi_id, id, placement, ret_ci_id, e);
}

static unsigned long nvml_mutations(const struct mk_backend *b) {
        const struct nvml_backend *x = b->data;
        return x ? x->mutations + (x->n ? mk_nvml_mutations(x->n) : 0) : 0;
}

const struct mk_backend_ops mk_backend_nvml = {
        .name = "nvml",
        .description = "NVML",
        .instances = true,
        .concurrent = true,
        .detect = nvml_detect,
        .close = nvml_close,
        .snapshot = nvml_snapshot,
        .set_mode = nvml_set_mode,
        .reset = nvml_reset,
        .destroy_ci = nvml_destroy_ci,
        .destroy_gi = nvml_destroy_gi,
        .create_gi = nvml_create_gi,
        .create_ci = nvml_create_ci,
        .mutations = nvml_mutations,
};

void mk_backend_close(struct mk_backend *b) {
        if (b && b->ops && b->data)
                b->ops->close(b);
        if (b)
                *b = (struct mk_backend){0};
}

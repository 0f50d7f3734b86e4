#include <stdlib.h>
#include <string.h>

#include "mig/gpu.h"

void mk_gpu_done(struct mk_gpu *g) {
        if (!g)
                return;
        for (size_t i = 0; i < g->n_profiles; i++) {
                struct mk_gi_profile *p = &g->profiles[i];
                free(p->placements);
                for (size_t j = 0; j < p->n_ci_profiles; j++)
                        free(p->ci_profiles[j].placements);
                free(p->ci_profiles);
        }
        free(g->profiles);
        for (size_t i = 0; i < g->n_gis; i++)
                free(g->gis[i].cis);
        free(g->gis);
        memset(g, 0, sizeof(*g));
}

struct mk_snapshot *mk_snapshot_free(struct mk_snapshot *s) {
        if (!s)
                return NULL;
        for (size_t i = 0; i < s->n_gpus; i++)
                mk_gpu_done(&s->gpus[i]);
        free(s->gpus);
        free(s->nvlinks);
        free(s->pcie_level);
        free(s);
        return NULL;
}

const struct mk_gi_profile *mk_gpu_profile_by_id(const struct mk_gpu *g, unsigned id) {
        for (size_t i = 0; i < g->n_profiles; i++)
                if (g->profiles[i].id == id)
                        return &g->profiles[i];
        return NULL;
}

const struct mk_gi_profile *mk_gpu_profile_by_enum(const struct mk_gpu *g, unsigned nvml_enum) {
        for (size_t i = 0; i < g->n_profiles; i++)
                if (g->profiles[i].nvml_enum == nvml_enum)
                        return &g->profiles[i];
        return NULL;
}

int mk_gpu_current_layout(const struct mk_gpu *g, struct mk_layout *ret) {
        struct mk_layout l = {0};
        for (size_t i = 0; i < g->n_gis; i++)
                for (size_t j = 0; j < g->gis[i].n_cis; j++) {
                        struct mk_profile_name n;
                        const struct mk_ci *ci = &g->gis[i].cis[j];
                        if (mk_profile_name_parse(ci->name, &n, NULL) < 0)
                                continue; /* unnamed (unknown enum): not countable */
                        int r = mk_layout_add(&l, &n, 1);
                        if (r < 0) {
                                mk_layout_done(&l);
                                return r;
                        }
                }
        mk_layout_canonicalize(&l);
        *ret = l;
        return 0;
}

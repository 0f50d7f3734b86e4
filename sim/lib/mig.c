/* MIG layout rules of the simulator; see mig.h. Facts:
 * MIG user guide, placements (placements, fitting rules). */
#include "lib/mig.h"
#include "lib/util.h"

static unsigned units_mask(unsigned start, unsigned size) {
        return ((1u << size) - 1) << start;
}

/* What a GPU's current instances occupy. */
struct gi_usage {
        unsigned units;     /* memory units mask */
        unsigned slices;    /* compute slices in use */
        unsigned media;     /* +me GIs */
        unsigned count;     /* GIs of the profile in question */
};

static void gi_usage(const struct sim_gpu *g, const struct sim_gi_profile *p, struct gi_usage *u) {
        *u = (struct gi_usage) { 0 };
        for (unsigned i = 0; i < g->n_gis; i++) {
                const struct sim_gi *gi = &g->gis[i];
                const struct sim_gi_profile *q = sim_gi_profile_by_enum(g->model, gi->profile);
                u->units |= units_mask(gi->start, gi->size);
                if (q) {
                        u->slices += q->slices;
                        u->media += q->media;
                }
                u->count += gi->profile == p->nvml_enum;
        }
}

static bool gi_fits(const struct sim_gpu *g, const struct sim_gi_profile *p, const struct gi_usage *u,
                    unsigned start) {
        /* Fitting rules (MIG user guide, placements): disjoint memory units, compute slices within
         * the GPU's, per-profile instance limit. One media-extension set per
         * GPU, so at most one +me GI of any size (UNVERIFIED for A30, whose
         * 1g+me and 2g+me would otherwise share it). */
        return !(u->units & units_mask(start, p->units)) && u->slices + p->slices <= g->model->compute_slices &&
               u->count < p->max && !(p->media && u->media > 0);
}

int sim_gi_check(const struct sim_gpu *g, const struct sim_gi_profile *p, unsigned start, unsigned size) {
        struct gi_usage u;

        if (size != p->units || start >= 32 || !(p->starts & (1u << start)))
                return -EINVAL;
        gi_usage(g, p, &u);
        return gi_fits(g, p, &u, start) ? 0 : -ENOSPC;
}

/* Placements (of every profile) that are still open, i.e. overlap no
 * existing GI, and that a GI at units `mask` would close. */
static unsigned placements_closed(const struct sim_gpu *g, unsigned used, unsigned mask) {
        const struct sim_model *m = g->model;
        unsigned n = 0;

        for (size_t i = 0; i < m->n_profiles; i++)
                for (unsigned s = 0; s < m->memory_units; s++) {
                        if (!(m->profiles[i].starts & (1u << s)))
                                continue;
                        unsigned q = units_mask(s, m->profiles[i].units);
                        n += !(q & used) && (q & mask);
                }
        return n;
}

int sim_gi_pick_start(const struct sim_gpu *g, const struct sim_gi_profile *p, unsigned *ret_start) {
        struct gi_usage u;
        unsigned best = 0, best_cost = UINT32_MAX;

        /* The driver keeps the layout open: of the free valid placements it
         * takes the one that closes the fewest other placements, the lowest
         * start on a tie. This reproduces every example of the MIG user
         * guide on an A100-40GB (-cgi 19,14,5 -> 6:1 4:2 0:4; 9,19,14,19 ->
         * 4:4 0:1 2:2 1:1; 14,19,19,19,19,19 -> 4:2 6:1 0:1 1:1 2:1 3:1; two
         * 3g.20gb -> 4:4 then 0:4). The rule itself is our inference. */
        gi_usage(g, p, &u);
        for (unsigned s = 0; s < g->model->memory_units; s++) {
                if (!(p->starts & (1u << s)) || !gi_fits(g, p, &u, s))
                        continue;
                unsigned cost = placements_closed(g, u.units, units_mask(s, p->units));
                if (cost < best_cost) {
                        best_cost = cost;
                        best = s;
                }
        }
        if (best_cost == UINT32_MAX)
                return -ENOSPC;
        *ret_start = best;
        return 0;
}

static unsigned gi_search(const struct sim_gpu *g, const struct sim_gi_profile *p, struct gi_usage u,
                          unsigned from) {
        unsigned best = 0;

        for (unsigned s = from; s < g->model->memory_units; s++) {
                if (!(p->starts & (1u << s)) || !gi_fits(g, p, &u, s))
                        continue;
                struct gi_usage v = u;
                v.units |= units_mask(s, p->units);
                v.slices += p->slices;
                v.media += p->media;
                v.count++;
                best = MAX(best, 1 + gi_search(g, p, v, s + 1));
        }
        return best;
}

unsigned sim_gi_remaining(const struct sim_gpu *g, const struct sim_gi_profile *p) {
        struct gi_usage u;

        gi_usage(g, p, &u);
        return gi_search(g, p, u, 0);
}

struct sim_gi *sim_gi_create(struct sim_state *st, struct sim_gpu *g, const struct sim_gi_profile *p,
                             unsigned start) {
        unsigned id = sim_gi_id_for_placement(g->model, start, p->units);
        unsigned pos = 0;

        if (g->n_gis >= SIM_MAX_GI)
                return NULL;
        while (pos < g->n_gis && g->gis[pos].id < id)
                pos++;
        memmove(&g->gis[pos + 1], &g->gis[pos], (g->n_gis - pos) * sizeof(g->gis[0]));
        g->n_gis++;
        g->gis[pos] = (struct sim_gi) {
                .id = id, .profile = p->nvml_enum, .start = start, .size = p->units, .serial = ++st->serial,
        };
        return &g->gis[pos];
}

int sim_gi_destroy(struct sim_gpu *g, unsigned gi_id) {
        for (unsigned i = 0; i < g->n_gis; i++) {
                if (g->gis[i].id != gi_id)
                        continue;
                if (g->gis[i].n_cis > 0 || sim_gi_has_processes(g, gi_id))
                        return -EBUSY;
                memmove(&g->gis[i], &g->gis[i + 1], (g->n_gis - i - 1) * sizeof(g->gis[0]));
                g->n_gis--;
                return 0;
        }
        return -ENOENT;
}

unsigned sim_ci_placements(const struct sim_gi_profile *p, const struct sim_ci_profile *cp, unsigned *starts,
                           unsigned max) {
        unsigned n = 0;

        /* MIG user guide, placements: starts aligned to the next power of two >= C, inside the GI. */
        for (unsigned s = 0; s + cp->slices <= p->slices; s += cp->align)
                if (n < max)
                        starts[n++] = s;
        return n;
}

static bool ci_fits(const struct sim_gi *gi, const struct sim_ci_profile *cp, unsigned used, unsigned count,
                    unsigned start) {
        return !(used & units_mask(start, cp->slices)) && count < cp->max;
}

static void ci_usage(const struct sim_gi *gi, const struct sim_ci_profile *cp, unsigned *used, unsigned *count) {
        *used = 0;
        *count = 0;
        for (unsigned i = 0; i < gi->n_cis; i++) {
                *used |= units_mask(gi->cis[i].start, gi->cis[i].size);
                *count += gi->cis[i].profile == cp->nvml_enum;
        }
}

int sim_ci_check(const struct sim_gi *gi, const struct sim_gi_profile *p, const struct sim_ci_profile *cp,
                 unsigned start, unsigned size) {
        unsigned used, count;

        if (size != cp->slices || start % cp->align != 0 || start + size > p->slices)
                return -EINVAL;
        ci_usage(gi, cp, &used, &count);
        return ci_fits(gi, cp, used, count, start) ? 0 : -ENOSPC;
}

int sim_ci_pick_start(const struct sim_gi *gi, const struct sim_gi_profile *p, const struct sim_ci_profile *cp,
                      unsigned *ret_start) {
        unsigned starts[SIM_MAX_CI], used, count;
        unsigned n = sim_ci_placements(p, cp, starts, SIM_MAX_CI);

        ci_usage(gi, cp, &used, &count);
        for (unsigned i = 0; i < n; i++)
                if (ci_fits(gi, cp, used, count, starts[i])) {
                        *ret_start = starts[i];
                        return 0;
                }
        return -ENOSPC;
}

static unsigned ci_search(const struct sim_gi *gi, const struct sim_ci_profile *cp, const unsigned *starts,
                          unsigned n, unsigned used, unsigned count, unsigned from) {
        unsigned best = 0;

        for (unsigned i = from; i < n; i++)
                if (ci_fits(gi, cp, used, count, starts[i]))
                        best = MAX(best, 1 + ci_search(gi, cp, starts, n, used | units_mask(starts[i], cp->slices),
                                                       count + 1, i + 1));
        return best;
}

unsigned sim_ci_remaining(const struct sim_gi *gi, const struct sim_gi_profile *p, const struct sim_ci_profile *cp) {
        unsigned starts[SIM_MAX_CI], used, count;
        unsigned n = sim_ci_placements(p, cp, starts, SIM_MAX_CI);

        ci_usage(gi, cp, &used, &count);
        return ci_search(gi, cp, starts, n, used, count, 0);
}

struct sim_ci *sim_ci_create(struct sim_state *st, const struct sim_gpu *g, struct sim_gi *gi,
                             const struct sim_ci_profile *cp, unsigned start) {
        unsigned id = 0, pos = 0;
        char key[SIM_UUID_MAX + 64];

        if (gi->n_cis >= SIM_MAX_CI)
                return NULL;
        /* Lowest unused id from 0 within the GI (UNVERIFIED beyond the user
         * guide's examples, which show 0, 1, 2 in creation order). */
        while (sim_gi_find_ci(gi, id))
                id++;
        while (pos < gi->n_cis && gi->cis[pos].id < id)
                pos++;
        memmove(&gi->cis[pos + 1], &gi->cis[pos], (gi->n_cis - pos) * sizeof(gi->cis[0]));
        gi->n_cis++;
        struct sim_ci *ci = &gi->cis[pos];
        *ci = (struct sim_ci) { .id = id, .profile = cp->nvml_enum, .start = start, .size = cp->slices };
        /* A new UUID per creation: GPU UUID + the machine's serial. */
        unsigned long long serial = ++st->serial;
        int n = snprintf(key, sizeof(key), "%s/%llu", g->uuid, serial);
        size_t len = n < 0 ? 0 : MIN((size_t) n, sizeof(key) - 1);
        sim_format_uuid(ci->uuid, sizeof(ci->uuid), "MIG-", sim_hash(key, len, 0x4d4947ULL),
                        sim_hash(key, len, 0x55554944ULL), true);
        return ci;
}

int sim_ci_destroy(struct sim_gpu *g, struct sim_gi *gi, unsigned ci_id) {
        for (unsigned i = 0; i < gi->n_cis; i++) {
                if (gi->cis[i].id != ci_id)
                        continue;
                if (sim_ci_has_processes(g, gi->id, ci_id))
                        return -EBUSY;
                memmove(&gi->cis[i], &gi->cis[i + 1], (gi->n_cis - i - 1) * sizeof(gi->cis[0]));
                gi->n_cis--;
                return 0;
        }
        return -ENOENT;
}

bool sim_gpu_has_processes(const struct sim_gpu *g) {
        return g->n_procs > 0;
}

bool sim_gi_has_processes(const struct sim_gpu *g, unsigned gi_id) {
        for (size_t i = 0; i < g->n_procs; i++)
                if (g->procs[i].gi == gi_id)
                        return true;
        return false;
}

bool sim_ci_has_processes(const struct sim_gpu *g, unsigned gi_id, unsigned ci_id) {
        for (size_t i = 0; i < g->n_procs; i++)
                if (g->procs[i].gi == gi_id && g->procs[i].ci == ci_id)
                        return true;
        return false;
}

unsigned long long sim_used_mib(const struct sim_gpu *g, unsigned gi_id) {
        unsigned long long sum = 0;

        for (size_t i = 0; i < g->n_procs; i++)
                if (gi_id == SIM_ID_NONE || g->procs[i].gi == gi_id)
                        sum += g->procs[i].used_mib;
        return sum;
}

unsigned sim_mig_device_count(const struct sim_gpu *g) {
        unsigned n = 0;

        for (unsigned i = 0; i < g->n_gis; i++)
                n += g->gis[i].n_cis;
        return n;
}

bool sim_mig_device_at(struct sim_gpu *g, unsigned index, struct sim_gi **ret_gi, struct sim_ci **ret_ci) {
        for (unsigned i = 0; i < g->n_gis; i++) {
                if (index < g->gis[i].n_cis) {
                        *ret_gi = &g->gis[i];
                        *ret_ci = &g->gis[i].cis[index];
                        return true;
                }
                index -= g->gis[i].n_cis;
        }
        return false;
}

unsigned sim_mig_device_index(const struct sim_gpu *g, unsigned gi_id, unsigned ci_id) {
        unsigned n = 0;

        for (unsigned i = 0; i < g->n_gis; i++)
                for (unsigned j = 0; j < g->gis[i].n_cis; j++) {
                        if (g->gis[i].id == gi_id && g->gis[i].cis[j].id == ci_id)
                                return n;
                        n++;
                }
        return SIM_ID_NONE;
}

int sim_gpu_reset(struct sim_state *st, unsigned index) {
        if (index >= st->n_gpus)
                return -ENODEV;
        struct sim_gpu *g = &st->gpus[index];
        if (sim_gpu_has_processes(g))
                return -EBUSY;
        g->n_gis = 0;
        g->mig_current = g->mig_pending;
        return 0;
}

void sim_machine_reboot(struct sim_state *st) {
        for (size_t i = 0; i < st->n_gpus; i++) {
                struct sim_gpu *g = &st->gpus[i];
                free(g->procs);
                g->procs = NULL;
                g->n_procs = 0;
                g->n_gis = 0;
                g->lost = false; /* back on the bus after a power cycle */
                if (g->model->mode_persistent)
                        g->mig_current = g->mig_pending;
                else
                        g->mig_current = g->mig_pending = 0;
        }
        st->n_events = 0;
}

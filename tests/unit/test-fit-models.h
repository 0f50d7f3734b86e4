/* GPU models and node states as data for the plan/fit unit tests
 * (test-fit*.c): A100-80GB and H100-80GB profiles built from the rows of
 * mig-model-rows.h, and GPU states written as text. Included by each test
 * binary; needs cmocka first. */
#pragma once

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/macro.h"
#include "mig/gpu.h"
#include "mig/layout.h"
#include "mig/profile.h"
#include "plan/fit.h"

#include "mig-model-rows.h"

/* --- GPU models as data -------------------------------------------------------- */

#define MAX_PROFILES 8
#define MAX_GPUS 4

struct model {
        struct mk_gi_profile profiles[MAX_PROFILES];
        struct mk_placement placements[MAX_PROFILES][8];
        size_t n_profiles;
        uint64_t memory_mib;
};

static struct model a100 _unused_, h100 _unused_;

static inline void model_build(struct model *m, const struct gi_row *rows, size_t n, uint64_t memory_mib) {
        memset(m, 0, sizeof *m);
        for (size_t i = 0; i < n; i++) {
                struct mk_gi_profile *p = &m->profiles[i];
                p->id = rows[i].id;
                p->slices = rows[i].slices;
                p->max_count = rows[i].max_count;
                p->memory_mib = rows[i].memory_mib;
                p->multiprocessors = rows[i].sms;
                p->named = true;
                snprintf(p->name, sizeof p->name, "%s", rows[i].name);
                assert_int_equal(mk_profile_name_parse(rows[i].name, &p->pname, NULL), 0);
                for (unsigned s = 0; s < 8; s++)
                        if (rows[i].starts & (1u << s))
                                m->placements[i][p->n_placements++] = (struct mk_placement) {s, rows[i].units};
                p->placements = m->placements[i];
        }
        m->n_profiles = n;
        m->memory_mib = memory_mib;
}

static inline int setup(void **state) {
        (void) state;
        model_build(&a100, a100_80gb_rows, sizeof a100_80gb_rows / sizeof a100_80gb_rows[0], 81920);
        model_build(&h100, h100_80gb_rows, sizeof h100_80gb_rows / sizeof h100_80gb_rows[0], 81559);
        return 0;
}

/* --- GPU states written as text ------------------------------------------------
 * A GPU: "" (empty), "-" (unavailable), or instances "3g.40gb@4 1g.10gb@6".
 * Allowed profiles: NULL (all of the model's) or names "1g.10gb 2g.20gb". */

struct node_buf {
        struct mk_fit_gpu gpus[MAX_GPUS];
        struct mk_fit_instance used[MAX_GPUS][8];
        struct mk_gi_profile allowed[MAX_PROFILES];
        size_t n_allowed;
};

static inline const struct mk_gi_profile *model_find(const struct model *m, const char *name, size_t len) {
        for (size_t i = 0; i < m->n_profiles; i++)
                if (strlen(m->profiles[i].name) == len && strncmp(m->profiles[i].name, name, len) == 0)
                        return &m->profiles[i];
        fail_msg("no profile '%.*s'", (int) len, name);
        return NULL;
}

static inline void node_build(struct node_buf *b, const struct model *m, const char *allowed, const char *const *gpus,
                       size_t n_gpus, struct mk_fit_node *ret) {
        memset(b, 0, sizeof *b);
        if (!allowed) {
                memcpy(b->allowed, m->profiles, sizeof m->profiles);
                b->n_allowed = m->n_profiles;
        } else {
                for (const char *s = allowed; *s;) {
                        size_t l = strcspn(s, " ");
                        b->allowed[b->n_allowed++] = *model_find(m, s, l);
                        s += l;
                        s += strspn(s, " ");
                }
        }
        assert_true(n_gpus <= MAX_GPUS);
        for (size_t i = 0; i < n_gpus; i++) {
                struct mk_fit_gpu *g = &b->gpus[i];
                *g = (struct mk_fit_gpu) {
                        .profiles = b->allowed,
                        .n_profiles = b->n_allowed,
                        .memory_units = 8,
                        .slices = 7,
                        .memory_mib = m->memory_mib,
                        .used = b->used[i],
                };
                if (streq(gpus[i], "-")) {
                        g->unavailable = true;
                        continue;
                }
                for (const char *s = gpus[i]; *s;) {
                        size_t l = strcspn(s, "@");
                        const struct mk_gi_profile *p = model_find(m, s, l);
                        s += l + 1;
                        char *end;
                        unsigned long start = strtoul(s, &end, 10);
                        assert_true(end != s);
                        b->used[i][g->n_used++] = (struct mk_fit_instance) {
                                .profile_id = p->id,
                                .slices = p->slices,
                                .placement = {(unsigned) start, p->placements[0].size},
                        };
                        s = end + strspn(end, " ");
                }
        }
        *ret = (struct mk_fit_node) {.gpus = b->gpus, .n_gpus = n_gpus};
}

/* Unit tests of plan/fit-geometry.h, one GPU's geometry: unit masks, the
 * capacity value C of free masks worked out by hand (docs/scheduler-fit.md
 * §3), capacity tables against the computed value for every free mask and
 * slice count, the tables' winning placement against the rule written out
 * here, variants, placement indices. Models: test-fit-models.h. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/macro.h"
#include "plan/fit-geometry.h"
#include "plan/fit.h"

#include "test-fit-models.h"

/* --- masks -------------------------------------------------------------------------- */

static void test_masks(void **state) {
        (void) state;
        static const struct {
                uint32_t free;
                unsigned size;
                uint32_t runs;
        } runs[] = {
                {0xff, 1, 0xff}, {0xff, 2, 0x7f}, {0xff, 4, 0x1f}, {0xff, 8, 0x01},
                {0xf0, 4, 0x10}, {0xc3, 2, 0x41}, {0x55, 2, 0x00}, {0x00, 1, 0x00},
        };
        for (size_t i = 0; i < ELEMENTSOF(runs); i++)
                if (fit_free_runs(runs[i].free, runs[i].size) != runs[i].runs)
                        fail_msg("runs of %u in 0x%x: 0x%x, expected 0x%x", runs[i].size, runs[i].free,
                                 fit_free_runs(runs[i].free, runs[i].size), runs[i].runs);
        static const struct {
                uint32_t x;
                unsigned n;
        } pops[] = {{0, 0}, {1, 1}, {0xff, 8}, {0x80000001u, 2}, {UINT32_MAX, 32}};
        for (size_t i = 0; i < ELEMENTSOF(pops); i++)
                assert_int_equal(fit_popcount32(pops[i].x), pops[i].n);
        assert_int_equal(fit_units_mask(0), 0);
        assert_int_equal(fit_units_mask(4), 0xf);
        assert_int_equal(fit_units_mask(32), UINT32_MAX);
        assert_int_equal(fit_units_mask(40), UINT32_MAX);
        assert_int_equal(fit_pmask((struct mk_placement) {4, 4}), 0xf0);
        assert_int_equal(fit_pmask((struct mk_placement) {6, 1}), 0x40);
        assert_int_equal(fit_pmask((struct mk_placement) {0, 0}), 0);
        assert_int_equal(fit_pmask((struct mk_placement) {30, 4}), 0); /* past unit 32 */
        assert_int_equal(fit_pmask((struct mk_placement) {0, 33}), 0);
}

/* --- the capacity value --------------------------------------------------------------- */

/* A100-80GB, all attribute-free profiles allowed: C(F) = sum size(p) *
 * M_p(F). 1g.10gb: size 1, starts 0..6; 1g.20gb: size 2, starts 0,2,4,6;
 * 2g.20gb: size 2, starts 0,2,4; 3g.40gb: size 4, starts 0,4; 4g.40gb and
 * 7g.80gb: start 0. */
struct cap_case {
        const char *what;
        uint32_t free;
        unsigned free_slices;
        unsigned cap;
};

static const struct cap_case cap_cases[] = {
        /* + 4 (FIT_USABLE_UNIT_WEIGHT) per free unit some free placement covers */
        {"empty GPU: 7 + 8 + 6 + 8 + 4 + 8, 8 usable units", 0xff, 7, 41 + 4 * 8},
        {"upper half, 3 slices: 1g 3, 1g.20gb 2x2, 2g 2, 3g 4, 4 usable", 0xf0, 3, 13 + 4 * 4},
        {"upper half, 4 slices: the same (4g starts at 0)", 0xf0, 4, 13 + 4 * 4},
        {"upper half, 2 slices: no 3g; 1g capped at 2; 1g.20gb@6 reaches unit 7", 0xf0, 2, 2 + 4 + 2 + 4 * 4},
        {"units 6-7: 1g at 6, 1g.20gb at 6", 0xc0, 2, 1 + 2 + 4 * 2},
        {"unit 0 alone: one 1g", 0x01, 1, 1 + 4},
        {"unit 7 alone: nothing starts there, not usable", 0x80, 1, 0},
        {"free units but no slices", 0xff, 0, 0},
        {"lower half, 4 slices: 1g 4 (capped), 1g.20gb 2x2, 2g 2x2, 3g 4, 4g 4", 0x0f, 4,
         4 + 4 + 4 + 4 + 4 + 4 * 4},
        {"units 0-6 free, 6 slices: 1g 6, 1g.20gb 3x2, 2g 3x2, 3g 4, 4g 4", 0x7f, 6, 6 + 3 * 2 + 3 * 2 + 4 + 4 + 4 * 7},
        {"nothing free", 0x00, 7, 0},
};

static void gpu_a100(struct node_buf *b, struct mk_fit_node *node, const char *allowed) {
        node_build(b, &a100, allowed, (const char *const[]) {""}, 1, node);
}

static void test_capacity(void **state) {
        (void) state;
        struct node_buf b;
        struct mk_fit_node node;
        gpu_a100(&b, &node, "1g.10gb 1g.10gb+me 1g.20gb 2g.20gb 3g.40gb 4g.40gb 7g.80gb");
        const struct mk_fit_gpu *g = &b.gpus[0];
        struct fit_profcache pc;
        fit_profcache_init(&pc);
        struct fit_gpu_state s;
        assert_int_equal(fit_gpu_prepare(&pc, g, &s), 0);
        assert_null(s.ps->tab);
        _cleanup_(mk_fit_tables_freep) struct mk_fit_tables *t = NULL;
        assert_int_equal(mk_fit_tables_new(g, &t), 0);
        int failures = 0;
        for (size_t i = 0; i < ELEMENTSOF(cap_cases); i++) {
                const struct cap_case *c = &cap_cases[i];
                unsigned computed = fit_capacity_compute(g, s.ps, NULL, SIZE_MAX, c->free, c->free_slices);
                unsigned looked_up = t->cap[c->free][c->free_slices];
                if (computed != c->cap || looked_up != c->cap) {
                        print_error("%s: C(0x%02x, %u) computed %u, tables %u, expected %u\n", c->what, c->free,
                                    c->free_slices, computed, looked_up, c->cap);
                        failures++;
                }
        }
        assert_int_equal(failures, 0);

        /* Tables and computation agree everywhere, and the ideal of n free
         * units is C of the n lowest units. */
        for (uint32_t f = 0; f <= 0xff; f++)
                for (unsigned fs = 0; fs <= 7; fs++)
                        assert_int_equal(t->cap[f][fs], fit_capacity_compute(g, s.ps, NULL, SIZE_MAX, f, fs));
        for (unsigned n = 0; n <= 8; n++)
                assert_int_equal(fit_ideal_slow(g, &s, n, 7), t->cap[fit_units_mask(n)][7]);

        /* Instance counts bind without tables: one 1g.10gb+me, not counted
         * in C (it has an attribute), and 1g.10gb's limit of 7. */
        unsigned counts[MK_FIT_MAX_PROFILES] = {[0] = 6};
        assert_int_equal(fit_capacity_compute(g, s.ps, counts, SIZE_MAX, 0xff, 7), 41 - 6 + 4 * 8);
        assert_int_equal(fit_capacity_compute(g, s.ps, counts, 0, 0xff, 7), 41 - 7 + 4 * 8);
}

/* --- the tables' winning placement ------------------------------------------------------- */

/* The rule of docs/scheduler-fit.md §3, written out independently of
 * fit-score.h: least loss, then the highest start. 1 + start, 0: none. */
static unsigned expected_best(const struct mk_fit_tables *t, const struct mk_gi_profile *p, size_t j, uint32_t f,
                              unsigned fs) {
        if (p->slices > fs)
                return 0;
        unsigned best = 0, best_loss = UINT32_MAX;
        for (unsigned start = 0; start < 8; start++) {
                uint32_t m = fit_units_mask(t->pi[j].size) << start;
                if (!(t->pi[j].starts & (1u << start)) || (f & m) != m)
                        continue;
                unsigned before = t->cap[f][fs], after = t->cap[f & ~m][fs - p->slices];
                unsigned loss = before > after ? before - after : 0;
                if (loss <= best_loss) {
                        best_loss = loss;
                        best = start + 1;
                }
        }
        return best;
}

struct best_case {
        const char *what;
        const char *profile;
        uint32_t free;
        unsigned free_slices;
        int start; /* -1: none */
};

static const struct best_case best_cases[] = {
        {"1g on an empty GPU: unit 5, as at 6 it would strand unit 7", "1g.10gb", 0xff, 7, 5},
        {"1g beside a 1g at 5: unit 4, keeping 6-7 for a 1g.20gb", "1g.10gb", 0xdf, 6, 4},
        {"1g beside a 1g at 6: unit 5", "1g.10gb", 0xbf, 6, 5},
        {"1g with the upper half full: unit 3", "1g.10gb", 0x0f, 4, 3},
        {"2g on an empty GPU: 4, keeping the 4g block", "2g.20gb", 0xff, 7, 4},
        {"3g on an empty GPU: 4", "3g.40gb", 0xff, 7, 4},
        {"3g with 4-7 used: 0", "3g.40gb", 0x0f, 4, 0},
        {"3g without slices", "3g.40gb", 0xff, 2, -1},
        {"7g on a used GPU", "7g.80gb", 0x7f, 7, -1},
        {"1g.20gb on an empty GPU: 6", "1g.20gb", 0xff, 7, 6},
};

static void test_tables_best(void **state) {
        (void) state;
        struct node_buf b;
        struct mk_fit_node node;
        gpu_a100(&b, &node, NULL);
        const struct mk_fit_gpu *g = &b.gpus[0];
        _cleanup_(mk_fit_tables_freep) struct mk_fit_tables *t = NULL;
        assert_int_equal(mk_fit_tables_new(g, &t), 0);
        assert_true(fit_tables_match(t, g));

        for (size_t i = 0; i < ELEMENTSOF(best_cases); i++) {
                const struct best_case *c = &best_cases[i];
                const struct mk_gi_profile *p = model_find(&a100, c->profile, strlen(c->profile));
                size_t j = (size_t) (p - a100.profiles);
                int got = (int) t->best[fit_best_index(j, c->free, c->free_slices)] - 1;
                if (got != c->start)
                        fail_msg("%s: start %d, expected %d", c->what, got, c->start);
        }
        for (size_t j = 0; j < g->n_profiles; j++)
                for (uint32_t f = 0; f <= 0xff; f++)
                        for (unsigned fs = 0; fs <= 8; fs++) {
                                unsigned want = expected_best(t, &g->profiles[j], j, f, MIN(fs, 7u));
                                unsigned got = t->best[fit_best_index(j, f, fs)];
                                if (fs <= 7 && got != want)
                                        fail_msg("profile %s free 0x%02x slices %u: %u, expected %u",
                                                 g->profiles[j].name, f, fs, got, want);
                        }

        /* Tables of other profiles or unit counts are not used. */
        struct mk_fit_gpu other = *g;
        other.n_profiles--;
        assert_false(fit_tables_match(t, &other));
        other = *g;
        other.slices = 0;
        assert_false(fit_tables_match(t, &other));
        assert_false(fit_tables_match(NULL, g));
}

/* --- profiles ------------------------------------------------------------------------------ */

static void test_variants(void **state) {
        (void) state;
        static const struct {
                const char *profile, *variant;
                bool match;
        } cases[] = {
                {"1g.10gb", NULL, true},        {"1g.10gb", "", true},          {"1g.10gb", "+me", false},
                {"1g.10gb+me", "+me", true},    {"1g.10gb+me", "+ME", true},    {"1g.10gb+me", NULL, false},
                {"1g.10gb+me", "+me.all", false}, {"1g.10gb+me", "-me", false}, {"1g.10gb+me", "+m", false},
                {"1g.10gb+me", "+mex", false},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                const struct mk_gi_profile *p = model_find(&h100, cases[i].profile, strlen(cases[i].profile));
                if (fit_variant_matches(p, cases[i].variant) != cases[i].match)
                        fail_msg("%s with variant '%s': expected %s", cases[i].profile,
                                 cases[i].variant ? cases[i].variant : "(null)", cases[i].match ? "match" : "none");
        }
        struct mk_gi_profile unnamed = {.named = false};
        assert_false(fit_variant_matches(&unnamed, NULL));
}

static void test_pinfo_and_index(void **state) {
        (void) state;
        struct node_buf b;
        struct mk_fit_node node;
        gpu_a100(&b, &node, "1g.10gb 3g.40gb 7g.80gb");
        struct fit_pinfo pi[MK_FIT_MAX_PROFILES];
        unsigned max_slices, max_sms;
        assert_int_equal(fit_pinfo_fill(&b.gpus[0], pi, &max_slices, &max_sms), 0);
        assert_int_equal(max_slices, 7);
        assert_int_equal(max_sms, 98);
        assert_int_equal(pi[0].starts, 0x7f);
        assert_int_equal(pi[0].size, 1);
        assert_true(pi[0].base && pi[0].disjoint && !pi[0].limited);
        assert_int_equal(pi[1].starts, 0x11);
        assert_int_equal(pi[1].size, 4);
        assert_int_equal(pi[2].starts, 0x01);

        const struct mk_gi_profile *p3 = &b.allowed[1];
        assert_int_equal(fit_placement_index(p3, 0), 0);
        assert_int_equal(fit_placement_index(p3, 4), 1);
        assert_int_equal(fit_placement_index(p3, 2), 0); /* not a start: the first */

        /* Placements of different sizes, or outside the GPU, are refused. */
        b.gpus[0].memory_units = 4;
        assert_int_equal(fit_pinfo_fill(&b.gpus[0], pi, &max_slices, &max_sms), -EINVAL);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_masks),
                cmocka_unit_test(test_capacity),
                cmocka_unit_test(test_tables_best),
                cmocka_unit_test(test_variants),
                cmocka_unit_test(test_pinfo_and_index),
        };
        return cmocka_run_group_tests(tests, setup, NULL);
}

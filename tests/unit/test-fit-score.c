/* Unit tests of plan/fit-score.h, the fit policy written once: the
 * placement tie-break (less lost capacity, then the higher start), the
 * profile order, the GPU order under each policy, the node score, and the
 * policy names. Every case is data. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/macro.h"
#include "plan/fit-score.h"

/* --- the placement tie-break ------------------------------------------------------ */

struct spot {
        size_t profile;
        unsigned start, loss;
};

struct pick_case {
        const char *what;
        struct spot offers[6];
        size_t n_offers;
        struct spot expect;
};

static const struct pick_case pick_cases[] = {
        {"one offer is taken", {{0, 3, 9}}, 1, {0, 3, 9}},
        {"less loss wins over a higher start", {{0, 6, 2}, {0, 0, 1}}, 2, {0, 0, 1}},
        {"less loss wins, offered first", {{0, 0, 1}, {0, 6, 2}}, 2, {0, 0, 1}},
        {"equal loss: the higher start", {{0, 2, 4}, {0, 6, 4}, {0, 4, 4}}, 3, {0, 6, 4}},
        {"equal loss, a lower start later does not replace", {{0, 5, 0}, {0, 1, 0}}, 2, {0, 5, 0}},
        {"equal loss and start: the first offer stays", {{0, 4, 3}, {1, 4, 3}}, 2, {0, 4, 3}},
        {"across profiles of one rank: the same rule", {{0, 2, 3}, {1, 4, 3}, {2, 6, 5}}, 3, {1, 4, 3}},
        {"the buddy rule on an empty A100: 1g losses by start 0..6", {{0, 0, 4}, {0, 1, 4}, {0, 2, 4}, {0, 3, 4},
                                                                     {0, 4, 4}, {0, 5, 4}},
         6, {0, 5, 4}},
};

static void test_pick(void **state) {
        (void) state;
        int failures = 0;
        for (size_t i = 0; i < ELEMENTSOF(pick_cases); i++) {
                const struct pick_case *c = &pick_cases[i];
                struct fit_pick b = FIT_PICK_NONE;
                for (size_t k = 0; k < c->n_offers; k++)
                        fit_pick_offer(&b, c->offers[k].profile, c->offers[k].start, c->offers[k].loss);
                if (!b.found || b.profile != c->expect.profile || b.start != c->expect.start ||
                    b.loss != c->expect.loss) {
                        print_error("%s: got profile %zu start %u loss %u, expected %zu/%u/%u\n", c->what, b.profile,
                                    b.start, b.loss, c->expect.profile, c->expect.start, c->expect.loss);
                        failures++;
                }
        }
        assert_int_equal(failures, 0);

        struct fit_pick none = FIT_PICK_NONE;
        assert_false(none.found);
}

struct spot_case {
        unsigned loss, start, best_loss, best_start;
        bool better;
};

static const struct spot_case spot_cases[] = {
        {1, 0, 2, 6, true}, {2, 6, 1, 0, false}, {3, 5, 3, 4, true},
        {3, 4, 3, 5, false}, {3, 4, 3, 4, false}, {0, 0, 0, 0, false},
};

static void test_spot_better(void **state) {
        (void) state;
        for (size_t i = 0; i < ELEMENTSOF(spot_cases); i++) {
                const struct spot_case *c = &spot_cases[i];
                if (fit_spot_better(c->loss, c->start, c->best_loss, c->best_start) != c->better)
                        fail_msg("loss %u start %u against loss %u start %u: expected %s", c->loss, c->start,
                                 c->best_loss, c->best_start, c->better ? "better" : "not better");
        }
}

/* --- profile and GPU order ------------------------------------------------------------ */

static void test_profile_rank(void **state) {
        (void) state;
        static const struct {
                uint64_t a_mib;
                unsigned a_slices;
                uint64_t b_mib;
                unsigned b_slices;
                int sign;
        } cases[] = {
                {9728, 1, 19968, 1, -1},  /* 1g.10gb before 1g.20gb */
                {19968, 1, 19968, 2, -1}, /* 1g.20gb before 2g.20gb: same memory, fewer slices */
                {40192, 4, 40192, 3, 1},  /* 4g.40gb after 3g.40gb */
                {9728, 1, 9728, 1, 0},    /* 1g.10gb and 1g.10gb+me: one rank */
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                struct mk_gi_profile a = {.memory_mib = cases[i].a_mib, .slices = cases[i].a_slices};
                struct mk_gi_profile b = {.memory_mib = cases[i].b_mib, .slices = cases[i].b_slices};
                int r = fit_profile_rank_compare(&a, &b);
                assert_int_equal((r > 0) - (r < 0), cases[i].sign);
                r = fit_profile_rank_compare(&b, &a);
                assert_int_equal((r > 0) - (r < 0), -cases[i].sign);
        }
}

#define CAND(g, mib, sl, l, u) \
        ((struct fit_cand) {.gpu = (g), .memory_mib = (mib), .slices = (sl), .loss = (l), .used_units = (u)})

struct order_case {
        const char *what;
        struct fit_cand a, b;
        int binpack, spread; /* sign of fit_cand_compare(a, b) under each GPU policy */
};

static const struct order_case order_cases[] = {
        {"smaller profile first, whatever else", CAND(3, 9728, 1, 9, 0), CAND(0, 19968, 1, 0, 7), -1, -1},
        {"same memory: fewer slices first", CAND(3, 19968, 1, 9, 0), CAND(0, 19968, 2, 0, 7), -1, -1},
        {"binpack: less loss first, spread: emptier first", CAND(0, 9728, 1, 1, 6), CAND(1, 9728, 1, 4, 0), -1, 1},
        {"equal loss: binpack the fuller GPU", CAND(0, 9728, 1, 2, 1), CAND(1, 9728, 1, 2, 5), 1, -1},
        {"equal used units: spread by loss", CAND(0, 9728, 1, 3, 2), CAND(1, 9728, 1, 2, 2), 1, 1},
        {"all equal: the lower index", CAND(4, 9728, 1, 2, 2), CAND(2, 9728, 1, 2, 2), 1, 1},
};

static void test_cand_order(void **state) {
        (void) state;
        int failures = 0;
        for (size_t i = 0; i < ELEMENTSOF(order_cases); i++) {
                const struct order_case *c = &order_cases[i];
                int bp = fit_cand_compare(&c->a, &c->b, MK_FIT_BINPACK);
                int sp = fit_cand_compare(&c->a, &c->b, MK_FIT_SPREAD);
                int rbp = fit_cand_compare(&c->b, &c->a, MK_FIT_BINPACK);
                if ((bp > 0) - (bp < 0) != c->binpack || (sp > 0) - (sp < 0) != c->spread ||
                    (rbp > 0) - (rbp < 0) != -c->binpack) {
                        print_error("%s: binpack %d spread %d (reversed %d), expected %d %d\n", c->what, bp, sp, rbp,
                                    c->binpack, c->spread);
                        failures++;
                }
        }
        assert_int_equal(failures, 0);
}

static void test_cands_select(void **state) {
        (void) state;
        struct fit_cand c[] = {
                CAND(0, 9728, 1, 4, 0), CAND(1, 9728, 1, 1, 6), CAND(2, 19968, 1, 0, 0), CAND(3, 9728, 1, 1, 7),
        };
        fit_cands_select(c, ELEMENTSOF(c), 2, MK_FIT_BINPACK);
        assert_int_equal(c[0].gpu, 3); /* loss 1, fuller */
        assert_int_equal(c[1].gpu, 1); /* loss 1 */
        fit_cands_select(c, ELEMENTSOF(c), 3, MK_FIT_SPREAD);
        assert_int_equal(c[0].gpu, 0); /* emptiest of the small profile */
        assert_int_equal(c[1].gpu, 1);
        assert_int_equal(c[2].gpu, 3);
}

/* --- the node score --------------------------------------------------------------------- */

struct score_case {
        const char *what;
        struct fit_sums sm;
        enum mk_fit_policy policy;
        bool have_res;
        double res_util;
        double score, frag;
};

/* Weights (docs/scheduler-fit.md §4): binpack util 0 (0.075 for CPU/memory
 * when known), spread 0.60 (half of it for CPU/memory when known), frag
 * 0.05, the rest "keep". */
static const struct score_case score_cases[] = {
        {"half used, half fragmented, nothing lost, binpack", {16, 8, 20, 40, 0, 20}, MK_FIT_BINPACK, false, 0,
         100 * (0.95 + 0.05 * 0.5), 0.5},
        {"the same, spread", {16, 8, 20, 40, 0, 20}, MK_FIT_SPREAD, false, 0, 100 * (0.35 + 0.60 * 0.5 + 0.05 * 0.5),
         0.5},
        {"with CPU/memory at 20%, binpack", {16, 8, 20, 40, 0, 20}, MK_FIT_BINPACK, true, 0.2,
         100 * (0.875 + 0.05 * 0.5 + 0.075 * 0.2), 0.5},
        {"with CPU/memory at 20%, spread", {16, 8, 20, 40, 0, 20}, MK_FIT_SPREAD, true, 0.2,
         100 * (0.35 + 0.30 * 0.5 + 0.05 * 0.5 + 0.30 * 0.8), 0.5},
        {"a quarter of an empty GPU's capacity lost", {8, 2, 30, 30, 10, 40}, MK_FIT_BINPACK, false, 0,
         100 * (0.95 * 0.75 + 0.05), 0},
        {"no GPUs at all", {0, 0, 0, 0, 0, 0}, MK_FIT_SPREAD, false, 0, 100, 0},
        {"loss over the empty capacity clamps", {8, 8, 0, 0, 60, 40}, MK_FIT_BINPACK, false, 0,
         100 * (0.95 * (1 - 60.0 / 40) + 0.05), 0},
};

static void test_node_score(void **state) {
        (void) state;
        for (size_t i = 0; i < ELEMENTSOF(score_cases); i++) {
                const struct score_case *c = &score_cases[i];
                double score, frag;
                fit_node_score(&c->sm, c->policy, FIT_W_UTIL_BINPACK, c->have_res, c->res_util, &score, &frag);
                double want = c->score < 0 ? 0 : c->score > 100 ? 100 : c->score;
                if (score < want - 1e-9 || score > want + 1e-9 || frag < c->frag - 1e-9 || frag > c->frag + 1e-9)
                        fail_msg("%s: score %.6f frag %.6f, expected %.6f %.6f", c->what, score, frag, want, c->frag);
        }
}

static void test_policy_strings(void **state) {
        (void) state;
        assert_int_equal(mk_fit_policy_from_string("binpack"), MK_FIT_BINPACK);
        assert_int_equal(mk_fit_policy_from_string("Spread"), MK_FIT_SPREAD);
        assert_int_equal(mk_fit_policy_from_string("mutex"), -EINVAL);
        assert_int_equal(mk_fit_policy_from_string(NULL), -EINVAL);
        assert_string_equal(mk_fit_policy_to_string(MK_FIT_SPREAD), "spread");
        assert_string_equal(mk_fit_policy_to_string(MK_FIT_BINPACK), "binpack");
        assert_null(mk_fit_policy_to_string(_MK_FIT_POLICY_MAX));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_pick),
                cmocka_unit_test(test_spot_better),
                cmocka_unit_test(test_profile_rank),
                cmocka_unit_test(test_cand_order),
                cmocka_unit_test(test_cands_select),
                cmocka_unit_test(test_node_score),
                cmocka_unit_test(test_policy_strings),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests of plan/fit as a whole (mk_fit_node and the public helpers of
 * fit.h): GPU states and requests as data with the expected choice (models
 * in test-fit-models.h), infeasible and malformed cases, policies, the
 * fragmentation metric, node caches against the path without. The parts
 * have their own tests: test-fit-geometry.c, test-fit-score.c. */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/macro.h"
#include "mig/gpu.h"
#include "mig/layout.h"
#include "mig/profile.h"
#include "plan/fit.h"

#include "test-fit-models.h"

/* "0:1g.10gb@6 1:2g.20gb@0", or "ENOSPC" / "EINVAL". */
static void result_format(int r, const struct mk_fit_result *res, char *buf, size_t size) {
        if (r == -ENOSPC) {
                snprintf(buf, size, "ENOSPC");
                return;
        }
        if (r == -EINVAL) {
                snprintf(buf, size, "EINVAL");
                return;
        }
        if (r < 0) {
                snprintf(buf, size, "error %d", r);
                return;
        }
        size_t k = 0;
        buf[0] = 0;
        for (size_t i = 0; i < res->n_choices && k < size; i++)
                k += (size_t) snprintf(buf + k, size - k, "%s%u:%s@%u", i ? " " : "", res->choices[i].gpu,
                                       res->choices[i].profile->name, res->choices[i].placement.start);
}

/* --- choices as data ------------------------------------------------------------ */

struct fit_case {
        const char *what;
        const struct model *model;
        const char *allowed;
        const char *gpus[MAX_GPUS];
        size_t n_gpus;
        struct mk_fit_request req;
        enum mk_fit_policy gpu_policy;
        const char *expect;
};

#define GIB(x) ((uint64_t) (x) * 1024)
#define REQ(...) ((struct mk_fit_request) {.gpus = 1, __VA_ARGS__})
#define REQN(n, ...) ((struct mk_fit_request) {.gpus = (n), __VA_ARGS__})

static const struct fit_case cases[] = {
        /* Placement: the loss of free capacity decides, keeping aligned blocks whole. */
        {"1g on an empty A100 goes to unit 6 (no 2g can use 6-7)", &a100, "1g.10gb 2g.20gb 3g.40gb 4g.40gb 7g.80gb",
         {""}, 1, REQ(.mem_mib = GIB(9)), MK_FIT_BINPACK, "0:1g.10gb@6"},
        {"second 1g fills the same 2-unit block's buddy", &a100, "1g.10gb 2g.20gb 3g.40gb 4g.40gb 7g.80gb",
         {"1g.10gb@6"}, 1, REQ(.mem_mib = GIB(9)), MK_FIT_BINPACK, "0:1g.10gb@5"},
        {"third 1g stays in the upper half", &a100, "1g.10gb 2g.20gb 3g.40gb 4g.40gb 7g.80gb",
         {"1g.10gb@6 1g.10gb@5"}, 1, REQ(.mem_mib = GIB(9)), MK_FIT_BINPACK, "0:1g.10gb@4"},
        {"1g with the upper half full goes to the lower half's top", &a100, "1g.10gb 2g.20gb 3g.40gb 4g.40gb 7g.80gb",
         {"3g.40gb@4"}, 1, REQ(.mem_mib = GIB(9)), MK_FIT_BINPACK, "0:1g.10gb@3"},
        {"2g on an empty GPU goes to 4 (keeps the 4g/3g block at 0)", &a100, "1g.10gb 2g.20gb 3g.40gb 4g.40gb 7g.80gb",
         {""}, 1, REQ(.mem_mib = GIB(19)), MK_FIT_BINPACK, "0:2g.20gb@4"},
        {"2g next to a 2g", &a100, "1g.10gb 2g.20gb 3g.40gb 4g.40gb 7g.80gb", {"2g.20gb@4"}, 1,
         REQ(.mem_mib = GIB(19)), MK_FIT_BINPACK, "0:2g.20gb@2"},
        {"3g on an empty GPU goes to 4 (4g stays possible)", &a100, NULL, {""}, 1, REQ(.mem_mib = GIB(39)),
         MK_FIT_BINPACK, "0:3g.40gb@4"},
        {"3g with 3g@4 taken goes to 0", &a100, NULL, {"3g.40gb@4"}, 1, REQ(.mem_mib = GIB(39)), MK_FIT_BINPACK,
         "0:3g.40gb@0"},
        {"whole GPU: 7g at 0", &a100, NULL, {""}, 1, REQ(.mem_mib = 0), MK_FIT_BINPACK, "0:7g.80gb@0"},
        {"100% is the whole GPU", &a100, NULL, {""}, 1, REQ(.mem_percent = 100), MK_FIT_BINPACK, "0:7g.80gb@0"},
        {"memory just over the 3g's needs the 7g", &a100, NULL, {""}, 1, REQ(.mem_mib = 40193), MK_FIT_BINPACK,
         "0:7g.80gb@0"},
        {"percent: 20% of 80 GiB = 16384 MiB -> 1g.20gb", &a100, NULL, {""}, 1, REQ(.mem_percent = 20),
         MK_FIT_BINPACK, "0:1g.20gb@6"},
        {"percent: 25% of 80 GiB = 20480 MiB > 2g's 19968 -> 3g", &a100, NULL, {""}, 1, REQ(.mem_percent = 25),
         MK_FIT_BINPACK, "0:3g.40gb@4"},

        /* Double-memory 1g: a 20 GB request takes 1g.20gb (one slice, and unit 7 usable). */
        {"20 GB on an empty H100 takes 1g.20gb at 6", &h100, NULL, {""}, 1, REQ(.mem_mib = GIB(19)), MK_FIT_BINPACK,
         "0:1g.20gb@6"},
        {"20 GB next to 2g@0 2g@2 2g@4: only 1g.20gb@6 fits", &h100, NULL, {"2g.20gb@0 2g.20gb@2 2g.20gb@4"}, 1,
         REQ(.mem_mib = GIB(19)), MK_FIT_BINPACK, "0:1g.20gb@6"},
        {"without 1g.20gb, 2g.20gb@0,2,4 full: no 20 GB room", &h100, "1g.10gb 2g.20gb 3g.40gb 4g.40gb 7g.80gb",
         {"2g.20gb@0 2g.20gb@2 2g.20gb@4"}, 1, REQ(.mem_mib = GIB(19)), MK_FIT_BINPACK, "ENOSPC"},
        {"10 GB never takes 1g.20gb while 1g.10gb fits", &h100, NULL, {"1g.20gb@6"}, 1, REQ(.mem_mib = GIB(9)),
         MK_FIT_BINPACK, "0:1g.10gb@5"},
        {"10 GB takes 1g.20gb when no 1g.10gb is allowed", &h100, "1g.20gb 2g.20gb 7g.80gb", {""}, 1,
         REQ(.mem_mib = GIB(9)), MK_FIT_BINPACK, "0:1g.20gb@6"},
        {"cores 20%: 1g.10gb has 13% (16/132), 1g.20gb 20% (26/132)", &h100, NULL, {""}, 1,
         REQ(.mem_mib = GIB(9), .cores_percent = 20), MK_FIT_BINPACK, "0:1g.20gb@6"},
        {"cores 21%: 2g.20gb (25%)", &h100, NULL, {""}, 1, REQ(.mem_mib = GIB(9), .cores_percent = 21),
         MK_FIT_BINPACK, "0:2g.20gb@4"},
        {"cores 100%: only the 7g", &h100, NULL, {""}, 1, REQ(.mem_mib = GIB(9), .cores_percent = 100),
         MK_FIT_BINPACK, "0:7g.80gb@0"},

        /* +me: only when asked, and one per GPU. */
        {"+me asked: 1g.10gb+me at 5 (at 6 it strands unit 7)", &h100, NULL, {""}, 1,
         REQ(.mem_mib = GIB(9), .variant = "+me"), MK_FIT_BINPACK, "0:1g.10gb+me@5"},
        {"+me asked, one exists: the next GPU", &h100, NULL, {"1g.10gb+me@6", ""}, 2,
         REQ(.mem_mib = GIB(9), .variant = "+me"), MK_FIT_BINPACK, "1:1g.10gb+me@5"},
        {"+me asked, every GPU has one", &h100, NULL, {"1g.10gb+me@6"}, 1, REQ(.mem_mib = GIB(9), .variant = "+me"),
         MK_FIT_BINPACK, "ENOSPC"},
        {"+me asked, not allowed here", &h100, "1g.10gb 2g.20gb", {""}, 1, REQ(.mem_mib = GIB(9), .variant = "+me"),
         MK_FIT_BINPACK, "ENOSPC"},
        {"plain request never takes +me", &h100, "1g.10gb+me 7g.80gb", {""}, 1, REQ(.mem_mib = GIB(9)),
         MK_FIT_BINPACK, "0:7g.80gb@0"},
        {"an unknown variant matches nothing", &h100, NULL, {""}, 1, REQ(.mem_mib = GIB(9), .variant = "+gfx"),
         MK_FIT_BINPACK, "ENOSPC"},

        /* Infeasible. */
        {"seven 1g: unit 7 alone is useless", &a100, NULL, {"1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6"},
         1, REQ(.mem_mib = GIB(9)), MK_FIT_BINPACK, "ENOSPC"},
        {"whole GPU on a used GPU", &a100, NULL, {"1g.10gb@6"}, 1, REQ(.mem_percent = 100), MK_FIT_BINPACK,
         "ENOSPC"},
        {"more memory than any profile", &a100, NULL, {""}, 1, REQ(.mem_mib = 90000), MK_FIT_BINPACK, "ENOSPC"},
        {"unavailable GPUs are never chosen", &a100, NULL, {"-", "-"}, 2, REQ(.mem_mib = GIB(9)), MK_FIT_BINPACK,
         "ENOSPC"},
        {"two GPUs asked, one fits", &a100, NULL, {"", "7g.80gb@0"}, 2, REQN(2, .mem_mib = GIB(9)),
         MK_FIT_BINPACK, "ENOSPC"},
        {"3g free at 0 but 4g held at 0 blocks it", &a100, NULL, {"4g.40gb@0"}, 1, REQ(.mem_mib = GIB(39)),
         MK_FIT_BINPACK, "0:3g.40gb@4"},
        {"3g and 4g both placed: no 3g", &a100, NULL, {"4g.40gb@0 3g.40gb@4"}, 1, REQ(.mem_mib = GIB(39)),
         MK_FIT_BINPACK, "ENOSPC"},

        /* GPU choice and policies. */
        {"binpack: the GPU where the 1g destroys least (a hole next to a 1g)", &a100, NULL,
         {"", "1g.10gb@6", "3g.40gb@4"}, 3, REQ(.mem_mib = GIB(9)), MK_FIT_BINPACK, "1:1g.10gb@5"},
        {"binpack, 2 GPUs: the two least-loss GPUs", &a100, NULL, {"", "1g.10gb@6", "3g.40gb@4"}, 3,
         REQN(2, .mem_mib = GIB(9)), MK_FIT_BINPACK, "1:1g.10gb@5 2:1g.10gb@3"},
        {"spread: the emptiest GPU first", &a100, NULL, {"1g.10gb@6", "", "3g.40gb@4"}, 3, REQ(.mem_mib = GIB(9)),
         MK_FIT_SPREAD, "1:1g.10gb@5"},
        {"spread, 2 GPUs: emptiest two", &a100, NULL, {"1g.10gb@6", "", "3g.40gb@4"}, 3,
         REQN(2, .mem_mib = GIB(9)), MK_FIT_SPREAD, "1:1g.10gb@5 0:1g.10gb@5"},
        {"ties: lower GPU index", &a100, NULL, {"", ""}, 2, REQ(.mem_mib = GIB(9)), MK_FIT_BINPACK, "0:1g.10gb@5"},
        {"used instances of profiles not allowed still hold space", &a100, "1g.10gb", {"7g.80gb@0", ""}, 2,
         REQ(.mem_mib = GIB(9)), MK_FIT_BINPACK, "1:1g.10gb@6"},

        /* Malformed requests. */
        {"zero GPUs", &a100, NULL, {""}, 1, REQN(0, .mem_mib = 1), MK_FIT_BINPACK, "EINVAL"},
        {"17 GPUs", &a100, NULL, {""}, 1, REQN(17, .mem_mib = 1), MK_FIT_BINPACK, "EINVAL"},
        {"101 percent", &a100, NULL, {""}, 1, REQ(.mem_percent = 101), MK_FIT_BINPACK, "EINVAL"},
        {"101 percent cores", &a100, NULL, {""}, 1, REQ(.mem_mib = 1, .cores_percent = 101), MK_FIT_BINPACK,
         "EINVAL"},
};

/* With capacity tables set on the node's GPUs: the fit through a node cache
 * (mk_fit_node_cache_update) gives exactly the answer without one: return
 * code, choices, score, fragmentation and message. Also requires that the
 * cache was usable whenever a GPU is available, so the comparison is real.
 * Returns the number of differences (printed). */
static int cache_differences(struct mk_fit_node *node, const struct mk_fit_request *rq, enum mk_fit_policy np,
                             enum mk_fit_policy gp, const char *what) {
        int failures = 0;
        struct mk_fit_node_cache nc;
        memset(&nc, 0x5A, sizeof nc);
        int u = mk_fit_node_cache_update(node, &nc);
        bool any_available = false;
        for (size_t i = 0; i < node->n_gpus; i++)
                any_available |= !node->gpus[i].unavailable;
        if (any_available ? u != 0 : u != -EOPNOTSUPP) {
                print_error("%s: node cache update returned %d\n", what, u);
                failures++;
        }
        struct mk_fit_result a, c;
        struct mk_error ea = {}, ec = {};
        memset(&a, 0, sizeof a);
        memset(&c, 0, sizeof c);
        int ra = mk_fit_node(node, rq, np, gp, &a, &ea);
        node->cache = &nc;
        int rc = mk_fit_node(node, rq, np, gp, &c, &ec);
        node->cache = NULL;
        char x[256], y[256];
        result_format(ra, &a, x, sizeof x);
        result_format(rc, &c, y, sizeof y);
        if (ra != rc || !streq(x, y) || !streq(ea.msg, ec.msg) ||
            (ra == 0 && (a.score != c.score || a.fragmentation != c.fragmentation))) {
                print_error("%s: with the node cache '%s' (score %.17g, fragmentation %.17g, '%s'), without '%s' "
                            "(score %.17g, fragmentation %.17g, '%s')\n",
                            what, y, c.score, c.fragmentation, ec.msg, x, a.score, a.fragmentation, ea.msg);
                failures++;
        }
        return failures;
}

static void test_cases(void **state) {
        (void) state;
        int failures = 0;
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
                const struct fit_case *c = &cases[i];
                struct node_buf b;
                struct mk_fit_node node;
                node_build(&b, c->model, c->allowed, c->gpus, c->n_gpus, &node);
                struct mk_fit_result res;
                memset(&res, 0xAA, sizeof res);
                struct mk_error e = {};
                int r = mk_fit_node(&node, &c->req, MK_FIT_BINPACK, c->gpu_policy, &res, &e);
                char got[256];
                result_format(r, &res, got, sizeof got);

                /* Same answer with capacity tables (every model here has them). */
                struct mk_fit_tables *t = NULL;
                assert_int_equal(mk_fit_tables_new(&b.gpus[0], &t), 0);
                for (size_t k = 0; k < c->n_gpus; k++)
                        b.gpus[k].tables = t;
                struct mk_fit_result rt;
                int q = mk_fit_node(&node, &c->req, MK_FIT_BINPACK, c->gpu_policy, &rt, NULL);
                char got_t[256];
                result_format(q, &rt, got_t, sizeof got_t);
                if (!streq(got, got_t) || (r == 0 && rt.score != res.score)) {
                        print_error("case '%s': tables give '%s' (score %f), without '%s' (score %f)\n", c->what,
                                    got_t, q == 0 ? rt.score : 0, got, r == 0 ? res.score : 0);
                        failures++;
                }
                for (int np = 0; np < _MK_FIT_POLICY_MAX; np++)
                        failures += cache_differences(&node, &c->req, (enum mk_fit_policy) np, c->gpu_policy, c->what);
                mk_fit_tables_free(t);
                if (!streq(got, c->expect)) {
                        print_error("case '%s': expected '%s', got '%s' (%s)\n", c->what, c->expect, got, e.msg);
                        failures++;
                }
                if (r < 0 && !e.msg[0]) {
                        print_error("case '%s': failure without a message\n", c->what);
                        failures++;
                }
                if (r == 0 && (res.score < 0 || res.score > 100 || res.fragmentation < 0 || res.fragmentation > 1)) {
                        print_error("case '%s': score %f / fragmentation %f out of range\n", c->what, res.score,
                                    res.fragmentation);
                        failures++;
                }
        }
        assert_int_equal(failures, 0);
}

/* Every choice is legal: on an available GPU, at one of the profile's
 * placements, overlapping nothing, within slices and counts; distinct GPUs. */
/* Fills each GPU of `b` with random legal instances by fitting random
 * requests; about one GPU in ten unavailable. */
static void random_fill(struct node_buf *b, unsigned *seed) {
        for (size_t gi = 0; gi < MAX_GPUS; gi++) {
                b->gpus[gi].unavailable = (rand_r(seed) % 10) == 0;
                for (int k = 0; k < 6; k++) {
                        struct mk_fit_gpu one = b->gpus[gi];
                        one.unavailable = false;
                        struct mk_fit_node n1 = {.gpus = &one, .n_gpus = 1};
                        static const uint64_t sizes[] = {GIB(9), GIB(19), GIB(39), 0};
                        struct mk_fit_request rq = {.gpus = 1, .mem_mib = sizes[rand_r(seed) % 4],
                                                    .variant = rand_r(seed) % 8 == 0 ? "+me" : NULL};
                        struct mk_fit_result res;
                        if (mk_fit_node(&n1, &rq, MK_FIT_BINPACK, MK_FIT_BINPACK, &res, NULL) == 0)
                                b->used[gi][b->gpus[gi].n_used++] = (struct mk_fit_instance) {
                                        .profile_id = res.choices[0].profile->id,
                                        .slices = res.choices[0].profile->slices,
                                        .placement = res.choices[0].placement,
                                };
                }
                assert_int_equal(mk_fit_gpu_validate(&b->gpus[gi], NULL), 0);
        }
}

static void test_random_states_legal(void **state) {
        (void) state;
        unsigned seed = 12345;
        for (int iter = 0; iter < 3000; iter++) {
                struct node_buf b;
                const char *gpus[MAX_GPUS] = {"", "", "", ""};
                struct mk_fit_node node;
                const struct model *m = iter % 2 ? &a100 : &h100;
                node_build(&b, m, NULL, gpus, MAX_GPUS, &node);
                random_fill(&b, &seed);
                bool pct = rand_r(&seed) % 6 == 0;
                struct mk_fit_request rq = {
                        .gpus = 1 + (unsigned) (rand_r(&seed) % 3),
                        .mem_mib = pct ? 0 : GIB(1 + rand_r(&seed) % 40),
                        .mem_percent = pct ? (unsigned) (rand_r(&seed) % 101) : 0,
                        .cores_percent = (unsigned) (rand_r(&seed) % 3 == 0 ? rand_r(&seed) % 60 : 0),
                        .variant = rand_r(&seed) % 5 == 0 ? "+me" : NULL,
                };
                struct mk_fit_result res, rt;
                enum mk_fit_policy np = iter % 3 ? MK_FIT_BINPACK : MK_FIT_SPREAD;
                enum mk_fit_policy gp = iter % 2 ? MK_FIT_SPREAD : MK_FIT_BINPACK;
                int r = mk_fit_node(&node, &rq, np, gp, &res, NULL);

                /* Tables change nothing but the speed. They are tied to the
                 * profile array, which node_build copied into `b`. */
                _cleanup_(mk_fit_tables_freep) struct mk_fit_tables *t = NULL;
                assert_int_equal(mk_fit_tables_new(&b.gpus[0], &t), 0);
                for (size_t gi = 0; gi < MAX_GPUS; gi++)
                        b.gpus[gi].tables = t;
                int q = mk_fit_node(&node, &rq, np, gp, &rt, NULL);
                char what[64];
                snprintf(what, sizeof what, "iteration %d", iter);
                assert_int_equal(cache_differences(&node, &rq, np, gp, what), 0);
                for (size_t gi = 0; gi < MAX_GPUS; gi++)
                        b.gpus[gi].tables = NULL;
                assert_int_equal(q, r);
                if (r == 0) {
                        char x[256], y[256];
                        result_format(r, &res, x, sizeof x);
                        result_format(q, &rt, y, sizeof y);
                        assert_string_equal(x, y);
                        if (res.score != rt.score || res.fragmentation != rt.fragmentation)
                                fail_msg("iteration %d: score %f/%f, fragmentation %f/%f with and without tables", iter,
                                         rt.score, res.score, rt.fragmentation, res.fragmentation);
                }
                if (r == -ENOSPC)
                        continue;
                assert_int_equal(r, 0);
                assert_int_equal(res.n_choices, rq.gpus);
                for (size_t k = 0; k < res.n_choices; k++) {
                        const struct mk_fit_choice *c = &res.choices[k];
                        assert_true(c->gpu < MAX_GPUS);
                        struct mk_fit_gpu *g = &b.gpus[c->gpu];
                        assert_false(g->unavailable);
                        for (size_t j = 0; j < k; j++)
                                assert_int_not_equal(res.choices[j].gpu, c->gpu);
                        assert_true(c->profile->memory_mib >= rq.mem_mib);
                        if (rq.mem_percent < 100) /* 100: the whole GPU, whose profile has a little less */
                                assert_true(c->profile->memory_mib * 100 >= m->memory_mib * rq.mem_percent);
                        assert_true(mk_fit_profile_cores(g, c->profile) >= rq.cores_percent);
                        bool listed = false;
                        for (size_t i = 0; i < c->profile->n_placements; i++)
                                listed |= c->profile->placements[i].start == c->placement.start &&
                                          c->profile->placements[i].size == c->placement.size;
                        assert_true(listed);
                        g->used = b.used[c->gpu];
                        b.used[c->gpu][g->n_used++] = (struct mk_fit_instance) {
                                .profile_id = c->profile->id,
                                .slices = c->profile->slices,
                                .placement = c->placement,
                        };
                        struct mk_error e = {};
                        if (mk_fit_gpu_validate(g, &e) < 0)
                                fail_msg("iteration %d: illegal choice: %s", iter, e.msg);
                        unsigned me = 0;
                        for (size_t i = 0; i < g->n_used; i++)
                                me += g->used[i].profile_id == 20;
                        assert_true(me <= 1);
                }
        }
}

/* The node score: binpack prefers the node where the pod destroys less (a
 * used GPU's hole over an empty GPU), spread the emptier node. */
static void test_node_policy(void **state) {
        (void) state;
        struct node_buf b1, b2;
        struct mk_fit_node empty, used;
        node_build(&b1, &a100, NULL, (const char *const[]) {"", ""}, 2, &empty);
        node_build(&b2, &a100, NULL, (const char *const[]) {"3g.40gb@4", ""}, 2, &used);
        struct mk_fit_request rq = {.gpus = 1, .mem_mib = GIB(9)};
        struct mk_fit_result re, ru;
        assert_int_equal(mk_fit_node(&empty, &rq, MK_FIT_BINPACK, MK_FIT_BINPACK, &re, NULL), 0);
        assert_int_equal(mk_fit_node(&used, &rq, MK_FIT_BINPACK, MK_FIT_BINPACK, &ru, NULL), 0);
        if (!(ru.score > re.score))
                fail_msg("binpack: used node %f should beat empty node %f", ru.score, re.score);
        assert_int_equal(mk_fit_node(&empty, &rq, MK_FIT_SPREAD, MK_FIT_BINPACK, &re, NULL), 0);
        assert_int_equal(mk_fit_node(&used, &rq, MK_FIT_SPREAD, MK_FIT_BINPACK, &ru, NULL), 0);
        if (!(re.score > ru.score))
                fail_msg("spread: empty node %f should beat used node %f", re.score, ru.score);

        /* Binpack has no utilisation term (docs/scheduler-fit.md §4): a
         * 10 GB pod goes next to a 1g on a half-used node (loses 5 of C)
         * rather than into the last two units of a full one-GPU node (loses
         * 9, node 7/8 full after); with utilisation weighted 0.15 the full
         * node won. */
        struct node_buf b3, b4;
        struct mk_fit_node light, full;
        node_build(&b3, &a100, NULL, (const char *const[]) {"1g.10gb@5", ""}, 2, &light);
        node_build(&b4, &a100, NULL, (const char *const[]) {"3g.40gb@4 1g.20gb@2"}, 1, &full);
        struct mk_fit_result r1, r2;
        assert_int_equal(mk_fit_node(&light, &rq, MK_FIT_BINPACK, MK_FIT_BINPACK, &r1, NULL), 0);
        assert_int_equal(mk_fit_node(&full, &rq, MK_FIT_BINPACK, MK_FIT_BINPACK, &r2, NULL), 0);
        assert_int_equal(r1.choices[0].placement.start, 4);
        if (!(r1.score > r2.score))
                fail_msg("binpack: the node losing less capacity %f should beat the fuller node %f", r1.score,
                         r2.score);
        assert_true(r1.fragmentation == 0);
}

static void test_node_resources(void **state) {
        (void) state;
        struct node_buf b;
        struct mk_fit_node node;
        node_build(&b, &a100, NULL, (const char *const[]) {""}, 1, &node);
        struct mk_fit_node_resources r = {
                .cpu_allocatable_milli = 4000, .cpu_requested_milli = 3500,
                .memory_allocatable_bytes = UINT64_C(1) << 34, .memory_requested_bytes = 0,
        };
        node.resources = &r;
        struct mk_fit_request rq = {.gpus = 1, .mem_mib = GIB(9), .cpu_milli = 1000};
        struct mk_fit_result res;
        struct mk_error e = {};
        assert_int_equal(mk_fit_node(&node, &rq, MK_FIT_BINPACK, MK_FIT_BINPACK, &res, &e), -ENOSPC);
        assert_non_null(strstr(e.msg, "Insufficient cpu"));
        rq.cpu_milli = 500;
        assert_int_equal(mk_fit_node(&node, &rq, MK_FIT_BINPACK, MK_FIT_BINPACK, &res, NULL), 0);
        double busy = res.score;
        r.cpu_requested_milli = 0;
        assert_int_equal(mk_fit_node(&node, &rq, MK_FIT_BINPACK, MK_FIT_BINPACK, &res, NULL), 0);
        if (!(busy > res.score))
                fail_msg("binpack: CPU-busy node %f should beat idle node %f", busy, res.score);
        rq.memory_bytes = (UINT64_C(1) << 34) + 1;
        assert_int_equal(mk_fit_node(&node, &rq, MK_FIT_BINPACK, MK_FIT_BINPACK, &res, &e), -ENOSPC);
        assert_non_null(strstr(e.msg, "Insufficient memory"));
}

static void test_failure_messages(void **state) {
        (void) state;
        struct node_buf b;
        struct mk_fit_node node;
        node_build(&b, &a100, NULL, (const char *const[]) {"7g.80gb@0"}, 1, &node);
        struct mk_fit_request rq = {.gpus = 1, .mem_mib = 12345};
        struct mk_fit_result res = {.n_choices = 99};
        struct mk_error e = {};
        assert_int_equal(mk_fit_node(&node, &rq, MK_FIT_BINPACK, MK_FIT_BINPACK, &res, &e), -ENOSPC);
        assert_non_null(strstr(e.msg, "12345 MiB"));
        assert_int_equal(res.n_choices, 99); /* untouched on failure */
        /* The message is written by hand: every form, exactly as the format
         * it replaced writes it; one too long for a message cut as before. */
        char long_variant[700];
        memset(long_variant, 'v', sizeof(long_variant) - 1);
        long_variant[sizeof(long_variant) - 1] = 0;
        static const struct {
                struct mk_fit_request rq;
                const char *want;
        } forms[] = {
                {{.gpus = 1, .mem_mib = 12345}, "0 of 1 GPUs have a free MIG placement for 12345 MiB, 1 needed"},
                {{.gpus = 2, .mem_percent = 100}, "0 of 1 GPUs have a free MIG placement for a whole GPU, 2 needed"},
                {{.gpus = 1}, "0 of 1 GPUs have a free MIG placement for a whole GPU, 1 needed"},
                {{.gpus = 1, .mem_percent = 30, .cores_percent = 20},
                 "0 of 1 GPUs have a free MIG placement for 30% of GPU memory with cores, 1 needed"},
                {{.gpus = 16, .mem_mib = 10, .variant = "+me"},
                 "0 of 1 GPUs have a free MIG placement for 10 MiB variant +me, 16 needed"},
                {{.gpus = 1, .mem_mib = 10, .variant = ""}, "0 of 1 GPUs have a free MIG placement for 10 MiB, 1 needed"},
                {{.gpus = 2, .mem_mib = 10, .variant = ""}, "0 of 1 GPUs have a free MIG placement for 10 MiB, 2 needed"},
        };
        for (size_t i = 0; i < ELEMENTSOF(forms); i++) {
                e = (struct mk_error) {};
                assert_int_equal(mk_fit_node(&node, &forms[i].rq, MK_FIT_BINPACK, MK_FIT_SPREAD, &res, &e), -ENOSPC);
                assert_int_equal(e.code, -ENOSPC);
                assert_string_equal(e.msg, forms[i].want);
        }
        /* Through a node cache, one memo for every request, each twice (the
         * second time from the request's part the memo keeps; the last two
         * differ only in GPUs asked), into an error holding junk: the same
         * messages, and nothing else of the error set. */
        struct mk_fit_tables *t = NULL;
        assert_int_equal(mk_fit_tables_new(&b.gpus[0], &t), 0);
        b.gpus[0].tables = t;
        struct mk_fit_node_cache nc;
        assert_int_equal(mk_fit_node_cache_update(&node, &nc), 0);
        node.cache = &nc;
        struct mk_fit_memo memo = {};
        for (size_t i = 0; i < 2 * ELEMENTSOF(forms); i++) {
                struct mk_fit_request fr = forms[i / 2].rq;
                fr.memo = &memo;
                memset(&e, 0x5A, sizeof(e));
                assert_int_equal(mk_fit_node(&node, &fr, MK_FIT_BINPACK, MK_FIT_SPREAD, &res, &e), -ENOSPC);
                assert_int_equal(e.code, -ENOSPC);
                assert_string_equal(e.msg, forms[i / 2].want);
                assert_string_equal(e.file, "");
                assert_string_equal(e.field, "");
                assert_int_equal(e.line + e.column, 0);
                assert_int_not_equal(memo.tail_len, 0);
        }
        node.cache = NULL;
        b.gpus[0].tables = NULL;
        mk_fit_tables_free(t);
        rq = (struct mk_fit_request) {.gpus = 1, .mem_mib = 10, .variant = long_variant};
        assert_int_equal(mk_fit_node(&node, &rq, MK_FIT_BINPACK, MK_FIT_SPREAD, &res, &e), -ENOSPC);
        char want[sizeof(e.msg)];
        static const char head[] = "0 of 1 GPUs have a free MIG placement for 10 MiB variant ";
        memcpy(want, head, sizeof(head) - 1);
        memcpy(want + sizeof(head) - 1, long_variant, sizeof(want) - sizeof(head));
        memcpy(want + sizeof(want) - 4, "...", 4); /* cut at the message's size, marked */
        assert_string_equal(e.msg, want);
        assert_int_equal(mk_fit_node(&node, &rq, MK_FIT_BINPACK, MK_FIT_SPREAD, &res, NULL), -ENOSPC);
}

struct frag_case {
        const char *gpu;
        double expect;
};

/* A100 without 1g.20gb/+me: capacity C = 1*M_1g + 2*M_2g + 4*M_3g + 4*M_4g + 8*M_7g + 4*|usable units|. */
static void test_fragmentation(void **state) {
        (void) state;
        static const struct frag_case fc[] = {
                {"", 0},
                {"7g.80gb@0", 0},
                /* free 1-7: C = 6 + 2*2 + 4 + 4*7 usable units = 42; ideal free 0-6: 6 + 6 + 4 + 4 + 4*7 = 48 */
                {"1g.10gb@0", 1 - 42.0 / 48},
                /* free 0-5 and 7: C = 6 + 6 + 4 + 4 + 4*6 = 44 (unit 7 stranded); ideal free 0-6: 48 */
                {"1g.10gb@6", 1 - 44.0 / 48},
                /* free 0-3: C = 4 + 4 + 4 + 4 + 4*4 = 32 = ideal */
                {"3g.40gb@4", 0},
                /* free 7 but no compute slice left: nothing usable either way */
                {"1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 1g.10gb@4 1g.10gb@5 1g.10gb@6", 0},
                /* free 1, 2, 5, 6, 7 with 4 slices: C = 4 (1g only) + 4*4 (unit 7 stranded) = 20;
                 * ideal free 0-4: 4 + 2*2 + 4 + 4 + 4*5 = 36 */
                {"1g.10gb@0 1g.10gb@3 1g.10gb@4", 1 - 20.0 / 36},
        };
        for (size_t i = 0; i < sizeof fc / sizeof fc[0]; i++) {
                struct node_buf b;
                struct mk_fit_node node;
                node_build(&b, &a100, "1g.10gb 2g.20gb 3g.40gb 4g.40gb 7g.80gb", (const char *const[]) {fc[i].gpu}, 1,
                           &node);
                double f = mk_fit_gpu_fragmentation(&b.gpus[0]);
                if (f < fc[i].expect - 1e-9 || f > fc[i].expect + 1e-9)
                        fail_msg("fragmentation of '%s': expected %f, got %f", fc[i].gpu, fc[i].expect, f);
        }
}

static void test_free_placements(void **state) {
        (void) state;
        struct node_buf b;
        struct mk_fit_node node;
        /* allowed[] in this order: 1g, 1g+me, 1g.20gb, 2g, 3g, 4g, 7g */
        node_build(&b, &h100, "1g.10gb 1g.10gb+me 1g.20gb 2g.20gb 3g.40gb 4g.40gb 7g.80gb",
                   (const char *const[]) {"3g.40gb@4 1g.10gb@0"}, 1, &node);
        assert_int_equal(mk_fit_free_placements(&b.gpus[0], &b.allowed[0]), 0x0e);   /* 1g at 1, 2, 3 */
        assert_int_equal(mk_fit_free_placements(&b.gpus[0], &b.allowed[2]), 0x02);   /* 1g.20gb at 2 */
        assert_int_equal(mk_fit_free_placements(&b.gpus[0], &b.allowed[3]), 0x02);   /* 2g at 2 */
        assert_int_equal(mk_fit_free_placements(&b.gpus[0], &b.allowed[4]), 0);      /* 3g: 0 overlaps the 1g */
        assert_int_equal(mk_fit_used_mask(&b.gpus[0]), 0xf1);
        b.gpus[0].slices = 4; /* 3g + 1g hold all 4 slices now */
        assert_int_equal(mk_fit_free_placements(&b.gpus[0], &b.allowed[0]), 0);
        b.gpus[0].unavailable = true;
        b.gpus[0].slices = 7;
        assert_int_equal(mk_fit_free_placements(&b.gpus[0], &b.allowed[0]), 0);
        assert_int_equal(mk_fit_profile_cores(&b.gpus[0], &b.allowed[2]), 20); /* ceil(26 * 100 / 132) */
        assert_int_equal(mk_fit_profile_cores(&b.gpus[0], &b.allowed[3]), 25);
}

static void test_slices_limit(void **state) {
        (void) state;
        struct node_buf b;
        struct mk_fit_node node;
        node_build(&b, &a100, NULL, (const char *const[]) {"2g.20gb@0"}, 1, &node);
        b.gpus[0].slices = 2;
        struct mk_fit_request rq = {.gpus = 1, .mem_mib = GIB(9)};
        struct mk_fit_result res;
        assert_int_equal(mk_fit_node(&node, &rq, MK_FIT_BINPACK, MK_FIT_BINPACK, &res, NULL), -ENOSPC);
        b.gpus[0].slices = 3;
        assert_int_equal(mk_fit_node(&node, &rq, MK_FIT_BINPACK, MK_FIT_BINPACK, &res, NULL), 0);
}

static void test_validate(void **state) {
        (void) state;
        struct node_buf b;
        struct mk_fit_node node;
        struct mk_error e = {};
        node_build(&b, &a100, NULL, (const char *const[]) {"3g.40gb@4 1g.10gb@6"}, 1, &node);
        assert_int_equal(mk_fit_gpu_validate(&b.gpus[0], &e), -EINVAL);
        assert_non_null(strstr(e.msg, "overlaps"));

        node_build(&b, &a100, NULL, (const char *const[]) {"1g.10gb@7"}, 1, &node);
        assert_int_equal(mk_fit_gpu_validate(&b.gpus[0], NULL), 0);
        b.used[0][0].placement = (struct mk_placement) {8, 1};
        assert_int_equal(mk_fit_gpu_validate(&b.gpus[0], &e), -EINVAL);
        assert_non_null(strstr(e.msg, "outside"));
        struct mk_fit_request rq = {.gpus = 1, .mem_mib = GIB(9)};
        struct mk_fit_result res;
        assert_int_equal(mk_fit_node(&node, &rq, MK_FIT_BINPACK, MK_FIT_BINPACK, &res, &e), -EINVAL);

        node_build(&b, &a100, NULL, (const char *const[]) {""}, 1, &node);
        b.gpus[0].memory_units = 4; /* placements past unit 3 no longer fit in the GPU */
        assert_int_equal(mk_fit_gpu_validate(&b.gpus[0], &e), -EINVAL);
        assert_non_null(strstr(e.msg, "outside the GPU's 4 memory units"));
        assert_int_equal(mk_fit_node(&node, &rq, MK_FIT_BINPACK, MK_FIT_BINPACK, &res, NULL), -EINVAL);
        b.gpus[0].memory_units = 0;
        assert_int_equal(mk_fit_gpu_validate(&b.gpus[0], NULL), -EINVAL);
        b.gpus[0].memory_units = 33;
        assert_int_equal(mk_fit_gpu_validate(&b.gpus[0], NULL), -EINVAL);
        b.gpus[0].memory_units = 8;
        b.allowed[1].id = b.allowed[0].id;
        assert_int_equal(mk_fit_gpu_validate(&b.gpus[0], &e), -EINVAL);
        assert_non_null(strstr(e.msg, "twice"));

        struct mk_fit_node big = {.gpus = b.gpus, .n_gpus = MK_FIT_MAX_NODE_GPUS + 1};
        assert_int_equal(mk_fit_node(&big, &rq, MK_FIT_BINPACK, MK_FIT_BINPACK, &res, NULL), -EINVAL);
}

static void test_tables(void **state) {
        (void) state;
        struct node_buf b;
        struct mk_fit_node node;
        node_build(&b, &a100, NULL, (const char *const[]) {"3g.40gb@4"}, 1, &node);
        struct mk_fit_tables *t = NULL;
        assert_int_equal(mk_fit_tables_new(&b.gpus[0], &t), 0); /* `used` is ignored */
        t = mk_fit_tables_free(t);
        assert_null(t);

        /* A base profile whose limit binds before its placements run out. */
        b.allowed[0].max_count = 3; /* 1g.10gb: 7 placements */
        assert_int_equal(mk_fit_tables_new(&b.gpus[0], &t), -EOPNOTSUPP);
        b.allowed[0].max_count = 7;
        b.gpus[0].memory_units = 16; /* fine for a fit, too large for tables */
        assert_int_equal(mk_fit_tables_new(&b.gpus[0], &t), -EOPNOTSUPP);
        b.gpus[0].memory_units = 4; /* placements outside the GPU */
        assert_int_equal(mk_fit_tables_new(&b.gpus[0], &t), -EINVAL);
        b.gpus[0].memory_units = 8;

        /* Tables of another profile array are ignored, not trusted. */
        struct node_buf b2;
        struct mk_fit_node n2;
        node_build(&b2, &a100, "1g.10gb 7g.80gb", (const char *const[]) {""}, 1, &n2);
        assert_int_equal(mk_fit_tables_new(&b2.gpus[0], &t), 0);
        b.gpus[0].tables = t;
        struct mk_fit_request rq = {.gpus = 1, .mem_mib = GIB(19)};
        struct mk_fit_result res;
        assert_int_equal(mk_fit_node(&node, &rq, MK_FIT_BINPACK, MK_FIT_BINPACK, &res, NULL), 0);
        assert_string_equal(res.choices[0].profile->name, "1g.20gb");
        assert_int_equal(res.choices[0].placement.start, 2);
        mk_fit_tables_free(t);
}

/* When a node cache cannot be used it says so and the fit reads the GPUs:
 * no tables, mixed GPUs, no available GPU, a malformed GPU (same error as
 * without), a cache of another GPU array. A refreshed cache follows the
 * node; a full node is rejected with the same message. */
static void test_node_cache(void **state) {
        (void) state;
        struct node_buf b;
        struct mk_fit_node node;
        struct mk_fit_node_cache nc;
        struct mk_fit_result res, ref;
        struct mk_error e = {}, eref = {};
        struct mk_fit_request rq = {.gpus = 1, .mem_mib = GIB(9)};
        node_build(&b, &a100, NULL, (const char *const[]) {"1g.10gb@6", "3g.40gb@4"}, 2, &node);
        assert_int_equal(mk_fit_node_cache_update(&node, &nc), -EOPNOTSUPP); /* no tables */
        node.cache = &nc;
        assert_int_equal(mk_fit_node(&node, &rq, MK_FIT_BINPACK, MK_FIT_BINPACK, &res, NULL), 0);
        assert_string_equal(res.choices[0].profile->name, "1g.10gb");

        _cleanup_(mk_fit_tables_freep) struct mk_fit_tables *t = NULL;
        assert_int_equal(mk_fit_tables_new(&b.gpus[0], &t), 0);
        b.gpus[0].tables = b.gpus[1].tables = t;
        assert_int_equal(mk_fit_node_cache_update(&node, &nc), 0);
        assert_int_equal(mk_fit_node(&node, &rq, MK_FIT_BINPACK, MK_FIT_BINPACK, &res, NULL), 0);
        assert_int_equal(res.choices[0].gpu, 0);
        assert_int_equal(res.choices[0].placement.start, 5);

        /* The GPU changes, the cache is refreshed: the choice follows. */
        b.used[0][b.gpus[0].n_used++] = (struct mk_fit_instance) {.profile_id = 0, .slices = 7, .placement = {0, 8}};
        assert_int_equal(mk_fit_node_cache_update(&node, &nc), 0);
        assert_int_equal(mk_fit_node(&node, &rq, MK_FIT_BINPACK, MK_FIT_BINPACK, &res, NULL), 0);
        assert_int_equal(res.choices[0].gpu, 1);
        assert_int_equal(res.choices[0].placement.start, 3);

        /* Nothing can host a whole GPU: the same rejection, with or without. */
        struct mk_fit_request whole = {.gpus = 1, .mem_percent = 100};
        assert_int_equal(mk_fit_node(&node, &whole, MK_FIT_BINPACK, MK_FIT_BINPACK, &res, &e), -ENOSPC);
        node.cache = NULL;
        assert_int_equal(mk_fit_node(&node, &whole, MK_FIT_BINPACK, MK_FIT_BINPACK, &ref, &eref), -ENOSPC);
        assert_string_equal(e.msg, eref.msg);
        assert_non_null(strstr(e.msg, "0 of 2 GPUs"));

        /* A cache of another array is ignored. */
        struct node_buf b2;
        struct mk_fit_node other;
        node_build(&b2, &a100, NULL, (const char *const[]) {"", ""}, 2, &other);
        other.cache = &nc;
        b2.gpus[0].tables = b2.gpus[1].tables = NULL;
        assert_int_equal(mk_fit_node(&other, &rq, MK_FIT_BINPACK, MK_FIT_BINPACK, &res, NULL), 0);
        assert_int_equal(res.choices[0].gpu, 0);
        assert_int_equal(res.choices[0].placement.start, 5);

        /* Mixed descriptions: another SM count, another profile array. */
        b.gpus[1].multiprocessors = 100;
        assert_int_equal(mk_fit_node_cache_update(&node, &nc), -EOPNOTSUPP);
        b.gpus[1].multiprocessors = b.gpus[0].multiprocessors;
        b.gpus[1].profiles = b2.allowed;
        assert_int_equal(mk_fit_node_cache_update(&node, &nc), -EOPNOTSUPP);
        b.gpus[1].profiles = b.allowed;

        /* No available GPU. */
        b.gpus[0].unavailable = b.gpus[1].unavailable = true;
        assert_int_equal(mk_fit_node_cache_update(&node, &nc), -EOPNOTSUPP);
        b.gpus[0].unavailable = b.gpus[1].unavailable = false;

        /* A malformed GPU: the fit reports it as without a cache. */
        b.used[1][0].placement = (struct mk_placement) {6, 4};
        assert_int_equal(mk_fit_node_cache_update(&node, &nc), -EINVAL);
        node.cache = &nc;
        assert_int_equal(mk_fit_node(&node, &rq, MK_FIT_BINPACK, MK_FIT_BINPACK, &res, &e), -EINVAL);
        assert_non_null(strstr(e.msg, "GPU 1"));

        /* Too many GPUs. */
        struct mk_fit_node big = {.gpus = b.gpus, .n_gpus = MK_FIT_MAX_NODE_GPUS + 1};
        assert_int_equal(mk_fit_node_cache_update(&big, &nc), -EINVAL);
}

/* The first field in which two caches of one node differ, NULL when none. */
/* Where two caches of the same node differ in what a fit reads of the
 * node (not in how they were made: winners, base, GPU array), or NULL. */
static const char *cache_difference(const struct mk_fit_node *node, const struct mk_fit_node_cache *x,
                                    const struct mk_fit_node_cache *y) {
        if (x->usable != y->usable || x->n_gpus != y->n_gpus || x->first != y->first)
                return "the header";
        if (x->hostable != y->hostable || x->total_units != y->total_units || x->used_units != y->used_units ||
            x->cap_sum != y->cap_sum || x->ideal_sum != y->ideal_sum || x->empty_cap != y->empty_cap ||
            x->desc.n_profiles != y->desc.n_profiles || x->desc.profiles != y->desc.profiles ||
            memcmp(x->rank, y->rank, MIN(x->desc.n_profiles, sizeof(x->rank))))
                return "the sums";
        for (size_t gi = 0; gi < node->n_gpus; gi++) {
                const struct mk_fit_node_cache_gpu *a = &x->gpu[gi], *b = &y->gpu[gi];
                if (a->hostable != b->hostable || a->used != b->used || a->cap != b->cap || a->ideal != b->ideal ||
                    a->free_slices != b->free_slices || a->used_units != b->used_units ||
                    a->available != b->available || a->switchable != b->switchable)
                        return "a GPU's state";
        }
        return NULL;
}

/* A pod's containers fitted one after another through caches derived
 * from the choices taken over the node left as it was
 * (mk_fit_node_cache_derive_taken, from the node's cache with winners,
 * +me's instance limits included) answer exactly as without a cache on
 * the node with the instances added: choices, score, fragmentation,
 * message; with or without a request memo (mk_fit_memo: one per request,
 * kept across nodes of both models, and one shared by all requests). The
 * derived cache's sums and GPU states equal those of a cache computed
 * afresh on the node with the instances added, field by field. Random
 * states, mostly one-GPU containers (the path that takes the first
 * cache's winner or runner-up on a GPU that did not change), both GPU
 * policies. */
static void test_derived_cache_sequences(void **state) {
        (void) state;
        unsigned seed = 777;
        unsigned compared = 0, fitted = 0, caches_compared = 0;
        struct mk_fit_memo per_request[4][2] = {}, shared = {};
        /* Also an A100 whose 1g.10gb+me is limited to 3 of its 7 placements: a
         * derived cache counts a limited profile's instances when it may
         * host more than one. */
        static struct model a100_lim;
        a100_lim = a100;
        bool limited = false;
        for (size_t i = 0; i < a100_lim.n_profiles; i++)
                if (streq(a100_lim.profiles[i].name, "1g.10gb+me")) {
                        a100_lim.profiles[i].max_count = 3;
                        limited = true;
                }
        assert_true(limited);
        for (int iter = 0; iter < 3000; iter++) {
                struct node_buf b;
                const char *gpus[MAX_GPUS] = {"", "", "", ""};
                struct mk_fit_node node;
                node_build(&b, iter % 3 == 2 ? &a100_lim : iter % 3 ? &a100 : &h100, NULL, gpus, MAX_GPUS, &node);
                random_fill(&b, &seed);
                _cleanup_(mk_fit_tables_freep) struct mk_fit_tables *t = NULL;
                assert_int_equal(mk_fit_tables_new(&b.gpus[0], &t), 0);
                for (size_t gi = 0; gi < MAX_GPUS; gi++) {
                        if (rand_r(&seed) % 2) /* room for the pod's containers */
                                b.gpus[gi].n_used = 0;
                        b.gpus[gi].tables = t;
                        b.gpus[gi].used = b.used[gi];
                }
                /* `node` gets each container's instances; node0 stays as it
                 * was and is fitted with caches derived from the choices. */
                struct mk_fit_gpu gpus0[MAX_GPUS];
                struct mk_fit_instance used0[MAX_GPUS][8];
                memcpy(gpus0, b.gpus, sizeof(gpus0));
                memcpy(used0, b.used, sizeof(used0));
                for (size_t gi = 0; gi < MAX_GPUS; gi++)
                        gpus0[gi].used = used0[gi];
                struct mk_fit_node node0 = node;
                node0.gpus = gpus0;
                struct mk_fit_node_cache base0, taken_cache, fresh;
                if (mk_fit_node_cache_update(&node0, &base0) < 0)
                        continue; /* no available GPU */
                const struct mk_fit_node_cache *cur = &base0;
                struct mk_fit_choice taken[16];
                size_t n_taken = 0;
                enum mk_fit_policy np = rand_r(&seed) % 2 ? MK_FIT_BINPACK : MK_FIT_SPREAD;
                enum mk_fit_policy gp = rand_r(&seed) % 2 ? MK_FIT_BINPACK : MK_FIT_SPREAD;
                for (int step = 0; step < 4 && cur; step++) {
                        static const uint64_t sizes[] = {GIB(4), GIB(9), GIB(19), GIB(39)};
                        unsigned n_req = rand_r(&seed) % 6 == 0 ? 2 : 1, si = (unsigned) rand_r(&seed) % 4;
                        struct mk_fit_request rq = {
                                .gpus = n_req,
                                .mem_mib = sizes[si],
                                .variant = rand_r(&seed) % 8 == 0 ? "+me" : NULL,
                        };
                        struct mk_fit_result a, c;
                        struct mk_error ea = {}, ec = {};
                        node.cache = NULL;
                        int ra = mk_fit_node(&node, &rq, np, gp, &a, &ea);
                        /* Without a memo, with this request's (kept across nodes, both models), with
                         * one shared by every request (its key must tell them apart). */
                        struct mk_fit_memo *memos[] = {NULL, &per_request[si][rq.variant != NULL],
                                                       &shared};
                        for (size_t mi = 0; mi < ELEMENTSOF(memos); mi++) {
                                rq.memo = memos[mi];
                                ec = (struct mk_error) {};
                                node0.cache = cur;
                                int rc = mk_fit_node(&node0, &rq, np, gp, &c, &ec);
                                node0.cache = NULL;
                                char x[256], y[256];
                                result_format(ra, &a, x, sizeof x);
                                result_format(rc, &c, y, sizeof y);
                                if (ra != rc || !streq(x, y) || !streq(ea.msg, ec.msg) ||
                                    (ra == 0 && (a.score != c.score || a.fragmentation != c.fragmentation)))
                                        fail_msg("iteration %d step %d memo %zu: cache from the choices taken '%s' "
                                                 "(score %.17g, '%s'), without '%s' (score %.17g, '%s')",
                                                 iter, step, mi, y, c.score, ec.msg, x, a.score, ea.msg);
                        }
                        rq.memo = NULL;
                        compared++;
                        if (ra < 0)
                                break;
                        fitted++;
                        for (size_t k = 0; k < a.n_choices; k++) {
                                const struct mk_fit_choice *ch = &a.choices[k];
                                struct mk_fit_gpu *g = &b.gpus[ch->gpu];
                                b.used[ch->gpu][g->n_used++] = (struct mk_fit_instance) {
                                        .profile_id = ch->profile->id,
                                        .slices = ch->profile->slices,
                                        .placement = ch->placement,
                                };
                        }
                        if (n_taken + a.n_choices > ELEMENTSOF(taken)) {
                                cur = NULL;
                                continue;
                        }
                        /* a's profiles point into node's GPUs: node0's are the same arrays */
                        memcpy(taken + n_taken, a.choices, a.n_choices * sizeof(a.choices[0]));
                        n_taken += a.n_choices;
                        assert_int_equal(mk_fit_node_cache_derive_taken(&node0, cur, &a, taken, n_taken, &taken_cache),
                                         0);
                        cur = &taken_cache;
                        /* Field by field: what a cache computed afresh on the node with the
                         * instances added holds. */
                        assert_int_equal(mk_fit_node_cache_update(&node, &fresh), 0);
                        const char *diff = cache_difference(&node, &taken_cache, &fresh);
                        if (diff)
                                fail_msg("iteration %d step %d: the cache derived from the choices differs in %s",
                                         iter, step, diff);
                        caches_compared++;
                }
        }
        print_message("derived caches: %u fits compared, %u placed, %u caches compared field by field\n", compared,
                      fitted, caches_compared);
        assert_true(compared > 5000);
        assert_true(fitted > 3000);
        assert_true(caches_compared > 3000);
}

static bool choices_equal(const struct mk_fit_result *a, const struct mk_fit_result *b) {
        if (a->n_choices != b->n_choices)
                return false;
        for (size_t k = 0; k < a->n_choices; k++) {
                const struct mk_fit_choice *x = &a->choices[k], *y = &b->choices[k];
                if (x->gpu != y->gpu || x->profile != y->profile || x->placement.start != y->placement.start ||
                    x->placement.size != y->placement.size) {
                        print_error("choice %zu: GPU %u/%u, profile %p/%p, placement %u:%u/%u:%u\n", k, x->gpu, y->gpu,
                                    (const void *) x->profile, (const void *) y->profile, x->placement.start,
                                    x->placement.size, y->placement.start, y->placement.size);
                        return false;
                }
        }
        return true;
}

/* Garbage in: never a crash, only 0, -ENOSPC or -EINVAL, and a choice is
 * always one of the chosen profile's own placements on a listed GPU. */
static void test_garbage(void **state) {
        (void) state;
        unsigned seed = 777;
        unsigned fits = 0, nospace = 0, invalid = 0, cached = 0;
        for (int iter = 0; iter < 20000; iter++) {
                struct mk_gi_profile prof[4];
                struct mk_placement pl[4][4];
                struct mk_fit_instance used[2][6];
                struct mk_fit_gpu gpus[2];
                memset(prof, 0, sizeof prof);
                for (int j = 0; j < 4; j++) {
                        prof[j].id = (unsigned) (rand_r(&seed) % 5);
                        prof[j].slices = (unsigned) (rand_r(&seed) % 10);
                        prof[j].max_count = (unsigned) (rand_r(&seed) % 4);
                        prof[j].memory_mib = (uint64_t) (rand_r(&seed) % 5) * 10000;
                        prof[j].multiprocessors = (unsigned) (rand_r(&seed) % 50);
                        prof[j].named = rand_r(&seed) % 10 != 0;
                        prof[j].pname.n_attrs = rand_r(&seed) % 3 ? 0 : (unsigned) (rand_r(&seed) % 7); /* may exceed the array */
                        for (unsigned a = 0; a < MK_PROFILE_ATTRS_MAX; a++)
                                memset(prof[j].pname.attrs[a], 'm', MK_PROFILE_ATTR_MAX); /* no NUL */
                        prof[j].n_placements = (size_t) (rand_r(&seed) % 5);
                        unsigned size = 1u << (rand_r(&seed) % 3);
                        for (size_t i = 0; i < prof[j].n_placements; i++)
                                pl[j][i] = rand_r(&seed) % 24 == 0
                                                   ? (struct mk_placement) {(unsigned) (rand_r(&seed) % 40),
                                                                            (unsigned) (rand_r(&seed) % 10)}
                                                   : (struct mk_placement) {(unsigned) (rand_r(&seed) % (9 - size)) / size * size,
                                                                            size};
                        prof[j].placements = pl[j];
                }
                for (int gi = 0; gi < 2; gi++) {
                        gpus[gi] = (struct mk_fit_gpu) {
                                .profiles = prof,
                                .n_profiles = (size_t) (rand_r(&seed) % 5),
                                .memory_units = rand_r(&seed) % 8 ? 8 : (unsigned) (rand_r(&seed) % 12),
                                .slices = (unsigned) (rand_r(&seed) % 9),
                                .memory_mib = rand_r(&seed) % 7 == 0 ? UINT64_MAX : (uint64_t) (rand_r(&seed) % 90000),
                                .multiprocessors = (unsigned) (rand_r(&seed) % 200),
                                .used = used[gi],
                                .n_used = (size_t) (rand_r(&seed) % 4),
                                .unavailable = rand_r(&seed) % 8 == 0,
                        };
                        for (size_t i = 0; i < gpus[gi].n_used; i++)
                                used[gi][i] = (struct mk_fit_instance) {
                                        .profile_id = (unsigned) (rand_r(&seed) % 5),
                                        .slices = (unsigned) (rand_r(&seed) % (rand_r(&seed) % 8 ? 3 : 100)),
                                        .placement = rand_r(&seed) % 16 ? (struct mk_placement) {(unsigned) (rand_r(&seed) % 8), 1}
                                                                       : (struct mk_placement) {(unsigned) (rand_r(&seed) % 40),
                                                                                                (unsigned) (rand_r(&seed) % 10)},
                                };
                }
                struct mk_fit_tables *t = NULL;
                if (mk_fit_tables_new(&gpus[0], &t) == 0 && rand_r(&seed) % 2)
                        gpus[0].tables = gpus[1].tables = t; /* may not match gpus[1]: must be ignored then */
                struct mk_fit_node node = {.gpus = gpus, .n_gpus = 1 + (size_t) (rand_r(&seed) % 2)};
                struct mk_fit_request rq = {
                        .gpus = rand_r(&seed) % 4 ? 1 : (unsigned) (rand_r(&seed) % 4),
                        .mem_mib = rand_r(&seed) % 3 ? (uint64_t) (rand_r(&seed) % 50000) : 0,
                        .mem_percent = (unsigned) (rand_r(&seed) % 104),
                        .cores_percent = rand_r(&seed) % 3 ? 0 : (unsigned) (rand_r(&seed) % 120),
                        .variant = rand_r(&seed) % 5 == 0 ? "+mmmmmmmmmmmmmmmmmmmm" : rand_r(&seed) % 4 == 0 ? "+me" : NULL,
                };
                struct mk_fit_result res, rc;
                struct mk_error e = {}, ec = {};
                enum mk_fit_policy np = (enum mk_fit_policy) (rand_r(&seed) % 16 == 0 ? 2 : rand_r(&seed) % 2);
                enum mk_fit_policy gp = (enum mk_fit_policy) (rand_r(&seed) % 2);
                int r = mk_fit_node(&node, &rq, np, gp, &res, &e);
                if (r != 0 && r != -ENOSPC && r != -EINVAL)
                        fail_msg("iteration %d: unexpected %d", iter, r);
                /* A node cache of garbage: usable or not, the same answer. */
                struct mk_fit_node_cache nc;
                int u = mk_fit_node_cache_update(&node, &nc);
                if (u != 0 && u != -EOPNOTSUPP && u != -EINVAL)
                        fail_msg("iteration %d: node cache update %d", iter, u);
                cached += u == 0;
                node.cache = &nc;
                int q = mk_fit_node(&node, &rq, np, gp, &rc, &ec);
                node.cache = NULL;
                if (q != r || !streq(e.msg, ec.msg) ||
                    (r == 0 && (!choices_equal(&res, &rc) || res.score != rc.score ||
                                res.fragmentation != rc.fragmentation)))
                {
                        char x[256], y[256];
                        result_format(r, &res, x, sizeof x);
                        result_format(q, &rc, y, sizeof y);
                        fail_msg("iteration %d: with the node cache %d '%s' %.17g '%s', without %d '%s' %.17g '%s'", iter, q,
                                 y, q == 0 ? rc.score : 0, ec.msg, r, x, r == 0 ? res.score : 0, e.msg);
                }
                fits += r == 0;
                nospace += r == -ENOSPC;
                invalid += r == -EINVAL;
                if (r < 0)
                        assert_true(e.msg[0] != 0);
                for (size_t k = 0; r == 0 && k < res.n_choices; k++) {
                        const struct mk_fit_choice *c = &res.choices[k];
                        assert_true(c->gpu < node.n_gpus);
                        assert_false(gpus[c->gpu].unavailable);
                        assert_true(c->profile >= prof && c->profile < prof + 4);
                        bool listed = false;
                        for (size_t i = 0; i < c->profile->n_placements; i++)
                                listed |= c->profile->placements[i].start == c->placement.start &&
                                          c->profile->placements[i].size == c->placement.size;
                        assert_true(listed);
                        assert_true((mk_placement_mask(c->placement) & mk_fit_used_mask(&gpus[c->gpu])) == 0);
                }
                (void) mk_fit_gpu_validate(&gpus[0], &e);
                (void) mk_fit_gpu_fragmentation(&gpus[0]);
                if (gpus[0].n_profiles > 0)
                        (void) mk_fit_free_placements(&gpus[0], &prof[0]);
                mk_fit_tables_free(t);
        }
        /* The generator reaches every outcome. */
        print_message("garbage: %u fits, %u -ENOSPC, %u -EINVAL, %u with a usable node cache\n", fits, nospace, invalid,
                      cached);
        assert_true(fits > 300 && nospace > 300 && invalid > 300 && cached > 300);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_cases),
                cmocka_unit_test(test_random_states_legal),
                cmocka_unit_test(test_node_policy),
                cmocka_unit_test(test_node_resources),
                cmocka_unit_test(test_failure_messages),
                cmocka_unit_test(test_fragmentation),
                cmocka_unit_test(test_free_placements),
                cmocka_unit_test(test_slices_limit),
                cmocka_unit_test(test_validate),
                cmocka_unit_test(test_tables),
                cmocka_unit_test(test_node_cache),
                cmocka_unit_test(test_derived_cache_sequences),
                cmocka_unit_test(test_garbage),
        };
        return cmocka_run_group_tests(tests, setup, NULL);
}

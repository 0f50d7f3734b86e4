/* Unit tests for sched/memo: a node's memo (hits, misses, reasons kept or
 * not, round robin over the slots, forget) and the interning of request
 * shapes (one id per shape, never reused after the table starts over). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/macro.h"
#include "sched/memo.h"
#include "sched/request.h"

static void test_memo(void **state) {
        (void) state;
        struct mk_sched_memo m = {0};
        int r = 1, pri = -1;
        char reason[64] = "";
        assert_false(mk_sched_memo_get(&m, 5, &r, &pri, reason, sizeof(reason)));
        mk_sched_memo_put(&m, 5, 0, 7, NULL);
        assert_true(mk_sched_memo_get(&m, 5, &r, &pri, reason, sizeof(reason)));
        assert_int_equal(r, 0);
        assert_int_equal(pri, 7);
        /* A failure kept without its reason (a prioritize) answers only
         * callers that want no reason. */
        mk_sched_memo_put(&m, 6, -ENOSPC, 0, NULL);
        assert_false(mk_sched_memo_get(&m, 6, &r, &pri, reason, sizeof(reason)));
        assert_true(mk_sched_memo_get(&m, 6, &r, &pri, reason, 0));
        assert_int_equal(r, -ENOSPC);
        /* With its reason, cut to the caller's buffer. */
        mk_sched_memo_put(&m, 6, -ENOSPC, 0, "no GPU has 40000 MiB free");
        assert_true(mk_sched_memo_get(&m, 6, &r, &pri, reason, sizeof(reason)));
        assert_string_equal(reason, "no GPU has 40000 MiB free");
        char small[6];
        assert_true(mk_sched_memo_get(&m, 6, &r, &pri, small, sizeof(small)));
        assert_string_equal(small, "no GP");
        /* A shape's first failure keeps no reason (a filter's reasons are
         * copied from its second decision on the node on). */
        mk_sched_memo_put(&m, 7, -ENOSPC, 0, "first");
        assert_false(mk_sched_memo_get(&m, 7, &r, &pri, reason, sizeof(reason)));
        assert_true(mk_sched_memo_get(&m, 7, &r, &pri, reason, 0));
        mk_sched_memo_put(&m, 7, -ENOSPC, 0, "second");
        assert_true(mk_sched_memo_get(&m, 7, &r, &pri, reason, sizeof(reason)));
        assert_string_equal(reason, "second");
        /* Slots: the oldest goes when a fifth shape comes. */
        mk_sched_memo_forget(&m);
        assert_false(mk_sched_memo_get(&m, 5, &r, &pri, reason, 0));
        for (uint64_t s = 1; s <= MK_SCHED_MEMO_SLOTS + 1; s++)
                mk_sched_memo_put(&m, s, 0, (int) s, NULL);
        size_t kept = 0;
        for (uint64_t s = 1; s <= MK_SCHED_MEMO_SLOTS + 1; s++)
                kept += mk_sched_memo_get(&m, s, &r, &pri, reason, 0);
        assert_int_equal(kept, MK_SCHED_MEMO_SLOTS);
        assert_true(mk_sched_memo_get(&m, MK_SCHED_MEMO_SLOTS + 1, &r, &pri, reason, 0));
        assert_int_equal(pri, MK_SCHED_MEMO_SLOTS + 1);
        /* Busy (another reader filling it): a miss, and a put is skipped. */
        assert_false(atomic_flag_test_and_set(&m.busy));
        assert_false(mk_sched_memo_get(&m, MK_SCHED_MEMO_SLOTS + 1, &r, &pri, reason, 0));
        mk_sched_memo_put(&m, 99, 0, 1, NULL);
        atomic_flag_clear(&m.busy);
        assert_false(mk_sched_memo_get(&m, 99, &r, &pri, reason, 0));
        mk_sched_memo_done(&m);
}

static void test_shapes(void **state) {
        (void) state;
        struct mk_sched_shapes sh;
        assert_int_equal(mk_sched_shapes_init(&sh), 0);
        struct mk_pod_request *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
        assert_non_null(a);
        assert_non_null(b);
        a->n_containers = 1;
        a->containers[0] = (struct mk_pod_request_container) {.index = 0, .gpus = 1, .mem_mib = 9000};
        *b = *a;
        uint64_t ia = mk_sched_shape_id(&sh, a);
        assert_true(ia != 0);
        assert_true(mk_sched_shape_id(&sh, b) == ia);
        /* Anything a decision reads makes another shape; strings cannot be
         * forged into one another by their separators. */
        b->containers[0].mem_mib = 9001;
        uint64_t ib = mk_sched_shape_id(&sh, b);
        assert_true(ib != 0 && ib != ia);
        *b = *a;
        snprintf(b->use_types, sizeof(b->use_types), "a|1:b");
        uint64_t ic = mk_sched_shape_id(&sh, b);
        *b = *a;
        snprintf(b->use_types, sizeof(b->use_types), "a");
        snprintf(b->nouse_types, sizeof(b->nouse_types), "b");
        uint64_t id = mk_sched_shape_id(&sh, b);
        assert_true(ic != id && ic != ia && id != ia);
        /* Past the table's cap it starts over with new ids: an old id never comes back. */
        uint64_t last = 0;
        for (unsigned i = 0; i < MK_SCHED_MEMO_MAX_SHAPES + 10; i++) {
                *b = *a;
                b->cpu_milli = 1000 + i;
                last = mk_sched_shape_id(&sh, b);
                assert_true(last != 0);
        }
        assert_true(sh.ids.n <= MK_SCHED_MEMO_MAX_SHAPES);
        uint64_t again = mk_sched_shape_id(&sh, a);
        assert_true(again != ia && again > last);
        free(a);
        free(b);
        mk_sched_shapes_done(&sh);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_memo),
                cmocka_unit_test(test_shapes),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}

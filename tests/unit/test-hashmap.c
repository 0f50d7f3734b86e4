/* Unit tests for base/hashmap: put, get, remove, growth past many doublings,
 * keys that collide in a small table, foreach, clear with a destructor. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hashmap.h"
#include "base/macro.h"

#pragma GCC diagnostic ignored "-Wunused-parameter"

static void test_basic(void **state) {
        struct mk_hashmap m = {0};
        int a = 1, b = 2;
        assert_null(mk_hashmap_get(&m, "x"));
        assert_null(mk_hashmap_remove(&m, "x"));
        assert_int_equal(mk_hashmap_put(&m, "x", &a), 0);
        assert_int_equal(mk_hashmap_put(&m, "", &b), 0); /* the empty key is a key */
        assert_int_equal(mk_hashmap_put(&m, "x", &b), -EEXIST);
        assert_int_equal(m.n, 2);
        assert_ptr_equal(mk_hashmap_get(&m, "x"), &a);
        assert_ptr_equal(mk_hashmap_get(&m, ""), &b);
        assert_null(mk_hashmap_get(&m, "X"));
        assert_ptr_equal(mk_hashmap_remove(&m, "x"), &a);
        assert_null(mk_hashmap_get(&m, "x"));
        assert_int_equal(m.n, 1);
        mk_hashmap_clear(&m, NULL);
        assert_int_equal(m.n, 0);
        assert_null(m.buckets);
        assert_null(mk_hashmap_get(&m, ""));
        mk_hashmap_clear(NULL, NULL);
}

static int count_fn(const char *key, void *value, void *userdata) {
        size_t *n = userdata;
        char want[32];
        snprintf(want, sizeof(want), "node-%d", *(int *) value);
        if (!streq(key, want))
                return -EINVAL;
        (*n)++;
        return 0;
}

static int stop_fn(const char *key, void *value, void *userdata) {
        return 7;
}

/* 10,000 keys: the table doubles from 64 buckets many times; every key
 * stays reachable, removal of half leaves the other half. */
static void test_many(void **state) {
        enum { N = 10000 };
        struct mk_hashmap m = {0};
        int *vals = calloc(N, sizeof(*vals));
        assert_non_null(vals);
        char key[32];
        for (int i = 0; i < N; i++) {
                vals[i] = i;
                snprintf(key, sizeof(key), "node-%d", i);
                assert_int_equal(mk_hashmap_put(&m, key, &vals[i]), 0);
        }
        assert_int_equal(m.n, N);
        assert_true(m.n_buckets >= N);
        assert_int_equal(m.n_buckets & (m.n_buckets - 1), 0);
        size_t seen = 0;
        assert_int_equal(mk_hashmap_foreach(&m, count_fn, &seen), 0);
        assert_int_equal(seen, N);
        assert_int_equal(mk_hashmap_foreach(&m, stop_fn, NULL), 7);
        for (int i = 0; i < N; i += 2) {
                snprintf(key, sizeof(key), "node-%d", i);
                assert_ptr_equal(mk_hashmap_remove(&m, key), &vals[i]);
        }
        for (int i = 0; i < N; i++) {
                snprintf(key, sizeof(key), "node-%d", i);
                if (i % 2)
                        assert_ptr_equal(mk_hashmap_get(&m, key), &vals[i]);
                else
                        assert_null(mk_hashmap_get(&m, key));
        }
        assert_int_equal(m.n, N / 2);
        mk_hashmap_clear(&m, NULL);
        free(vals);
}

/* Values freed by clear (ASan checks none leaks or is freed twice). */
static void test_clear_frees(void **state) {
        struct mk_hashmap m = {0};
        char key[16];
        for (int i = 0; i < 100; i++) {
                snprintf(key, sizeof(key), "k%d", i);
                assert_int_equal(mk_hashmap_put(&m, key, strdup(key)), 0);
        }
        free(mk_hashmap_remove(&m, "k5"));
        mk_hashmap_clear(&m, free);
        assert_int_equal(m.n, 0);
        /* usable again after clear */
        assert_int_equal(mk_hashmap_put(&m, "again", &m), 0);
        assert_ptr_equal(mk_hashmap_get(&m, "again"), &m);
        mk_hashmap_clear(&m, NULL);
}

static void test_hash(void **state) {
        /* FNV-1a 64 test vectors (Fowler, Noll, Vo: "FNV hash" reference page). */
        assert_true(mk_hash_str("") == 0xcbf29ce484222325ull);
        assert_true(mk_hash_str("a") == 0xaf63dc4c8601ec8cull);
        assert_true(mk_hash_str("foobar") == 0x85944171f73967e8ull);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_basic),
                cmocka_unit_test(test_many),
                cmocka_unit_test(test_clear_frees),
                cmocka_unit_test(test_hash),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests for plugin/dynamic/podres: the kubelet's PodResources List
 * answer, counted before protobuf-c decodes it. Answers written here in the
 * wire format, as a kubelet 1.21+ sends them (one device entry per device
 * ID and NUMA node, with its topology; CPU IDs and memory, which the proto
 * of ours leaves out): a heavy but real node decodes; answers of many tiny
 * entries are refused by the count that is over, at each bound and one past
 * it, without the memory decoding them would take; one key a container over
 * kubelet's entries of one ID each. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "base/error.h"
#include "base/macro.h"
#include "plugin/dynamic/podres.h"
#include "plugin/pb-scan.h"

#define OURS "nvidia.com/mig-1g.10gb"

/* A growing buffer of wire bytes; allocation failure fails the test. */
struct wire {
        uint8_t *p;
        size_t len, cap;
};

static void put(struct wire *w, const void *data, size_t n) {
        if (w->len + n > w->cap) {
                size_t cap = w->cap ? w->cap : 64;
                while (cap < w->len + n)
                        cap *= 2;
                w->p = realloc(w->p, cap);
                assert_non_null(w->p);
                w->cap = cap;
        }
        if (n)
                memcpy(w->p + w->len, data, n);
        w->len += n;
}

static void put_varint(struct wire *w, uint64_t v) {
        uint8_t b[10];
        size_t n = 0;
        do {
                b[n] = (uint8_t) (v & 0x7f);
                v >>= 7;
                if (v)
                        b[n] |= 0x80;
                n++;
        } while (v);
        put(w, b, n);
}

/* Field f as a length-delimited value (a string or a message). */
static void put_len(struct wire *w, uint32_t f, const void *data, size_t n) {
        put_varint(w, (uint64_t) f << 3 | 2);
        put_varint(w, n);
        put(w, data, n);
}

static void put_str(struct wire *w, uint32_t f, const char *s) {
        put_len(w, f, s, strlen(s));
}

/* Field f holding message m, which is emptied for the next one. */
static void put_msg(struct wire *w, uint32_t f, struct wire *m) {
        put_len(w, f, m->p, m->len);
        m->len = 0;
}

static void put_uint(struct wire *w, uint32_t f, uint64_t v) {
        put_varint(w, (uint64_t) f << 3);
        put_varint(w, v);
}

static void wire_done(struct wire *w) {
        free(w->p);
        *w = (struct wire){ 0 };
}

/* n copies of the two bytes of an empty field f (message or string). */
static void put_empty(struct wire *w, uint32_t f, size_t n) {
        const uint8_t e[2] = { (uint8_t) (f << 3 | 2), 0 };
        for (size_t i = 0; i < n; i++)
                put(w, e, 2);
}

/* A node of `pods` pods of 4 containers, each with 8 devices of another
 * resource on NUMA node i % 2, 16 CPU IDs and one memory entry; every
 * tenth pod's first container holds two devices of ours (two entries). */
static void real_node(struct wire *out, size_t pods) {
        struct wire pod = { 0 }, ctr = { 0 }, dev = { 0 }, topo = { 0 }, numa = { 0 }, mem = { 0 }, cpus = { 0 };
        char s[96];
        for (size_t p = 0; p < pods; p++) {
                snprintf(s, sizeof(s), "worker-%zu-7f9c8d6b5-x2k4q", p);
                put_str(&pod, 1, s);
                put_str(&pod, 2, p % 10 ? "team-a" : "inference");
                for (size_t c = 0; c < 4; c++) {
                        snprintf(s, sizeof(s), "container-%zu", c);
                        put_str(&ctr, 1, s);
                        size_t ours = p % 10 == 0 && c == 0 ? 2 : 0;
                        for (size_t d = 0; d < 8 + ours; d++) {
                                put_uint(&numa, 1, d % 2);
                                put_msg(&topo, 1, &numa);
                                put_str(&dev, 1, d < ours ? OURS : "example.com/nic");
                                if (d < ours)
                                        snprintf(s, sizeof(s), "MIG-%08zx-1c2d-4e5f-8a9b-0c1d2e3f4a5b::%zu", p, d);
                                else
                                        snprintf(s, sizeof(s), "nic-%zu-%zu-%zu", p, c, d);
                                put_str(&dev, 2, s);
                                put_msg(&dev, 3, &topo);
                                put_msg(&ctr, 2, &dev);
                        }
                        for (size_t i = 0; i < 16; i++) /* cpu_ids = 3, packed */
                                put_varint(&cpus, 16 * c + i);
                        put_msg(&ctr, 3, &cpus);
                        put_str(&mem, 1, "memory"); /* memory = 4 */
                        put_uint(&mem, 2, (uint64_t) 8 << 30);
                        put_msg(&ctr, 4, &mem);
                        put_msg(&pod, 3, &ctr);
                }
                put_msg(out, 1, &pod);
        }
        wire_done(&pod);
        wire_done(&ctr);
        wire_done(&dev);
        wire_done(&topo);
        wire_done(&numa);
        wire_done(&mem);
        wire_done(&cpus);
}

static void test_real_node(void **state) {
        (void) state;
        struct wire w = { 0 };
        size_t pods = 750; /* the most pods a managed offering runs on one node */
        real_node(&w, pods);
        struct mk_dp_held *held = NULL;
        size_t n = 0;
        struct mk_error e = { 0 };
        static const uint32_t path[] = { 1, 3, 2, 2 };
        struct mk_pb_path_counts c;
        assert_int_equal(mk_pb_scan_path(w.p, w.len, path, 4, &c, NULL), 0);
        int r = mk_dp_podres_decode(w.p, w.len, OURS, &held, &n, &e);
        printf("a node of %zu pods: %zu bytes, %zu fields, r %d (%s)\n", pods, w.len, c.fields, r, e.msg);
        assert_true(c.fields < MK_DP_PODRES_MAX_FIELDS / 4);
        assert_int_equal(r, 0);
        assert_int_equal(n, pods / 10);
        for (size_t i = 0; i < n; i++) {
                char name[64], key[160];
                snprintf(name, sizeof(name), "worker-%zu-7f9c8d6b5-x2k4q", 10 * i);
                assert_string_equal(held[i].name, name);
                assert_string_equal(held[i].namespace, "inference");
                /* one key for the container's two entries of ours (kubelet's one ID each) */
                assert_int_equal(held[i].n_keys, 1);
                snprintf(key, sizeof(key), "MIG-%08zx-1c2d-4e5f-8a9b-0c1d2e3f4a5b::0,MIG-%08zx-1c2d-4e5f-8a9b-0c1d2e3f4a5b::1",
                         10 * i, 10 * i);
                assert_string_equal(held[i].keys[0], key);
        }
        mk_dp_held_free(held, n);
        wire_done(&w);
}

/* A device entry of `resource` with ids (NULL-terminated), on NUMA node numa (-1: no topology). */
static void put_entry(struct wire *ctr, const char *resource, const char *const *ids, int numa) {
        struct wire dev = { 0 }, topo = { 0 }, node = { 0 };
        put_str(&dev, 1, resource);
        for (size_t i = 0; ids[i]; i++)
                put_str(&dev, 2, ids[i]);
        if (numa >= 0) {
                put_uint(&node, 1, (uint64_t) numa);
                put_msg(&topo, 1, &node);
                put_msg(&dev, 3, &topo);
        }
        put_msg(ctr, 2, &dev);
        wire_done(&dev);
        wire_done(&topo);
        wire_done(&node);
}

static void put_pod(struct wire *w, const char *name, struct wire *ctr) {
        struct wire pod = { 0 };
        put_str(&pod, 1, name);
        put_str(&pod, 2, "ns");
        put_msg(&pod, 3, ctr);
        put_msg(w, 1, &pod);
        wire_done(&pod);
}

/* One key a container, over all its entries of the resource, in both of
 * kubelet's forms; a device on two NUMA nodes counted once; more than 16
 * ids of ours: not a container an Allocate of ours answered. */
static void test_container_keys(void **state) {
        (void) state;
        struct wire w = { 0 }, ctr = { 0 };
        /* kubelet 1.21+: an entry per id and NUMA node, another resource between */
        put_entry(&ctr, OURS, (const char *const[]){ "MIG-b", NULL }, 0);
        put_entry(&ctr, "example.com/nic", (const char *const[]){ "nic-0", NULL }, 0);
        put_entry(&ctr, OURS, (const char *const[]){ "MIG-a", NULL }, 0);
        put_entry(&ctr, OURS, (const char *const[]){ "MIG-a", NULL }, 1);
        put_pod(&w, "new-kubelet", &ctr);
        /* kubelet 1.20: one entry with the resource's ids */
        put_entry(&ctr, OURS, (const char *const[]){ "MIG-b", "MIG-a", NULL }, -1);
        put_pod(&w, "old-kubelet", &ctr);
        /* 17 ids of ours, in entries of one */
        char ids[17][16];
        for (size_t i = 0; i < 17; i++) {
                snprintf(ids[i], sizeof(ids[i]), "MIG-%zu", i);
                put_entry(&ctr, OURS, (const char *const[]){ ids[i], NULL }, (int) (i % 2));
        }
        put_pod(&w, "seventeen", &ctr);
        /* 16 ids, each on two NUMA nodes: 32 entries, 16 ids */
        for (size_t i = 0; i < 32; i++)
                put_entry(&ctr, OURS, (const char *const[]){ ids[i / 2], NULL }, (int) (i % 2));
        put_pod(&w, "sixteen", &ctr);
        struct mk_dp_held *held = NULL;
        size_t n = 0;
        struct mk_error e = { 0 };
        assert_int_equal(mk_dp_podres_decode(w.p, w.len, OURS, &held, &n, &e), 0);
        assert_int_equal(n, 3);
        assert_string_equal(held[0].name, "new-kubelet");
        assert_int_equal(held[0].n_keys, 1);
        assert_string_equal(held[0].keys[0], "MIG-a,MIG-b");
        assert_string_equal(held[1].name, "old-kubelet");
        assert_int_equal(held[1].n_keys, 1);
        assert_string_equal(held[1].keys[0], "MIG-a,MIG-b");
        assert_string_equal(held[2].name, "sixteen");
        assert_int_equal(held[2].n_keys, 1);
        assert_non_null(strstr(held[2].keys[0], "MIG-0,MIG-1,MIG-10,"));
        mk_dp_held_free(held, n);
        wire_done(&w);
        wire_done(&ctr);
}

/* decode() refuses buf with -E2BIG and a message holding `msg`. */
static void refused(const struct wire *w, const char *msg) {
        struct mk_dp_held *held = NULL;
        size_t n = 7;
        struct mk_error e = { 0 };
        int r = mk_dp_podres_decode(w->p, w->len, OURS, &held, &n, &e);
        printf("%zu bytes: r %d (%s)\n", w->len, r, e.msg);
        assert_int_equal(r, -E2BIG);
        assert_non_null(strstr(e.msg, msg));
        assert_null(held);
        assert_int_equal(n, 7);
}

static void accepted(const struct wire *w) {
        struct mk_dp_held *held = NULL;
        size_t n = 7;
        struct mk_error e = { 0 };
        int r = mk_dp_podres_decode(w->p, w->len, OURS, &held, &n, &e);
        if (r < 0)
                printf("%zu bytes: r %d (%s)\n", w->len, r, e.msg);
        assert_int_equal(r, 0);
        assert_int_equal(n, 0); /* nothing of ours */
        mk_dp_held_free(held, n);
}

/* Each bound holds at its value and refuses one more, naming the count. */
static void test_bounds(void **state) {
        (void) state;
        struct wire w = { 0 }, pod = { 0 }, ctr = { 0 }, dev = { 0 };
        put_empty(&w, 1, MK_DP_PODRES_MAX_PODS);
        accepted(&w);
        put_empty(&w, 1, 1);
        refused(&w, "4097 pods in the answer, at most 4096");

        w.len = 0;
        put_empty(&pod, 3, MK_DP_PODRES_MAX_CONTAINERS);
        put_msg(&w, 1, &pod);
        accepted(&w);
        w.len = 0;
        put_empty(&pod, 3, MK_DP_PODRES_MAX_CONTAINERS + 1);
        put_msg(&w, 1, &pod);
        refused(&w, "1025 containers in one pod, at most 1024");

        for (size_t extra = 0; extra < 2; extra++) {
                w.len = 0;
                put_empty(&ctr, 2, MK_DP_PODRES_MAX_DEVICES + extra);
                put_msg(&pod, 3, &ctr);
                put_msg(&w, 1, &pod);
                if (!extra)
                        accepted(&w);
                else
                        refused(&w, "16385 device entries in one container, at most 16384");
        }

        for (size_t extra = 0; extra < 2; extra++) {
                w.len = 0;
                put_str(&dev, 1, OURS);
                put_empty(&dev, 2, MK_DP_PODRES_MAX_IDS + extra);
                put_msg(&ctr, 2, &dev);
                put_msg(&pod, 3, &ctr);
                put_str(&pod, 1, "p");
                put_str(&pod, 2, "ns");
                put_msg(&w, 1, &pod);
                if (!extra)
                        accepted(&w); /* empty IDs: no key of ours */
                else
                        refused(&w, "4097 device IDs in one device entry, at most 4096");
        }

        /* every level within its bound, the fields in all at theirs: 4096
         * pods of one container of 126 entries are 4096 * (1 + 1 + 126) =
         * 524,288; one unknown varint field more is one too many */
        w.len = 0;
        for (size_t p = 0; p < MK_DP_PODRES_MAX_PODS; p++) {
                put_empty(&ctr, 2, 126);
                put_msg(&pod, 3, &ctr);
                put_msg(&w, 1, &pod);
        }
        accepted(&w);
        put_uint(&w, 9, 1);
        refused(&w, "524289 fields in the answer, at most 524288");
        wire_done(&w);
        wire_done(&pod);
        wire_done(&ctr);
        wire_done(&dev);
}

static long peak_rss_kib(void) {
        struct rusage u;
        assert_int_equal(getrusage(RUSAGE_SELF, &u), 0);
        return u.ru_maxrss;
}

/* 8 MB of empty device entries in one container: protobuf-c would take
 * some 300 MB to decode them (a message of 48 bytes, its allocation and a
 * pointer each); the count refuses them with next to no memory. */
static void test_many_tiny(void **state) {
        (void) state;
        size_t n = 4u << 20;
        struct wire w = { 0 }, pod = { 0 }, ctr = { 0 };
        ctr.p = malloc(2 * n);
        assert_non_null(ctr.p);
        ctr.cap = 2 * n;
        put_empty(&ctr, 2, n);
        put_msg(&pod, 3, &ctr);
        wire_done(&ctr);
        put_msg(&w, 1, &pod);
        wire_done(&pod);
        long before = peak_rss_kib();
        refused(&w, "4194304 device entries in one container, at most 16384");
        long grown = peak_rss_kib() - before;
        printf("peak RSS grew by %ld KiB\n", grown);
        assert_true(grown < 32 * 1024);
        wire_done(&w);

        /* many pods' worth of empty pods: the same memory, refused */
        put_empty(&w, 1, n);
        refused(&w, "4194304 pods in the answer, at most 4096");
        wire_done(&w);
}

static void test_malformed(void **state) {
        (void) state;
        /* a pod whose length runs past the answer, and a container as a varint */
        static const uint8_t past[] = { 0x0a, 0x05, 0x0a, 0x00 }, varint[] = { 0x0a, 0x02, 0x18, 0x01 };
        struct mk_dp_held *held = NULL;
        size_t n = 0;
        struct mk_error e = { 0 };
        assert_int_equal(mk_dp_podres_decode(past, sizeof(past), OURS, &held, &n, &e), -EINVAL);
        assert_non_null(strstr(e.msg, "PodResources List: cannot decode the answer: length 5 at byte 0"));
        assert_int_equal(mk_dp_podres_decode(varint, sizeof(varint), OURS, &held, &n, &e), -EINVAL);
        assert_non_null(strstr(e.msg, "field 3 at byte 2 has wire type 0, not a message"));
        /* empty: no pods */
        assert_int_equal(mk_dp_podres_decode((const uint8_t *) "", 0, OURS, &held, &n, &e), 0);
        assert_int_equal(n, 0);
        mk_dp_held_free(held, n);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_real_node),
                cmocka_unit_test(test_container_keys),
                cmocka_unit_test(test_bounds),
                cmocka_unit_test(test_many_tiny),
                cmocka_unit_test(test_malformed),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}

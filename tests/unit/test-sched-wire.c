/* Unit tests for sched/wire: the NodeNames scan of a raw body (what it
 * takes, what it leaves to jansson), reading ExtenderArgs (pod,
 * candidates, their errors), the answer writers (json_t and text agree,
 * exact bytes), JSON string escaping, and ExtenderBindingArgs. The scan's
 * equality with the jansson path on whole requests is in test-sched.c
 * (test_body_text) and tests/fuzz/fuzz-sched-body.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/macro.h"
#include "sched/decide.h"
#include "sched/request.h"
#include "sched/wire.h"
#include "spec/sched-config.h"

static char *dumps(json_t *v) {
        char *s = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
        json_decref(v);
        return s;
}

static json_t *load(const char *text) {
        json_error_t je;
        json_t *j = json_loads(text, 0, &je);
        if (!j)
                fail_msg("bad test JSON '%s': %s", text, je.text);
        return j;
}

static void test_scan_names(void **state) {
        (void) state;
        static const struct {
                const char *body;
                bool found;
                size_t n;
                const char *names; /* joined by ',' */
        } cases[] = {
                {"{\"NodeNames\":[\"n1\",\"n2\"]}", true, 2, "n1,n2"},
                {" {\"Pod\":{\"NodeNames\":[\"x\"]},\"NodeNames\" : [ \"a\" ,\"b-c.d\" ] }", true, 2, "a,b-c.d"},
                {"{\"NodeNames\":[]}", true, 0, ""},
                {"{\"x\":\"\\\"NodeNames\\\":[\",\"NodeNames\":[\"n\"]}", true, 1, "n"},
                {"{\"nodenames\":[\"n1\"]}", false, 0, NULL},          /* another spelling: jansson's */
                {"{\"NodeNames\":[\"n 1\"]}", false, 0, NULL},         /* not a plain name */
                {"{\"NodeNames\":[\"n\\u0031\"]}", false, 0, NULL},  /* an escape */
                {"{\"NodeNames\":[\"\"]}", false, 0, NULL},            /* empty */
                {"{\"NodeNames\":[\"n1\",]}", false, 0, NULL},
                {"{\"NodeNames\":[1]}", false, 0, NULL},
                {"{\"NodeNames\":null}", false, 0, NULL},
                {"[{\"NodeNames\":[\"n1\"]}]", false, 0, NULL},     /* not an object */
                {"{\"NodeNames\":[\"n1\"", false, 0, NULL},          /* cut */
                {"{\"a\":\"unterminated", false, 0, NULL},
                {"", false, 0, NULL},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                struct mk_sched_names pn = {0};
                bool found = mk_sched_scan_names(cases[i].body, strlen(cases[i].body), &pn);
                if (found != cases[i].found)
                        fail_msg("'%s': found %d, want %d", cases[i].body, found, cases[i].found);
                if (!found)
                        continue;
                char joined[256] = "";
                for (size_t k = 0; k < pn.n; k++) {
                        assert_int_equal(pn.cands[k].len, strlen(pn.cands[k].name));
                        assert_null(pn.cands[k].object);
                        strncat(joined, pn.cands[k].name, sizeof(joined) - strlen(joined) - 2);
                        if (k + 1 < pn.n)
                                strcat(joined, ",");
                }
                if (pn.n != cases[i].n || !streq(joined, cases[i].names))
                        fail_msg("'%s': %zu names '%s', want %zu '%s'", cases[i].body, pn.n, joined, cases[i].n,
                                 cases[i].names);
                /* [start, end) is the array, brackets included. */
                assert_int_equal(cases[i].body[pn.start], '[');
                assert_int_equal(cases[i].body[pn.end - 1], ']');
                mk_sched_names_done(&pn);
        }
        /* More names than MK_MAX_EXTENDER_NODES: left to jansson (which then refuses them). */
        size_t n = MK_MAX_EXTENDER_NODES + 1, cap = n * 4 + 32;
        char *big = malloc(cap), *p = big;
        assert_non_null(big);
        p += sprintf(p, "{\"NodeNames\":[");
        for (size_t k = 0; k < n; k++)
                p += sprintf(p, k ? ",\"n\"" : "\"n\"");
        p += sprintf(p, "]}");
        struct mk_sched_names pn = {0};
        assert_false(mk_sched_scan_names(big, (size_t) (p - big), &pn));
        /* Exactly the limit, names of every length the list grows through: all read. */
        free(big);
        cap = (size_t) MK_MAX_EXTENDER_NODES * 8 + 64;
        p = big = malloc(cap);
        assert_non_null(big);
        p += sprintf(p, "{\"NodeNames\":[");
        for (size_t k = 0; k < MK_MAX_EXTENDER_NODES; k++)
                p += sprintf(p, "%s\"%zx\"", k ? "," : "", k);
        p += sprintf(p, "],\"Pod\":{}}");
        assert_true((size_t) (p - big) < cap);
        assert_true(mk_sched_scan_names(big, (size_t) (p - big), &pn));
        assert_int_equal(pn.n, MK_MAX_EXTENDER_NODES);
        for (size_t k = 0; k < pn.n; k++) {
                char want[32];
                snprintf(want, sizeof(want), "%zx", k);
                assert_string_equal(pn.cands[k].name, want);
                assert_int_equal(pn.cands[k].len, strlen(want));
        }
        assert_null(pn.cands[pn.n].name);
        assert_int_equal(big[pn.end], ',');
        mk_sched_names_done(&pn);
        free(big);
}

static void test_candidates(void **state) {
        (void) state;
        static const struct {
                const char *args;
                int r;
                const char *msg_or_names;
                bool by_name;
        } cases[] = {
                {"{\"NodeNames\":[\"a\",\"b\"]}", 0, "a,b", true},
                {"{\"nodenames\":[\"a\"]}", 0, "a", true},
                {"{\"Nodes\":{\"items\":[{\"metadata\":{\"name\":\"x\"}}]}}", 0, "x", false},
                {"{\"NodeNames\":null,\"nodes\":{\"Items\":[{\"metadata\":{\"name\":\"y\"}}]}}", 0, "y", false},
                {"{}", -EINVAL, "neither NodeNames nor Nodes.items", false},
                {"{\"NodeNames\":[1]}", -EINVAL, "node 0 has no valid name", false},
                {"{\"Nodes\":{\"items\":[{}]}}", -EINVAL, "node 0 has no valid name", false},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                json_t *a = load(cases[i].args);
                struct mk_sched_cand *c = NULL;
                size_t n = 0;
                bool by_name = false;
                char err[256] = "";
                int r = mk_sched_wire_candidates(a, &c, &n, &by_name, err, sizeof(err));
                if (r != cases[i].r)
                        fail_msg("%s: %d (%s), want %d", cases[i].args, r, err, cases[i].r);
                if (r < 0) {
                        if (!strstr(err, cases[i].msg_or_names))
                                fail_msg("%s: '%s', want '%s'", cases[i].args, err, cases[i].msg_or_names);
                } else {
                        char joined[64] = "";
                        for (size_t k = 0; k < n; k++) {
                                strcat(joined, c[k].name);
                                if (k + 1 < n)
                                        strcat(joined, ",");
                                assert_true((c[k].object != NULL) == !by_name);
                        }
                        assert_string_equal(joined, cases[i].msg_or_names);
                        assert_int_equal(by_name, cases[i].by_name);
                }
                free(c);
                json_decref(a);
        }
}

static void test_pod(void **state) {
        (void) state;
        struct mk_sched_config *cfg = NULL;
        assert_int_equal(mk_sched_config_load(NULL, &cfg, NULL), 0);
        struct mk_pod_request req;
        const char *uid = NULL;
        const json_t *pod = NULL;
        char err[256];
        json_t *a = load("{\"pod\":{\"metadata\":{\"uid\":\"u1\"},\"spec\":{\"containers\":[{\"name\":\"c\","
                         "\"resources\":{\"limits\":{\"nvidia.com/gpu\":1}}}]}}}");
        assert_int_equal(mk_sched_wire_pod(a, cfg, &req, &uid, &pod, err, sizeof(err)), 0);
        assert_string_equal(uid, "u1");
        assert_ptr_equal(pod, json_object_get(a, "pod"));
        assert_int_equal(req.n_containers, 1);
        json_decref(a);
        a = load("{\"NodeNames\":[]}");
        assert_int_equal(mk_sched_wire_pod(a, cfg, &req, &uid, &pod, err, sizeof(err)), -EINVAL);
        assert_string_equal(err, "ExtenderArgs has no Pod");
        json_decref(a);
        a = load("{\"Pod\":{\"spec\":{\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":"
                 "{\"nvidia.com/gpu\":\"x\"}}}]}}}");
        assert_int_equal(mk_sched_wire_pod(a, cfg, &req, &uid, &pod, err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, "pod request: "));
        assert_non_null(strstr(err, "not a quantity"));
        json_decref(a);
        mk_sched_config_free(cfg);
}

/* Hand-made decisions: n1 feasible (priority 7), "a\"b" failed, n3 feasible (3). */
static void make_decisions(struct mk_sched_decisions *d, bool by_name) {
        static const char *const names[] = {"n1", "a\"b", "n3"};
        *d = (struct mk_sched_decisions) {.n = 3, .by_name = by_name};
        d->cands = calloc(3, sizeof(*d->cands));
        d->v = calloc(3, sizeof(*d->v));
        assert_non_null(d->cands);
        assert_non_null(d->v);
        for (size_t i = 0; i < 3; i++)
                d->cands[i] = (struct mk_sched_cand) {.name = names[i], .len = strlen(names[i])};
        mk_buf_init(&d->reasons, 1 << 16);
        d->v[0] = (struct mk_sched_verdict) {.r = 0, .priority = 7};
        d->v[1] = (struct mk_sched_verdict) {.r = -ENOSPC, .reason = 0};
        assert_int_equal(mk_buf_append(&d->reasons, "no GPU has 40000 MiB free", 26), 0);
        d->v[2] = (struct mk_sched_verdict) {.r = 0, .priority = 3};
        d->feasible = 2;
}

static void test_writers(void **state) {
        (void) state;
        struct mk_sched_decisions d;
        make_decisions(&d, true);
        char *t = mk_sched_wire_filter_text(&d);
        assert_string_equal(t, "{\"Nodes\":null,\"NodeNames\":[\"n1\",\"n3\"],\"FailedNodes\":"
                               "{\"a\\\"b\":\"migkit: no GPU has 40000 MiB free\"},\"Error\":\"\"}");
        /* The json_t writer says the same. */
        json_t *j = load(t);
        char *a = dumps(j), *b = dumps(mk_sched_wire_filter_json(&d));
        assert_string_equal(a, b);
        free(a);
        free(b);
        free(t);
        t = mk_sched_wire_prioritize_text(&d);
        assert_string_equal(t, "[{\"Host\":\"n1\",\"Score\":7},{\"Host\":\"a\\\"b\",\"Score\":0},"
                               "{\"Host\":\"n3\",\"Score\":3}]");
        a = dumps(load(t));
        b = dumps(mk_sched_wire_prioritize_json(&d));
        assert_string_equal(a, b);
        free(a);
        free(b);
        free(t);
        /* A feasible name that is not plain: escaped in NodeNames and Host as elsewhere. */
        d.cands[0] = (struct mk_sched_cand) {.name = "n\x01\"1", .len = 4};
        t = mk_sched_wire_filter_text(&d);
        assert_non_null(strstr(t, "\"NodeNames\":[\"n\\u0001\\\"1\",\"n3\"]"));
        free(t);
        t = mk_sched_wire_prioritize_text(&d);
        assert_string_equal(t, "[{\"Host\":\"n\\u0001\\\"1\",\"Score\":7},{\"Host\":\"a\\\"b\",\"Score\":0},"
                               "{\"Host\":\"n3\",\"Score\":3}]");
        free(t);
        /* A reason that could not be kept reads "out of memory". */
        d.v[1].reason = SIZE_MAX;
        assert_string_equal(mk_sched_verdict_reason(&d, 1), "out of memory");
        mk_sched_decisions_done(&d);
        assert_null(d.cands);
        /* An error answer. */
        t = dumps(mk_sched_wire_filter_error("ExtenderArgs has no Pod"));
        assert_string_equal(t, "{\"Error\":\"ExtenderArgs has no Pod\",\"FailedNodes\":{},\"NodeNames\":null,"
                               "\"Nodes\":null}");
        free(t);
}

static void test_put_string(void **state) {
        (void) state;
        static const struct {
                const char *in, *out;
        } cases[] = {
                {"", "\"\""},
                {"plain", "\"plain\""},
                {"q\"b\\", "\"q\\\"b\\\\\""},
                {"\t\n\x01\x1f", "\"\\u0009\\u000a\\u0001\\u001f\""},
                {"\xc3\xa9\xf0\x9f\x98\x80", "\"\xc3\xa9\xf0\x9f\x98\x80\""},       /* valid UTF-8 kept */
                {"cut\xc3", "\"cut?\""},                                        /* a cut sequence */
                {"\xed\xa0\x80", "\"???\""},                                   /* a surrogate */
                {"\xe0\x80\xaf", "\"???\""},                                   /* overlong */
                {"\xf4\x90\x80\x80", "\"????\""},                              /* past U+10FFFF */
                {"\xff", "\"?\""},
                {"a b\x7f~!", "\"a b\x7f~!\""},                                /* plain: copied whole */
                {"plain then \"", "\"plain then \\\"\""},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                struct mk_buf b;
                mk_buf_init(&b, 1 << 16);
                assert_int_equal(mk_sched_wire_put_string(&b, cases[i].in), 0);
                if (!streq(mk_buf_str(&b), cases[i].out))
                        fail_msg("case %zu: '%s', want '%s'", i, mk_buf_str(&b), cases[i].out);
                /* jansson reads it back (valid JSON, valid UTF-8). */
                json_t *j = json_loads(mk_buf_str(&b), JSON_DECODE_ANY, NULL);
                assert_non_null(j);
                json_decref(j);
                mk_buf_done(&b);
        }
        /* Longer than the writer's chunk. */
        char *long_s = malloc(5000);
        memset(long_s, '"', 4999);
        long_s[4999] = 0;
        struct mk_buf b;
        mk_buf_init(&b, 1 << 16);
        assert_int_equal(mk_sched_wire_put_string(&b, long_s), 0);
        assert_int_equal(b.len, 2 + 2 * 4999);
        mk_buf_done(&b);
        memset(long_s, 'a', 4999); /* plain, longer than the chunk */
        mk_buf_init(&b, 1 << 16);
        assert_int_equal(mk_buf_puts(&b, "x"), 0);
        assert_int_equal(mk_sched_wire_put_string(&b, long_s), 0);
        assert_int_equal(b.len, 1 + 2 + 4999);
        assert_true(b.data[1] == '"' && b.data[5001] == '"' && b.data[5002] == 0 && b.data[2] == 'a');
        mk_buf_done(&b);
        mk_buf_init(&b, 4999); /* over the cap: refused */
        assert_int_equal(mk_sched_wire_put_string(&b, long_s), -E2BIG);
        mk_buf_done(&b);
        free(long_s);
}

/* The scan and the writer test bytes eight at a time: every byte value at
 * every position of a 20-byte name (in the first and second block and the
 * tail) is classed as the byte-wise rules say. */
static void test_byte_classes(void **state) {
        (void) state;
        for (unsigned v = 0; v < 256; v++)
                for (size_t pos = 0; pos < 20; pos++) {
                        char name[21];
                        memset(name, 'n', 20);
                        name[20] = 0;
                        name[pos] = (char) v;
                        bool name_byte = v >= 0x21 && v <= 0x7e && v != '"' && v != '\\';
                        bool json_plain = v >= 0x20 && v <= 0x7f && v != '"' && v != '\\';
                        char body[64];
                        memcpy(body, "{\"NodeNames\":[\"", 15);
                        memcpy(body + 15, name, 20);
                        memcpy(body + 35, "\"]}", 3);
                        struct mk_sched_names pn = {0};
                        bool found = mk_sched_scan_names(body, 38, &pn);
                        if (found != name_byte)
                                fail_msg("byte 0x%02x at %zu: scan found %d", v, pos, found);
                        if (found) {
                                assert_int_equal(pn.n, 1);
                                assert_int_equal(pn.cands[0].len, 20);
                                assert_true(pn.cands[0].plain);
                                assert_memory_equal(pn.cands[0].name, name, 20);
                        }
                        mk_sched_names_done(&pn);
                        if (v == 0)
                                continue;
                        struct mk_buf b;
                        mk_buf_init(&b, 1 << 16);
                        assert_int_equal(mk_sched_wire_put_string(&b, name), 0);
                        char whole[32];
                        snprintf(whole, sizeof(whole), "\"%s\"", name);
                        if (streq(mk_buf_str(&b), whole) != json_plain)
                                fail_msg("byte 0x%02x at %zu: written '%s'", v, pos, mk_buf_str(&b));
                        mk_buf_done(&b);
                }
}

static void test_bind_args(void **state) {
        (void) state;
        struct mk_bind_args a;
        json_t *j = json_loads("{\"podname\":\"p\",\"PODNAMESPACE\":\"ns\",\"PodUID\":\"u\",\"Node\":\"n1\"}", 0, NULL);
        assert_int_equal(mk_bind_args_parse(j, &a, NULL), 0);
        json_decref(j);
        assert_string_equal(a.pod_name, "p");
        assert_string_equal(a.pod_namespace, "ns");
        j = json_loads("{\"PodName\":\"p.0\",\"PodNamespace\":\"ns-1\",\"PodUID\":\"u\",\"Node\":\"n1.example\"}",
                       0, NULL);
        struct mk_bind_args dotted;
        assert_int_equal(mk_bind_args_parse(j, &dotted, NULL), 0);
        json_decref(j);
        char *s = dumps(mk_bind_object(&a));
        assert_string_equal(s, "{\"apiVersion\":\"v1\",\"kind\":\"Binding\",\"metadata\":{\"name\":\"p\","
                               "\"namespace\":\"ns\",\"uid\":\"u\"},\"target\":{\"apiVersion\":\"v1\",\"kind\":"
                               "\"Node\",\"name\":\"n1\"}}");
        free(s);
        static const char *const bad[] = {
                "{\"PodName\":\"p\",\"PodNamespace\":\"ns\",\"PodUID\":\"u\"}",
                "{\"PodName\":\"../x\",\"PodNamespace\":\"ns\",\"PodUID\":\"u\",\"Node\":\"n\"}",
                "{\"PodName\":\"p q\",\"PodNamespace\":\"ns\",\"PodUID\":\"u\",\"Node\":\"n\"}",
                "{\"PodName\":1,\"PodNamespace\":\"ns\",\"PodUID\":\"u\",\"Node\":\"n\"}",
                /* The probe's path injections (issue 17) and other non-names. */
                "{\"PodName\":\"..\",\"PodNamespace\":\"ns\",\"PodUID\":\"u\",\"Node\":\"n\"}",
                "{\"PodName\":\".\",\"PodNamespace\":\"ns\",\"PodUID\":\"u\",\"Node\":\"n\"}",
                "{\"PodName\":\"p\",\"PodNamespace\":\"..\",\"PodUID\":\"u\",\"Node\":\"n\"}",
                "{\"PodName\":\"p\",\"PodNamespace\":\"p1;x\",\"PodUID\":\"u\",\"Node\":\"n\"}",
                "{\"PodName\":\"p\",\"PodNamespace\":\"a.b\",\"PodUID\":\"u\",\"Node\":\"n\"}",
                "{\"PodName\":\"P\",\"PodNamespace\":\"ns\",\"PodUID\":\"u\",\"Node\":\"n\"}",
                "{\"PodName\":\"p\",\"PodNamespace\":\"ns\",\"PodUID\":\"u\",\"Node\":\"..\"}",
                "{\"PodName\":\"p\",\"PodNamespace\":\"ns\",\"PodUID\":\"u\",\"Node\":\"n;x\"}",
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                j = json_loads(bad[i], 0, NULL);
                struct mk_error e = {0};
                assert_int_equal(mk_bind_args_parse(j, &a, &e), -EINVAL);
                assert_true(e.field[0] != 0);
                if (i >= 4 && i < 10)
                        assert_string_equal(e.field, i == 4 || i == 5 || i == 9 ? "PodName" : "PodNamespace");
                if (i >= 10)
                        assert_string_equal(e.field, "Node");
                json_decref(j);
        }
}

/* The streaming count of a body: the same fed whole or a byte at a time;
 * candidates only in NodeNames or Nodes.items (keys any case), refused at
 * the first value over a limit. */
static void test_body_count(void **state) {
        (void) state;
        static const struct {
                const char *body;
                size_t nodes, values;
        } cases[] = {
                {"{\"NodeNames\":[\"a\",\"b\",\"c\"]}", 3, 5},
                {"{\"nodenames\": [ \"a\" , \"b\" ] , \"Pod\":{\"x\":[1,2,true,null]}}", 2, 10},
                {"{\"Nodes\":{\"Items\":[{\"metadata\":{\"name\":\"n1\"}},{}]},\"NodeNames\":null}", 2, 8},
                {"{\"Pod\":{\"NodeNames\":[\"a\"]},\"x\":\"NodeNames\\\"\"}", 0, 5},
                {"{\"Nodes\":[[\"a\"]],\"items\":[1]}", 0, 6},
                {"[\"NodeNames\",[1,2]]", 0, 5},
                /* Escapes in names: a backslash before the closing quote, an escaped quote. */
                {"{\"NodeNames\":[\"a\\\\\",\"b\\\"c\",\"\\\\\\\"\\\\\",\"dddddddddddddddddddddddddddddd\"]}", 4, 6},
                {"{\"NodeNames\":[\"x\\\"\",\"y\"],\"Pod\":{\"k\":\"v\\\\\"}}", 2, 6},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                const char *b = cases[i].body;
                struct mk_sched_body_count whole = {0}, bytes = {0};
                char err[128];
                assert_int_equal(mk_sched_body_count_feed(&whole, b, strlen(b), 100, 100, err, sizeof(err)), 0);
                for (size_t k = 0; b[k]; k++)
                        assert_int_equal(mk_sched_body_count_feed(&bytes, b + k, 1, 100, 100, err, sizeof(err)), 0);
                if (whole.nodes != cases[i].nodes || whole.values != cases[i].values || bytes.nodes != whole.nodes ||
                    bytes.values != whole.values)
                        fail_msg("%s: %zu nodes %zu values (bytewise %zu %zu), want %zu %zu", b, whole.nodes,
                                 whole.values, bytes.nodes, bytes.values, cases[i].nodes, cases[i].values);
        }
        /* Random bodies (strings of every length, quotes and backslashes
         * anywhere): fed whole, a string's text is skipped eight bytes at a
         * time; fed a byte at a time, never. Both count alike. */
        uint64_t seed = 42;
        for (int iter = 0; iter < 20000; iter++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull; /* a few steps of an LCG */
                char body[160];
                size_t n = 0;
                n += (size_t) snprintf(body, sizeof(body), "{\"NodeNames\":[");
                static const char alphabet[] = "aaaaaaaaaaaaaaaaaaaa\"\\,[]{}: ";
                uint64_t x = seed;
                size_t len = 1 + (x >> 33) % 120;
                for (size_t k = 0; k < len && n < sizeof(body) - 1; k++) {
                        x = x * 6364136223846793005ull + 1442695040888963407ull;
                        body[n++] = alphabet[(x >> 33) % (sizeof(alphabet) - 1)];
                }
                body[n] = 0;
                struct mk_sched_body_count whole = {0}, bytes = {0};
                char err[128];
                int rw = mk_sched_body_count_feed(&whole, body, n, 1000, 1000, err, sizeof(err)), rb = 0;
                for (size_t k = 0; k < n && rb >= 0; k++)
                        rb = mk_sched_body_count_feed(&bytes, body + k, 1, 1000, 1000, err, sizeof(err));
                if (rw != rb || whole.nodes != bytes.nodes || whole.values != bytes.values ||
                    whole.depth != bytes.depth || whole.in_string != bytes.in_string)
                        fail_msg("'%s': whole %d %zu nodes %zu values, bytewise %d %zu %zu", body, rw, whole.nodes,
                                 whole.values, rb, bytes.nodes, bytes.values);
        }
        struct mk_sched_body_count c = {0};
        char err[128];
        const char *b = cases[0].body;
        assert_int_equal(mk_sched_body_count_feed(&c, b, strlen(b), 2, 100, err, sizeof(err)), -E2BIG);
        assert_string_equal(err, "more than 2 nodes in one request");
        c = (struct mk_sched_body_count) {0};
        assert_int_equal(mk_sched_body_count_feed(&c, b, strlen(b), 100, 4, err, sizeof(err)), -E2BIG);
        assert_string_equal(err, "more than 4 JSON values in one request");
        c = (struct mk_sched_body_count) {0};
        char deep[MK_SCHED_COUNT_DEPTH + 2];
        memset(deep, '[', sizeof(deep));
        assert_int_equal(mk_sched_body_count_feed(&c, deep, sizeof(deep), 100, 1000, err, sizeof(err)), -E2BIG);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_scan_names),
                cmocka_unit_test(test_candidates),
                cmocka_unit_test(test_pod),
                cmocka_unit_test(test_writers),
                cmocka_unit_test(test_put_string),
                cmocka_unit_test(test_byte_classes),
                cmocka_unit_test(test_bind_args),
                cmocka_unit_test(test_body_count),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The extender's decision time (issue 7: p99 under 1 ms for one pod over
 * 1,000 nodes x 8 GPUs). Builds a cache of N nodes with 8 A100-SXM4-40GB
 * each, every GPU filled to a random level with created instances, plus
 * observed reservations on some nodes and in-flight (pending) ones on a few,
 * and bound pods using CPU and memory. Then, for P pods drawn from a memory
 * mix, times what kube-scheduler would make the extender do, in the
 * nodeCacheCapable form (NodeNames):
 *   - in-process: the request body parsed (json_loads), mk_sched_filter or
 *     mk_sched_prioritize, the answer serialised (json_dumps), as the HTTP
 *     handler does; Filter then Prioritize for the same pod, as
 *     kube-scheduler calls them; for the common pods also
 *     mk_sched_body_text, the body handed over as the server does (a plain
 *     NodeNames list read by a scan, not by jansson);
 *   - the same over HTTP on loopback (mk_sched_server, libcurl, keep-alive).
 * Pod kinds: common (one container), GPU-type filter, two containers.
 *
 *   bench-extender [--nodes N] [--pods P] [--http-pods P] [--kinds K] [--seed S]
 * (--kinds 1: only the common pods)
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>
#include <jansson.h>

#include "base/macro.h"
#include "base/parse.h"
#include "claim/claim.h"
#include "sched/extender.h"
#include "sched/inventory.h"
#include "sched/server.h"
#include "spec/sched-config.h"

#define GPUS 8
#define UNITS 8

/* A100-SXM4-40GB (MIG user guide, "Supported MIG Profiles"). */
static const struct prof {
        const char *name;
        unsigned id, slices, mib, max, sms, size, n_starts, starts[7];
} profs[] = {
        {"1g.5gb", 19, 1, 4864, 7, 14, 1, 7, {0, 1, 2, 3, 4, 5, 6}},
        {"1g.5gb+me", 20, 1, 4864, 1, 14, 1, 7, {0, 1, 2, 3, 4, 5, 6}},
        {"1g.10gb", 15, 1, 9856, 4, 14, 2, 4, {0, 2, 4, 6}},
        {"2g.10gb", 14, 2, 9856, 3, 28, 2, 3, {0, 2, 4}},
        {"3g.20gb", 9, 3, 19968, 2, 42, 4, 2, {0, 4}},
        {"4g.20gb", 5, 4, 19968, 1, 56, 4, 1, {0}},
        {"7g.40gb", 0, 7, 40448, 1, 98, 8, 1, {0}},
};

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
        uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
}

static double rng_unit(uint64_t *s) {
        return (double) (rng_next(s) >> 11) / (double) (1ull << 53);
}

static void die(const char *what) {
        fprintf(stderr, "bench-extender: %s\n", what);
        exit(EXIT_FAILURE);
}

static json_t *profiles_json(void) {
        json_t *a = json_array();
        for (size_t i = 0; i < ELEMENTSOF(profs); i++) {
                const struct prof *p = &profs[i];
                json_t *pl = json_array();
                for (unsigned k = 0; k < p->n_starts; k++)
                        json_array_append_new(pl, json_pack("[i, i]", (int) p->starts[k], (int) p->size));
                json_array_append_new(a, json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:o}", "name", p->name, "id",
                                                   (int) p->id, "slices", (int) p->slices, "memoryMiB", (int) p->mib,
                                                   "maxCount", (int) p->max, "sms", (int) p->sms, "placements", pl));
        }
        return a;
}

struct counts {
        unsigned long instances, units, gpus_used, reserved_observed, reserved_pending, bound_pods;
};

/* One GPU filled to a random level (about 10% empty, 10% full) with
 * instances of random profiles at random free placements. */
static json_t *gpu_json(uint64_t *s, const char *node, unsigned index, struct counts *cnt) {
        char uuid[128];
        snprintf(uuid, sizeof(uuid), "GPU-%s-%u", node, index);
        json_t *inst = json_array();
        double target = rng_unit(s) * 1.2 - 0.1;
        unsigned used = 0, slices = 0, count[ELEMENTSOF(profs)] = {0}, n_used = 0;
        for (int tries = 0; tries < 24 && n_used < target * UNITS; tries++) {
                size_t k = rng_next(s) % ELEMENTSOF(profs);
                const struct prof *p = &profs[k];
                unsigned start = p->starts[rng_next(s) % p->n_starts];
                uint32_t m = ((1u << p->size) - 1) << start;
                if ((used & m) || slices + p->slices > 7 || count[k] >= p->max)
                        continue;
                used |= m;
                slices += p->slices;
                count[k]++;
                n_used += p->size;
                char pod[128], uid[128];
                snprintf(pod, sizeof(pod), "ns/%s-g%u-%d", node, index, tries);
                snprintf(uid, sizeof(uid), "uid-%s-g%u-%d", node, index, tries);
                json_array_append_new(inst, json_pack("{s:s, s:s, s:i, s:i, s:[i, i], s:i, s:s, s:s}", "state",
                                                      "created", "profile", p->name, "id", (int) p->id, "slices",
                                                      (int) p->slices, "placement", (int) start, (int) p->size, "gi",
                                                      tries + 1, "pod", pod, "uid", uid));
                cnt->instances++;
        }
        cnt->units += n_used;
        cnt->gpus_used += n_used > 0;
        return json_pack("{s:i, s:s, s:s, s:i, s:i, s:i, s:i, s:b, s:o, s:o}", "index", (int) index, "uuid", uuid,
                         "model", "NVIDIA A100-SXM4-40GB", "memoryMiB", 40960, "units", UNITS, "slices", 7, "sms", 98,
                         "mig", 1, "profiles", profiles_json(), "instances", inst);
}

static json_t *node_json(uint64_t *s, const char *name, struct counts *cnt) {
        json_t *gpus = json_array();
        for (unsigned g = 0; g < GPUS; g++)
                json_array_append_new(gpus, gpu_json(s, name, g, cnt));
        json_t *inv = json_pack("{s:i, s:s, s:o}", "version", 1, "node", name, "gpus", gpus);
        char *v = json_dumps(inv, JSON_COMPACT | JSON_PRESERVE_ORDER);
        json_decref(inv);
        if (!v)
                die("out of memory");
        json_t *n = json_pack("{s:{s:s, s:{s:s}}, s:{s:{s:s, s:s}}}", "metadata", "name", name, "annotations",
                              MK_ANN_INVENTORY, v, "status", "allocatable", "cpu", "96", "memory", "1000Gi");
        free(v);
        return n;
}

struct pod_kind {
        const char *title;
        const char *annotations;        /* extra pod annotations (JSON members) */
        bool two_containers;
};

static const struct pod_kind kinds[] = {
        {"common (1 container)", "", false},
        {"GPU-type filter", "\"nvidia.com/use-gputype\":\"A100\"", false},
        {"2 containers", "", true},
};

/* Memory mix of one container: 30% 4000, 30% 9000, 25% 19000, 15% 40000 MiB. */
static unsigned mix_mib(uint64_t *s) {
        unsigned u = (unsigned) (rng_next(s) % 100);
        return u < 30 ? 4000 : u < 60 ? 9000 : u < 85 ? 19000 : 40000;
}

static json_t *pod_json(const char *uid, const char *annotations, unsigned mib, unsigned mib2, const char *node,
                        const char *reservation) {
        char buf[2048], c2[512] = "";
        if (mib2)
                snprintf(c2, sizeof(c2),
                         ",{\"name\":\"d\",\"resources\":{\"limits\":{\"nvidia.com/gpu\":1,"
                         "\"nvidia.com/gpumem\":\"%u\"}}}",
                         mib2);
        snprintf(buf, sizeof(buf),
                 "{\"metadata\":{\"namespace\":\"ns\",\"name\":\"pod-%s\",\"uid\":\"%s\",\"annotations\":{%s}},"
                 "\"spec\":{\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":{\"nvidia.com/gpu\":1,"
                 "\"nvidia.com/gpumem\":\"%u\"},\"requests\":{\"cpu\":\"2\",\"memory\":\"8Gi\"}}}%s]},"
                 "\"status\":{\"phase\":\"Pending\"}}",
                 uid, uid, annotations, mib, c2);
        json_error_t je;
        json_t *j = json_loads(buf, 0, &je);
        if (!j)
                die(je.text);
        if (node)
                json_object_set_new(json_object_get(j, "spec"), "nodeName", json_string(node));
        if (reservation)
                json_object_set_new(json_object_get(json_object_get(j, "metadata"), "annotations"),
                                    MK_ANN_RESERVATION, json_string(reservation));
        return j;
}

static uint64_t mono_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

static int dbl_cmp(const void *a, const void *b) {
        double x = *(const double *) a, y = *(const double *) b;
        return (x > y) - (x < y);
}

static void report(const char *what, double *us, size_t n) {
        qsort(us, n, sizeof(*us), dbl_cmp);
        printf("    %-34s median %6.0f us, p99 %6.0f us, max %6.0f us\n", what, us[n / 2],
               us[(size_t) ((double) n * 0.99)], us[n - 1]);
}

/* The ExtenderArgs body for one pod, NodeNames form. */
static char *args_body(json_t *pod, json_t *names) {
        json_t *a = json_pack("{s:O, s:O}", "Pod", pod, "NodeNames", names);
        char *s = json_dumps(a, JSON_COMPACT);
        json_decref(a);
        if (!s)
                die("out of memory");
        return s;
}

/* Where a verb's time goes (ns summed over the pods of one kind):
 * parsing the body, deciding, serialising and freeing the answer. */
struct split {
        uint64_t parse, decide, dump;
        uint64_t last;                  /* the last call's parse + decide + serialise */
        uint64_t last_cpu;              /* the same in this thread's CPU time */
        uint64_t last_decide;           /* the last call's decide step alone */
};

static uint64_t cpu_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

/* What the bench reads of an answer: the feasible count of a filter, the
 * best host of a prioritize. */
static void pick(const json_t *r, size_t *feasible, char *best, size_t best_size) {
        if (feasible)
                *feasible = json_array_size(json_object_get(r, "NodeNames"));
        if (best) {
                json_int_t top = -1;
                size_t i;
                json_t *h;
                best[0] = 0;
                json_array_foreach(r, i, h) {
                        json_int_t v = json_integer_value(json_object_get(h, "Score"));
                        if (v > top) {
                                top = v;
                                snprintf(best, best_size, "%s", json_string_value(json_object_get(h, "Host")));
                        }
                }
        }
}

/* What the HTTP handler does around a verb: parse, decide, serialise. */
static char *verb(struct mk_sched *s, bool filter, bool text, bool raw, const char *body, size_t *feasible,
                  struct split *sp, char *best, size_t best_size) {
        json_error_t je;
        uint64_t c0 = cpu_ns(), t0 = mono_ns();
        if (raw) {
                /* The body as the server hands it over: parse and decide in one call. */
                char *out = NULL;
                if (mk_sched_body_text(s, filter, body, strlen(body), MK_MAX_EXTENDER_REQUEST, &out, NULL) < 0 || !out)
                        die("mk_sched_body_text failed");
                uint64_t t2 = mono_ns();
                sp->decide += t2 - t0;
                sp->last = t2 - t0;
                sp->last_cpu = cpu_ns() - c0;
                sp->last_decide = t2 - t0;
                json_t *r = json_loads(out, 0, &je); /* not timed: what the bench reads of the answer */
                if (!r)
                        die(je.text);
                pick(r, feasible, best, best_size);
                json_decref(r);
                return out;
        }
        json_t *args = json_loads(body, 0, &je);
        if (!args)
                die(je.text);
        uint64_t t1 = mono_ns();
        if (text) {
                char *out = filter ? mk_sched_filter_text(s, args) : mk_sched_prioritize_text(s, args);
                uint64_t t2 = mono_ns();
                json_decref(args);
                uint64_t t3 = mono_ns();
                if (!out)
                        die("out of memory");
                sp->parse += t1 - t0;
                sp->decide += t2 - t1;
                sp->dump += t3 - t2;
                sp->last = t3 - t0;
                sp->last_cpu = cpu_ns() - c0;
                sp->last_decide = t2 - t1;
                json_t *r = json_loads(out, 0, &je); /* not timed: what the bench reads of the answer */
                if (!r)
                        die(je.text);
                pick(r, feasible, best, best_size);
                json_decref(r);
                return out;
        }
        json_t *r = filter ? mk_sched_filter(s, args) : mk_sched_prioritize(s, args);
        uint64_t t2 = mono_ns();
        json_decref(args);
        uint64_t t2b = mono_ns(), c2b = cpu_ns(); /* not timed: picking the node to bind */
        pick(r, feasible, best, best_size);
        uint64_t t2b_end = mono_ns(), c2b_end = cpu_ns();
        t2 += t2b_end - t2b;
        char *out = json_dumps(r, JSON_COMPACT);
        json_decref(r);
        uint64_t t3 = mono_ns();
        sp->parse += t1 - t0;
        sp->decide += t2 - t1;
        sp->dump += t3 - t2;
        sp->last = t3 - t0;
        sp->last_decide = t2 - t1;
        sp->last_cpu = cpu_ns() - c0 - (c2b_end - c2b);
        if (!out)
                die("out of memory");
        return out;
}

/* What a completed bind leaves in the cache: the reservation, observed on
 * the pod, and the pod's CPU and memory on the node. */
static unsigned bind_pod(struct mk_sched *s, const char *uid, const char *annotations, unsigned m1, unsigned m2,
                     const char *node, int64_t now) {
        json_t *p = pod_json(uid, annotations, m1, m2, NULL, NULL);
        struct mk_claim c;
        int r = mk_sched_reserve(s, p, node, now, &c, NULL);
        json_decref(p);
        if (r < 0)
                return 0;
        char *v = NULL;
        if (mk_claim_reservation_format(&c, &v) < 0)
                die("out of memory");
        p = pod_json(uid, annotations, m1, m2, node, v);
        free(v);
        if (mk_sched_pod_event(s, MK_KUBE_EVENT_ADDED, p) < 0)
                die("pod event failed");
        json_decref(p);
        return 1;
}

static size_t on_body(char *p, size_t size, size_t n, void *userdata) {
        (void) p;
        *(size_t *) userdata += size * n;
        return size * n;
}

static void http_post(CURL *c, unsigned port, const char *path, const char *body) {
        char url[128];
        size_t got = 0;
        long code = 0;
        snprintf(url, sizeof(url), "http://127.0.0.1:%u%s", port, path);
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long) strlen(body));
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &got);
        if (curl_easy_perform(c) != CURLE_OK || curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code) != CURLE_OK ||
            code != 200 || got == 0)
                die("HTTP request failed");
}

static size_t parse_size(const char *opt, const char *v) {
        uint32_t x;
        if (!v || mk_parse_u32(v, &x) < 0 || x == 0 || x > 1000000) {
                fprintf(stderr, "bench-extender: %s wants a number 1..1000000\n", opt);
                exit(EXIT_FAILURE);
        }
        return x;
}

int main(int argc, char **argv) {
        size_t n_nodes = 1000, n_pods = 2000, n_http = 1000;
        uint64_t seed = 7;
        size_t n_kinds = ELEMENTSOF(kinds);
        for (int i = 1; i < argc; i++) {
                const char *v = i + 1 < argc ? argv[i + 1] : NULL;
                if (streq(argv[i], "--nodes"))
                        n_nodes = parse_size(argv[i], v), i++;
                else if (streq(argv[i], "--pods"))
                        n_pods = parse_size(argv[i], v), i++;
                else if (streq(argv[i], "--http-pods"))
                        n_http = parse_size(argv[i], v), i++;
                else if (streq(argv[i], "--kinds"))
                        n_kinds = MIN(parse_size(argv[i], v), ELEMENTSOF(kinds)), i++;
                else if (streq(argv[i], "--seed"))
                        seed = parse_size(argv[i], v), i++;
                else {
                        fprintf(stderr, "usage: bench-extender [--nodes N] [--pods P] [--http-pods P] [--kinds K] [--seed S]\n");
                        return streq(argv[i], "--help") ? EXIT_SUCCESS : EXIT_FAILURE;
                }
        }
        const char *y = "version: v1\n";
        struct mk_sched_config *cfg = NULL;
        struct mk_sched *s = NULL;
        if (mk_sched_config_parse(y, strlen(y), "bench", &cfg, NULL) < 0 || mk_sched_new(cfg, &s) < 0)
                die("cannot set up the extender");
        uint64_t rs = seed;
        struct counts cnt = {0};
        json_t *names = json_array();
        uint64_t t0 = mono_ns();
        for (size_t i = 0; i < n_nodes; i++) {
                char name[64];
                snprintf(name, sizeof(name), "gpu-node-%04zu", i);
                json_t *n = node_json(&rs, name, &cnt);
                if (mk_sched_node_event(s, MK_KUBE_EVENT_ADDED, n) < 0)
                        die("node event failed");
                json_decref(n);
                json_array_append_new(names, json_string(name));
        }
        /* Reservations: observed on 10% of the nodes (binds that completed
         * but whose instances the node agent has not created yet), pending
         * on 1% (binds in flight); every bound pod also uses CPU and memory. */
        int64_t now = (int64_t) time(NULL);
        for (size_t i = 0; i < n_nodes; i++) {
                double u = rng_unit(&rs);
                if (u >= 0.11)
                        continue;
                char uid[64];
                snprintf(uid, sizeof(uid), "held-%zu", i);
                const char *node = json_string_value(json_array_get(names, i));
                json_t *p = pod_json(uid, "", mix_mib(&rs), 0, NULL, NULL);
                struct mk_claim c;
                if (mk_sched_reserve(s, p, node, now, &c, NULL) < 0) {
                        json_decref(p);
                        continue; /* full node */
                }
                if (u < 0.10) {
                        char *v = NULL;
                        if (mk_claim_reservation_format(&c, &v) < 0)
                                die("out of memory");
                        json_t *q = pod_json(uid, "", 4000, 0, node, v);
                        free(v);
                        if (mk_sched_pod_event(s, MK_KUBE_EVENT_ADDED, q) < 0)
                                die("pod event failed");
                        json_decref(q);
                        cnt.reserved_observed++;
                        cnt.bound_pods++;
                } else
                        cnt.reserved_pending++;
                json_decref(p);
        }
        size_t cn, cc;
        mk_sched_counts(s, &cn, &cc);
        printf("bench-extender: seed %" PRIu64 "; %zu nodes x %d A100-SXM4-40GB (%lu GPUs in use, %.0f%% of units used, "
               "%lu instances); reservations: %lu observed, %lu pending (binds in flight); %lu bound pods using CPU; "
               "cache %zu nodes, %zu claims; set up in %.1f s\n",
               seed, n_nodes, GPUS, cnt.gpus_used, 100.0 * (double) cnt.units / (double) (n_nodes * GPUS * UNITS),
               cnt.instances, cnt.reserved_observed, cnt.reserved_pending, cnt.bound_pods, cn, cc,
               (double) (mono_ns() - t0) / 1e9);
        printf("pods: gpumem 30%% 4000, 30%% 9000, 25%% 19000, 15%% 40000 MiB, cpu 2, memory 8Gi; "
               "NodeNames with all %zu nodes; one thread\n",
               n_nodes);

        double *tf = malloc(n_pods * sizeof(*tf)), *tp = malloc(n_pods * sizeof(*tp)),
               *tb = malloc(n_pods * sizeof(*tb)), *cf = malloc(n_pods * sizeof(*cf)),
               *cp = malloc(n_pods * sizeof(*cp)), *df = malloc(n_pods * sizeof(*df)),
               *dp = malloc(n_pods * sizeof(*dp));
        if (!tf || !tp || !tb || !cf || !cp || !df || !dp)
                die("out of memory");
        /* Per kind: the json_t entry points without the memo (as before it),
         * then the text ones the server uses, with the memo; for the common
         * kind also the json_t ones with the memo. */
        static const struct {
                size_t kind;
                bool memo, text, raw;
        } passes[] = {
                {0, false, false, false}, {0, true, false, false}, {0, true, true, false}, {0, true, true, true},
                {1, false, false, false}, {1, true, true, false},  {2, false, false, false}, {2, true, true, false},
        };
        for (size_t pass = 0; pass < ELEMENTSOF(passes); pass++) {
                size_t k = passes[pass].kind;
                bool memo = passes[pass].memo, text = passes[pass].text, raw = passes[pass].raw;
                if (k >= n_kinds)
                        continue;
                mk_sched_set_memo(s, memo);
                unsigned long hits0 = atomic_load(&mk_sched_stats(s)->memo_hits), bound = 0;
                size_t np = k == 0 ? n_pods : MAX(n_pods / 2, (size_t) 1);
                unsigned long feasible = 0, none = 0;
                struct split sf = {0}, sp = {0};
                for (size_t i = 0; i < np; i++) {
                        char uid[64];
                        snprintf(uid, sizeof(uid), "new-%zu-%zu", k, i);
                        unsigned m1 = mix_mib(&rs), m2 = kinds[k].two_containers ? mix_mib(&rs) : 0;
                        json_t *pod = pod_json(uid, kinds[k].annotations, m1, m2, NULL, NULL);
                        char *body = args_body(pod, names);
                        json_decref(pod);
                        size_t f = 0;
                        char *out = verb(s, true, text, raw, body, &f, &sf, NULL, 0);
                        free(out);
                        char best[256];
                        out = verb(s, false, text, raw, body, NULL, &sp, best, sizeof(best));
                        free(out);
                        free(body);
                        /* Bind every 2nd pod to its best node (not timed): the
                         * cluster changes between decisions, as it does live. */
                        if (i % 2 == 0 && best[0] && f > 0) {
                                bound += bind_pod(s, uid, kinds[k].annotations, m1, m2, best, now);
                        }
                        tf[i] = (double) sf.last / 1e3;
                        tp[i] = (double) sp.last / 1e3;
                        tb[i] = tf[i] + tp[i];
                        cf[i] = (double) sf.last_cpu / 1e3;
                        cp[i] = (double) sp.last_cpu / 1e3;
                        df[i] = (double) sf.last_decide / 1e3;
                        dp[i] = (double) sp.last_decide / 1e3;
                        feasible += f;
                        none += f == 0;
                }
                printf("  in-process, %s, %s, memo %s, %zu pods (%.0f feasible nodes on average, %lu pods fit "
                       "nowhere, %lu bound):\n",
                       kinds[k].title,
                       raw    ? "mk_sched_body_text (as the server: body in, text out; decide step = all of it)"
                       : text ? "mk_sched_*_text"
                              : "json_t API", memo ? "on" : "off", np, (double) feasible / (double) np, none, bound);
                report("filter", tf, np);
                report("prioritize", tp, np);
                report("filter + prioritize", tb, np);
                report("filter, CPU time", cf, np);
                report("prioritize, CPU time", cp, np);
                report("filter, decide step only", df, np);
                report("prioritize, decide step only", dp, np);
                printf("    memo %s: %lu node decisions answered from a node's memo\n", memo ? "on" : "off",
                       atomic_load(&mk_sched_stats(s)->memo_hits) - hits0);
                printf("    mean split, parse / decide / serialise+free: filter %.0f / %.0f / %.0f us, "
                       "prioritize %.0f / %.0f / %.0f us\n",
                       (double) sf.parse / 1e3 / (double) np, (double) sf.decide / 1e3 / (double) np,
                       (double) sf.dump / 1e3 / (double) np, (double) sp.parse / 1e3 / (double) np,
                       (double) sp.decide / 1e3 / (double) np, (double) sp.dump / 1e3 / (double) np);
        }

        /* Over HTTP: the server's own thread pool, one client, keep-alive. */
        struct mk_sched_server *srv = NULL;
        struct mk_sched_server_opts o = {.address = "127.0.0.1", .sched = s};
        if (mk_sched_server_start(&o, &srv, NULL) < 0)
                die("cannot start the HTTP server");
        unsigned port = mk_sched_server_port(srv);
        curl_global_init(CURL_GLOBAL_DEFAULT);
        CURL *c = curl_easy_init();
        if (!c)
                die("curl_easy_init failed");
        struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
        size_t nh = MIN(n_http, n_pods);
        for (size_t i = 0; i < nh; i++) {
                char uid[64];
                snprintf(uid, sizeof(uid), "http-%zu", i);
                json_t *pod = pod_json(uid, "", mix_mib(&rs), 0, NULL, NULL);
                char *body = args_body(pod, names);
                json_decref(pod);
                uint64_t a = mono_ns();
                http_post(c, port, "/filter", body);
                uint64_t b = mono_ns();
                http_post(c, port, "/prioritize", body);
                uint64_t e = mono_ns();
                free(body);
                tf[i] = (double) (b - a) / 1e3;
                tp[i] = (double) (e - b) / 1e3;
                tb[i] = (double) (e - a) / 1e3;
        }
        printf("  HTTP round trip on loopback (libcurl, keep-alive), common pods, %zu pods:\n", nh);
        report("POST /filter", tf, nh);
        report("POST /prioritize", tp, nh);
        report("filter + prioritize", tb, nh);
        curl_slist_free_all(h);
        curl_easy_cleanup(c);
        curl_global_cleanup();
        mk_sched_server_stop(srv);
        free(tf);
        free(tp);
        free(tb);
        free(cf);
        free(cp);
        free(df);
        free(dp);
        json_decref(names);
        mk_sched_free(s);
        mk_sched_config_free(cfg);
        return 0;
}

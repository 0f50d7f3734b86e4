/* The extender's decision time (issue 7: p99 under 1 ms for one pod over
 * 1,000 nodes x 8 GPUs; issue 17: for every pod kind). Builds a cache of N
 * nodes with 8 A100-SXM4-40GB each, every GPU filled to a random level with
 * created instances, plus observed reservations on some nodes and in-flight
 * (pending) ones on a few, and bound pods using CPU and memory. Then, per
 * pod kind (one container; a GPU-type filter; two containers; an init
 * container and a container) and per pass, for P pods drawn from a memory
 * mix, times what kube-scheduler would make the extender do in the
 * nodeCacheCapable form (NodeNames), Filter then Prioritize for each pod,
 * every second pod then bound to its best node:
 *   - server: the body handed over as the HTTP handler does
 *     (mk_sched_body_text: a plain NodeNames list read by a scan, the pod by
 *     jansson, the decisions, the answer written as text), memo on;
 *   - nomemo: the same with the memo off (every pod a new request shape);
 *   - http: over HTTP on loopback (mk_sched_server, libcurl, keep-alive);
 *     its CPU time is the whole process's, client and server, and the
 *     server's alone (the process's less the client thread's: the
 *     extender's own cost, column http-server);
 *   - exact: the server path with mk_sched_set_exact (every node fitted on a
 *     view rebuilt for the pod: the slow path every pod but the common one
 *     took before issue 17);
 *   - api: the json_t entry points (jansson parses the 1,000 names).
 * Prints median, p99 and max of the CPU time (this thread's; the
 * process's over HTTP) and the wall time per request, and a table of the
 * p99 CPU times. The process's allocator is set as the server sets it
 * (mk_sched_server_malloc), in every pass.
 *
 * With --names M (a number, or "kube"), each request names M of the nodes
 * (a window that moves on by M every request, as kube-scheduler's start
 * index does) instead of all of them; "kube" is the count kube-scheduler
 * hands extenders by default (percentageOfNodesToScore unset: it stops
 * looking after max(100, N x max(5, 50 - N/125) %) feasible nodes; 500 of
 * 5,000), after untimed sweeps of windows per pod kind (each node touched
 * with the kind's shapes, as a run over all the names does in its first
 * requests; --cold: none). The RSS after the
 * set-up and at the end (with its peak) is printed.
 *
 *   bench-extender [--nodes N] [--pods P] [--http-pods P] [--seed S] [--names M|kube] [--cold]
 *                  [--kinds common,gputype,two,init] [--passes server,nomemo,http,exact,api]
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>
#include <jansson.h>

#include "base/dynbuf.h"
#include "base/macro.h"
#include "base/parse.h"
#include "claim/claim.h"
#include "sched/extender.h"
#include "sched/inventory.h"
#include "sched/server.h"
#include "spec/sched-config.h"
#include "../tests/common/a100-profiles.h"

#define GPUS 8
#define UNITS 8

static double rng_unit(uint64_t *s) {
        return (double) (rng_next(s) >> 11) / (double) (1ull << 53);
}

/* A line of /proc/self/status ("VmRSS", "VmHWM") in kB; 0 when unreadable. */
static unsigned long status_kb(const char *key) {
        FILE *f = fopen("/proc/self/status", "re");
        char line[256];
        unsigned long v = 0;
        size_t n = strlen(key);
        while (f && fgets(line, sizeof(line), f))
                if (strncmp(line, key, n) == 0 && line[n] == ':') {
                        v = strtoul(line + n + 1, NULL, 10);
                        break;
                }
        if (f)
                fclose(f);
        return v;
}

static void die(const char *what) {
        fprintf(stderr, "bench-extender: %s\n", what);
        exit(EXIT_FAILURE);
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
        unsigned used = 0, slices = 0, count[ELEMENTSOF(a100_profs)] = {0}, n_used = 0;
        for (int tries = 0; tries < 24 && n_used < target * UNITS; tries++) {
                size_t k = rng_next(s) % ELEMENTSOF(a100_profs);
                const struct a100_prof *p = &a100_profs[k];
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
                         "mig", 1, "profiles", a100_profiles_json(), "instances", inst);
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
        const char *name;               /* for --kinds */
        const char *title;
        const char *annotations;        /* extra pod annotations (JSON members) */
        unsigned containers;            /* GPU containers (1 or 2) */
        bool init;                      /* one GPU init container before them */
};

static const struct pod_kind kinds[] = {
        {"common", "common (1 container)", "", 1, false},
        {"gputype", "GPU-type filter (use-gputype A100)", "\"nvidia.com/use-gputype\":\"A100\"", 1, false},
        {"two", "2 containers", "", 2, false},
        {"init", "init container + 1 container", "", 1, true},
};

/* Memory mix of one container: 30% 4000, 30% 9000, 25% 19000, 15% 40000 MiB. */
static unsigned mix_mib(uint64_t *s) {
        unsigned u = (unsigned) (rng_next(s) % 100);
        return u < 30 ? 4000 : u < 60 ? 9000 : u < 85 ? 19000 : 40000;
}

/* A pod's GPU memory per container: [0] the init container's (0: none),
 * [1] and [2] the containers' (0: no second one). */
struct pod_mib {
        unsigned m[3];
};

static struct pod_mib kind_mib(uint64_t *s, const struct pod_kind *k) {
        struct pod_mib pm = {{0, 0, 0}};
        if (k->init)
                pm.m[0] = mix_mib(s);
        pm.m[1] = mix_mib(s);
        if (k->containers > 1)
                pm.m[2] = mix_mib(s);
        return pm;
}

static json_t *pod_json(const char *uid, const char *annotations, struct pod_mib pm, const char *node,
                        const char *reservation) {
        char buf[2048], c2[512] = "", init[512] = "";
        if (pm.m[2])
                snprintf(c2, sizeof(c2),
                         ",{\"name\":\"d\",\"resources\":{\"limits\":{\"nvidia.com/gpu\":1,"
                         "\"nvidia.com/gpumem\":\"%u\"}}}",
                         pm.m[2]);
        if (pm.m[0])
                snprintf(init, sizeof(init),
                         "\"initContainers\":[{\"name\":\"i\",\"resources\":{\"limits\":{\"nvidia.com/gpu\":1,"
                         "\"nvidia.com/gpumem\":\"%u\"}}}],",
                         pm.m[0]);
        snprintf(buf, sizeof(buf),
                 "{\"metadata\":{\"namespace\":\"ns\",\"name\":\"pod-%s\",\"uid\":\"%s\",\"annotations\":{%s}},"
                 "\"spec\":{%s\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":{\"nvidia.com/gpu\":1,"
                 "\"nvidia.com/gpumem\":\"%u\"},\"requests\":{\"cpu\":\"2\",\"memory\":\"8Gi\"}}}%s]},"
                 "\"status\":{\"phase\":\"Pending\"}}",
                 uid, uid, annotations, init, pm.m[1], c2);
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

static struct pod_mib one_mib(unsigned mib) {
        return (struct pod_mib) {{0, mib, 0}};
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
/* kube-scheduler's default count of feasible nodes it looks for (and hands
 * the extenders) among n: numFeasibleNodesToFind with the adaptive
 * percentage. */
static size_t kube_names(size_t n) {
        if (n < 100)
                return n;
        long pct = 50 - (long) (n / 125);
        if (pct < 5)
                pct = 5;
        size_t k = n * (size_t) pct / 100;
        return k < 100 ? 100 : k;
}

/* NodeNames for request `i`: all of `names`, or a window of `m` of them that
 * moves on by m a request. */
static json_t *names_for(json_t *names, size_t m, size_t i) {
        size_t n = json_array_size(names);
        if (m >= n)
                return json_incref(names);
        json_t *w = json_array();
        for (size_t j = 0; w && j < m; j++)
                json_array_append(w, json_array_get(names, (i * m + j) % n));
        if (!w)
                die("out of memory");
        return w;
}

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

/* Bound pods, oldest first: a bind adds one, and past BOUND_KEEP the
 * oldest is deleted, so the cluster changes between decisions but stays
 * as full as it started, whatever the number of pods. */
#define BOUND_KEEP 256
struct bound {
        json_t *pods[BOUND_KEEP];
        size_t n, next;
};

/* What a completed bind leaves in the cache: the reservation, observed on
 * the pod, and the pod's CPU and memory on the node. */
static unsigned bind_pod(struct mk_sched *s, struct bound *b, const char *uid, const char *annotations,
                         struct pod_mib pm, const char *node, int64_t now) {
        json_t *p = pod_json(uid, annotations, pm, NULL, NULL);
        struct mk_claim c;
        int r = mk_sched_reserve(s, p, node, now, &c, NULL);
        json_decref(p);
        if (r < 0)
                return 0;
        char *v = NULL;
        if (mk_claim_reservation_format(&c, &v) < 0)
                die("out of memory");
        p = pod_json(uid, annotations, pm, node, v);
        free(v);
        if (mk_sched_pod_event(s, MK_KUBE_EVENT_ADDED, p) < 0)
                die("pod event failed");
        if (b->n == BOUND_KEEP) {
                json_t *old = b->pods[b->next];
                if (mk_sched_pod_event(s, MK_KUBE_EVENT_DELETED, old) < 0)
                        die("pod event failed");
                json_decref(old);
        } else
                b->n++;
        b->pods[b->next] = p;
        b->next = (b->next + 1) % BOUND_KEEP;
        return 1;
}

static size_t on_body(char *p, size_t size, size_t n, void *userdata) {
        struct mk_buf *b = userdata;
        if (mk_buf_append(b, p, size * n) < 0)
                return 0;
        return size * n;
}

/* POSTs `body`; the answer (malloc'd, NUL-terminated). */
static char *http_post(CURL *c, unsigned port, const char *path, const char *body) {
        char url[128];
        struct mk_buf got;
        mk_buf_init(&got, 64u << 20);
        long code = 0;
        snprintf(url, sizeof(url), "http://127.0.0.1:%u%s", port, path);
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long) strlen(body));
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &got);
        if (curl_easy_perform(c) != CURLE_OK || curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code) != CURLE_OK ||
            code != 200 || got.len == 0 || mk_buf_append(&got, "", 1) < 0)
                die("HTTP request failed");
        return mk_buf_take(&got);
}

static size_t parse_size(const char *opt, const char *v) {
        uint32_t x;
        if (!v || mk_parse_u32(v, &x) < 0 || x == 0 || x > 1000000) {
                fprintf(stderr, "bench-extender: %s wants a number 1..1000000\n", opt);
                exit(EXIT_FAILURE);
        }
        return x;
}

static uint64_t proc_cpu_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
        return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

/* How the pods of a pass are decided. */
enum pass_kind {
        PASS_SERVER,            /* mk_sched_body_text, memo on: what the HTTP handler runs */
        PASS_NOMEMO,            /* the same, memo off: every pod a new shape */
        PASS_HTTP,              /* POST /filter, /prioritize on loopback, memo on */
        PASS_EXACT,             /* the same as server, mk_sched_set_exact: every node on a view rebuilt per pod
                                 * (the slow path, what every pod but the common one took before) */
        PASS_API,               /* the json_t API and the text one, memo on */
        _PASS_MAX,
};

static const char *const pass_names[_PASS_MAX] = {"server", "nomemo", "http", "exact", "api"};
static const char *const pass_titles[_PASS_MAX] = {
        "server path (mk_sched_body_text: body in, text out), memo on",
        "server path, memo off (every pod a new shape)",
        "HTTP on loopback (libcurl, keep-alive), memo on; CPU = the whole process (client and server)",
        "server path, exact (mk_sched_set_exact: every node on a view rebuilt per pod, as before)",
        "json_t API (mk_sched_filter / _prioritize), memo on",
};

/* Names from a comma list into a bit set; exits naming the bad one. */
static unsigned parse_list(const char *opt, const char *v, const char *const *names, size_t n) {
        unsigned set = 0;
        if (!v) {
                fprintf(stderr, "bench-extender: %s wants a list\n", opt);
                exit(EXIT_FAILURE);
        }
        for (const char *p = v; *p;) {
                size_t len = strcspn(p, ",");
                size_t i = 0;
                while (i < n && !(strlen(names[i]) == len && strncmp(names[i], p, len) == 0))
                        i++;
                if (i == n) {
                        fprintf(stderr, "bench-extender: %s: unknown '%.*s'\n", opt, (int) len, p);
                        exit(EXIT_FAILURE);
                }
                set |= 1u << i;
                p += len + (p[len] == ',');
        }
        return set;
}

static double pct(double *us, size_t n, double q) {
        qsort(us, n, sizeof(*us), dbl_cmp);
        return us[MIN((size_t) ((double) n * q), n - 1)];
}

int main(int argc, char **argv) {
        size_t n_nodes = 1000, n_pods = 1000, n_http = 500, n_names = SIZE_MAX;
        bool names_kube = false, cold = false;
        uint64_t seed = 7;
        unsigned kind_set = (1u << ELEMENTSOF(kinds)) - 1, pass_set = 1u << PASS_SERVER | 1u << PASS_NOMEMO | 1u << PASS_HTTP;
        const char *kind_names[ELEMENTSOF(kinds)];
        for (size_t k = 0; k < ELEMENTSOF(kinds); k++)
                kind_names[k] = kinds[k].name;
        for (int i = 1; i < argc; i++) {
                const char *v = i + 1 < argc ? argv[i + 1] : NULL;
                if (streq(argv[i], "--nodes"))
                        n_nodes = parse_size(argv[i], v), i++;
                else if (streq(argv[i], "--pods"))
                        n_pods = parse_size(argv[i], v), i++;
                else if (streq(argv[i], "--http-pods"))
                        n_http = parse_size(argv[i], v), i++;
                else if (streq(argv[i], "--kinds"))
                        kind_set = parse_list(argv[i], v, kind_names, ELEMENTSOF(kinds)), i++;
                else if (streq(argv[i], "--passes"))
                        pass_set = parse_list(argv[i], v, pass_names, _PASS_MAX), i++;
                else if (streq(argv[i], "--cold"))
                        cold = true;
                else if (streq(argv[i], "--names")) {
                        names_kube = v && streq(v, "kube");
                        if (!names_kube)
                                n_names = parse_size(argv[i], v);
                        i++;
                } else if (streq(argv[i], "--seed"))
                        seed = parse_size(argv[i], v), i++;
                else {
                        fprintf(stderr, "usage: bench-extender [--nodes N] [--pods P] [--http-pods P] [--seed S] [--names M|kube] [--cold]\n"
                                        "         [--kinds common,gputype,two,init]\n"
                                        "         [--passes server,nomemo,http,exact,api] (default server,nomemo,http)\n");
                        return streq(argv[i], "--help") ? EXIT_SUCCESS : EXIT_FAILURE;
                }
        }
        /* The allocator as the server process sets it, in every pass (the
         * server path's too, and before the cache is built). */
        mk_sched_server_malloc();
        const char *y = "version: v1\n";
        struct mk_sched_config *cfg = NULL;
        struct mk_sched *s = NULL;
        if (mk_sched_config_parse(y, strlen(y), "bench", &cfg, NULL) < 0 || mk_sched_new(cfg, &s) < 0)
                die("cannot set up the extender");
        uint64_t rs = seed;
        struct counts cnt = {0};
        json_t *names = json_array();
        uint64_t t0 = mono_ns();
        if (names_kube)
                n_names = kube_names(n_nodes);
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
                json_t *p = pod_json(uid, "", one_mib(mix_mib(&rs)), NULL, NULL);
                struct mk_claim c;
                if (mk_sched_reserve(s, p, node, now, &c, NULL) < 0) {
                        json_decref(p);
                        continue; /* full node */
                }
                if (u < 0.10) {
                        char *v = NULL;
                        if (mk_claim_reservation_format(&c, &v) < 0)
                                die("out of memory");
                        json_t *q = pod_json(uid, "", one_mib(4000), node, v);
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
               "cache %zu nodes, %zu claims; set up in %.1f s; RSS %.0f MiB\n",
               seed, n_nodes, GPUS, cnt.gpus_used, 100.0 * (double) cnt.units / (double) (n_nodes * GPUS * UNITS),
               cnt.instances, cnt.reserved_observed, cnt.reserved_pending, cnt.bound_pods, cn, cc,
               (double) (mono_ns() - t0) / 1e9, (double) status_kb("VmRSS") / 1024);
        printf("pods: gpumem per container 30%% 4000, 30%% 9000, 25%% 19000, 15%% 40000 MiB, cpu 2, memory 8Gi; "
               "NodeNames with %zu of the %zu nodes; Filter then Prioritize per pod, every 2nd pod then bound to its best "
               "node (the %d bound last are kept, older ones deleted); one client thread\n",
               MIN(n_names, n_nodes), n_nodes, BOUND_KEEP);

        size_t n_max = MAX(n_pods, n_http);
        double *tf = malloc(n_max * sizeof(*tf)), *tp = malloc(n_max * sizeof(*tp)),
               *cf = malloc(n_max * sizeof(*cf)), *cp = malloc(n_max * sizeof(*cp)),
               *hf = malloc(n_max * sizeof(*hf)), *hp = malloc(n_max * sizeof(*hp));
        if (!tf || !tp || !cf || !cp || !hf || !hp)
                die("out of memory");
        double p99[ELEMENTSOF(kinds)][_PASS_MAX][2] = {{{0}}}, p99_srv[ELEMENTSOF(kinds)][2] = {{0}};
        struct bound bnd = {0};
        struct mk_sched_server *srv = NULL;
        CURL *c = NULL;
        struct curl_slist *h = NULL;
        unsigned port = 0;
        if (pass_set & (1u << PASS_HTTP)) {
                struct mk_sched_server_opts o = {.address = "127.0.0.1", .sched = s};
                if (mk_sched_server_start(&o, &srv, NULL) < 0)
                        die("cannot start the HTTP server");
                port = mk_sched_server_port(srv);
                curl_global_init(CURL_GLOBAL_DEFAULT);
                if (!(c = curl_easy_init()))
                        die("curl_easy_init failed");
                h = curl_slist_append(NULL, "Content-Type: application/json");
                curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
        }
        for (size_t k = 0; k < ELEMENTSOF(kinds); k++) {
                if (!(kind_set & (1u << k)))
                        continue;
                printf("%s pods:\n", kinds[k].title);
                /* With a window of names, the first requests of a kind are each
                 * the first to touch their nodes with its shapes (memory and
                 * memo entries first written: page faults, as after a restart;
                 * one request of a run over all the names): unless --cold,
                 * untimed sweeps of windows first (4 per window, for the mix's
                 * shapes), so that the percentiles say the steady state. */
                if (n_names < n_nodes && !cold) {
                        struct split ws = {0};
                        size_t sweeps = 4 * ((n_nodes + n_names - 1) / n_names);
                        for (size_t i = 0; i < sweeps; i++) {
                                char uid[64];
                                snprintf(uid, sizeof(uid), "warm-%zu-%zu", k, i);
                                json_t *pod = pod_json(uid, kinds[k].annotations, kind_mib(&rs, &kinds[k]), NULL,
                                                       NULL);
                                json_t *ask = names_for(names, n_names, i);
                                char *body = args_body(pod, ask);
                                json_decref(ask);
                                json_decref(pod);
                                free(verb(s, true, false, true, body, NULL, &ws, NULL, 0));
                                free(body);
                        }
                        printf("  (%zu untimed requests first: every node touched with the kind's shapes)\n",
                               sweeps);
                }
                for (int pass = 0; pass < _PASS_MAX; pass++) {
                        if (!(pass_set & (1u << pass)))
                                continue;
                        bool http = pass == PASS_HTTP;
                        mk_sched_set_memo(s, pass != PASS_NOMEMO);
                        mk_sched_set_exact(s, pass == PASS_EXACT);
                        unsigned long hits0 = atomic_load(&mk_sched_stats(s)->memo_hits), bound = 0, feasible = 0,
                                      none = 0;
                        size_t np = http ? n_http : n_pods;
                        struct split sf = {0}, sp = {0};
                        for (size_t i = 0; i < np; i++) {
                                char uid[64], best[256] = "";
                                snprintf(uid, sizeof(uid), "new-%zu-%d-%zu", k, pass, i);
                                struct pod_mib pm = kind_mib(&rs, &kinds[k]);
                                json_t *pod = pod_json(uid, kinds[k].annotations, pm, NULL, NULL);
                                json_t *ask = names_for(names, n_names, i);
                                char *body = args_body(pod, ask);
                                json_decref(ask);
                                json_decref(pod);
                                size_t f = 0;
                                if (http) {
                                        uint64_t a = mono_ns(), ca = proc_cpu_ns(), ta = cpu_ns();
                                        char *out = http_post(c, port, "/filter", body);
                                        uint64_t b = mono_ns(), cb = proc_cpu_ns(), tb = cpu_ns();
                                        json_error_t je;
                                        json_t *r = json_loads(out, 0, &je); /* not timed */
                                        if (!r)
                                                die(je.text);
                                        pick(r, &f, NULL, 0);
                                        json_decref(r);
                                        free(out);
                                        uint64_t b2 = mono_ns(), cb2 = proc_cpu_ns(), tb2 = cpu_ns();
                                        out = http_post(c, port, "/prioritize", body);
                                        uint64_t e = mono_ns(), ce = proc_cpu_ns(), te = cpu_ns();
                                        if (!(r = json_loads(out, 0, &je)))
                                                die(je.text);
                                        pick(r, NULL, best, sizeof(best));
                                        json_decref(r);
                                        free(out);
                                        tf[i] = (double) (b - a) / 1e3;
                                        tp[i] = (double) (e - b2) / 1e3;
                                        cf[i] = (double) (cb - ca) / 1e3;
                                        cp[i] = (double) (ce - cb2) / 1e3;
                                        /* The server's threads alone: the process less this
                                         * (the client's) thread. */
                                        hf[i] = (double) ((cb - ca) - MIN(cb - ca, tb - ta)) / 1e3;
                                        hp[i] = (double) ((ce - cb2) - MIN(ce - cb2, te - tb2)) / 1e3;
                                } else {
                                        bool raw = pass != PASS_API;
                                        free(verb(s, true, false, raw, body, &f, &sf, NULL, 0));
                                        tf[i] = (double) sf.last / 1e3;
                                        cf[i] = (double) sf.last_cpu / 1e3;
                                        free(verb(s, false, false, raw, body, NULL, &sp, best, sizeof(best)));
                                        tp[i] = (double) sp.last / 1e3;
                                        cp[i] = (double) sp.last_cpu / 1e3;
                                }
                                free(body);
                                /* Bind every 2nd pod to its best node (not timed): the
                                 * cluster changes between decisions, as it does live. */
                                if (i % 2 == 0 && best[0] && f > 0)
                                        bound += bind_pod(s, &bnd, uid, kinds[k].annotations, pm, best, now);
                                feasible += f;
                                none += f == 0;
                        }
                        printf("  %s, %zu pods (%.0f feasible nodes on average, %lu fit nowhere, %lu bound; "
                               "%lu node decisions from the memo):\n",
                               pass_titles[pass], np, (double) feasible / (double) np, none, bound,
                               atomic_load(&mk_sched_stats(s)->memo_hits) - hits0);
                        p99[k][pass][0] = pct(cf, np, 0.99);
                        p99[k][pass][1] = pct(cp, np, 0.99);
                        report("filter, CPU time", cf, np);
                        report("prioritize, CPU time", cp, np);
                        if (http) {
                                p99_srv[k][0] = pct(hf, np, 0.99);
                                p99_srv[k][1] = pct(hp, np, 0.99);
                                report("filter, CPU time of the server", hf, np);
                                report("prioritize, CPU time of the server", hp, np);
                        }
                        report("filter, wall", tf, np);
                        report("prioritize, wall", tp, np);
                }
        }
        mk_sched_set_memo(s, true);
        mk_sched_set_exact(s, false);
        printf("p99 CPU time per request (filter / prioritize, us); goal: under 1,000 us for every kind:\n");
        printf("  %-36s", "pod kind");
        for (int pass = 0; pass < _PASS_MAX; pass++)
                if (pass_set & (1u << pass))
                        printf(" %15s%s", pass_names[pass], pass == PASS_HTTP ? "      http-server" : "");
        printf("\n");
        for (size_t k = 0; k < ELEMENTSOF(kinds); k++) {
                if (!(kind_set & (1u << k)))
                        continue;
                printf("  %-36s", kinds[k].title);
                for (int pass = 0; pass < _PASS_MAX; pass++)
                        if (pass_set & (1u << pass)) {
                                printf("     %5.0f/%5.0f", p99[k][pass][0], p99[k][pass][1]);
                                if (pass == PASS_HTTP)
                                        printf("      %5.0f/%5.0f", p99_srv[k][0], p99_srv[k][1]);
                        }
                printf("\n");
        }
        printf("RSS at the end %.0f MiB, peak %.0f MiB (the whole process: the cache, the pods and their bodies, "
               "the HTTP client when it ran)\n",
               (double) status_kb("VmRSS") / 1024, (double) status_kb("VmHWM") / 1024);
        if (srv) {
                curl_slist_free_all(h);
                curl_easy_cleanup(c);
                curl_global_cleanup();
                mk_sched_server_stop(srv);
        }
        for (size_t i = 0; i < bnd.n; i++)
                json_decref(bnd.pods[i]);
        free(tf);
        free(tp);
        free(cf);
        free(cp);
        free(hf);
        free(hp);
        json_decref(names);
        mk_sched_free(s);
        mk_sched_config_free(cfg);
        return 0;
}

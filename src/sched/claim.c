/* Reservations on pods, pod requests, Allocate matching (claim.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/macro.h"
#include "base/parse.h"
#include "sched/claim.h"
#include "sched/json.h"
#include "spec/sched-config.h"

int mk_claim_reservation_format(const struct mk_claim *c, char **ret) {
        json_t *devs = json_array();
        json_t *root = json_pack("{s:i, s:s, s:I, s:o}", "version", MK_RESERVATION_VERSION, "node", c->node, "time",
                                 (json_int_t) c->time, "devices", devs);
        if (!root)
                return -ENOMEM;
        for (size_t i = 0; i < c->n_devices; i++) {
                const struct mk_claim_device *d = &c->devices[i];
                json_t *o = json_pack("{s:I, s:s, s:s, s:I, s:I, s:{s:I, s:I}}", "container",
                                      (json_int_t) d->container, "gpu", d->gpu, "profile", d->profile, "profileID",
                                      (json_int_t) d->profile_id, "slices", (json_int_t) d->slices, "placement",
                                      "start", (json_int_t) d->placement.start, "size",
                                      (json_int_t) d->placement.size);
                if (!o || json_array_append_new(devs, o) < 0) {
                        json_decref(root);
                        return -ENOMEM;
                }
        }
        char *s = json_dumps(root, JSON_COMPACT);
        json_decref(root);
        if (!s)
                return -ENOMEM;
        *ret = s;
        return 0;
}

static int parse_device(const json_t *o, size_t i, struct mk_claim_device *d, struct mk_error *e) {
        static const char *const known[] = {"container", "gpu", "profile", "profileID", "slices", "placement", NULL};
        char f[64];
        snprintf(f, sizeof(f), "devices[%zu]", i);
        int r = mk_json_check_keys(o, f, known, e);
        if (r < 0)
                return r;
        uint64_t v;
        *d = (struct mk_claim_device) {0};
        if ((r = mk_json_get_u64(o, "container", f, MK_MAX_POD_CONTAINERS - 1, true, &v, e)) < 0)
                return r;
        d->container = (unsigned) v;
        if ((r = mk_json_get_str(o, "gpu", f, d->gpu, sizeof(d->gpu), true, e)) < 0 ||
            (r = mk_json_get_str(o, "profile", f, d->profile, sizeof(d->profile), true, e)) < 0)
                return r;
        if ((r = mk_json_get_u64(o, "profileID", f, UINT32_MAX - 1, true, &v, e)) < 0)
                return r;
        d->profile_id = (unsigned) v;
        if ((r = mk_json_get_u64(o, "slices", f, 32, true, &v, e)) < 0)
                return r;
        d->slices = (unsigned) v;
        return mk_json_get_placement(o, "placement", f, &d->placement, e);
}

int mk_claim_reservation_parse(const char *s, struct mk_claim *c, struct mk_error *e) {
        static const char *const known[] = {"version", "node", "time", "devices", NULL};
        const char *f = MK_ANN_RESERVATION;
        json_t *root = NULL;
        int r = mk_json_load(s, strlen(s), MK_MAX_RESERVATION_BYTES, f, &root, e);
        if (r < 0)
                return r;
        struct mk_claim tmp = *c;
        uint64_t v;
        const json_t *devs;
        if ((r = mk_json_check_keys(root, f, known, e)) < 0 ||
            (r = mk_json_get_u64(root, "version", f, UINT32_MAX, true, &v, e)) < 0)
                goto out;
        if (v != MK_RESERVATION_VERSION) {
                r = mk_error_set_field(e, -EINVAL, f, "unsupported version %" PRIu64 " (want %d)", v,
                                       MK_RESERVATION_VERSION);
                goto out;
        }
        if ((r = mk_json_get_str(root, "node", f, tmp.node, sizeof(tmp.node), true, e)) < 0 ||
            (r = mk_json_get_u64(root, "time", f, INT64_MAX, false, &v, e)) < 0)
                goto out;
        tmp.time = r > 0 ? (int64_t) v : 0;
        devs = json_object_get(root, "devices");
        if (!json_is_array(devs) || json_array_size(devs) == 0) {
                r = mk_error_set_field(e, -EINVAL, f, "devices: must be a non-empty array");
                goto out;
        }
        if (json_array_size(devs) > MK_MAX_CLAIM_DEVICES) {
                r = mk_error_set_field(e, -E2BIG, f, "devices: more than %u", MK_MAX_CLAIM_DEVICES);
                goto out;
        }
        tmp.n_devices = json_array_size(devs);
        for (size_t i = 0; i < tmp.n_devices; i++)
                if ((r = parse_device(json_array_get(devs, i), i, &tmp.devices[i], e)) < 0)
                        goto out;
        *c = tmp;
        r = 0;
out:
        json_decref(root);
        return r;
}

int mk_claim_devices_parse(const char *s, struct mk_claim *c, struct mk_error *e) {
        const char *f = MK_ANN_DEVICES;
        json_t *root = NULL;
        int r = mk_json_load(s, strlen(s), MK_MAX_RESERVATION_BYTES, f, &root, e);
        if (r < 0)
                return r;
        if (!json_is_array(root) || json_array_size(root) != c->n_devices) {
                r = mk_error_set_field(e, -EINVAL, f, "must be an array of %zu MIG device UUIDs", c->n_devices);
                goto out;
        }
        for (size_t i = 0; i < c->n_devices; i++) {
                const char *u = json_string_value(json_array_get(root, i));
                if (!u || strlen(u) >= MK_UUID_MAX || !mk_json_token_ok(u)) {
                        r = mk_error_set_field(e, -EINVAL, f, "[%zu]: not a MIG device UUID", i);
                        goto out;
                }
        }
        for (size_t i = 0; i < c->n_devices; i++)
                snprintf(c->devices[i].mig_uuid, sizeof(c->devices[i].mig_uuid), "%s",
                         json_string_value(json_array_get(root, i)));
        r = 0;
out:
        json_decref(root);
        return r;
}

static const char *annotation(const json_t *pod, const char *key) {
        const json_t *md = json_object_get(pod, "metadata");
        return json_string_value(json_object_get(json_object_get(md, "annotations"), key));
}

int mk_claim_from_pod(const json_t *pod, struct mk_claim *ret, struct mk_error *e) {
        const json_t *md = json_object_get(pod, "metadata");
        const char *ns = json_string_value(json_object_get(md, "namespace"));
        const char *name = json_string_value(json_object_get(md, "name"));
        const char *uid = json_string_value(json_object_get(md, "uid"));
        if (!ns || !name || !uid || strlen(ns) >= MK_K8S_NAME_MAX || strlen(name) >= MK_K8S_NAME_MAX ||
            strlen(uid) >= MK_K8S_UID_MAX)
                return mk_error_set_field(e, -EINVAL, "metadata", "pod without a valid namespace, name or uid");
        struct mk_claim *c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        snprintf(c->namespace, sizeof(c->namespace), "%s", ns);
        snprintf(c->name, sizeof(c->name), "%s", name);
        snprintf(c->uid, sizeof(c->uid), "%s", uid);
        const char *phase = json_string_value(json_object_get(json_object_get(pod, "status"), "phase"));
        c->active = !json_object_get(md, "deletionTimestamp") &&
                    !(phase && (streq(phase, "Succeeded") || streq(phase, "Failed")));
        c->allocated = annotation(pod, MK_ANN_ALLOCATED) != NULL;
        const char *res = annotation(pod, MK_ANN_RESERVATION);
        int r = 0;
        if (res) {
                r = mk_claim_reservation_parse(res, c, e);
                const char *devs = annotation(pod, MK_ANN_DEVICES);
                if (r >= 0 && devs)
                        r = mk_claim_devices_parse(devs, c, e);
                if (r >= 0)
                        r = 1;
        }
        if (r >= 0)
                *ret = *c;
        free(c);
        return r;
}

/* --- quantities --- */

int mk_quantity_parse_milli(const char *s, uint64_t *ret) {
        static const struct {
                const char *suffix;
                uint64_t mul;   /* per unit, in milli */
                uint64_t div;
        } suffixes[] = {
                {"Ki", 1024ull * 1000, 1},
                {"Mi", 1048576ull * 1000, 1},
                {"Gi", 1073741824ull * 1000, 1},
                {"Ti", 1099511627776ull * 1000, 1},
                {"Pi", 1125899906842624ull * 1000, 1},
                {"m", 1, 1},
                {"k", 1000ull * 1000, 1},
                {"M", 1000000ull * 1000, 1},
                {"G", 1000000000ull * 1000, 1},
                {"T", 1000000000000ull * 1000, 1},
                {"P", 1000000000000000ull * 1000, 1},
                {"", 1000, 1},
        };
        size_t len = strlen(s);
        if (len == 0 || len > 64)
                return -EINVAL;
        /* digits [. digits] suffix; exponents ("1e3") are accepted as a plain suffix "eN". */
        size_t i = 0;
        unsigned __int128 ip = 0, fp = 0, fscale = 1;
        if (s[0] == '+')
                i++;
        size_t start = i;
        for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
                ip = ip * 10 + (unsigned) (s[i] - '0');
                if (ip > UINT64_MAX)
                        return -ERANGE;
        }
        bool digits = i > start;
        if (i < len && s[i] == '.') {
                i++;
                for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
                        if (fscale < 1000000000000000000ull) {
                                fp = fp * 10 + (unsigned) (s[i] - '0');
                                fscale *= 10;
                        }
                        digits = true;
                }
        }
        if (!digits)
                return -EINVAL;
        const char *suf = s + i;
        unsigned __int128 mul = 0;
        if ((suf[0] == 'e' || suf[0] == 'E') && suf[1]) {
                uint32_t ex;
                if (mk_parse_u32(suf + 1, &ex) < 0 || ex > 18)
                        return -EINVAL;
                mul = 1000;
                for (uint32_t k = 0; k < ex; k++)
                        mul *= 10;
        } else {
                for (size_t k = 0; k < ELEMENTSOF(suffixes); k++)
                        if (streq(suf, suffixes[k].suffix)) {
                                mul = suffixes[k].mul;
                                break;
                        }
                if (!mul)
                        return -EINVAL;
        }
        unsigned __int128 v = ip * mul + (fp * mul + fscale - 1) / fscale;
        if (v > UINT64_MAX)
                return -ERANGE;
        *ret = (uint64_t) v;
        return 0;
}

/* A resource of one container (limits win over requests) as a whole number. */
static int container_resource(const json_t *ctr, const char *res, const char *cname, uint64_t max, uint64_t *ret,
                              struct mk_error *e) {
        const json_t *rs = json_object_get(ctr, "resources");
        const json_t *v = json_object_get(json_object_get(rs, "limits"), res);
        if (!v)
                v = json_object_get(json_object_get(rs, "requests"), res);
        if (!v) {
                *ret = 0;
                return 0;
        }
        uint64_t m;
        if (json_is_integer(v) && json_integer_value(v) >= 0)
                m = (uint64_t) json_integer_value(v) * 1000;
        else if (!json_is_string(v) || mk_quantity_parse_milli(json_string_value(v), &m) < 0)
                return mk_error_set_field(e, -EINVAL, cname, "%s: not a quantity", res);
        if (m % 1000 != 0 || m / 1000 > max)
                return mk_error_set_field(e, -EINVAL, cname, "%s: must be a whole number from 0 to %" PRIu64, res,
                                          max);
        *ret = m / 1000;
        return 0;
}

static uint64_t container_request(const json_t *ctr, const char *res) {
        const json_t *rs = json_object_get(ctr, "resources");
        const json_t *v = json_object_get(json_object_get(rs, "requests"), res);
        if (!v)
                v = json_object_get(json_object_get(rs, "limits"), res);
        uint64_t m = 0;
        if (json_is_string(v) && mk_quantity_parse_milli(json_string_value(v), &m) < 0)
                m = 0;
        return m;
}

void mk_pod_resource_requests(const json_t *pod, uint64_t *ret_cpu_milli, uint64_t *ret_memory_bytes) {
        const json_t *spec = json_object_get(pod, "spec"), *ctr;
        uint64_t cpu = 0, mem = 0, init_cpu = 0, init_mem = 0;
        size_t i;
        json_array_foreach(json_object_get(spec, "containers"), i, ctr) {
                cpu += container_request(ctr, "cpu");
                mem += container_request(ctr, "memory") / 1000;
        }
        json_array_foreach(json_object_get(spec, "initContainers"), i, ctr) {
                init_cpu = MAX(init_cpu, container_request(ctr, "cpu"));
                init_mem = MAX(init_mem, container_request(ctr, "memory") / 1000);
        }
        *ret_cpu_milli = MAX(cpu, init_cpu);
        *ret_memory_bytes = MAX(mem, init_mem);
}

static void copy_annotation(const json_t *pod, const char *key, char *buf, size_t size) {
        const char *v = annotation(pod, key);
        buf[0] = 0;
        if (v && strlen(v) < size)
                snprintf(buf, size, "%s", v);
}

int mk_pod_request_parse(const json_t *pod, const struct mk_sched_config *cfg, struct mk_pod_request *ret,
                         struct mk_error *e) {
        struct mk_pod_request *r = calloc(1, sizeof(*r));
        if (!r)
                return -ENOMEM;
        const json_t *spec = json_object_get(pod, "spec");
        const char *lists[2] = {"initContainers", "containers"};
        unsigned index = 0;
        int err = 0;
        for (size_t l = 0; l < 2 && err >= 0; l++) {
                const json_t *arr = json_object_get(spec, lists[l]);
                size_t i;
                const json_t *ctr;
                if (arr && !json_is_array(arr)) {
                        err = mk_error_set_field(e, -EINVAL, lists[l], "must be an array");
                        break;
                }
                json_array_foreach(arr, i, ctr) {
                        char cname[96];
                        const char *nm = json_string_value(json_object_get(ctr, "name"));
                        snprintf(cname, sizeof(cname), "container '%.64s'", nm ? nm : "?");
                        if (index >= MK_MAX_POD_CONTAINERS) {
                                err = mk_error_set_field(e, -E2BIG, "spec", "more than %u containers",
                                                         MK_MAX_POD_CONTAINERS);
                                break;
                        }
                        uint64_t gpus, mem, pct, cores;
                        if ((err = container_resource(ctr, cfg->resource_count, cname, 16, &gpus, e)) < 0 ||
                            (err = container_resource(ctr, cfg->resource_memory, cname, 1ull << 30, &mem, e)) < 0 ||
                            (err = container_resource(ctr, cfg->resource_memory_percentage, cname, 100, &pct, e)) <
                                    0 ||
                            (err = container_resource(ctr, cfg->resource_cores, cname, 100, &cores, e)) < 0)
                                break;
                        if (l == 1) {
                                r->cpu_milli += container_request(ctr, "cpu");
                                r->memory_bytes += container_request(ctr, "memory") / 1000;
                        }
                        if (gpus == 0 && (mem || pct || cores))
                                gpus = 1; /* HAMi's webhook default (defaultGPUNum) */
                        if (gpus > 0)
                                r->containers[r->n_containers++] = (struct mk_pod_request_container) {
                                        .index = index,
                                        .gpus = (unsigned) gpus,
                                        .mem_mib = mem,
                                        .mem_percent = (unsigned) pct,
                                        .cores_percent = (unsigned) cores,
                                };
                        index++;
                }
        }
        if (err >= 0) {
                const char *mode = annotation(pod, MK_ANN_VGPU_MODE);
                r->not_mig = mode && !strstr(mode, "mig");
                copy_annotation(pod, MK_ANN_VARIANT, r->variant, sizeof(r->variant));
                copy_annotation(pod, MK_ANN_USE_GPUTYPE, r->use_types, sizeof(r->use_types));
                copy_annotation(pod, MK_ANN_NOUSE_GPUTYPE, r->nouse_types, sizeof(r->nouse_types));
                copy_annotation(pod, MK_ANN_NODE_POLICY, r->node_policy, sizeof(r->node_policy));
                copy_annotation(pod, MK_ANN_GPU_POLICY, r->gpu_policy, sizeof(r->gpu_policy));
                size_t total = 0;
                for (size_t i = 0; i < r->n_containers; i++)
                        total += r->containers[i].gpus;
                if (total > MK_MAX_CLAIM_DEVICES)
                        err = mk_error_set_field(e, -E2BIG, "spec", "the pod asks for %zu GPUs, more than %u", total,
                                                 MK_MAX_CLAIM_DEVICES);
        }
        if (err >= 0)
                *ret = *r;
        free(r);
        return err < 0 ? err : 0;
}

/* Whether a comma list holds an item that is a case-insensitive substring of `model`. */
static bool list_matches(const char *list, const char *model) {
        const char *p = list;
        while (*p) {
                const char *end = strchr(p, ',');
                size_t n = end ? (size_t) (end - p) : strlen(p);
                while (n > 0 && *p == ' ')
                        p++, n--;
                while (n > 0 && p[n - 1] == ' ')
                        n--;
                if (n > 0)
                        for (size_t i = 0; model[i] && strlen(model + i) >= n; i++)
                                if (strncasecmp(model + i, p, n) == 0)
                                        return true;
                if (!end)
                        break;
                p = end + 1;
        }
        return false;
}

bool mk_pod_request_gpu_type_ok(const struct mk_pod_request *r, const char *model) {
        if (r->use_types[0] && !list_matches(r->use_types, model))
                return false;
        if (r->nouse_types[0] && list_matches(r->nouse_types, model))
                return false;
        return true;
}

static bool claim_fits_counts(const struct mk_claim *c, const unsigned *counts, size_t n_counts) {
        /* The claim's containers in order, with their device counts. */
        size_t k = 0, i = 0;
        while (i < c->n_devices) {
                unsigned ctr = c->devices[i].container, cnt = 0;
                while (i < c->n_devices && c->devices[i].container == ctr)
                        i++, cnt++;
                if (k >= n_counts || counts[k] != cnt)
                        return false;
                k++;
        }
        return k == n_counts;
}

int mk_claim_match_allocate(const struct mk_claim *claims, size_t n, const char *node, const unsigned *counts,
                            size_t n_counts) {
        int best = -ENOENT;
        for (size_t i = 0; i < n; i++) {
                const struct mk_claim *c = &claims[i];
                if (!c->active || c->allocated || !streq(c->node, node) || c->n_devices == 0)
                        continue;
                bool created = true;
                for (size_t d = 0; d < c->n_devices; d++)
                        if (!c->devices[d].mig_uuid[0])
                                created = false;
                if (!created || !claim_fits_counts(c, counts, n_counts))
                        continue;
                if (best >= 0) {
                        const struct mk_claim *b = &claims[best];
                        int cmp = c->time < b->time ? -1 : c->time > b->time ? 1 : strcmp(c->namespace, b->namespace);
                        if (cmp == 0)
                                cmp = strcmp(c->name, b->name);
                        if (cmp >= 0)
                                continue;
                }
                best = (int) i;
        }
        return best;
}

/* A pod's GPU request (request.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/macro.h"
#include "kube/object.h"
#include "sched/request.h"
#include "spec/sched-config.h"

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

static void copy_annotation(const json_t *pod, const char *key, char *buf, size_t size) {
        const char *v = mk_kube_annotation(pod, key);
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
                        uint64_t gpus = 0, mem = 0, pct = 0, cores = 0; /* gcc -O3 cannot see container_resource sets them */
                        if ((err = container_resource(ctr, cfg->resource_count, cname, 16, &gpus, e)) < 0 ||
                            (err = container_resource(ctr, cfg->resource_memory, cname, 1ull << 30, &mem, e)) < 0 ||
                            (err = container_resource(ctr, cfg->resource_memory_percentage, cname, 100, &pct, e)) <
                                    0 ||
                            (err = container_resource(ctr, cfg->resource_cores, cname, 100, &cores, e)) < 0)
                                break;
                        if (l == 1) {
                                r->cpu_milli += mk_kube_container_request(ctr, "cpu");
                                r->memory_bytes += mk_kube_container_request(ctr, "memory") / 1000;
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
                const char *mode = mk_kube_annotation(pod, MK_ANN_VGPU_MODE);
                r->mode_named = mode != NULL;
                r->allow_mig = !mode || strstr(mode, "mig");
                r->allow_soft = !mode || strstr(mode, "hami-core");
                copy_annotation(pod, MK_ANN_VARIANT, r->variant, sizeof(r->variant));
                copy_annotation(pod, MK_ANN_USE_GPUTYPE, r->use_types, sizeof(r->use_types));
                copy_annotation(pod, MK_ANN_NOUSE_GPUTYPE, r->nouse_types, sizeof(r->nouse_types));
                copy_annotation(pod, MK_ANN_NODE_POLICY, r->node_policy, sizeof(r->node_policy));
                copy_annotation(pod, MK_ANN_GPU_POLICY, r->gpu_policy, sizeof(r->gpu_policy));
                r->fit_node_policy = mk_fit_policy_from_string(r->node_policy);
                r->fit_gpu_policy = mk_fit_policy_from_string(r->gpu_policy);
                if ((int) r->fit_node_policy < 0)
                        r->fit_node_policy = MK_FIT_BINPACK;
                if ((int) r->fit_gpu_policy < 0)
                        r->fit_gpu_policy = MK_FIT_SPREAD;
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


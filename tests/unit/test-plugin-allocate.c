/* Unit tests for plugin/allocate: Allocate responses as data (curl-style
 * protocol tests: request in, exact response out). Each case is a node, the
 * plugin options and one container's requested devices (by index, replicas
 * as "0::1"); the whole response dumped one item per line with UUIDs
 * shortened (GPU1, MIG0/2 = GPU 0's GI 2) and the random CDI annotation
 * UUID checked then replaced by <uuid>. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/host.h"
#include "base/macro.h"
#include "mig/gpu.h"
#include "plugin/allocate.h"
#include "plugin/resources.h"
#include "spec/plugin-config.h"

#include "../fixtures/plugin/snap.h"

#define MIG MK_MIG_ENABLED
#define OFF MK_MIG_DISABLED

#define ENVVAR MK_DP_LIST_ENVVAR
#define VOLUMES MK_DP_LIST_VOLUME_MOUNTS
#define CDI_ANN MK_DP_LIST_CDI_ANNOTATIONS
#define CDI_CRI MK_DP_LIST_CDI_CRI

/* Replaces every occurrence of `from` in *s by `to`. */
static void replace_all(char **s, const char *from, const char *to) {
        struct mk_buf b;
        mk_buf_init(&b, 1 << 20);
        const char *p = *s;
        for (const char *q; (q = strstr(p, from)); p = q + strlen(from)) {
                assert_int_equal(mk_buf_append(&b, p, (size_t) (q - p)), 0);
                assert_int_equal(mk_buf_puts(&b, to), 0);
        }
        assert_int_equal(mk_buf_puts(&b, p), 0);
        free(*s);
        *s = mk_buf_take(&b);
}

static bool is_uuid(const char *s) {
        if (strlen(s) != 36)
                return false;
        for (size_t i = 0; i < 36; i++) {
                bool dash = i == 8 || i == 13 || i == 18 || i == 23;
                if (dash ? s[i] != '-' : !strchr("0123456789abcdef", s[i]))
                        return false;
        }
        return s[14] == '4';
}

static char *dump(const struct mk_snapshot *s, const struct mk_dp_response *r) {
        struct mk_buf b;
        mk_buf_init(&b, 1 << 20);
        for (size_t i = 0; i < r->n_envs; i++)
                assert_int_equal(mk_buf_printf(&b, "env %s=%s\n", r->envs[i].key, r->envs[i].value), 0);
        for (size_t i = 0; i < r->n_mounts; i++)
                assert_int_equal(mk_buf_printf(&b, "mount %s <- %s%s\n", r->mounts[i].container_path,
                                               r->mounts[i].host_path, r->mounts[i].read_only ? " ro" : ""),
                                 0);
        for (size_t i = 0; i < r->n_devices; i++)
                assert_int_equal(mk_buf_printf(&b, "dev %s <- %s %s\n", r->devices[i].container_path,
                                               r->devices[i].host_path, r->devices[i].permissions),
                                 0);
        for (size_t i = 0; i < r->n_annotations; i++) {
                const char *k = r->annotations[i].key, *u = strrchr(k, '_');
                assert_non_null(u);
                if (!is_uuid(u + 1))
                        fail_msg("annotation key '%s' does not end in a random UUID", k);
                assert_int_equal(mk_buf_printf(&b, "ann %.*s_<uuid>=%s\n", (int) (u - k), k, r->annotations[i].value),
                                 0);
        }
        for (size_t i = 0; i < r->n_cdi_devices; i++)
                assert_int_equal(mk_buf_printf(&b, "cdi %s\n", r->cdi_devices[i]), 0);
        char *out = mk_buf_take(&b);
        for (size_t i = 0; i < s->n_gpus; i++) {
                char to[32];
                snprintf(to, sizeof(to), "GPU%zu", i);
                replace_all(&out, s->gpus[i].uuid, to);
                for (size_t j = 0; j < s->gpus[i].n_gis; j++)
                        for (size_t k = 0; k < s->gpus[i].gis[j].n_cis; k++) {
                                snprintf(to, sizeof(to), "MIG%zu/%u", i, s->gpus[i].gis[j].id);
                                replace_all(&out, s->gpus[i].gis[j].cis[k].uuid, to);
                        }
        }
        return out;
}

struct acase {
        const char *name;
        struct snap_gpu gpus[4];
        enum mk_mig_strategy strategy;
        const char *config;     /* sharing YAML or NULL */
        unsigned lists;
        enum mk_dp_id_strategy ids;
        bool specs, host, gds, mofed;
        const char *dev_root, *prefix, *kind;
        const char *resource;
        const char *request;    /* device indices, blank-separated; replicas "0::1" */
        const char *want;       /* dump, or "error: <substring>" */
};

#define TWO_GPUS {{"a100", OFF, NULL}, {"a100", OFF, NULL}, {0}}
#define MIG_NODE {{"a100", MIG, "1g.5gb*2,3g.20gb"}, {"a100", MIG, "1g.5gb"}, {0}}

static const struct acase cases[] = {
        {"envvar, uuid", TWO_GPUS, MK_MIG_STRATEGY_NONE, NULL, ENVVAR, MK_DP_ID_UUID, .resource = "nvidia.com/gpu",
         .request = "1 0", .want = "env NVIDIA_VISIBLE_DEVICES=GPU1,GPU0\n"},
        {"default list strategy is envvar", TWO_GPUS, MK_MIG_STRATEGY_NONE, NULL, 0, MK_DP_ID_UUID,
         .resource = "nvidia.com/gpu", .request = "0", .want = "env NVIDIA_VISIBLE_DEVICES=GPU0\n"},
        {"envvar, index, MIG", MIG_NODE, MK_MIG_STRATEGY_MIXED, NULL, ENVVAR, MK_DP_ID_INDEX,
         .resource = "nvidia.com/mig-1g.5gb", .request = "1:0 0:1", .want = "env NVIDIA_VISIBLE_DEVICES=1:0,0:1\n"},
        {"envvar, uuid, MIG single", MIG_NODE, MK_MIG_STRATEGY_MIXED, NULL, ENVVAR, MK_DP_ID_UUID,
         .resource = "nvidia.com/mig-3g.20gb", .request = "0:2", .want = "env NVIDIA_VISIBLE_DEVICES=MIG0/3\n"},
        {"volume-mounts", TWO_GPUS, MK_MIG_STRATEGY_NONE, NULL, VOLUMES, MK_DP_ID_UUID,
         .resource = "nvidia.com/gpu", .request = "0 1",
         .want = "env NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices\n"
                 "mount /var/run/nvidia-container-devices/GPU0 <- /dev/null\n"
                 "mount /var/run/nvidia-container-devices/GPU1 <- /dev/null\n"},
        {"envvar and volume-mounts: the directory wins", MIG_NODE, MK_MIG_STRATEGY_MIXED, NULL, ENVVAR | VOLUMES,
         MK_DP_ID_INDEX, .resource = "nvidia.com/mig-1g.5gb", .request = "0:0",
         .want = "env NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices\n"
                 "mount /var/run/nvidia-container-devices/0:0 <- /dev/null\n"},
        {"cdi-annotations: no env, no device specs", TWO_GPUS, MK_MIG_STRATEGY_NONE, NULL, CDI_ANN, MK_DP_ID_UUID,
         .specs = true, .resource = "nvidia.com/gpu", .request = "0 1",
         .want = "ann cdi.k8s.io/nvidia-device-plugin_<uuid>=k8s.device-plugin.nvidia.com/gpu=GPU0,"
                 "k8s.device-plugin.nvidia.com/gpu=GPU1\n"},
        {"cdi-cri, index, GDS and MOFED", MIG_NODE, MK_MIG_STRATEGY_MIXED, NULL, CDI_CRI, MK_DP_ID_INDEX,
         .gds = true, .mofed = true, .resource = "nvidia.com/mig-1g.5gb", .request = "0:1 1:0",
         .want = "env NVIDIA_GDS=enabled\nenv NVIDIA_MOFED=enabled\n"
                 "cdi k8s.device-plugin.nvidia.com/gpu=0:1\ncdi k8s.device-plugin.nvidia.com/gpu=1:0\n"
                 "cdi k8s.device-plugin.nvidia.com/gds=all\ncdi k8s.device-plugin.nvidia.com/mofed=all\n"},
        {"both CDI strategies, own prefix and kind", TWO_GPUS, MK_MIG_STRATEGY_NONE, NULL, CDI_ANN | CDI_CRI,
         MK_DP_ID_UUID, .gds = true, .prefix = "example.com/", .kind = "acme.io/gpu", .resource = "nvidia.com/gpu",
         .request = "1",
         .want = "env NVIDIA_GDS=enabled\nann example.com/nvidia-device-plugin_<uuid>=acme.io/gpu=GPU1,acme.io/gds=all\n"
                 "cdi acme.io/gpu=GPU1\ncdi acme.io/gds=all\n"},
        {"device specs: control nodes present on the host, GPU nodes", TWO_GPUS, MK_MIG_STRATEGY_NONE, NULL, ENVVAR,
         MK_DP_ID_UUID, .specs = true, .host = true, .resource = "nvidia.com/gpu", .request = "1",
         .want = "env NVIDIA_VISIBLE_DEVICES=GPU1\ndev /dev/nvidiactl <- /dev/nvidiactl rw\n"
                 "dev /dev/nvidia-uvm <- /dev/nvidia-uvm rw\ndev /dev/nvidia1 <- /dev/nvidia1 rw\n"},
        {"device specs: MIG caps from mig-minors, dev root", MIG_NODE, MK_MIG_STRATEGY_MIXED, NULL, ENVVAR,
         MK_DP_ID_UUID, .specs = true, .host = true, .dev_root = "/run/nvidia/driver",
         .resource = "nvidia.com/mig-1g.5gb", .request = "0:1 1:0",
         .want = "env NVIDIA_VISIBLE_DEVICES=MIG0/2,MIG1/1\n"
                 "dev /dev/nvidiactl <- /run/nvidia/driver/dev/nvidiactl rw\n"
                 "dev /dev/nvidia-uvm <- /run/nvidia/driver/dev/nvidia-uvm rw\n"
                 "dev /dev/nvidia0 <- /run/nvidia/driver/dev/nvidia0 rw\n"
                 "dev /dev/nvidia-caps/nvidia-cap21 <- /run/nvidia/driver/dev/nvidia-caps/nvidia-cap21 rw\n"
                 "dev /dev/nvidia-caps/nvidia-cap22 <- /run/nvidia/driver/dev/nvidia-caps/nvidia-cap22 rw\n"
                 "dev /dev/nvidia1 <- /run/nvidia/driver/dev/nvidia1 rw\n"
                 "dev /dev/nvidia-caps/nvidia-cap147 <- /run/nvidia/driver/dev/nvidia-caps/nvidia-cap147 rw\n"
                 "dev /dev/nvidia-caps/nvidia-cap148 <- /run/nvidia/driver/dev/nvidia-caps/nvidia-cap148 rw\n"},
        {"device specs without host roots: every control node", TWO_GPUS, MK_MIG_STRATEGY_NONE, NULL, ENVVAR,
         MK_DP_ID_INDEX, .specs = true, .resource = "nvidia.com/gpu", .request = "0",
         .want = "env NVIDIA_VISIBLE_DEVICES=0\ndev /dev/nvidiactl <- /dev/nvidiactl rw\n"
                 "dev /dev/nvidia-uvm <- /dev/nvidia-uvm rw\ndev /dev/nvidia-uvm-tools <- /dev/nvidia-uvm-tools rw\n"
                 "dev /dev/nvidia-modeset <- /dev/nvidia-modeset rw\ndev /dev/nvidia0 <- /dev/nvidia0 rw\n"},
        {"device specs: MIG without mig-minors", MIG_NODE, MK_MIG_STRATEGY_MIXED, NULL, ENVVAR, MK_DP_ID_UUID,
         .specs = true, .resource = "nvidia.com/mig-1g.5gb", .request = "0:0",
         .want = "error: MIG device 'MIG-00000000-0000-0000-0000-000000000100' (GPU minor 0, GI 1, CI 0): no GPU "
                 "instance access capability in /proc/driver/nvidia-caps/mig-minors"},
        {"replicas: one device for the runtime, specs per replica", TWO_GPUS, MK_MIG_STRATEGY_NONE,
         "sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 4}\n", ENVVAR, MK_DP_ID_UUID,
         .specs = true, .host = true, .resource = "nvidia.com/gpu", .request = "0::3 1::0 0::1",
         .want = "env NVIDIA_VISIBLE_DEVICES=GPU0,GPU1\ndev /dev/nvidiactl <- /dev/nvidiactl rw\n"
                 "dev /dev/nvidia-uvm <- /dev/nvidia-uvm rw\ndev /dev/nvidia0 <- /dev/nvidia0 rw\n"
                 "dev /dev/nvidia1 <- /dev/nvidia1 rw\ndev /dev/nvidia0 <- /dev/nvidia0 rw\n"},
        {"replicas, index strategy", TWO_GPUS, MK_MIG_STRATEGY_NONE,
         "sharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n    - {name: gpu, replicas: 4}\n",
         VOLUMES, MK_DP_ID_INDEX, .resource = "nvidia.com/gpu.shared", .request = "1::2 1::3",
         .want = "env NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices\n"
                 "mount /var/run/nvidia-container-devices/1 <- /dev/null\n"},
        {"failRequestsGreaterThanOne", TWO_GPUS, MK_MIG_STRATEGY_NONE,
         "sharing:\n  timeSlicing:\n    failRequestsGreaterThanOne: true\n    resources:\n"
         "    - {name: gpu, replicas: 4}\n",
         ENVVAR, MK_DP_ID_UUID, .resource = "nvidia.com/gpu", .request = "0::0 1::1",
         .want = "error: invalid allocation request for 'nvidia.com/gpu': maximum request size for shared resources "
                 "is 1; found 2"},
        {"failRequestsGreaterThanOne, one is fine", TWO_GPUS, MK_MIG_STRATEGY_NONE,
         "sharing:\n  timeSlicing:\n    failRequestsGreaterThanOne: true\n    resources:\n"
         "    - {name: gpu, replicas: 4}\n",
         ENVVAR, MK_DP_ID_UUID, .resource = "nvidia.com/gpu", .request = "1::1",
         .want = "env NVIDIA_VISIBLE_DEVICES=GPU1\n"},
        {"unknown device", TWO_GPUS, MK_MIG_STRATEGY_NONE, NULL, ENVVAR, MK_DP_ID_UUID,
         .resource = "nvidia.com/gpu", .request = "0 GPU-nope",
         .want = "error: invalid allocation request for 'nvidia.com/gpu': unknown device: 'GPU-nope'"},
        /* The kubelet never repeats an id; a repeat is refused, named (issue 17). */
        {"a device listed twice", TWO_GPUS, MK_MIG_STRATEGY_NONE, NULL, ENVVAR, MK_DP_ID_UUID,
         .resource = "nvidia.com/gpu", .request = "0 1 0",
         .want = "error: invalid allocation request for 'nvidia.com/gpu': device "
                 "'GPU-00000000-0000-0000-0000-000000000000' is listed twice"},
        {"a replica listed twice (two replicas of one device are fine)", TWO_GPUS, MK_MIG_STRATEGY_NONE,
         "sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 4}\n", ENVVAR, MK_DP_ID_UUID,
         .resource = "nvidia.com/gpu", .request = "0::1 0::2 0::1",
         .want = "error: device 'GPU-00000000-0000-0000-0000-000000000000::1' is listed twice"},
        {"a MIG device asked of another resource", MIG_NODE, MK_MIG_STRATEGY_MIXED, NULL, ENVVAR, MK_DP_ID_UUID,
         .resource = "nvidia.com/mig-1g.5gb", .request = "MIG-00000000-0000-0000-0000-000000000300",
         .want = "error: unknown device: 'MIG-00000000-0000-0000-0000-000000000300'"},
        {"empty request", TWO_GPUS, MK_MIG_STRATEGY_NONE, NULL, ENVVAR, MK_DP_ID_UUID,
         .resource = "nvidia.com/gpu", .request = "", .want = "error: no devices"},
};

static void host_init(struct mk_host *h) {
        const char *src = getenv("MIGKIT_SOURCE_DIR");
        assert_non_null(src);
        *h = (struct mk_host) {0};
        assert_true(asprintf(&h->sysfs_root, "%s/tests/fixtures/plugin/sys", src) > 0);
        assert_true(asprintf(&h->proc_root, "%s/tests/fixtures/plugin/proc", src) > 0);
        assert_true(asprintf(&h->dev_root, "%s/tests/fixtures/plugin/dev", src) > 0);
}

/* Resolves "0", "0:1", "0::2" (index and replica) or a literal id ("GPU-…")
 * to the resource's advertised ids. */
static size_t resolve(const struct mk_dp_resource *r, const char *request, char ids[][MK_DP_ID_MAX], size_t max) {
        _cleanup_free_ char *copy = strdup(request);
        assert_non_null(copy);
        size_t n = 0;
        char *save = NULL;
        for (char *w = strtok_r(copy, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
                assert_true(n < max);
                if (strneq(w, "GPU-", 4) || strneq(w, "MIG-", 4)) {
                        snprintf(ids[n++], MK_DP_ID_MAX, "%s", w);
                        continue;
                }
                char *rep = strstr(w, "::");
                unsigned replica = 0;
                if (rep) {
                        *rep = 0;
                        replica = (unsigned) strtoul(rep + 2, NULL, 10);
                }
                bool found = false;
                for (size_t i = 0; i < r->n_devices && !found; i++)
                        if (streq(r->devices[i].index, w) && r->devices[i].replica == replica &&
                            (rep != NULL) == !streq(r->devices[i].id, r->devices[i].base_id)) {
                                snprintf(ids[n++], MK_DP_ID_MAX, "%s", r->devices[i].id);
                                found = true;
                        }
                if (!found)
                        fail_msg("no device '%s' in '%s'", w, r->name);
        }
        return n;
}

static void test_cases(void **state) {
        _cleanup_(mk_host_done) struct mk_host h;
        host_init(&h);
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                const struct acase *t = &cases[i];
                _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = snap_build(t->gpus);
                assert_non_null(s);
                struct mk_error e = {0};
                _cleanup_(mk_plugin_config_freep) struct mk_plugin_config *cfg = NULL;
                if (t->config)
                        assert_int_equal(mk_plugin_config_parse(t->config, strlen(t->config), "c.yaml", &cfg, &e), 0);
                struct mk_dp_options o;
                mk_dp_options_init(&o);
                o.mig_strategy = t->strategy;
                o.config = cfg;
                o.list_strategies = t->lists;
                o.id_strategy = t->ids;
                o.pass_device_specs = t->specs;
                o.host = t->host ? &h : NULL;
                o.gds_enabled = t->gds;
                o.mofed_enabled = t->mofed;
                if (t->dev_root)
                        o.dev_root = t->dev_root;
                if (t->prefix)
                        o.cdi_annotation_prefix = t->prefix;
                if (t->kind)
                        o.cdi_kind = t->kind;
                _cleanup_(mk_dp_resources_freep) struct mk_dp_resources *rs = NULL;
                if (mk_dp_resources_build(s, &o, &rs, &e) < 0)
                        fail_msg("case '%s': %s", t->name, e.msg);
                const struct mk_dp_resource *r = mk_dp_resources_find(rs, t->resource);
                if (!r)
                        fail_msg("case '%s': no resource '%s'", t->name, t->resource);
                char ids[16][MK_DP_ID_MAX];
                const char *idp[16];
                size_t n = resolve(r, t->request, ids, 16);
                for (size_t k = 0; k < n; k++)
                        idp[k] = ids[k];
                struct mk_dp_response res = {.n_envs = 99};
                int q = mk_dp_allocate(s, r, idp, n, &o, &res, &e);
                if (strneq(t->want, "error: ", 7)) {
                        if (q >= 0)
                                fail_msg("case '%s': allocated, want %s", t->name, t->want);
                        assert_int_equal(q, -EINVAL);
                        assert_int_equal(res.n_envs, 99); /* untouched */
                        if (!strstr(e.msg, t->want + 7))
                                fail_msg("case '%s':\n got: %s\nwant: %s", t->name, e.msg, t->want + 7);
                        continue;
                }
                if (q < 0)
                        fail_msg("case '%s': %s", t->name, e.msg);
                _cleanup_free_ char *got = dump(s, &res);
                mk_dp_response_done(&res);
                if (!streq(got, t->want))
                        fail_msg("case '%s':\n got:\n%s\nwant:\n%s", t->name, got, t->want);
        }
}

/* The raw strings, unshortened, and the helpers. */
static void test_raw(void **state) {
        const struct snap_gpu gpus[] = {{"a100", MIG, "1g.5gb"}, {0}};
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = snap_build(gpus);
        struct mk_dp_options o;
        mk_dp_options_init(&o);
        o.mig_strategy = MK_MIG_STRATEGY_SINGLE;
        o.list_strategies = ENVVAR | CDI_ANN;
        struct mk_error e = {0};
        _cleanup_(mk_dp_resources_freep) struct mk_dp_resources *rs = NULL;
        assert_int_equal(mk_dp_resources_build(s, &o, &rs, &e), 0);
        const struct mk_dp_resource *r = mk_dp_resources_find(rs, "nvidia.com/gpu");
        const char *ids[] = {"MIG-00000000-0000-0000-0000-000000000100"};
        struct mk_dp_response a = {0}, b = {0};
        assert_int_equal(mk_dp_allocate(s, r, ids, 1, &o, &a, &e), 0);
        assert_int_equal(mk_dp_allocate(s, r, ids, 1, &o, &b, &e), 0);
        assert_string_equal(mk_dp_response_env(&a, "NVIDIA_VISIBLE_DEVICES"), ids[0]);
        assert_null(mk_dp_response_env(&a, "NVIDIA_GDS"));
        assert_int_equal(a.n_annotations, 1);
        assert_string_equal(a.annotations[0].value, "k8s.device-plugin.nvidia.com/gpu=MIG-00000000-0000-0000-0000-000000000100");
        /* Each call its own key. */
        assert_string_not_equal(a.annotations[0].key, b.annotations[0].key);
        mk_dp_response_done(&a);
        mk_dp_response_done(&a); /* done twice is fine */
        mk_dp_response_done(&b);
        mk_dp_response_done(NULL);

        /* Over the id cap. */
        const char **many = calloc(MK_DP_MAX_REQUEST_IDS + 1, sizeof(*many));
        assert_non_null(many);
        for (size_t i = 0; i <= MK_DP_MAX_REQUEST_IDS; i++)
                many[i] = ids[0];
        assert_int_equal(mk_dp_allocate(s, r, many, MK_DP_MAX_REQUEST_IDS + 1, &o, &a, &e), -EINVAL);
        assert_non_null(strstr(e.msg, "at most 4096"));
        /* The same id many times: refused, naming it (the kubelet never repeats an id). */
        assert_int_equal(mk_dp_allocate(s, r, many, MK_DP_MAX_REQUEST_IDS, &o, &a, &e), -EINVAL);
        assert_non_null(strstr(e.msg, "device 'MIG-00000000-0000-0000-0000-000000000100' is listed twice"));
        free(many);
        /* A NULL id. */
        const char *nul[] = {NULL};
        assert_int_equal(mk_dp_allocate(s, r, nul, 1, &o, &a, &e), -EINVAL);
}

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *) a, y = *(const double *) b;
        return x < y ? -1 : x > y;
}

/* Bench-style print (no assertion on time): 10,000 Allocate calls of one MIG
 * device with device specs on an 8-GPU H100 node in mixed MIG, median and p99. */
static void test_timing(void **state) {
        struct snap_gpu gpus[9];
        for (size_t i = 0; i < 8; i++)
                gpus[i] = (struct snap_gpu) {"h100", MIG, i % 2 ? "1g.10gb*7" : "3g.40gb*2"};
        gpus[8] = (struct snap_gpu) {0};
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = snap_build(gpus);
        assert_non_null(s);
        _cleanup_(mk_host_done) struct mk_host h;
        host_init(&h);
        struct mk_dp_options o;
        mk_dp_options_init(&o);
        o.mig_strategy = MK_MIG_STRATEGY_MIXED;
        o.pass_device_specs = true;
        o.host = &h;
        o.list_strategies = ENVVAR | CDI_ANN;
        struct mk_error e = {0};
        _cleanup_(mk_dp_resources_freep) struct mk_dp_resources *rs = NULL;
        assert_int_equal(mk_dp_resources_build(s, &o, &rs, &e), 0);
        const struct mk_dp_resource *r = mk_dp_resources_find(rs, "nvidia.com/mig-1g.10gb");
        assert_int_equal(r->n_devices, 28);
        enum { N = 10000 };
        double *t = calloc(N, sizeof(*t));
        assert_non_null(t);
        for (size_t i = 0; i < N; i++) {
                const char *id = r->devices[i % r->n_devices].id;
                struct timespec a, b;
                clock_gettime(CLOCK_MONOTONIC, &a);
                struct mk_dp_response res;
                assert_int_equal(mk_dp_allocate(s, r, &id, 1, &o, &res, &e), 0);
                mk_dp_response_done(&res);
                clock_gettime(CLOCK_MONOTONIC, &b);
                t[i] = (double) (b.tv_sec - a.tv_sec) * 1e6 + (double) (b.tv_nsec - a.tv_nsec) / 1e3;
        }
        qsort(t, N, sizeof(*t), cmp_double);
        printf("# Allocate, one MIG device, envvar + cdi-annotations + device specs, 8 x H100 mixed: "
               "median %.1f us, p99 %.1f us over %d calls\n",
               t[N / 2], t[N * 99 / 100], N);
        free(t);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_cases),
                cmocka_unit_test(test_raw),
                cmocka_unit_test(test_timing),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests for gfd/labels: GFD labels as data. Each case is a
 * hand-built node (GPU models, MIG modes, MIG layouts), a strategy and an
 * optional sharing config; the labels it must have, and the keys it must not.
 * Golden files for simulated machines are in tests/integration/test-labels.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/macro.h"
#include "gfd/labels.h"
#include "mig/gpu.h"
#include "spec/plugin-config.h"

/* ---- GPU models (figures as NVML reports them on the real parts) ---- */

struct prof {
        const char *name;
        unsigned id, slices;
        uint64_t memory_mib;
        unsigned mp, copy, dec, enc, jpeg, ofa;
};

struct model {
        const char *key, *name;
        uint64_t memory_mib;
        int cc_major, cc_minor;
        bool mig_capable;
        struct prof profiles[6];
};

static const struct model models[] = {
        {"a100", "NVIDIA A100-SXM4-40GB", 40960, 8, 0, true,
         {{"1g.5gb", 19, 1, 4864, 14, 1, 0, 0, 0, 0},
          {"2g.10gb", 14, 2, 9856, 28, 2, 1, 0, 0, 0},
          {"3g.20gb", 9, 3, 19968, 42, 3, 2, 0, 0, 0},
          {"7g.40gb", 0, 7, 40192, 98, 7, 5, 0, 1, 1},
          {"1g.10gb", 15, 1, 9856, 14, 1, 1, 0, 0, 0}}},
        {"a100-80", "NVIDIA A100-SXM4-80GB", 81920, 8, 0, true,
         {{"1g.10gb", 19, 1, 9728, 14, 1, 0, 0, 0, 0}, {"7g.80gb", 0, 7, 80384, 98, 7, 5, 0, 1, 1}}},
        {"h100", "NVIDIA H100 80GB HBM3", 81559, 9, 0, true,
         {{"1g.10gb", 19, 1, 9984, 16, 1, 1, 0, 1, 0}, {"7g.80gb", 0, 7, 80384, 132, 8, 7, 0, 7, 1}}},
        {"t4", "Tesla T4", 15360, 7, 5, false, {{0}}},
};

static const struct model *model_get(const char *key) {
        for (size_t i = 0; i < ELEMENTSOF(models); i++)
                if (streq(models[i].key, key))
                        return &models[i];
        fail_msg("no model '%s'", key);
        return NULL;
}

struct gpu_spec {
        const char *model;      /* NULL ends the list */
        enum mk_mig_mode mig;
        const char *layout;     /* "3g.20gb,1g.5gb*2,1c.3g.20gb": one GI with one CI each */
};

/* Adds one GI (with one CI of `c` slices, 0: full) of profile `pname`. */
static void add_gi(struct mk_gpu *g, const char *pname, unsigned c, const char *ci_name) {
        const struct mk_gi_profile *p = NULL;
        for (size_t i = 0; i < g->n_profiles && !p; i++)
                if (streq(g->profiles[i].name, pname))
                        p = &g->profiles[i];
        if (!p)
                fail_msg("%s has no profile '%s'", g->name, pname);
        g->gis = realloc(g->gis, (g->n_gis + 1) * sizeof(*g->gis));
        assert_non_null(g->gis);
        struct mk_gi *gi = &g->gis[g->n_gis];
        *gi = (struct mk_gi) {.id = (unsigned) g->n_gis + 1, .profile_id = p->id, .nvml_enum = p->nvml_enum};
        gi->cis = calloc(1, sizeof(*gi->cis));
        assert_non_null(gi->cis);
        gi->n_cis = 1;
        gi->cis[0] = (struct mk_ci) {.id = 0, .profile_id = UINT32_MAX - 1, .slices = c ? c : p->slices};
        snprintf(gi->cis[0].name, sizeof(gi->cis[0].name), "%s", ci_name);
        g->n_gis++;
}

static void build_layout(struct mk_gpu *g, const char *layout) {
        _cleanup_free_ char *copy = strdup(layout);
        assert_non_null(copy);
        char *save = NULL;
        for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
                unsigned count = 1;
                char *star = strchr(item, '*');
                if (star) {
                        *star = 0;
                        count = (unsigned) (star[1] - '0');
                }
                unsigned c = 0;
                const char *gi_name = item;
                if (item[0] >= '1' && item[0] <= '9' && item[1] == 'c' && item[2] == '.') {
                        c = (unsigned) (item[0] - '0');
                        gi_name = item + 3;
                }
                for (unsigned k = 0; k < count; k++)
                        add_gi(g, gi_name, c, item);
        }
}

static struct mk_snapshot *build(const struct gpu_spec *specs) {
        struct mk_snapshot *s = calloc(1, sizeof(*s));
        assert_non_null(s);
        snprintf(s->driver_version, sizeof(s->driver_version), "550.54.15");
        snprintf(s->nvml_version, sizeof(s->nvml_version), "12.550.54.15");
        size_t n = 0;
        while (specs[n].model)
                n++;
        s->gpus = calloc(n ? n : 1, sizeof(*s->gpus));
        assert_non_null(s->gpus);
        for (size_t i = 0; i < n; i++) {
                const struct model *m = model_get(specs[i].model);
                struct mk_gpu *g = &s->gpus[i];
                s->n_gpus = i + 1;
                g->index = (unsigned) i;
                snprintf(g->uuid, sizeof(g->uuid), "GPU-0000000%zu-0000-0000-0000-000000000000", i);
                snprintf(g->name, sizeof(g->name), "%s", m->name);
                g->memory_total_bytes = m->memory_mib << 20;
                g->cc_major = m->cc_major;
                g->cc_minor = m->cc_minor;
                g->mig_capable = m->mig_capable;
                g->mig_current = g->mig_pending = m->mig_capable ? specs[i].mig : MK_MIG_UNSUPPORTED;
                size_t np = 0;
                while (np < ELEMENTSOF(m->profiles) && m->profiles[np].name)
                        np++;
                g->profiles = calloc(np ? np : 1, sizeof(*g->profiles));
                assert_non_null(g->profiles);
                g->n_profiles = np;
                for (size_t k = 0; k < np; k++) {
                        const struct prof *p = &m->profiles[k];
                        struct mk_gi_profile *gp = &g->profiles[k];
                        *gp = (struct mk_gi_profile) {.id = p->id, .slices = p->slices, .memory_mib = p->memory_mib,
                                                      .multiprocessors = p->mp, .copy_engines = p->copy,
                                                      .decoders = p->dec, .encoders = p->enc, .jpegs = p->jpeg,
                                                      .ofas = p->ofa, .named = true, .max_count = 7};
                        snprintf(gp->name, sizeof(gp->name), "%s", p->name);
                }
                if (specs[i].layout)
                        build_layout(g, specs[i].layout);
        }
        return s;
}

/* ---- cases ---- */

#define A100(mode, layout) {"a100", mode, layout}
#define A100X8(mode, layout)                                                                                   \
        A100(mode, layout), A100(mode, layout), A100(mode, layout), A100(mode, layout), A100(mode, layout),    \
                A100(mode, layout), A100(mode, layout), A100(mode, layout)
#define OFF MK_MIG_DISABLED
#define ON MK_MIG_ENABLED

static const char *const driver_labels = "nvidia.com/cuda.driver.major=550\n"
                                         "nvidia.com/cuda.driver.minor=54\n"
                                         "nvidia.com/cuda.driver.rev=15\n"
                                         "nvidia.com/cuda.driver-version.major=550\n"
                                         "nvidia.com/cuda.driver-version.minor=54\n"
                                         "nvidia.com/cuda.driver-version.revision=15\n"
                                         "nvidia.com/cuda.driver-version.full=550.54.15\n";

static const char *const ts_shared = "sharing:\n  timeSlicing:\n    resources:\n"
                                     "    - {name: nvidia.com/gpu, replicas: 4}\n"
                                     "    - {name: mig-1g.5gb, replicas: 2, rename: small}\n";

struct label_case {
        const char *name;
        struct gpu_spec gpus[10];
        enum mk_mig_strategy strategy;
        const char *config;     /* YAML, or NULL */
        unsigned cuda;
        int error;              /* expected -errno, 0 for success */
        const char *want;       /* "key=value" lines that must be present (error: message substring) */
        const char *absent;     /* keys (one a line) that must not be */
};

static const struct label_case cases[] = {
        {"none on A100 (MIG off)",
         {A100X8(OFF, NULL)},
         MK_MIG_STRATEGY_NONE, NULL, 0, 0,
         "nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB\nnvidia.com/gpu.count=8\nnvidia.com/gpu.memory=40960\n"
         "nvidia.com/gpu.family=ampere\nnvidia.com/gpu.compute.major=8\nnvidia.com/gpu.compute.minor=0\n"
         "nvidia.com/gpu.replicas=1\nnvidia.com/gpu.sharing-strategy=none\nnvidia.com/mig.capable=true\n"
         "nvidia.com/mps.capable=false\n",
         "nvidia.com/mig.strategy\nnvidia.com/gfd.timestamp\nnvidia.com/cuda.runtime.major\n"
         "nvidia.com/gpu.multiprocessors\n"},
        /* Issue 16 parity case 1, upstream GFD v0.16.2: MIG-enabled GPUs get a
         * labeler without sharing under every strategy: gpu.replicas=0. */
        {"none on A100 with MIG on: MIG devices hidden, replicas 0 as upstream",
         {A100X8(ON, "1g.5gb*7")},
         MK_MIG_STRATEGY_NONE, ts_shared, 0, 0,
         "nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB\nnvidia.com/gpu.count=8\nnvidia.com/gpu.replicas=0\n"
         "nvidia.com/gpu.sharing-strategy=none\n",
         "nvidia.com/mig-1g.5gb.count\nnvidia.com/gpu.slices.gi\nnvidia.com/mig.strategy\n"},
        {"none, one model with MIG on and off: the MIG-disabled GPU's sharing wins",
         {A100(ON, "1g.5gb*7"), A100(OFF, NULL)},
         MK_MIG_STRATEGY_NONE, NULL, 0, 0, "nvidia.com/gpu.count=2\nnvidia.com/gpu.replicas=1\n", NULL},
        {"none on H100",
         {{"h100", OFF, NULL}, {"h100", OFF, NULL}},
         MK_MIG_STRATEGY_NONE, NULL, 12040, 0,
         "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3\nnvidia.com/gpu.count=2\nnvidia.com/gpu.memory=81559\n"
         "nvidia.com/gpu.family=hopper\nnvidia.com/gpu.compute.major=9\nnvidia.com/cuda.runtime.major=12\n"
         "nvidia.com/cuda.runtime.minor=4\nnvidia.com/cuda.runtime-version.full=12.4\n",
         NULL},
        {"single, uniform layout",
         {A100X8(ON, "1g.5gb*7")},
         MK_MIG_STRATEGY_SINGLE, NULL, 0, 0,
         "nvidia.com/mig.strategy=single\nnvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB-MIG-1g.5gb\n"
         "nvidia.com/gpu.count=56\nnvidia.com/gpu.memory=4864\nnvidia.com/gpu.multiprocessors=14\n"
         "nvidia.com/gpu.slices.gi=1\nnvidia.com/gpu.slices.ci=1\nnvidia.com/gpu.engines.copy=1\n"
         "nvidia.com/gpu.engines.decoder=0\nnvidia.com/gpu.engines.encoder=0\nnvidia.com/gpu.engines.jpeg=0\n"
         "nvidia.com/gpu.engines.ofa=0\nnvidia.com/gpu.replicas=1\nnvidia.com/gpu.sharing-strategy=none\n"
         "nvidia.com/gpu.family=ampere\nnvidia.com/gpu.compute.major=8\n",
         "nvidia.com/mig-1g.5gb.count\n"},
        {"single, no MIG-enabled GPU: like none",
         {A100X8(OFF, NULL)},
         MK_MIG_STRATEGY_SINGLE, NULL, 0, 0,
         "nvidia.com/mig.strategy=single\nnvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB\nnvidia.com/gpu.count=8\n"
         "nvidia.com/gpu.replicas=1\n",
         "nvidia.com/gpu.slices.gi\n"},
        {"single, two profiles: invalid",
         {A100(ON, "3g.20gb,2g.10gb,1g.5gb*2"), A100(ON, "3g.20gb,2g.10gb,1g.5gb*2")},
         MK_MIG_STRATEGY_SINGLE, NULL, 0, 0,
         "nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB-MIG-INVALID\nnvidia.com/gpu.count=0\n"
         "nvidia.com/gpu.replicas=0\nnvidia.com/gpu.sharing-strategy=\nnvidia.com/gpu.memory=0\n",
         "nvidia.com/gpu.slices.gi\nnvidia.com/gpu.multiprocessors\n"},
        {"single, MIG and full GPUs mixed: invalid",
         {A100(ON, "1g.5gb*7"), A100(OFF, NULL)},
         MK_MIG_STRATEGY_SINGLE, NULL, 0, 0,
         "nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB-MIG-INVALID\nnvidia.com/gpu.count=0\n", NULL},
        {"single, MIG enabled without instances: invalid",
         {A100(ON, "1g.5gb*7"), A100(ON, NULL)},
         MK_MIG_STRATEGY_SINGLE, NULL, 0, 0,
         "nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB-MIG-INVALID\nnvidia.com/gpu.count=0\n", NULL},
        {"mixed, all-balanced",
         {A100X8(ON, "3g.20gb,2g.10gb,1g.5gb*2")},
         MK_MIG_STRATEGY_MIXED, NULL, 0, 0,
         "nvidia.com/mig.strategy=mixed\nnvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB\nnvidia.com/gpu.count=8\n"
         "nvidia.com/gpu.replicas=0\nnvidia.com/gpu.sharing-strategy=none\n"
         "nvidia.com/mig-1g.5gb.count=16\nnvidia.com/mig-1g.5gb.product=NVIDIA-A100-SXM4-40GB-MIG-1g.5gb\n"
         "nvidia.com/mig-1g.5gb.memory=4864\nnvidia.com/mig-1g.5gb.replicas=1\n"
         "nvidia.com/mig-2g.10gb.count=8\nnvidia.com/mig-2g.10gb.multiprocessors=28\n"
         "nvidia.com/mig-2g.10gb.engines.decoder=1\nnvidia.com/mig-3g.20gb.count=8\n"
         "nvidia.com/mig-3g.20gb.slices.gi=3\nnvidia.com/mig-3g.20gb.slices.ci=3\n"
         "nvidia.com/mig-3g.20gb.sharing-strategy=none\n",
         "nvidia.com/mig-7g.40gb.count\nnvidia.com/mig-3g.20gb.family\n"},
        {"mixed, MIG enabled without instances: ignored",
         {A100(ON, NULL), A100(ON, NULL), A100(OFF, NULL)},
         MK_MIG_STRATEGY_MIXED, NULL, 0, 0,
         "nvidia.com/mig.strategy=mixed\nnvidia.com/gpu.count=3\nnvidia.com/mig.capable=true\n",
         "nvidia.com/mig-1g.5gb.count\n"},
        {"mixed, MIG and full GPU side by side",
         {A100(OFF, NULL), A100(ON, "7g.40gb")},
         MK_MIG_STRATEGY_MIXED, NULL, 0, 0,
         "nvidia.com/gpu.count=2\nnvidia.com/gpu.replicas=1\nnvidia.com/mig-7g.40gb.count=1\n"
         "nvidia.com/mig-7g.40gb.engines.jpeg=1\nnvidia.com/mig-7g.40gb.engines.ofa=1\n"
         "nvidia.com/mig-7g.40gb.multiprocessors=98\n",
         NULL},
        /* Issue 16 parity case 2, upstream GFD v0.16.2: GPU instances with a
         * smaller compute instance are labelled by the CI profile's name. */
        {"mixed, CI smaller than GI: labelled by the CI profile, as upstream",
         {A100X8(ON, "1c.3g.20gb*2")},
         MK_MIG_STRATEGY_MIXED, NULL, 0, 0,
         "nvidia.com/mig-1c.3g.20gb.count=16\nnvidia.com/mig-1c.3g.20gb.product=NVIDIA-A100-SXM4-40GB-MIG-1c.3g.20gb\n"
         "nvidia.com/mig-1c.3g.20gb.slices.gi=3\nnvidia.com/mig-1c.3g.20gb.slices.ci=1\n"
         "nvidia.com/mig-1c.3g.20gb.memory=19968\nnvidia.com/mig-1c.3g.20gb.multiprocessors=14\n"
         "nvidia.com/mig-1c.3g.20gb.replicas=1\nnvidia.com/gpu.replicas=0\n",
         "nvidia.com/mig-3g.20gb.count\n"},
        /* Issue 16 parity case 3, upstream GFD v0.16.2 on a node with A100 40GB
         * and 80GB, 1g.10gb on both: every 1g.10gb device of the node (4x4 + 4x7). */
        {"mixed, two models with one profile name: count of the node, as upstream",
         {A100(ON, "1g.10gb*4"), A100(ON, "1g.10gb*4"), A100(ON, "1g.10gb*4"), A100(ON, "1g.10gb*4"),
          {"a100-80", ON, "1g.10gb*7"}, {"a100-80", ON, "1g.10gb*7"}, {"a100-80", ON, "1g.10gb*7"},
          {"a100-80", ON, "1g.10gb*7"}},
         MK_MIG_STRATEGY_MIXED, NULL, 0, 0,
         "nvidia.com/mig-1g.10gb.count=44\nnvidia.com/mig-1g.10gb.product=NVIDIA-A100-SXM4-40GB-MIG-1g.10gb\n"
         "nvidia.com/mig-1g.10gb.memory=9856\n",
         NULL},
        /* ... and under single: upstream's plugin refuses the layout (two
         * device types) and so do we with MIG-INVALID; upstream GFD differs
         * (docs/labels.md). */
        {"single, two models with one profile name: invalid, as upstream's plugin",
         {A100(ON, "1g.10gb*4"), A100(ON, "1g.10gb*4"), A100(ON, "1g.10gb*4"), A100(ON, "1g.10gb*4"),
          {"a100-80", ON, "1g.10gb*7"}, {"a100-80", ON, "1g.10gb*7"}, {"a100-80", ON, "1g.10gb*7"},
          {"a100-80", ON, "1g.10gb*7"}},
         MK_MIG_STRATEGY_SINGLE, NULL, 0, 0,
         "nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB-MIG-INVALID\nnvidia.com/gpu.count=0\n", NULL},
        {"single, CI smaller than GI: named by the CI, SMs by share",
         {A100(ON, "1c.3g.20gb*2")},
         MK_MIG_STRATEGY_SINGLE, NULL, 0, 0,
         "nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB-MIG-1c.3g.20gb\nnvidia.com/gpu.count=2\n"
         "nvidia.com/gpu.slices.gi=3\nnvidia.com/gpu.slices.ci=1\nnvidia.com/gpu.multiprocessors=14\n"
         "nvidia.com/gpu.memory=19968\n",
         NULL},
        {"sharing: replicas, -SHARED, rename",
         {A100(OFF, NULL), A100(ON, "1g.5gb*7")},
         MK_MIG_STRATEGY_MIXED, ts_shared, 0, 0,
         "nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB-SHARED\nnvidia.com/gpu.replicas=4\n"
         "nvidia.com/gpu.sharing-strategy=time-slicing\nnvidia.com/gpu.count=2\n"
         "nvidia.com/mig-1g.5gb.product=NVIDIA-A100-SXM4-40GB-MIG-1g.5gb\nnvidia.com/mig-1g.5gb.replicas=2\n"
         "nvidia.com/mig-1g.5gb.sharing-strategy=time-slicing\nnvidia.com/mps.capable=false\n",
         NULL},
        {"sharing: renameByDefault drops -SHARED",
         {A100(OFF, NULL)},
         MK_MIG_STRATEGY_NONE,
         "sharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n    - {name: gpu, replicas: 10}\n", 0,
         0,
         "nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB\nnvidia.com/gpu.replicas=10\n"
         "nvidia.com/gpu.sharing-strategy=time-slicing\n",
         NULL},
        {"sharing: single MIG resource shared",
         {A100X8(ON, "1g.5gb*7")},
         MK_MIG_STRATEGY_SINGLE, ts_shared, 0, 0,
         "nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED\nnvidia.com/gpu.replicas=4\n"
         "nvidia.com/gpu.count=56\n",
         NULL},
        {"sharing: MPS",
         {{"h100", OFF, NULL}},
         MK_MIG_STRATEGY_NONE, "sharing:\n  mps:\n    resources:\n    - {name: gpu, replicas: 4}\n", 0, 0,
         "nvidia.com/mps.capable=true\nnvidia.com/gpu.sharing-strategy=mps\n"
         "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3-SHARED\n",
         NULL},
        {"sharing: MPS with MIG enabled is an error",
         {A100(ON, "7g.40gb")},
         MK_MIG_STRATEGY_MIXED, "sharing:\n  mps:\n    resources:\n    - {name: gpu, replicas: 4}\n", 0, -EINVAL,
         "MPS sharing is not supported on a node with MIG enabled", NULL},
        /* Two models: the one with most GPUs, never a random one. */
        {"two models: the majority model",
         {{"t4", OFF, NULL}, A100(OFF, NULL), A100(OFF, NULL), {"t4", OFF, NULL}, A100(OFF, NULL)},
         MK_MIG_STRATEGY_NONE, NULL, 0, 0,
         "nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB\nnvidia.com/gpu.count=3\nnvidia.com/gpu.memory=40960\n"
         "nvidia.com/gpu.family=ampere\nnvidia.com/mig.capable=true\n",
         NULL},
        {"two models, a tie: the model of GPU 0",
         {{"t4", OFF, NULL}, A100(OFF, NULL), A100(OFF, NULL), {"t4", OFF, NULL}},
         MK_MIG_STRATEGY_NONE, NULL, 0, 0,
         "nvidia.com/gpu.product=Tesla-T4\nnvidia.com/gpu.count=2\nnvidia.com/gpu.family=turing\n", NULL},
        {"two models, mixed: each profile by its first device, counted over the node",
         {A100(ON, "1g.5gb*7"), {"h100", ON, "1g.10gb*7"}, {"a100-80", ON, "1g.10gb*7"},
          {"a100-80", ON, "1g.10gb*7"}},
         MK_MIG_STRATEGY_MIXED, NULL, 0, 0,
         "nvidia.com/mig-1g.10gb.product=NVIDIA-H100-80GB-HBM3-MIG-1g.10gb\nnvidia.com/mig-1g.10gb.count=21\n"
         "nvidia.com/mig-1g.10gb.memory=9984\nnvidia.com/mig-1g.5gb.count=7\n"
         "nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB\nnvidia.com/gpu.count=2\n",
         NULL},
        {"two models, single: same profile name, different attributes: invalid",
         {{"a100-80", ON, "1g.10gb*7"}, {"h100", ON, "1g.10gb*7"}},
         MK_MIG_STRATEGY_SINGLE, NULL, 0, 0, "nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB-MIG-INVALID\n", NULL},
        {"non-MIG GPU (T4)",
         {{"t4", OFF, NULL}},
         MK_MIG_STRATEGY_NONE, NULL, 0, 0,
         "nvidia.com/gpu.product=Tesla-T4\nnvidia.com/gpu.count=1\nnvidia.com/gpu.memory=15360\n"
         "nvidia.com/gpu.family=turing\nnvidia.com/gpu.compute.major=7\nnvidia.com/gpu.compute.minor=5\n"
         "nvidia.com/mig.capable=false\nnvidia.com/mps.capable=false\n",
         "nvidia.com/mig.strategy\n"},
        {"T4 with the mixed strategy: full GPU labels only",
         {{"t4", OFF, NULL}},
         MK_MIG_STRATEGY_MIXED, NULL, 0, 0,
         "nvidia.com/gpu.product=Tesla-T4\nnvidia.com/gpu.replicas=1\nnvidia.com/mig.strategy=mixed\n", NULL},
};

/* Each line of `lines` (key=value) must be in `l`. */
static void check_present(const char *name, const struct mk_labels *l, const char *lines) {
        _cleanup_free_ char *copy = strdup(lines);
        assert_non_null(copy);
        char *save = NULL;
        for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                char *eq = strchr(line, '=');
                assert_non_null(eq);
                *eq = 0;
                const char *got = mk_labels_get(l, line);
                if (!got)
                        fail_msg("case '%s': no label '%s' (want '%s')", name, line, eq + 1);
                if (!streq(got, eq + 1))
                        fail_msg("case '%s': label '%s' is '%s', want '%s'", name, line, got, eq + 1);
        }
}

static void check_absent(const char *name, const struct mk_labels *l, const char *keys) {
        _cleanup_free_ char *copy = strdup(keys);
        assert_non_null(copy);
        char *save = NULL;
        for (char *key = strtok_r(copy, "\n", &save); key; key = strtok_r(NULL, "\n", &save)) {
                const char *got = mk_labels_get(l, key);
                if (got)
                        fail_msg("case '%s': unexpected label '%s=%s'", name, key, got);
        }
}

static void test_cases(void **state) {
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                const struct label_case *t = &cases[i];
                _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = build(t->gpus);
                _cleanup_(mk_plugin_config_freep) struct mk_plugin_config *cfg = NULL;
                struct mk_error e = {0};
                if (t->config && mk_plugin_config_parse(t->config, strlen(t->config), "c.yaml", &cfg, &e) < 0)
                        fail_msg("case '%s': config: %s", t->name, e.msg);
                struct mk_labels_input in = {
                        .snapshot = s, .strategy = t->strategy, .config = cfg, .cuda_driver_version = t->cuda};
                _cleanup_(mk_labels_freep) struct mk_labels *l = NULL;
                int r = mk_labels_compute(&in, &l, &e);
                if (t->error) {
                        if (r != t->error)
                                fail_msg("case '%s': got %d, want %d", t->name, r, t->error);
                        if (!strstr(e.msg, t->want))
                                fail_msg("case '%s': message '%s' lacks '%s'", t->name, e.msg, t->want);
                        assert_null(l);
                        continue;
                }
                if (r < 0)
                        fail_msg("case '%s': %s", t->name, e.msg);
                check_present(t->name, l, driver_labels);
                check_present(t->name, l, t->want);
                if (t->absent)
                        check_absent(t->name, l, t->absent);
                for (size_t k = 1; k < l->n; k++)
                        if (strcmp(l->items[k - 1].key, l->items[k].key) >= 0)
                                fail_msg("case '%s': not sorted at '%s'", t->name, l->items[k].key);
        }
}

/* The exact set for one machine, so that nothing extra slips in. */
static void test_exact(void **state) {
        static const struct gpu_spec specs[] = {{"t4", OFF, NULL}, {NULL, 0, NULL}};
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = build(specs);
        struct mk_labels_input in = {.snapshot = s, .strategy = MK_MIG_STRATEGY_NONE, .machine_type = "  HVM domU\n",
                                     .timestamp = 1700000000};
        _cleanup_(mk_labels_freep) struct mk_labels *l = NULL;
        struct mk_error e = {0};
        assert_int_equal(mk_labels_compute(&in, &l, &e), 0);
        struct mk_buf b;
        mk_buf_init(&b, 1 << 16);
        for (size_t i = 0; i < l->n; i++)
                assert_int_equal(mk_buf_printf(&b, "%s=%s\n", l->items[i].key, l->items[i].value), 0);
        assert_string_equal(mk_buf_str(&b), "nvidia.com/cuda.driver-version.full=550.54.15\n"
                                            "nvidia.com/cuda.driver-version.major=550\n"
                                            "nvidia.com/cuda.driver-version.minor=54\n"
                                            "nvidia.com/cuda.driver-version.revision=15\n"
                                            "nvidia.com/cuda.driver.major=550\n"
                                            "nvidia.com/cuda.driver.minor=54\n"
                                            "nvidia.com/cuda.driver.rev=15\n"
                                            "nvidia.com/gfd.timestamp=1700000000\n"
                                            "nvidia.com/gpu.compute.major=7\n"
                                            "nvidia.com/gpu.compute.minor=5\n"
                                            "nvidia.com/gpu.count=1\n"
                                            "nvidia.com/gpu.family=turing\n"
                                            "nvidia.com/gpu.machine=HVM-domU\n"
                                            "nvidia.com/gpu.memory=15360\n"
                                            "nvidia.com/gpu.product=Tesla-T4\n"
                                            "nvidia.com/gpu.replicas=1\n"
                                            "nvidia.com/gpu.sharing-strategy=none\n"
                                            "nvidia.com/mig.capable=false\n"
                                            "nvidia.com/mps.capable=false\n");
        mk_buf_done(&b);
}

static void test_edges(void **state) {
        /* No GPUs: no labels. */
        static const struct gpu_spec none[] = {{NULL, 0, NULL}};
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = build(none);
        struct mk_labels_input in = {.snapshot = s, .strategy = MK_MIG_STRATEGY_MIXED, .timestamp = 5};
        _cleanup_(mk_labels_freep) struct mk_labels *l = NULL;
        struct mk_error e = {0};
        assert_int_equal(mk_labels_compute(&in, &l, &e), 0);
        assert_int_equal(l->n, 0);

        /* Driver version shapes. */
        static const struct gpu_spec one[] = {{"t4", OFF, NULL}, {NULL, 0, NULL}};
        static const struct {
                const char *v;
                int r;
                const char *rev;
        } versions[] = {{"535.104", 0, ""}, {"550.54.15", 0, "15"}, {"550", -EINVAL, NULL},
                        {"550.54.15.1", -EINVAL, NULL}, {"550.x", -EINVAL, NULL}, {"", -EINVAL, NULL},
                        {"550..1", -EINVAL, NULL}, {"1.2.33333333333333333333333333333", -EINVAL, NULL}};
        for (size_t i = 0; i < ELEMENTSOF(versions); i++) {
                _cleanup_(mk_snapshot_freep) struct mk_snapshot *s1 = build(one);
                snprintf(s1->driver_version, sizeof(s1->driver_version), "%s", versions[i].v);
                struct mk_labels_input in1 = {.snapshot = s1};
                _cleanup_(mk_labels_freep) struct mk_labels *l1 = NULL;
                int r = mk_labels_compute(&in1, &l1, &e);
                if (r != versions[i].r)
                        fail_msg("driver '%s': got %d, want %d", versions[i].v, r, versions[i].r);
                if (r >= 0)
                        assert_string_equal(mk_labels_get(l1, "nvidia.com/cuda.driver.rev"), versions[i].rev);
        }

        /* Bad strategy. */
        in.strategy = _MK_MIG_STRATEGY_MAX;
        struct mk_labels *l2 = NULL;
        assert_int_equal(mk_labels_compute(&in, &l2, &e), -EINVAL);
        assert_null(l2);
        assert_null(mk_labels_free(NULL));
}

static void test_helpers(void **state) {
        static const struct {
                const char *in, *out;
        } san[] = {{"NVIDIA A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB"},
                   {"Tesla T4", "Tesla-T4"},
                   {"  NVIDIA  H100 (80GB) HBM3 ", "NVIDIA-H100-80GB-HBM3"},
                   {"a_b.c", "a_b.c"},
                   {"", ""}};
        for (size_t i = 0; i < ELEMENTSOF(san); i++) {
                char buf[64];
                assert_true(mk_labels_sanitise(san[i].in, buf, sizeof(buf)) >= 0);
                assert_string_equal(buf, san[i].out);
        }
        char small[4];
        assert_int_equal(mk_labels_sanitise("Tesla T4", small, sizeof(small)), -ENOBUFS);

        static const struct {
                int maj, min;
                const char *family;
        } fam[] = {{0, 0, NULL},         {1, 3, "tesla"},       {2, 0, "fermi"},        {3, 7, "kepler"},
                   {5, 2, "maxwell"},    {6, 1, "pascal"},      {7, 0, "volta"},        {7, 5, "turing"},
                   {8, 0, "ampere"},     {8, 6, "ampere"},      {8, 9, "ada-lovelace"}, {9, 0, "hopper"},
                   {10, 0, "blackwell"}, {12, 0, "blackwell"},  {13, 0, "rubin"},       {4, 0, "undefined"},
                   {11, 0, "undefined"}};
        for (size_t i = 0; i < ELEMENTSOF(fam); i++) {
                const char *f = mk_labels_family(fam[i].maj, fam[i].min);
                if (!fam[i].family)
                        assert_null(f);
                else
                        assert_string_equal(f, fam[i].family);
        }
}

/* ---- issue 16 parity case 4: gpu.mode and vgpu.* from sysfs ---- */

static char sys_root[] = "/tmp/test-labels-sys.XXXXXX";

static void put(const char *rel, const void *data, size_t len) {
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", sys_root, rel);
        for (char *p = path + strlen(sys_root) + 1; *p; p++)
                if (*p == '/') {
                        *p = 0;
                        (void) mkdir(path, 0755);
                        *p = '/';
                }
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        assert_int_equal(fwrite(data, 1, len, f), len);
        assert_int_equal(fclose(f), 0);
}

static void put_str(const char *rel, const char *text) {
        put(rel, text, strlen(text));
}

/* A 256-byte configuration space: capability list at 0x40, one vendor-
 * specific capability; with `vgpu`, NVIDIA's "VF" signature and a record 0
 * (host driver version, branch) as a vGPU guest sees them. */
static void config_space(unsigned char cfg[256], bool vgpu) {
        memset(cfg, 0, 256);
        cfg[0] = 0xde;
        cfg[1] = 0x10;
        cfg[0x06] = 0x10; /* status: capability list */
        cfg[0x34] = 0x40;
        cfg[0x40] = 0x01; /* power management, next 0x50 */
        cfg[0x41] = 0x50;
        cfg[0x50] = 0x09; /* vendor specific, last */
        cfg[0x51] = 0x00;
        cfg[0x52] = 0x20;
        if (!vgpu)
                return;
        cfg[0x53] = 0x56;
        cfg[0x54] = 0x46;
        cfg[0x55] = 0x00; /* record 0 at offset 5 */
        cfg[0x56] = 0x16;
        memcpy(cfg + 0x57, "535.54.06", 9);
        memcpy(cfg + 0x61, "r535_00", 7);
}

static struct mk_labels *labels_on(const struct mk_snapshot *s, struct mk_labels_host *facts) {
        struct mk_host h = {.sysfs_root = sys_root, .proc_root = (char *) "/nonexistent", .dev_root = (char *) "/dev"};
        mk_labels_host_read(&h, s, facts);
        struct mk_labels_input in = {.snapshot = s, .strategy = MK_MIG_STRATEGY_NONE, .host = facts};
        struct mk_labels *l = NULL;
        struct mk_error e = {0};
        assert_int_equal(mk_labels_compute(&in, &l, &e), 0);
        return l;
}

static void test_host_facts(void **state) {
        assert_non_null(mkdtemp(sys_root));
        static const struct gpu_spec two[] = {A100(OFF, NULL), A100(OFF, NULL), {NULL, 0, NULL}};
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = build(two);
        snprintf(s->gpus[0].bus_id, sizeof(s->gpus[0].bus_id), "00000000:07:00.0");
        snprintf(s->gpus[1].bus_id, sizeof(s->gpus[1].bus_id), "00000000:B7:00.0");
        unsigned char cfg[256];
        config_space(cfg, false);
        put_str("bus/pci/devices/0000:07:00.0/class", "0x030200\n");
        put_str("bus/pci/devices/0000:07:00.0/vendor", "0x10de\n");
        put("bus/pci/devices/0000:07:00.0/config", cfg, sizeof(cfg));
        put_str("bus/pci/devices/0000:b7:00.0/class", "0x030200\n");
        put_str("bus/pci/devices/0000:b7:00.0/vendor", "0x10de\n");
        put("bus/pci/devices/0000:b7:00.0/config", cfg, sizeof(cfg));
        put_str("bus/pci/devices/0000:00:1f.0/vendor", "0x8086\n"); /* not NVIDIA: never read further */

        /* Data-center GPUs are 3D controllers: upstream GFD v0.16.2 labels
         * gpu.mode=compute; no vGPU capability: vgpu.present=false. */
        struct mk_labels_host facts;
        _cleanup_(mk_labels_freep) struct mk_labels *l = labels_on(s, &facts);
        assert_string_equal(mk_labels_get(l, "nvidia.com/gpu.mode"), "compute");
        assert_string_equal(mk_labels_get(l, "nvidia.com/vgpu.present"), "false");
        assert_null(mk_labels_get(l, "nvidia.com/vgpu.host-driver-version"));

        /* One VGA controller beside a 3D one: classes differ, "unknown" upstream. */
        put_str("bus/pci/devices/0000:b7:00.0/class", "0x030000\n");
        _cleanup_(mk_labels_freep) struct mk_labels *l2 = labels_on(s, &facts);
        assert_string_equal(mk_labels_get(l2, "nvidia.com/gpu.mode"), "unknown");
        /* Both VGA: graphics. */
        put_str("bus/pci/devices/0000:07:00.0/class", "0x030000\n");
        _cleanup_(mk_labels_freep) struct mk_labels *l3 = labels_on(s, &facts);
        assert_string_equal(mk_labels_get(l3, "nvidia.com/gpu.mode"), "graphics");
        /* A class that cannot be read: unknown (upstream logs and says unknown). */
        snprintf(s->gpus[1].bus_id, sizeof(s->gpus[1].bus_id), "00000000:C7:00.0");
        _cleanup_(mk_labels_freep) struct mk_labels *l4 = labels_on(s, &facts);
        assert_string_equal(mk_labels_get(l4, "nvidia.com/gpu.mode"), "unknown");

        /* A vGPU guest: the "VF" capability, and its host driver record. */
        config_space(cfg, true);
        put("bus/pci/devices/0000:b7:00.0/config", cfg, sizeof(cfg));
        _cleanup_(mk_labels_freep) struct mk_labels *l5 = labels_on(s, &facts);
        assert_string_equal(mk_labels_get(l5, "nvidia.com/vgpu.present"), "true");
        assert_string_equal(mk_labels_get(l5, "nvidia.com/vgpu.host-driver-version"), "535.54.06");
        assert_string_equal(mk_labels_get(l5, "nvidia.com/vgpu.host-driver-branch"), "r535_00");

        /* An unprivileged read (64 bytes) of the only NVIDIA config: not known, no label. */
        put("bus/pci/devices/0000:b7:00.0/config", cfg, 64);
        put("bus/pci/devices/0000:07:00.0/config", cfg, 64);
        _cleanup_(mk_labels_freep) struct mk_labels *l6 = labels_on(s, &facts);
        assert_null(mk_labels_get(l6, "nvidia.com/vgpu.present"));
        char v[16], b[16];
        assert_int_equal(mk_pci_config_vgpu(cfg, 64, v, b), -ENODATA);
        /* A capability chain that loops ends. */
        config_space(cfg, false);
        cfg[0x41] = 0x40;
        assert_int_equal(mk_pci_config_vgpu(cfg, 256, v, b), 0);

        /* No host facts: neither label. */
        struct mk_labels_input in = {.snapshot = s, .strategy = MK_MIG_STRATEGY_NONE};
        _cleanup_(mk_labels_freep) struct mk_labels *l7 = NULL;
        struct mk_error e = {0};
        assert_int_equal(mk_labels_compute(&in, &l7, &e), 0);
        assert_null(mk_labels_get(l7, "nvidia.com/gpu.mode"));
        assert_null(mk_labels_get(l7, "nvidia.com/vgpu.present"));
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", sys_root);
        assert_int_equal(system(cmd), 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_cases),
                cmocka_unit_test(test_exact),
                cmocka_unit_test(test_edges),
                cmocka_unit_test(test_helpers),
                cmocka_unit_test(test_host_facts),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}

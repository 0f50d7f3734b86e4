/* GFD labels (labels.h; k8s-device-plugin v0.20.0 cmd/gpu-feature-discovery and internal/lm, internal/rm, api/config/v1). */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/macro.h"
#include "gfd/labels.h"

#define PREFIX "nvidia.com/"

struct mk_labels *mk_labels_free(struct mk_labels *l) {
        if (!l)
                return NULL;
        for (size_t i = 0; i < l->n; i++) {
                free(l->items[i].key);
                free(l->items[i].value);
        }
        free(l->items);
        free(l);
        return NULL;
}

const char *mk_labels_get(const struct mk_labels *l, const char *key) {
        for (size_t i = 0; l && i < l->n; i++)
                if (streq(l->items[i].key, key))
                        return l->items[i].value;
        return NULL;
}

int mk_labels_sanitise(const char *in, char *buf, size_t size) {
        size_t k = 0;
        bool pending_dash = false;
        if (size == 0)
                return -ENOBUFS;
        for (const char *p = in; *p; p++) {
                char ch = *p;
                bool keep = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
                            ch == '-' || ch == '_' || ch == '.';
                if (ch == ' ') {
                        pending_dash = k > 0;
                        continue;
                }
                if (!keep)
                        continue;
                if (pending_dash) {
                        if (k + 1 >= size)
                                return -ENOBUFS;
                        buf[k++] = '-';
                        pending_dash = false;
                }
                if (k + 1 >= size)
                        return -ENOBUFS;
                buf[k++] = ch;
        }
        buf[k] = 0;
        return (int) k;
}

const char *mk_labels_family(int major, int minor) {
        /* GFD's table (k8s-device-plugin v0.20.0 cmd/gpu-feature-discovery and internal/lm), from the CUDA compute capability. */
        switch (major) {
        case 0:
                return NULL;
        case 1:
                return "tesla";
        case 2:
                return "fermi";
        case 3:
                return "kepler";
        case 5:
                return "maxwell";
        case 6:
                return "pascal";
        case 7:
                return minor < 5 ? "volta" : "turing";
        case 8:
                return minor < 9 ? "ampere" : "ada-lovelace";
        case 9:
                return "hopper";
        case 10:
        case 12:
                return "blackwell";
        case 13:
                return "rubin";
        default:
                return "undefined";
        }
}

/* The label set under construction; setting a key again replaces it (the
 * single strategy overrides full-GPU labels with MIG ones). */
struct builder {
        struct mk_labels *l;
        size_t alloc;
};

static int set(struct builder *b, const char *key, const char *fmt, ...) _printf_(3, 4);
static int set(struct builder *b, const char *key, const char *fmt, ...) {
        char *value = NULL;
        va_list ap;
        va_start(ap, fmt);
        int n = vasprintf(&value, fmt, ap);
        va_end(ap);
        if (n < 0)
                return -ENOMEM;
        for (size_t i = 0; i < b->l->n; i++)
                if (streq(b->l->items[i].key, key)) {
                        free(b->l->items[i].value);
                        b->l->items[i].value = value;
                        return 0;
                }
        if (b->l->n >= MK_MAX_LABELS) {
                free(value);
                return -E2BIG;
        }
        if (b->l->n == b->alloc) {
                size_t na = b->alloc ? b->alloc * 2 : 32;
                struct mk_label *it = realloc(b->l->items, na * sizeof(*it));
                if (!it) {
                        free(value);
                        return -ENOMEM;
                }
                b->l->items = it;
                b->alloc = na;
        }
        char *k = strdup(key);
        if (!k) {
                free(value);
                return -ENOMEM;
        }
        b->l->items[b->l->n++] = (struct mk_label) {.key = k, .value = value};
        return 0;
}

/* Sets "<resource>.<suffix>". */
static int set_res(struct builder *b, const char *res, const char *suffix, const char *fmt, ...) _printf_(4, 5);
static int set_res(struct builder *b, const char *res, const char *suffix, const char *fmt, ...) {
        char key[256];
        int n = snprintf(key, sizeof(key), "%s.%s", res, suffix);
        if (n < 0 || (size_t) n >= sizeof(key))
                return -ENAMETOOLONG;
        _cleanup_free_ char *value = NULL;
        va_list ap;
        va_start(ap, fmt);
        n = vasprintf(&value, fmt, ap);
        va_end(ap);
        if (n < 0)
                return -ENOMEM;
        return set(b, key, "%s", value);
}

static int cmp_label(const void *a, const void *b) {
        return strcmp(((const struct mk_label *) a)->key, ((const struct mk_label *) b)->key);
}

/* Sharing of one resource: the first active entry with its name (k8s-device-plugin v0.20.0 api/config/v1). */
struct sharing {
        unsigned replicas;
        bool renamed;
        enum mk_sharing_strategy strategy;
};

static struct sharing sharing_of(const struct mk_plugin_config *c, const char *resource) {
        struct sharing s = {.replicas = 1, .strategy = MK_SHARING_NONE};
        if (!c || c->sharing == MK_SHARING_NONE)
                return s;
        const struct mk_shared_resource *r = mk_plugin_config_find(c, resource);
        if (!r || r->replicas <= 1)
                return s;
        s.replicas = r->replicas;
        s.renamed = r->rename != NULL;
        s.strategy = c->sharing;
        return s;
}

/* product, replicas, sharing-strategy of a resource; `product` already
 * sanitised. Without sharing (MIG-enabled GPUs under single/mixed): replicas 0. */
static int set_sharing_labels(struct builder *b, const char *res, const char *product, const struct sharing *s,
                              bool without_sharing) {
        int r;
        if (without_sharing) {
                r = set_res(b, res, "product", "%s", product);
                if (r >= 0)
                        r = set_res(b, res, "replicas", "0");
                if (r >= 0)
                        r = set_res(b, res, "sharing-strategy", "none");
                return r;
        }
        bool shared = s->replicas > 1;
        r = set_res(b, res, "product", "%s%s", product, shared && !s->renamed ? "-SHARED" : "");
        if (r >= 0)
                r = set_res(b, res, "replicas", "%u", s->replicas);
        if (r >= 0)
                r = set_res(b, res, "sharing-strategy", "%s",
                            mk_sharing_strategy_to_string(shared ? s->strategy : MK_SHARING_NONE));
        return r;
}

/* The model a resource's labels describe, among `n` candidates given as GPU
 * indices into the snapshot (in snapshot order, possibly repeated, one entry
 * per device): the name with most entries, ties to the earliest. Returns the
 * index of the first candidate of that model and its count. */
static size_t pick_model(const struct mk_snapshot *s, const size_t *gpu_of, size_t n, size_t *ret_count) {
        size_t best = 0, best_count = 0;
        for (size_t i = 0; i < n; i++) {
                bool seen = false;
                for (size_t j = 0; j < i && !seen; j++)
                        seen = streq(s->gpus[gpu_of[j]].name, s->gpus[gpu_of[i]].name);
                if (seen)
                        continue;
                size_t count = 0;
                for (size_t j = i; j < n; j++)
                        count += streq(s->gpus[gpu_of[j]].name, s->gpus[gpu_of[i]].name);
                if (count > best_count) {
                        best = i;
                        best_count = count;
                }
        }
        *ret_count = best_count;
        return best;
}

/* One MIG device, flattened from the snapshot. */
struct mig_dev {
        size_t gpu;                   /* index into snapshot->gpus */
        const struct mk_gi_profile *gp; /* NULL when the driver profile is not in the table */
        const struct mk_ci *ci;
        unsigned g, c;
        uint64_t memory_mib;
        unsigned multiprocessors;
};

static unsigned ci_multiprocessors(const struct mk_gi_profile *gp, const struct mk_ci *ci) {
        if (!gp)
                return 0;
        for (size_t i = 0; i < gp->n_ci_profiles; i++)
                if (gp->ci_profiles[i].queried && gp->ci_profiles[i].id == ci->profile_id &&
                    gp->ci_profiles[i].multiprocessors)
                        return gp->ci_profiles[i].multiprocessors;
        if (ci->slices == 0 || ci->slices >= gp->slices)
                return gp->multiprocessors;
        return gp->slices ? gp->multiprocessors * ci->slices / gp->slices : 0;
}

static int collect_mig(const struct mk_snapshot *s, struct mig_dev **ret, size_t *ret_n) {
        size_t n = 0;
        for (size_t i = 0; i < s->n_gpus; i++)
                if (s->gpus[i].mig_current == MK_MIG_ENABLED)
                        for (size_t j = 0; j < s->gpus[i].n_gis; j++)
                                n += s->gpus[i].gis[j].n_cis;
        struct mig_dev *d = calloc(n ? n : 1, sizeof(*d));
        if (!d)
                return -ENOMEM;
        size_t k = 0;
        for (size_t i = 0; i < s->n_gpus; i++) {
                const struct mk_gpu *g = &s->gpus[i];
                if (g->mig_current != MK_MIG_ENABLED)
                        continue;
                for (size_t j = 0; j < g->n_gis; j++) {
                        const struct mk_gi *gi = &g->gis[j];
                        const struct mk_gi_profile *gp = mk_gpu_profile_by_id(g, gi->profile_id);
                        for (size_t c = 0; c < gi->n_cis; c++) {
                                const struct mk_ci *ci = &gi->cis[c];
                                d[k++] = (struct mig_dev) {
                                        .gpu = i,
                                        .gp = gp,
                                        .ci = ci,
                                        .g = gp ? gp->slices : 0,
                                        .c = ci->slices,
                                        .memory_mib = gp ? gp->memory_mib : 0,
                                        .multiprocessors = ci_multiprocessors(gp, ci),
                                };
                        }
                }
        }
        *ret = d;
        *ret_n = n;
        return 0;
}

static unsigned gpu_mig_devices(const struct mk_gpu *g) {
        unsigned n = 0;
        for (size_t j = 0; j < g->n_gis; j++)
                n += (unsigned) g->gis[j].n_cis;
        return n;
}

/* Two MIG devices are of one type when every attribute a label shows is equal. */
static bool mig_same_type(const struct mig_dev *a, const struct mig_dev *b) {
        return streq(a->ci->name, b->ci->name) && a->g == b->g && a->c == b->c && a->memory_mib == b->memory_mib &&
               a->multiprocessors == b->multiprocessors && (a->gp == NULL) == (b->gp == NULL) &&
               (!a->gp || (a->gp->copy_engines == b->gp->copy_engines && a->gp->decoders == b->gp->decoders &&
                           a->gp->encoders == b->gp->encoders && a->gp->jpegs == b->gp->jpegs &&
                           a->gp->ofas == b->gp->ofas));
}

/* multiprocessors, slices.*, engines.* of a MIG device (k8s-device-plugin v0.20.0 cmd/gpu-feature-discovery and internal/lm). */
static int set_mig_attrs(struct builder *b, const char *res, const struct mig_dev *d) {
        int r = set_res(b, res, "memory", "%" PRIu64, d->memory_mib);
        if (r >= 0)
                r = set_res(b, res, "multiprocessors", "%u", d->multiprocessors);
        if (r >= 0)
                r = set_res(b, res, "slices.gi", "%u", d->g);
        if (r >= 0)
                r = set_res(b, res, "slices.ci", "%u", d->c);
        if (r >= 0)
                r = set_res(b, res, "engines.copy", "%u", d->gp ? d->gp->copy_engines : 0);
        if (r >= 0)
                r = set_res(b, res, "engines.decoder", "%u", d->gp ? d->gp->decoders : 0);
        if (r >= 0)
                r = set_res(b, res, "engines.encoder", "%u", d->gp ? d->gp->encoders : 0);
        if (r >= 0)
                r = set_res(b, res, "engines.jpeg", "%u", d->gp ? d->gp->jpegs : 0);
        if (r >= 0)
                r = set_res(b, res, "engines.ofa", "%u", d->gp ? d->gp->ofas : 0);
        return r;
}

/* nvidia.com/gpu.* for full GPUs: every GPU, MIG-enabled or not, counts (k8s-device-plugin v0.20.0 cmd/gpu-feature-discovery and internal/lm). */
static int full_gpu_labels(struct builder *b, const struct mk_labels_input *in, struct mk_error *e) {
        const struct mk_snapshot *s = in->snapshot;
        _cleanup_free_ size_t *idx = calloc(s->n_gpus, sizeof(size_t));
        if (!idx)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        for (size_t i = 0; i < s->n_gpus; i++)
                idx[i] = i;
        size_t count = 0;
        const struct mk_gpu *g = &s->gpus[idx[pick_model(s, idx, s->n_gpus, &count)]];
        char product[MK_GPU_NAME_MAX];
        if (mk_labels_sanitise(g->name, product, sizeof(product)) < 0)
                return mk_error_set(e, -EINVAL, "GPU %u: name '%s' too long", g->index, g->name);
        struct sharing sh = sharing_of(in->config, PREFIX "gpu");
        /* GFD gives MIG-enabled GPUs a labeler without sharing under every
         * strategy (replicas 0); a MIG-disabled GPU of the same model
         * overrides it. */
        bool without = true;
        for (size_t i = 0; i < s->n_gpus && without; i++)
                if (streq(s->gpus[i].name, g->name))
                        without = s->gpus[i].mig_current == MK_MIG_ENABLED;
        int r = set_sharing_labels(b, PREFIX "gpu", product, &sh, without);
        if (r >= 0)
                r = set_res(b, PREFIX "gpu", "count", "%zu", count);
        if (r >= 0)
                r = set_res(b, PREFIX "gpu", "memory", "%" PRIu64, g->memory_total_bytes >> 20);
        const char *family = mk_labels_family(g->cc_major, g->cc_minor);
        if (r >= 0 && family)
                r = set_res(b, PREFIX "gpu", "family", "%s", family);
        if (r >= 0)
                r = set_res(b, PREFIX "gpu", "compute.major", "%d", g->cc_major);
        if (r >= 0)
                r = set_res(b, PREFIX "gpu", "compute.minor", "%d", g->cc_minor);
        return r < 0 ? mk_error_set(e, r, "Failed to build the GPU labels") : 0;
}

static int single_labels(struct builder *b, const struct mk_labels_input *in, struct mk_error *e) {
        const struct mk_snapshot *s = in->snapshot;
        size_t n_enabled = 0;
        bool invalid = false;
        for (size_t i = 0; i < s->n_gpus; i++)
                if (s->gpus[i].mig_current == MK_MIG_ENABLED) {
                        n_enabled++;
                        invalid = invalid || gpu_mig_devices(&s->gpus[i]) == 0;
                }
        if (n_enabled == 0)
                return 0; /* like none */
        invalid = invalid || n_enabled != s->n_gpus;

        _cleanup_free_ struct mig_dev *d = NULL;
        size_t n = 0;
        int r = collect_mig(s, &d, &n);
        if (r < 0)
                return mk_error_set(e, r, "Out of memory");
        for (size_t i = 1; i < n && !invalid; i++)
                invalid = !mig_same_type(&d[0], &d[i]);

        _cleanup_free_ size_t *gpu_of = calloc(n ? n : 1, sizeof(size_t));
        if (!gpu_of)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        for (size_t i = 0; i < n; i++)
                gpu_of[i] = d[i].gpu;
        size_t count = 0;
        /* The model: of the MIG devices when there are any, else of the GPUs. */
        const struct mk_gpu *g = &s->gpus[0];
        const struct mig_dev *rep = NULL;
        if (n > 0) {
                size_t k = pick_model(s, gpu_of, n, &count);
                rep = &d[k];
                g = &s->gpus[rep->gpu];
        }
        char product[MK_GPU_NAME_MAX + MK_PROFILE_NAME_MAX + 16], model[MK_GPU_NAME_MAX];
        if (mk_labels_sanitise(g->name, model, sizeof(model)) < 0)
                return mk_error_set(e, -EINVAL, "GPU %u: name '%s' too long", g->index, g->name);
        if (invalid) {
                /* GFD's invalid-single labels (k8s-device-plugin v0.20.0 cmd/gpu-feature-discovery and internal/lm),
                 * named after the first MIG-enabled GPU as GFD names them. */
                for (size_t i = 0; i < s->n_gpus; i++)
                        if (s->gpus[i].mig_current == MK_MIG_ENABLED) {
                                g = &s->gpus[i];
                                break;
                        }
                if (mk_labels_sanitise(g->name, model, sizeof(model)) < 0)
                        return mk_error_set(e, -EINVAL, "GPU %u: name '%s' too long", g->index, g->name);
                snprintf(product, sizeof(product), "%s-MIG-INVALID", model);
                r = set_res(b, PREFIX "gpu", "product", "%s", product);
                if (r >= 0)
                        r = set_res(b, PREFIX "gpu", "count", "0");
                if (r >= 0)
                        r = set_res(b, PREFIX "gpu", "replicas", "0");
                if (r >= 0)
                        r = set_res(b, PREFIX "gpu", "sharing-strategy", "%s", "");
                if (r >= 0)
                        r = set_res(b, PREFIX "gpu", "memory", "0");
                return r < 0 ? mk_error_set(e, r, "Failed to build the MIG labels") : 0;
        }
        snprintf(product, sizeof(product), "%s-MIG-%s", model, rep->ci->name);
        struct sharing sh = sharing_of(in->config, PREFIX "gpu");
        r = set_sharing_labels(b, PREFIX "gpu", product, &sh, false);
        if (r >= 0)
                r = set_res(b, PREFIX "gpu", "count", "%zu", n);
        if (r >= 0)
                r = set_mig_attrs(b, PREFIX "gpu", rep);
        return r < 0 ? mk_error_set(e, r, "Failed to build the MIG labels") : 0;
}

/* Mixed (GFD's newMigStrategyMixedLabeler): one group per MIG device name,
 * the CI profile's ("1g.10gb", "1c.3g.20gb"); `count` is every device of that
 * name on the node, whatever the model, and the other labels describe the
 * first such device in GPU order, as GFD does. MIG-enabled GPUs without MIG
 * devices add nothing. */
static int mixed_labels(struct builder *b, const struct mk_labels_input *in, struct mk_error *e) {
        const struct mk_snapshot *s = in->snapshot;
        _cleanup_free_ struct mig_dev *d = NULL;
        size_t n = 0;
        int r = collect_mig(s, &d, &n);
        if (r < 0)
                return mk_error_set(e, r, "Out of memory");
        for (size_t i = 0; i < n; i++) {
                bool seen = false;
                for (size_t j = 0; j < i && !seen; j++)
                        seen = streq(d[j].ci->name, d[i].ci->name);
                if (seen)
                        continue;
                size_t count = 0;
                for (size_t j = i; j < n; j++)
                        count += streq(d[j].ci->name, d[i].ci->name);
                const struct mig_dev *rep = &d[i];
                const struct mk_gpu *g = &s->gpus[rep->gpu];
                char res[128], model[MK_GPU_NAME_MAX], product[MK_GPU_NAME_MAX + MK_PROFILE_NAME_MAX + 16];
                if (mk_labels_sanitise(g->name, model, sizeof(model)) < 0)
                        return mk_error_set(e, -EINVAL, "GPU %u: name '%s' too long", g->index, g->name);
                /* "1g.10gb+me" -> "1g.10gb.me": '+' is not valid in a label key
                 * or value, and it is the device plugin's resource name (k8s-device-plugin v0.20.0 cmd/nvidia-device-plugin). */
                char prof[MK_PROFILE_NAME_MAX];
                snprintf(prof, sizeof(prof), "%s", rep->ci->name);
                for (char *c = prof; *c; c++)
                        if (*c == '+')
                                *c = '.';
                snprintf(res, sizeof(res), PREFIX "mig-%s", prof);
                snprintf(product, sizeof(product), "%s-MIG-%s", model, prof);
                struct sharing sh = sharing_of(in->config, res);
                r = set_sharing_labels(b, res, product, &sh, false);
                if (r >= 0)
                        r = set_res(b, res, "count", "%zu", count);
                if (r >= 0)
                        r = set_mig_attrs(b, res, rep);
                if (r < 0)
                        return mk_error_set(e, r, "Failed to build the MIG labels");
        }
        return 0;
}

/* "X.Y" or "X.Y.Z", digits only (k8s-device-plugin v0.20.0 cmd/gpu-feature-discovery and internal/lm). */
static int split_driver_version(const char *v, char parts[3][24], unsigned *ret_n) {
        unsigned n = 0;
        size_t k = 0;
        for (const char *p = v;; p++) {
                if (*p == '.' || *p == 0) {
                        if (k == 0 || n >= 3)
                                return -EINVAL;
                        parts[n++][k] = 0;
                        k = 0;
                        if (!*p)
                                break;
                        continue;
                }
                if (n >= 3 || *p < '0' || *p > '9' || k + 1 >= sizeof(parts[0]))
                        return -EINVAL;
                parts[n][k++] = *p;
        }
        if (n < 2)
                return -EINVAL;
        if (n == 2)
                parts[2][0] = 0;
        *ret_n = n;
        return 0;
}

static int node_labels(struct builder *b, const struct mk_labels_input *in, struct mk_error *e) {
        const struct mk_snapshot *s = in->snapshot;
        char parts[3][24];
        unsigned np = 0;
        if (split_driver_version(s->driver_version, parts, &np) < 0)
                return mk_error_set(e, -EINVAL, "Unexpected driver version '%s' (want X.Y or X.Y.Z)",
                                    s->driver_version);
        int r = 0;
        if (in->timestamp)
                r = set(b, PREFIX "gfd.timestamp", "%" PRIu64, in->timestamp);
        if (r >= 0)
                r = set(b, PREFIX "cuda.driver.major", "%s", parts[0]);
        if (r >= 0)
                r = set(b, PREFIX "cuda.driver.minor", "%s", parts[1]);
        if (r >= 0)
                r = set(b, PREFIX "cuda.driver.rev", "%s", parts[2]);
        if (r >= 0)
                r = set(b, PREFIX "cuda.driver-version.major", "%s", parts[0]);
        if (r >= 0)
                r = set(b, PREFIX "cuda.driver-version.minor", "%s", parts[1]);
        if (r >= 0)
                r = set(b, PREFIX "cuda.driver-version.revision", "%s", parts[2]);
        if (r >= 0)
                r = set(b, PREFIX "cuda.driver-version.full", "%s", s->driver_version);
        if (in->cuda_driver_version) {
                unsigned maj = in->cuda_driver_version / 1000, min = (in->cuda_driver_version % 1000) / 10;
                if (r >= 0)
                        r = set(b, PREFIX "cuda.runtime.major", "%u", maj);
                if (r >= 0)
                        r = set(b, PREFIX "cuda.runtime.minor", "%u", min);
                if (r >= 0)
                        r = set(b, PREFIX "cuda.runtime-version.major", "%u", maj);
                if (r >= 0)
                        r = set(b, PREFIX "cuda.runtime-version.minor", "%u", min);
                if (r >= 0)
                        r = set(b, PREFIX "cuda.runtime-version.full", "%u.%u", maj, min);
        }
        if (in->machine_type && r >= 0) {
                char m[256];
                int k = mk_labels_sanitise(in->machine_type, m, sizeof(m));
                r = set(b, PREFIX "gpu.machine", "%s", k > 0 ? m : "unknown");
        }
        bool capable = false, enabled = false;
        for (size_t i = 0; i < s->n_gpus; i++) {
                capable = capable || s->gpus[i].mig_capable;
                enabled = enabled || s->gpus[i].mig_current == MK_MIG_ENABLED;
        }
        if (r >= 0)
                r = set(b, PREFIX "mig.capable", "%s", capable ? "true" : "false");
        bool mps = in->config && in->config->sharing == MK_SHARING_MPS;
        if (mps && enabled)
                return mk_error_set(e, -EINVAL, "MPS sharing is not supported on a node with MIG enabled");
        if (r >= 0)
                r = set(b, PREFIX "mps.capable", "%s", mps ? "true" : "false");
        if (r >= 0 && in->strategy != MK_MIG_STRATEGY_NONE)
                r = set(b, PREFIX "mig.strategy", "%s", mk_mig_strategy_to_string(in->strategy));
        const struct mk_labels_host *h = in->host;
        if (r >= 0 && h && h->gpu_mode)
                r = set(b, PREFIX "gpu.mode", "%s", h->gpu_mode);
        if (r >= 0 && h && h->vgpu_present >= 0)
                r = set(b, PREFIX "vgpu.present", "%s", h->vgpu_present ? "true" : "false");
        if (r >= 0 && h && h->vgpu_present > 0 && *h->vgpu_host_driver_version) {
                r = set(b, PREFIX "vgpu.host-driver-version", "%s", h->vgpu_host_driver_version);
                if (r >= 0)
                        r = set(b, PREFIX "vgpu.host-driver-branch", "%s", h->vgpu_host_driver_branch);
        }
        return r < 0 ? mk_error_set(e, r, "Failed to build the node labels") : 0;
}

int mk_labels_compute(const struct mk_labels_input *in, struct mk_labels **ret, struct mk_error *e) {
        if (!in || !in->snapshot || in->strategy < 0 || in->strategy >= _MK_MIG_STRATEGY_MAX)
                return mk_error_set(e, -EINVAL, "Invalid arguments");
        _cleanup_(mk_labels_freep) struct mk_labels *l = calloc(1, sizeof(*l));
        if (!l)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        struct builder b = {.l = l};
        if (in->snapshot->n_gpus > 0) {
                int r = node_labels(&b, in, e);
                if (r >= 0)
                        r = full_gpu_labels(&b, in, e);
                if (r >= 0 && in->strategy == MK_MIG_STRATEGY_SINGLE)
                        r = single_labels(&b, in, e);
                if (r >= 0 && in->strategy == MK_MIG_STRATEGY_MIXED)
                        r = mixed_labels(&b, in, e);
                if (r < 0)
                        return r;
        }
        if (l->n > 1)
                qsort(l->items, l->n, sizeof(*l->items), cmp_label);
        *ret = TAKE_PTR(l);
        return 0;
}

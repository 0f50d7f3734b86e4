/* Unit tests of plan/: hand-built snapshots of an A100-40GB and an H100-80GB
 * (profiles: the MIG user guide's supported-profiles tables, k8s-test-infra
 * profiles/mig; GI and CI placements: the MIG user guide's placement
 * tables), cases as data, and an exhaustive check of every A100 and H100
 * GI-level layout against a brute force written here independently. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mig/gpu.h"
#include "mig/layout.h"
#include "mig/profile.h"
#include "plan/plan.h"

#include "mig-model-rows.h"

#define MIB (UINT64_C(1) << 20)
#define TEXT_MAX 2048

/* --- GPU models as data -------------------------------------------------------- */

struct model {
        const char *gpu_name;
        unsigned arch; /* NVML_DEVICE_ARCH_*: 7 Ampere, 9 Hopper */
        uint64_t total_mib;
        unsigned slices, units;
        const struct gi_row *rows;
        size_t n_rows;
};

enum { A100_40GB, H100_80GB };

static const struct model models[] = {
        [A100_40GB] = {"NVIDIA A100-SXM4-40GB", 7, 40960, 7, 8, a100_40gb_rows, ELEMENTSOF(a100_40gb_rows)},
        [H100_80GB] = {"NVIDIA H100 80GB HBM3", 9, 81559, 7, 8, h100_80gb_rows, ELEMENTSOF(h100_80gb_rows)},
};

/* C of CI enums 0..6 (NVML reference, compute instance profiles; 7 and 8
 * duplicate sizes and are not listed). */
static const unsigned ci_enum_c[] = {1, 2, 3, 4, 7, 8, 6};

/* MIG user guide, placements: CI placement starts by GI size G and CI size C. */
static const struct {
        unsigned g, c, starts;
} ci_starts_table[] = {
        {7, 1, 0x7f}, {7, 2, 0x15}, {7, 3, 0x11}, {7, 4, 0x01}, {7, 7, 0x01},
        {4, 1, 0x0f}, {4, 2, 0x05}, {4, 4, 0x01},
        {3, 1, 0x07}, {3, 2, 0x01}, {3, 3, 0x01},
        {2, 1, 0x03}, {2, 2, 0x01},
        {1, 1, 0x01},
};

static unsigned ci_starts(unsigned g, unsigned c) {
        for (size_t i = 0; i < ELEMENTSOF(ci_starts_table); i++)
                if (ci_starts_table[i].g == g && ci_starts_table[i].c == c)
                        return ci_starts_table[i].starts;
        fail_msg("no CI placements for %uc in a %ug GI", c, g);
        return 0;
}

static struct mk_placement *placements_from_starts(unsigned starts, unsigned size, size_t *ret_n) {
        size_t n = 0;
        struct mk_placement *p = calloc(32, sizeof(*p));
        assert_non_null(p);
        for (unsigned s = 0; s < 32; s++)
                if (starts >> s & 1)
                        p[n++] = (struct mk_placement){s, size};
        *ret_n = n;
        return p;
}

/* Upstream's size rule (go-nvlib v0.12, pkg/nvlib/device/mig_profile.go),
 * written out again here. */
static bool size_offered(unsigned c, unsigned g) {
        return c <= g && (c == g || 2 * c <= g + 1);
}

/* A MIG-enabled GPU of `model` without instances. CI profiles are derived
 * (id UINT32_MAX, no placements) or, with `queried`, as NVML lists them on a
 * live GI (id = enum, as on hardware; placements from the MIG user guide's
 * tables). */
static void build_gpu(struct mk_gpu *g, int model, bool queried) {
        const struct model *m = &models[model];

        *g = (struct mk_gpu){.index = 0,
                             .memory_total_bytes = m->total_mib * MIB,
                             .architecture = m->arch,
                             .mig_capable = true,
                             .mig_current = MK_MIG_ENABLED,
                             .mig_pending = MK_MIG_ENABLED,
                             .memory_units = m->units};
        snprintf(g->name, sizeof(g->name), "%s", m->gpu_name);
        snprintf(g->uuid, sizeof(g->uuid), "GPU-test-%d", model);
        g->profiles = calloc(m->n_rows, sizeof(*g->profiles));
        assert_non_null(g->profiles);
        g->n_profiles = m->n_rows;

        for (size_t i = 0; i < m->n_rows; i++) {
                const struct gi_row *r = &m->rows[i];
                struct mk_gi_profile *p = &g->profiles[i];
                *p = (struct mk_gi_profile){.nvml_enum = r->nvml_enum,
                                            .id = r->id,
                                            .slices = r->slices,
                                            .max_count = r->max_count,
                                            .memory_mib = r->memory_mib,
                                            .named = true};
                snprintf(p->name, sizeof(p->name), "%s", r->name);
                assert_int_equal(mk_profile_name_parse(r->name, &p->pname, NULL), 0);
                /* The table agrees with go-nvlib's naming rule
                 * (v0.12, pkg/nvlib/device/mig_profile.go). */
                struct mk_profile_name derived;
                char s[MK_PROFILE_NAME_MAX];
                assert_int_equal(mk_profile_name_from_nvml(r->nvml_enum, MK_CI_ENUM_FULL, r->memory_mib,
                                                           g->memory_total_bytes, &derived),
                                 0);
                assert_true(mk_profile_name_format(&derived, s, sizeof(s)) > 0);
                assert_string_equal(s, r->name);
                p->placements = placements_from_starts(r->starts, r->units, &p->n_placements);

                p->ci_profiles = calloc(ELEMENTSOF(ci_enum_c), sizeof(*p->ci_profiles));
                assert_non_null(p->ci_profiles);
                for (unsigned ce = 0; ce < ELEMENTSOF(ci_enum_c); ce++) {
                        unsigned c = ci_enum_c[ce];
                        if (!size_offered(c, r->slices))
                                continue;
                        struct mk_ci_profile *cp = &p->ci_profiles[p->n_ci_profiles++];
                        *cp = (struct mk_ci_profile){.nvml_enum = ce,
                                                     .id = queried ? ce : UINT32_MAX,
                                                     .slices = c,
                                                     .max_count = queried ? r->slices / c : 0,
                                                     .queried = queried};
                        if (c == r->slices)
                                snprintf(cp->name, sizeof(cp->name), "%s", r->name);
                        else
                                snprintf(cp->name, sizeof(cp->name), "%uc.%s", c, r->name);
                        if (queried)
                                cp->placements = placements_from_starts(ci_starts(r->slices, c), c, &cp->n_placements);
                }
        }
}

static const struct mk_gi_profile *profile_named(const struct mk_gpu *g, const char *name) {
        for (size_t i = 0; i < g->n_profiles; i++)
                if (strcmp(g->profiles[i].name, name) == 0)
                        return &g->profiles[i];
        fail_msg("no GI profile '%s' on %s", name, g->name);
        return NULL;
}

static const struct mk_ci_profile *ci_profile_named(const struct mk_gi_profile *gp, const char *name) {
        for (size_t i = 0; i < gp->n_ci_profiles; i++)
                if (strcmp(gp->ci_profiles[i].name, name) == 0)
                        return &gp->ci_profiles[i];
        fail_msg("no CI profile '%s' in %s", name, gp->name);
        return NULL;
}

static void make_uuid(char *buf, size_t size, unsigned gi, unsigned ci) {
        snprintf(buf, size, "MIG-g%uc%u", gi, ci);
}

static struct mk_gi *add_gi(struct mk_gpu *g, unsigned id, unsigned profile_id, unsigned nvml_enum,
                            struct mk_placement pl) {
        struct mk_gi *l = realloc(g->gis, (g->n_gis + 1) * sizeof(*l));
        assert_non_null(l);
        g->gis = l;
        g->gis[g->n_gis] = (struct mk_gi){.id = id, .profile_id = profile_id, .nvml_enum = nvml_enum, .placement = pl};
        return &g->gis[g->n_gis++];
}

/* A CI as nvml/ reads it: the hardware CI profile id (= the enum here). */
static void add_ci(struct mk_gi *gi, unsigned id, const struct mk_ci_profile *cp, unsigned start) {
        struct mk_ci *l = realloc(gi->cis, (gi->n_cis + 1) * sizeof(*l));
        assert_non_null(l);
        gi->cis = l;
        struct mk_ci *ci = &gi->cis[gi->n_cis++];
        *ci = (struct mk_ci){.id = id,
                             .profile_id = cp->nvml_enum,
                             .nvml_enum = cp->nvml_enum,
                             .slices = cp->slices,
                             .placement = {start, cp->slices},
                             .mig_index = UINT32_MAX};
        snprintf(ci->name, sizeof(ci->name), "%s", cp->name);
        make_uuid(ci->uuid, sizeof(ci->uuid), gi->id, id);
}

static unsigned parse_num(const char **p) {
        unsigned v = 0;
        if (**p < '0' || **p > '9')
                fail_msg("number expected at '%s'", *p);
        while (**p >= '0' && **p <= '9')
                v = v * 10 + (unsigned) (*(*p)++ - '0');
        return v;
}

static void expect_char(const char **p, char ch) {
        if (**p != ch)
                fail_msg("'%c' expected at '%s'", ch, *p);
        (*p)++;
}

/* Copies the characters up to `stop` into buf. */
static void parse_word(const char **p, char stop, char *buf, size_t size) {
        const char *end = strchr(*p, stop);
        if (!end || (size_t) (end - *p) >= size)
                fail_msg("'%c' expected after '%s'", stop, *p);
        memcpy(buf, *p, (size_t) (end - *p));
        buf[end - *p] = 0;
        *p = end + 1;
}

/* Instances as text: "<gi>@<start>#<id>(<ci>@<start>#<id>,...) ...". A GI
 * profile the GPU does not list is "?<profile id>:<units>". UUIDs are
 * MIG-g<gi>c<ci>. */
static void add_existing(struct mk_gpu *g, const char *spec) {
        const char *p = spec;
        while (*p) {
                char name[MK_PROFILE_NAME_MAX];
                while (*p == ' ')
                        p++;
                if (!*p)
                        break;
                parse_word(&p, '@', name, sizeof(name));
                unsigned start = parse_num(&p);
                expect_char(&p, '#');
                unsigned id = parse_num(&p);
                expect_char(&p, '(');
                struct mk_gi *gi;
                const struct mk_gi_profile *gp = NULL;
                if (name[0] == '?') {
                        const char *q = name + 1;
                        unsigned pid = parse_num(&q);
                        expect_char(&q, ':');
                        unsigned units = parse_num(&q);
                        gi = add_gi(g, id, pid, UINT32_MAX, (struct mk_placement){start, units});
                } else {
                        gp = profile_named(g, name);
                        gi = add_gi(g, id, gp->id, gp->nvml_enum, (struct mk_placement){start, gp->placements[0].size});
                }
                while (*p != ')') {
                        char ci_name[MK_PROFILE_NAME_MAX];
                        assert_non_null(gp);
                        parse_word(&p, '@', ci_name, sizeof(ci_name));
                        unsigned ci_start = parse_num(&p);
                        expect_char(&p, '#');
                        unsigned ci_id = parse_num(&p);
                        add_ci(gi, ci_id, ci_profile_named(gp, ci_name), ci_start);
                        if (*p == ',')
                                p++;
                }
                p++;
        }
}

/* "3g.20gb:1, 4g.20gb:1" as given: not canonicalised, zero counts kept. */
static void parse_layout(const char *s, struct mk_layout *ret) {
        struct mk_layout l = {0};
        const char *p = s;
        while (p && *p) {
                char name[MK_PROFILE_NAME_MAX];
                struct mk_profile_name n;
                parse_word(&p, ':', name, sizeof(name));
                unsigned count = parse_num(&p);
                struct mk_error e = {0};
                if (mk_profile_name_parse(name, &n, &e) < 0)
                        fail_msg("bad name in layout '%s': %s", s, e.msg);
                /* Appended, not merged: the planner must not rely on canonical input. */
                struct mk_layout_item *items = realloc(l.items, (l.n_items + 1) * sizeof(*items));
                assert_non_null(items);
                l.items = items;
                l.items[l.n_items++] = (struct mk_layout_item){.name = n, .count = count};
                if (*p == ',')
                        p++;
                while (*p == ' ')
                        p++;
        }
        *ret = l;
}

/* --- plans as text --------------------------------------------------------------- */

static void append(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t size, const char *fmt, ...) {
        size_t off = strlen(buf);
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(buf + off, size - off, fmt, ap);
        va_end(ap);
        assert_true(n >= 0 && (size_t) n < size - off);
}

/* "4g.20gb@0(4g.20gb@0) 3g.20gb@4=1(3g.20gb@0=0)": GIs by placement, "=id" when kept. */
static void target_text(const struct mk_gpu_plan *p, char *buf, size_t size) {
        buf[0] = 0;
        for (size_t i = 0; i < p->n_target; i++) {
                const struct mk_plan_gi *t = &p->target[i];
                append(buf, size, "%s%s@%u", i ? " " : "", t->profile->name, t->placement.start);
                if (t->kept)
                        append(buf, size, "=%u", t->existing_id);
                append(buf, size, "(");
                for (size_t k = 0; k < t->n_cis; k++) {
                        const struct mk_plan_ci *c = &t->cis[k];
                        append(buf, size, "%s%s@%u", k ? "," : "", c->profile->name, c->placement.start);
                        if (c->kept)
                                append(buf, size, "=%u", c->existing_id);
                }
                append(buf, size, ")");
        }
}

/* "ci1.0:3g.20gb gi1:3g.20gb@0", in plan order. */
static void destroy_text(const struct mk_gpu_plan *p, char *buf, size_t size) {
        buf[0] = 0;
        for (size_t i = 0; i < p->n_destroy; i++) {
                const struct mk_plan_destroy *d = &p->destroy[i];
                if (d->is_ci)
                        append(buf, size, "%sci%u.%u:%s", i ? " " : "", d->gi_id, d->ci_id, d->name);
                else
                        append(buf, size, "%sgi%u:%s@%u", i ? " " : "", d->gi_id, d->name, d->placement.start);
        }
}

/* "mode reset change kept 1/1 new 1/1" (kept GIs/CIs, new GIs/CIs). */
static void summary_text(const struct mk_gpu_plan *p, char *buf, size_t size) {
        buf[0] = 0;
        if (p->mode_change)
                append(buf, size, "mode ");
        if (p->reset_needed)
                append(buf, size, "reset ");
        if (p->layout_change)
                append(buf, size, "change ");
        append(buf, size, "kept %zu/%zu new %zu/%zu", p->n_kept_gis, p->n_kept_cis, p->n_new_gis, p->n_new_cis);
}

static void expect_text(const char *what, const char *name, const char *got, const char *want) {
        if (strcmp(got, want) != 0)
                fail_msg("%s: %s\n  got:      '%s'\n  expected: '%s'", name, what, got, want);
}

/* --- applying a plan (what engine/ would do) and checking the result ----------- */

static const struct gi_row *row_of(int model, unsigned profile_id) {
        for (size_t i = 0; i < models[model].n_rows; i++)
                if (models[model].rows[i].id == profile_id)
                        return &models[model].rows[i];
        return NULL;
}

/* Every GI of a known profile at a valid start, no overlaps, per-profile
 * limits, each GI with CIs at valid placements (the MIG user guide's) that
 * do not overlap. */
static void check_state(const struct mk_gpu *g, int model, const char *name) {
        uint32_t used = 0;
        for (size_t i = 0; i < g->n_gis; i++) {
                const struct mk_gi *gi = &g->gis[i];
                const struct gi_row *r = row_of(model, gi->profile_id);
                if (!r)
                        fail_msg("%s: GI %u has unknown profile %u", name, gi->id, gi->profile_id);
                if (!(r->starts >> gi->placement.start & 1) || gi->placement.size != r->units)
                        fail_msg("%s: GI %u (%s) at invalid placement %u/%u", name, gi->id, r->name,
                                 gi->placement.start, gi->placement.size);
                uint32_t m = ((1u << r->units) - 1) << gi->placement.start;
                if (used & m)
                        fail_msg("%s: GI %u (%s@%u) overlaps another GI", name, gi->id, r->name, gi->placement.start);
                used |= m;
                size_t same = 0;
                for (size_t j = 0; j < g->n_gis; j++)
                        same += g->gis[j].profile_id == gi->profile_id;
                if (same > r->max_count)
                        fail_msg("%s: %zu GIs of %s, limit %u", name, same, r->name, r->max_count);
                if (gi->n_cis == 0)
                        fail_msg("%s: GI %u (%s) has no CI", name, gi->id, r->name);
                uint32_t ci_used = 0;
                for (size_t k = 0; k < gi->n_cis; k++) {
                        const struct mk_ci *ci = &gi->cis[k];
                        if (!(ci_starts(r->slices, ci->slices) >> ci->placement.start & 1) ||
                            ci->placement.size != ci->slices)
                                fail_msg("%s: CI %u.%u (%s) at invalid placement %u/%u", name, gi->id, ci->id,
                                         ci->name, ci->placement.start, ci->placement.size);
                        uint32_t cm = ((1u << ci->slices) - 1) << ci->placement.start;
                        if (ci_used & cm)
                                fail_msg("%s: CI %u.%u (%s) overlaps another CI", name, gi->id, ci->id, ci->name);
                        ci_used |= cm;
                }
        }
}

static struct mk_gi *find_gi(struct mk_gpu *g, unsigned id) {
        for (size_t i = 0; i < g->n_gis; i++)
                if (g->gis[i].id == id)
                        return &g->gis[i];
        return NULL;
}

/* Executes the plan on the snapshot like engine/ does on a GPU: destroys in
 * order (a GI only once its CIs are gone), creates what is new with fresh
 * ids, checks that what is kept is there unchanged, then sets the mode. */
static void apply_plan(struct mk_gpu *g, const struct mk_gpu_plan *p, const char *name) {
        for (size_t i = 0; i < p->n_destroy; i++) {
                const struct mk_plan_destroy *d = &p->destroy[i];
                struct mk_gi *gi = find_gi(g, d->gi_id);
                if (!gi)
                        fail_msg("%s: destroy of missing GI %u", name, d->gi_id);
                if (d->is_ci) {
                        size_t k = 0;
                        while (k < gi->n_cis && gi->cis[k].id != d->ci_id)
                                k++;
                        if (k == gi->n_cis)
                                fail_msg("%s: destroy of missing CI %u.%u", name, d->gi_id, d->ci_id);
                        if (strcmp(gi->cis[k].uuid, d->uuid) != 0)
                                fail_msg("%s: CI %u.%u UUID '%s', plan says '%s'", name, d->gi_id, d->ci_id,
                                         gi->cis[k].uuid, d->uuid);
                        memmove(&gi->cis[k], &gi->cis[k + 1], (gi->n_cis - k - 1) * sizeof(gi->cis[0]));
                        gi->n_cis--;
                } else {
                        if (gi->n_cis > 0)
                                fail_msg("%s: GI %u destroyed before its %zu CIs", name, d->gi_id, gi->n_cis);
                        free(gi->cis);
                        size_t k = (size_t) (gi - g->gis);
                        memmove(&g->gis[k], &g->gis[k + 1], (g->n_gis - k - 1) * sizeof(g->gis[0]));
                        g->n_gis--;
                }
        }
        for (size_t i = 0; i < p->n_target; i++) {
                const struct mk_plan_gi *t = &p->target[i];
                struct mk_gi *gi;
                if (t->kept) {
                        gi = find_gi(g, t->existing_id);
                        if (!gi || gi->profile_id != t->profile->id || gi->placement.start != t->placement.start ||
                            gi->placement.size != t->placement.size)
                                fail_msg("%s: kept GI %u is not there as planned", name, t->existing_id);
                } else {
                        unsigned id = 1;
                        for (size_t k = 0; k < g->n_gis; k++)
                                id = g->gis[k].id >= id ? g->gis[k].id + 1 : id;
                        gi = add_gi(g, id, t->profile->id, t->profile->nvml_enum, t->placement);
                }
                for (size_t k = 0; k < t->n_cis; k++) {
                        const struct mk_plan_ci *c = &t->cis[k];
                        if (c->kept) {
                                const struct mk_ci *old = NULL;
                                for (size_t j = 0; j < gi->n_cis; j++)
                                        if (gi->cis[j].id == c->existing_id)
                                                old = &gi->cis[j];
                                if (!old || old->placement.start != c->placement.start ||
                                    old->placement.size != c->placement.size || old->slices != c->profile->slices)
                                        fail_msg("%s: kept CI %u.%u is not there as planned", name, gi->id,
                                                 c->existing_id);
                                if (strcmp(old->uuid, c->uuid) != 0)
                                        fail_msg("%s: kept CI %u.%u UUID '%s', plan says '%s'", name, gi->id,
                                                 c->existing_id, old->uuid, c->uuid);
                                continue;
                        }
                        unsigned id = 0;
                        for (size_t j = 0; j < gi->n_cis; j++)
                                id = gi->cis[j].id >= id ? gi->cis[j].id + 1 : id;
                        if (c->placement.size != c->profile->slices)
                                fail_msg("%s: CI %s placed with size %u", name, c->profile->name, c->placement.size);
                        add_ci(gi, id, c->profile, c->placement.start);
                }
        }
        if (g->mig_capable)
                g->mig_current = g->mig_pending = p->mig_enabled ? MK_MIG_ENABLED : MK_MIG_DISABLED;
}

/* After applying: the state is valid, counts as the desired layout, and a
 * second plan has nothing to do. */
static void check_converged(struct mk_gpu *g, int model, bool enabled, const struct mk_layout *desired,
                            const char *name) {
        struct mk_layout cur = {0}, want = {0};
        struct mk_gpu_plan again;
        struct mk_error e = {0};
        char a[TEXT_MAX], b[TEXT_MAX];

        check_state(g, model, name);
        assert_int_equal(mk_gpu_current_layout(g, &cur), 0);
        if (enabled)
                for (size_t i = 0; i < desired->n_items; i++)
                        assert_int_equal(mk_layout_add(&want, &desired->items[i].name, desired->items[i].count), 0);
        if (!mk_layout_equal(&cur, &want)) {
                assert_true(mk_layout_format(&cur, a, sizeof(a)) >= 0);
                assert_true(mk_layout_format(&want, b, sizeof(b)) >= 0);
                fail_msg("%s: after applying\n  got:      '%s'\n  expected: '%s'", name, a, b);
        }
        if (!enabled && g->n_gis != 0)
                fail_msg("%s: %zu GIs left with MIG disabled", name, g->n_gis);

        int r = mk_plan_gpu(g, enabled, desired, &again, &e);
        if (r < 0)
                fail_msg("%s: second plan failed (%d): %s", name, r, e.msg);
        summary_text(&again, a, sizeof(a));
        target_text(&again, b, sizeof(b));
        if (again.mode_change || again.layout_change || again.n_destroy != 0)
                fail_msg("%s: second plan is not empty: %s: %s", name, a, b);
        mk_gpu_plan_done(&again);
        mk_layout_done(&cur);
        mk_layout_done(&want);
}

/* --- the cases ------------------------------------------------------------------------ */

struct plan_case {
        const char *name;
        int model;
        bool queried;          /* CI profiles as listed on a live GI */
        const char *before;    /* a layout planned and applied first */
        const char *existing;  /* instances added after `before` (add_existing syntax) */
        const char *mode;      /* "on" (default), "off", "off->on" (pending on), "on->off", "n/a" (not capable) */
        unsigned arch;         /* 0: the model's */
        bool disable;          /* desired mig-enabled: false */
        const char *layout;
        int rc;
        const char *msg;       /* substring of the error message */
        const char *target;    /* NULL: not checked */
        const char *destroy;
        const char *summary;
};

#define A100_ALL_BALANCED "1g.5gb:2, 2g.10gb:1, 3g.20gb:1"
/* Where the planner puts it from empty, with the ids apply_plan() gives. */
#define A100_ALL_BALANCED_KEPT \
        "1g.5gb@0=1(1g.5gb@0=0) 1g.5gb@1=2(1g.5gb@0=0) 2g.10gb@2=3(2g.10gb@0=0) 3g.20gb@4=4(3g.20gb@0=0)"
#define A100_ALL_BALANCED_NEW "1g.5gb@0(1g.5gb@0) 1g.5gb@1(1g.5gb@0) 2g.10gb@2(2g.10gb@0) 3g.20gb@4(3g.20gb@0)"
#define A100_LIST                                                                                             \
        "(it has: 1g.5gb, 1g.5gb+me, 1g.10gb, 2g.10gb, 1c.2g.10gb, 3g.20gb, 2c.3g.20gb, 1c.3g.20gb, 4g.20gb, " \
        "2c.4g.20gb, 1c.4g.20gb, 7g.40gb, 4c.7g.40gb, 3c.7g.40gb, 2c.7g.40gb, 1c.7g.40gb)"

static const struct plan_case cases[] = {
        /* From empty; all-balanced needs 3g at 4 (with 3g at 0 only one 1g fits). */
        {.name = "a100 all-balanced from empty",
         .layout = A100_ALL_BALANCED,
         .target = A100_ALL_BALANCED_NEW,
         .destroy = "",
         .summary = "change kept 0/0 new 4/4"},
        {.name = "a100 all-balanced again: nothing to do",
         .before = A100_ALL_BALANCED,
         .layout = A100_ALL_BALANCED,
         .target = A100_ALL_BALANCED_KEPT,
         .destroy = "",
         .summary = "kept 4/4 new 0/0"},
        {.name = "a100 same layout in another order: nothing to do",
         .before = A100_ALL_BALANCED,
         .layout = "1g.5gb:1, 3g.20gb:1, 1g.5gb:1, 2g.10gb:1",
         .target = A100_ALL_BALANCED_KEPT,
         .destroy = "",
         .summary = "kept 4/4 new 0/0"},
        {.name = "a100 adding one instance keeps the rest",
         .before = "3g.20gb:1, 2g.10gb:1",
         .layout = "3g.20gb:1, 2g.10gb:1, 1g.5gb:1",
         .target = "1g.5gb@1(1g.5gb@0) 2g.10gb@2=1(2g.10gb@0=0) 3g.20gb@4=2(3g.20gb@0=0)",
         .destroy = "",
         .summary = "change kept 2/2 new 1/1"},
        /* Built from empty, 3g+2g keep the largest aligned blocks free (3g at
         * 4, 2g at 2): the 1g pair all-balanced adds fits beside them. */
        {.name = "a100 adding two 1g keeps 3g and 2g",
         .before = "3g.20gb:1, 2g.10gb:1",
         .layout = A100_ALL_BALANCED,
         .target = "1g.5gb@0(1g.5gb@0) 1g.5gb@1(1g.5gb@0) 2g.10gb@2=1(2g.10gb@0=0) 3g.20gb@4=2(3g.20gb@0=0)",
         .destroy = "",
         .summary = "change kept 2/2 new 2/2"},
        /* bench-apply's three misses before placements were chosen by the
         * fit's rule: small-heavy built from empty had its 2g at 0 and 2,
         * blocking the 3g's only slot beside a 2g, so 4 instances went. */
        {.name = "a100 small-heavy from empty to all-balanced: only what must change",
         .before = "1g.5gb:3, 2g.10gb:2",
         .layout = A100_ALL_BALANCED,
         .target = "1g.5gb@0=1(1g.5gb@0=0) 1g.5gb@1=2(1g.5gb@0=0) 2g.10gb@2=3(2g.10gb@0=0) 3g.20gb@4(3g.20gb@0)",
         .destroy = "ci4.0:2g.10gb gi4:2g.10gb@4 ci5.0:1g.5gb gi5:1g.5gb@6",
         .summary = "change kept 3/3 new 1/1"},
        {.name = "h100 small-heavy from empty to all-balanced: only what must change",
         .model = H100_80GB,
         .before = "1g.10gb:3, 2g.20gb:2",
         .layout = "1g.10gb:2, 2g.20gb:1, 3g.40gb:1",
         .destroy = "ci4.0:2g.20gb gi4:2g.20gb@4 ci5.0:1g.10gb gi5:1g.10gb@6",
         .summary = "change kept 3/3 new 1/1"},
        {.name = "a100 swapping 3g for 2g+1g keeps what can stay",
         .before = A100_ALL_BALANCED,
         .layout = "2g.10gb:2, 1g.5gb:3",
         .target = "1g.5gb@0=1(1g.5gb@0=0) 1g.5gb@1=2(1g.5gb@0=0) 2g.10gb@2=3(2g.10gb@0=0) 2g.10gb@4(2g.10gb@0) "
                   "1g.5gb@6(1g.5gb@0)",
         .destroy = "ci4.0:3g.20gb gi4:3g.20gb@4",
         .summary = "change kept 3/3 new 2/2"},
        {.name = "a100 removing one instance destroys only it",
         .before = A100_ALL_BALANCED,
         .layout = "1g.5gb:1, 2g.10gb:1, 3g.20gb:1",
         .target = "1g.5gb@1=2(1g.5gb@0=0) 2g.10gb@2=3(2g.10gb@0=0) 3g.20gb@4=4(3g.20gb@0=0)",
         .destroy = "ci1.0:1g.5gb gi1:1g.5gb@0",
         .summary = "change kept 3/3 new 0/0"},

        /* CI sharing (mig-parted v0.15.0 cmd/nvidia-mig-parted/apply and pkg/mig). */
        {.name = "a100 1c.2g.10gb:2 shares one GI",
         .layout = "1c.2g.10gb:2",
         .target = "2g.10gb@4(1c.2g.10gb@0,1c.2g.10gb@1)",
         .summary = "change kept 0/0 new 1/2"},
        {.name = "a100 queried: 1c.2g.10gb:2 shares one GI",
         .queried = true,
         .layout = "1c.2g.10gb:2",
         .target = "2g.10gb@4(1c.2g.10gb@0,1c.2g.10gb@1)",
         .summary = "change kept 0/0 new 1/2"},
        {.name = "a100 1c.3g.20gb:4 takes two GIs (3 + 1)",
         .layout = "1c.3g.20gb:4",
         .target = "3g.20gb@0(1c.3g.20gb@0) 3g.20gb@4(1c.3g.20gb@0,1c.3g.20gb@1,1c.3g.20gb@2)",
         .summary = "change kept 0/0 new 2/4"},
        {.name = "a100 3g.20gb:1 and 1c.3g.20gb:1 take two GIs",
         .layout = "3g.20gb:1, 1c.3g.20gb:1",
         .target = "3g.20gb@0(3g.20gb@0) 3g.20gb@4(1c.3g.20gb@0)",
         .summary = "change kept 0/0 new 2/2"},
        {.name = "a100 2c and 1c of 3g, twice: two GIs, first fit",
         .layout = "2c.3g.20gb:2, 1c.3g.20gb:2",
         .target = "3g.20gb@0(2c.3g.20gb@0,1c.3g.20gb@2) 3g.20gb@4(2c.3g.20gb@0,1c.3g.20gb@2)",
         .summary = "change kept 0/0 new 2/4"},
        {.name = "a100 4c and three 1c share the 7g",
         .layout = "1c.7g.40gb:3, 4c.7g.40gb:1",
         .target = "7g.40gb@0(4c.7g.40gb@0,1c.7g.40gb@4,1c.7g.40gb@5,1c.7g.40gb@6)",
         .summary = "change kept 0/0 new 1/4"},
        {.name = "a100 two 3c and a 1c share the 7g",
         .queried = true,
         .layout = "3c.7g.40gb:2, 1c.7g.40gb:1",
         .target = "7g.40gb@0(3c.7g.40gb@0,1c.7g.40gb@3,3c.7g.40gb@4)",
         .summary = "change kept 0/0 new 1/3"},
        {.name = "a100 seven 1c share the 7g",
         .layout = "1c.7g.40gb:7",
         .target = "7g.40gb@0(1c.7g.40gb@0,1c.7g.40gb@1,1c.7g.40gb@2,1c.7g.40gb@3,1c.7g.40gb@4,1c.7g.40gb@5,"
                   "1c.7g.40gb@6)",
         .summary = "change kept 0/0 new 1/7"},

        /* What does not fit. */
        {.name = "a100 4x1g.10gb + 3x1g.5gb: 7 slices but 11 units",
         .layout = "1g.10gb:4, 1g.5gb:3",
         .rc = -ENOSPC,
         .msg = "GPU 0 (NVIDIA A100-SXM4-40GB): layout '1g.10gb:4, 1g.5gb:3' does not fit: needs 11 memory units, "
                "the GPU has 8"},
        {.name = "a100 too many slices",
         .layout = "3g.20gb:2, 2g.10gb:1",
         .rc = -ENOSPC,
         .msg = "does not fit: needs 8 compute slices, the GPU has 7"},
        {.name = "a100 7g and a 1g",
         .layout = "7g.40gb:1, 1g.5gb:1",
         .rc = -ENOSPC,
         .msg = "needs 8 compute slices, the GPU has 7"},
        {.name = "a100 +me twice",
         .layout = "1g.5gb+me:2",
         .rc = -ENOSPC,
         .msg = "1g.5gb+me: 2 exceeds the GPU's limit of 1"},
        {.name = "a100 eight 1g.5gb",
         .layout = "1g.5gb:8",
         .rc = -ENOSPC,
         .msg = "1g.5gb: 8 exceeds the GPU's limit of 7"},
        {.name = "a100 1c.3g.20gb:7 needs three 3g GIs",
         .layout = "1c.3g.20gb:7",
         .rc = -ENOSPC,
         .msg = "3g.20gb: 3 exceeds the GPU's limit of 2"},
        {.name = "a100 1g.20gb does not exist",
         .layout = "1g.20gb:1",
         .rc = -EINVAL,
         .msg = "GPU 0 (NVIDIA A100-SXM4-40GB): profile '1g.20gb' does not exist on this GPU " A100_LIST},
        {.name = "a100 3c.4g.20gb is not offered",
         .layout = "3c.4g.20gb:1",
         .rc = -EINVAL,
         .msg = "profile '3c.4g.20gb' does not exist on this GPU"},
        {.name = "a100 unknown name with an existing layout changes nothing",
         .before = A100_ALL_BALANCED,
         .layout = "1g.5gb:2, 2g.10gb:1, 3g.40gb:1",
         .rc = -EINVAL,
         .msg = "profile '3g.40gb' does not exist"},

        /* Names that resolve. */
        {.name = "a100 1g.10gb (double memory) is valid",
         .layout = "1g.10gb:1",
         .target = "1g.10gb@6(1g.10gb@0)",
         .summary = "change kept 0/0 new 1/1"},
        {.name = "a100 1c.1g.5gb and 2c.2g.10gb are 1g.5gb and 2g.10gb",
         .layout = "1c.1g.5gb:1, 2c.2g.10gb:1",
         .target = "2g.10gb@4(2g.10gb@0) 1g.5gb@6(1g.5gb@0)",
         .summary = "change kept 0/0 new 2/2"},
        {.name = "a100 zero counts are ignored, even of unknown names",
         .layout = "1g.20gb:0, 2g.10gb:1, 1g.5gb:0",
         .target = "2g.10gb@4(2g.10gb@0)",
         .summary = "change kept 0/0 new 1/1"},
        {.name = "a100 +me with six 1g",
         .layout = "1g.5gb+me:1, 1g.5gb:6",
         .target = "1g.5gb+me@0(1g.5gb+me@0) 1g.5gb@1(1g.5gb@0) 1g.5gb@2(1g.5gb@0) 1g.5gb@3(1g.5gb@0) "
                   "1g.5gb@4(1g.5gb@0) 1g.5gb@5(1g.5gb@0) 1g.5gb@6(1g.5gb@0)",
         .summary = "change kept 0/0 new 7/7"},
        {.name = "a100 7x1g.5gb takes all seven placements",
         .layout = "1g.5gb:7",
         .target = "1g.5gb@0(1g.5gb@0) 1g.5gb@1(1g.5gb@0) 1g.5gb@2(1g.5gb@0) 1g.5gb@3(1g.5gb@0) "
                   "1g.5gb@4(1g.5gb@0) 1g.5gb@5(1g.5gb@0) 1g.5gb@6(1g.5gb@0)",
         .summary = "change kept 0/0 new 7/7"},
        {.name = "a100 4x1g.10gb",
         .layout = "1g.10gb:4",
         .target = "1g.10gb@0(1g.10gb@0) 1g.10gb@2(1g.10gb@0) 1g.10gb@4(1g.10gb@0) 1g.10gb@6(1g.10gb@0)",
         .summary = "change kept 0/0 new 4/4"},

        /* k8s-test-infra#886: 3g + 4g fits only with 4g at 0 and 3g at 4. */
        {.name = "a100 3g+4g from empty",
         .layout = "3g.20gb:1, 4g.20gb:1",
         .target = "4g.20gb@0(4g.20gb@0) 3g.20gb@4(3g.20gb@0)",
         .summary = "change kept 0/0 new 2/2"},
        {.name = "a100 3g+4g with a 3g at 0: recreated at 4",
         .existing = "3g.20gb@0#1(3g.20gb@0#0)",
         .layout = "3g.20gb:1, 4g.20gb:1",
         .target = "4g.20gb@0(4g.20gb@0) 3g.20gb@4(3g.20gb@0)",
         .destroy = "ci1.0:3g.20gb gi1:3g.20gb@0",
         .summary = "change kept 0/0 new 2/2"},
        {.name = "a100 3g+4g with a 3g at 4: kept",
         .existing = "3g.20gb@4#1(3g.20gb@0#0)",
         .layout = "3g.20gb:1, 4g.20gb:1",
         .target = "4g.20gb@0(4g.20gb@0) 3g.20gb@4=1(3g.20gb@0=0)",
         .destroy = "",
         .summary = "change kept 1/1 new 1/1"},

        /* Minimal change. */
        {.name = "a100 a GI at another placement than the first stays",
         .existing = "2g.10gb@4#1(2g.10gb@0#0)",
         .layout = "2g.10gb:1",
         .target = "2g.10gb@4=1(2g.10gb@0=0)",
         .destroy = "",
         .summary = "kept 1/1 new 0/0"},
        {.name = "a100 scattered 1g stay where they are",
         .existing = "1g.5gb@6#3(1g.5gb@0#0) 1g.5gb@1#2(1g.5gb@0#0)",
         .layout = "1g.5gb:2",
         .target = "1g.5gb@1=2(1g.5gb@0=0) 1g.5gb@6=3(1g.5gb@0=0)",
         .destroy = "",
         .summary = "kept 2/2 new 0/0"},
        {.name = "a100 a GI without CIs is kept when a target lands on it",
         .existing = "2g.10gb@2#1()",
         .layout = "2g.10gb:1",
         .target = "2g.10gb@2=1(2g.10gb@0)",
         .destroy = "",
         .summary = "change kept 1/0 new 0/1"},
        {.name = "a100 a GI without CIs that is not wanted goes",
         .existing = "2g.10gb@2#1()",
         .layout = "1g.5gb:1",
         .target = "1g.5gb@6(1g.5gb@0)",
         .destroy = "gi1:2g.10gb@2",
         .summary = "change kept 0/0 new 1/1"},
        {.name = "a100 a GI of an unknown profile goes",
         .existing = "?17:4@0#7() 2g.10gb@4#1(2g.10gb@0#0)",
         .layout = "2g.10gb:1",
         .target = "2g.10gb@4=1(2g.10gb@0=0)",
         .destroy = "gi7:unknown profile 17@0",
         .summary = "change kept 1/1 new 0/0"},
        {.name = "a100 CIs grouped differently from upstream are not regrouped",
         .existing = "2g.10gb@0#1(1c.2g.10gb@0#0) 2g.10gb@2#2(1c.2g.10gb@1#0)",
         .layout = "1c.2g.10gb:2",
         .target = "2g.10gb@0=1(1c.2g.10gb@0=0) 2g.10gb@2=2(1c.2g.10gb@1=0)",
         .destroy = "",
         .summary = "kept 2/2 new 0/0"},
        {.name = "a100 queried: CIs grouped differently are not regrouped",
         .queried = true,
         .existing = "2g.10gb@0#1(1c.2g.10gb@0#0) 2g.10gb@2#2(1c.2g.10gb@1#0)",
         .layout = "1c.2g.10gb:2",
         .target = "2g.10gb@0=1(1c.2g.10gb@0=0) 2g.10gb@2=2(1c.2g.10gb@1=0)",
         .destroy = "",
         .summary = "kept 2/2 new 0/0"},
        {.name = "a100 one CI fewer in a shared GI",
         .existing = "3g.20gb@0#1(1c.3g.20gb@0#0,1c.3g.20gb@1#1,1c.3g.20gb@2#2)",
         .layout = "1c.3g.20gb:2",
         .target = "3g.20gb@0=1(1c.3g.20gb@0=0,1c.3g.20gb@1=1)",
         .destroy = "ci1.2:1c.3g.20gb",
         .summary = "change kept 1/2 new 0/0"},
        {.name = "a100 queried: one CI fewer in a shared GI (by profile id)",
         .queried = true,
         .existing = "3g.20gb@0#1(1c.3g.20gb@0#0,1c.3g.20gb@1#1,1c.3g.20gb@2#2)",
         .layout = "1c.3g.20gb:2",
         .target = "3g.20gb@0=1(1c.3g.20gb@0=0,1c.3g.20gb@1=1)",
         .destroy = "ci1.2:1c.3g.20gb",
         .summary = "change kept 1/2 new 0/0"},
        {.name = "a100 a CI in the way of a wanted 2c: kept, the 2c goes in a new GI",
         .existing = "3g.20gb@0#1(1c.3g.20gb@1#5)",
         .layout = "2c.3g.20gb:1, 1c.3g.20gb:1",
         .target = "3g.20gb@0=1(1c.3g.20gb@1=5) 3g.20gb@4(2c.3g.20gb@0)",
         .destroy = "",
         .summary = "change kept 1/1 new 1/1"},
        {.name = "a100 a CI in the way and no GI to spare: GI kept, CI recreated",
         .existing = "3g.20gb@0#1(1c.3g.20gb@1#5)",
         .layout = "3g.20gb:1, 2c.3g.20gb:1, 1c.3g.20gb:1",
         .target = "3g.20gb@0=1(2c.3g.20gb@0,1c.3g.20gb@2) 3g.20gb@4(3g.20gb@0)",
         .destroy = "ci1.5:1c.3g.20gb",
         .summary = "change kept 1/0 new 1/3"},
        {.name = "a100 a full CI replaced by two 1c in the same GI",
         .existing = "2g.10gb@0#1(2g.10gb@0#0)",
         .layout = "1c.2g.10gb:2",
         .target = "2g.10gb@0=1(1c.2g.10gb@0,1c.2g.10gb@1)",
         .destroy = "ci1.0:2g.10gb",
         .summary = "change kept 1/0 new 0/2"},
        {.name = "a100 empty layout destroys everything, MIG stays on",
         .before = "4g.20gb:1, 1c.3g.20gb:2",
         .layout = "",
         .target = "",
         .destroy = "ci1.0:4g.20gb gi1:4g.20gb@0 ci2.0:1c.3g.20gb ci2.1:1c.3g.20gb gi2:3g.20gb@4",
         .summary = "change kept 0/0 new 0/0"},

        /* MIG mode. */
        {.name = "a100 disabled to enabled: reset (Ampere)",
         .mode = "off",
         .layout = "7g.40gb:1",
         .target = "7g.40gb@0(7g.40gb@0)",
         .summary = "mode reset change kept 0/0 new 1/1"},
        {.name = "a100 disabled to enabled, unknown architecture: reset",
         .mode = "off",
         .arch = 0xffffffffu,
         .layout = "7g.40gb:1",
         .summary = "mode reset change kept 0/0 new 1/1"},
        {.name = "h100 disabled to enabled: no reset (Hopper)",
         .model = H100_80GB,
         .mode = "off",
         .layout = "7g.80gb:1",
         .target = "7g.80gb@0(7g.80gb@0)",
         .summary = "mode change kept 0/0 new 1/1"},
        {.name = "h100 enable already pending: reset",
         .model = H100_80GB,
         .mode = "off->on",
         .layout = "3g.40gb:2",
         .target = "3g.40gb@0(3g.40gb@0) 3g.40gb@4(3g.40gb@0)",
         .summary = "mode reset change kept 0/0 new 2/2"},
        {.name = "a100 enabled to disabled: everything goes, CIs first",
         .before = A100_ALL_BALANCED,
         .disable = true,
         .target = "",
         .destroy = "ci1.0:1g.5gb gi1:1g.5gb@0 ci2.0:1g.5gb gi2:1g.5gb@1 ci3.0:2g.10gb gi3:2g.10gb@2 "
                    "ci4.0:3g.20gb gi4:3g.20gb@4",
         .summary = "mode reset change kept 0/0 new 0/0"},
        {.name = "h100 enabled to disabled: no reset",
         .model = H100_80GB,
         .before = "1c.7g.80gb:2",
         .disable = true,
         .destroy = "ci1.0:1c.7g.80gb ci1.1:1c.7g.80gb gi1:7g.80gb@0",
         .summary = "mode change kept 0/0 new 0/0"},
        {.name = "a100 disable already pending: reset",
         .before = "7g.40gb:1",
         .mode = "on->off",
         .disable = true,
         .destroy = "ci1.0:7g.40gb gi1:7g.40gb@0",
         .summary = "mode reset change kept 0/0 new 0/0"},
        {.name = "a100 pending disable cancelled when enabled is wanted",
         .before = "7g.40gb:1",
         .mode = "on->off",
         .layout = "7g.40gb:1",
         .target = "7g.40gb@0=1(7g.40gb@0=0)",
         .summary = "mode kept 1/1 new 0/0"},
        {.name = "a100 pending enable cancelled when disabled is wanted: no reset",
         .mode = "off->on",
         .disable = true,
         .target = "",
         .destroy = "",
         .summary = "mode kept 0/0 new 0/0"},
        {.name = "a100 disabled stays disabled",
         .mode = "off",
         .disable = true,
         .target = "",
         .destroy = "",
         .summary = "kept 0/0 new 0/0"},
        {.name = "not MIG-capable, disabled: nothing to do",
         .mode = "n/a",
         .disable = true,
         .summary = "kept 0/0 new 0/0"},
        {.name = "not MIG-capable, enabled: refused",
         .mode = "n/a",
         .layout = "1g.5gb:1",
         .rc = -EOPNOTSUPP,
         .msg = "GPU 0 (NVIDIA A100-SXM4-40GB) is not MIG-capable"},

        /* H100 80GB. */
        {.name = "h100 all-balanced",
         .model = H100_80GB,
         .layout = "1g.10gb:2, 2g.20gb:1, 3g.40gb:1",
         .target = "1g.10gb@0(1g.10gb@0) 1g.10gb@1(1g.10gb@0) 2g.20gb@2(2g.20gb@0) 3g.40gb@4(3g.40gb@0)",
         .summary = "change kept 0/0 new 4/4"},
        {.name = "h100 4x1g.20gb",
         .model = H100_80GB,
         .queried = true,
         .layout = "1g.20gb:4",
         .target = "1g.20gb@0(1g.20gb@0) 1g.20gb@2(1g.20gb@0) 1g.20gb@4(1g.20gb@0) 1g.20gb@6(1g.20gb@0)",
         .summary = "change kept 0/0 new 4/4"},
        {.name = "h100 1c.2g.20gb:2 shares one GI",
         .model = H100_80GB,
         .queried = true,
         .layout = "1c.2g.20gb:2",
         .target = "2g.20gb@4(1c.2g.20gb@0,1c.2g.20gb@1)",
         .summary = "change kept 0/0 new 1/2"},
        {.name = "h100 4x1g.20gb + 1g.10gb: 9 units",
         .model = H100_80GB,
         .layout = "1g.20gb:4, 1g.10gb:1",
         .rc = -ENOSPC,
         .msg = "GPU 0 (NVIDIA H100 80GB HBM3): layout '1g.20gb:4, 1g.10gb:1' does not fit: needs 9 memory units"},
        {.name = "h100 1g.5gb is an A100 name",
         .model = H100_80GB,
         .layout = "1g.5gb:1",
         .rc = -EINVAL,
         .msg = "GPU 0 (NVIDIA H100 80GB HBM3): profile '1g.5gb' does not exist on this GPU (it has: 1g.10gb, "
                "1g.10gb+me, 1g.20gb, 2g.20gb, 1c.2g.20gb, 3g.40gb,"},
        {.name = "h100 3g+4g with a 3g at 0: recreated at 4",
         .model = H100_80GB,
         .queried = true,
         .existing = "3g.40gb@0#3(3g.40gb@0#0)",
         .layout = "4g.40gb:1, 3g.40gb:1",
         .target = "4g.40gb@0(4g.40gb@0) 3g.40gb@4(3g.40gb@0)",
         .destroy = "ci3.0:3g.40gb gi3:3g.40gb@0",
         .summary = "change kept 0/0 new 2/2"},
};

static void set_mode(struct mk_gpu *g, const char *mode) {
        if (!mode || strcmp(mode, "on") == 0)
                g->mig_current = g->mig_pending = MK_MIG_ENABLED;
        else if (strcmp(mode, "off") == 0)
                g->mig_current = g->mig_pending = MK_MIG_DISABLED;
        else if (strcmp(mode, "off->on") == 0) {
                g->mig_current = MK_MIG_DISABLED;
                g->mig_pending = MK_MIG_ENABLED;
        } else if (strcmp(mode, "on->off") == 0) {
                g->mig_current = MK_MIG_ENABLED;
                g->mig_pending = MK_MIG_DISABLED;
        } else if (strcmp(mode, "n/a") == 0) {
                g->mig_capable = false;
                g->mig_current = g->mig_pending = MK_MIG_UNSUPPORTED;
        } else
                fail_msg("unknown mode '%s'", mode);
}

/* Plans `layout` on g and applies it (a "before" state). */
static void plan_and_apply(struct mk_gpu *g, int model, const char *layout, const char *name) {
        struct mk_layout l;
        struct mk_gpu_plan p;
        struct mk_error e = {0};
        parse_layout(layout, &l);
        int r = mk_plan_gpu(g, true, &l, &p, &e);
        if (r < 0)
                fail_msg("%s: planning '%s' first failed (%d): %s", name, layout, r, e.msg);
        apply_plan(g, &p, name);
        check_state(g, model, name);
        mk_gpu_plan_done(&p);
        mk_layout_done(&l);
}

static uint64_t max_nodes_seen;
static char max_nodes_case[1200];

static void note_nodes(const struct mk_gpu_plan *p, const char *what) {
        if (p->search_nodes > max_nodes_seen) {
                size_t n = MIN(strlen(what), sizeof(max_nodes_case) - 1);
                max_nodes_seen = p->search_nodes;
                memcpy(max_nodes_case, what, n);
                max_nodes_case[n] = 0;
        }
}

static void run_case(void **state) {
        const struct plan_case *c = *state;
        struct mk_gpu g;
        struct mk_layout l;
        struct mk_gpu_plan p, sentinel;
        struct mk_error e = {0};
        char got[TEXT_MAX];

        build_gpu(&g, c->model, c->queried);
        if (c->before)
                plan_and_apply(&g, c->model, c->before, c->name);
        if (c->existing)
                add_existing(&g, c->existing);
        set_mode(&g, c->mode);
        if (c->arch)
                g.architecture = c->arch;
        parse_layout(c->layout ? c->layout : "", &l);

        memset(&p, 0x5a, sizeof(p));
        sentinel = p;
        int r = mk_plan_gpu(&g, !c->disable, &l, &p, &e);
        if (r != c->rc)
                fail_msg("%s: returned %d, expected %d (message: '%s')", c->name, r, c->rc, e.msg);
        if (r < 0) {
                if (e.code != r)
                        fail_msg("%s: error code %d, returned %d", c->name, e.code, r);
                if (!c->msg || !strstr(e.msg, c->msg))
                        fail_msg("%s: message\n  got:      '%s'\n  expected: '...%s...'", c->name, e.msg,
                                 c->msg ? c->msg : "(none)");
                /* ret_* is written only on success. */
                if (memcmp(&p, &sentinel, sizeof(p)) != 0)
                        fail_msg("%s: the plan was written although planning failed", c->name);
                /* No detail wanted: same result. */
                struct mk_gpu_plan q;
                assert_int_equal(mk_plan_gpu(&g, !c->disable, &l, &q, NULL), c->rc);
                goto out;
        }
        assert_int_equal(e.code, 0);
        note_nodes(&p, c->name);
        assert_int_equal(p.gpu_index, g.index);
        assert_int_equal(p.mig_enabled, !c->disable);
        if (c->target) {
                target_text(&p, got, sizeof(got));
                expect_text("target", c->name, got, c->target);
        }
        if (c->destroy) {
                destroy_text(&p, got, sizeof(got));
                expect_text("destroy", c->name, got, c->destroy);
        }
        if (c->summary) {
                summary_text(&p, got, sizeof(got));
                expect_text("summary", c->name, got, c->summary);
        }
        /* The counts agree with the lists. */
        size_t kg = 0, kc = 0, ng = 0, nc = 0;
        for (size_t i = 0; i < p.n_target; i++) {
                p.target[i].kept ? kg++ : ng++;
                for (size_t k = 0; k < p.target[i].n_cis; k++)
                        p.target[i].cis[k].kept ? kc++ : nc++;
        }
        if (kg != p.n_kept_gis || kc != p.n_kept_cis || ng != p.n_new_gis || nc != p.n_new_cis)
                fail_msg("%s: counts %zu/%zu %zu/%zu, lists say %zu/%zu %zu/%zu", c->name, p.n_kept_gis, p.n_kept_cis,
                         p.n_new_gis, p.n_new_cis, kg, kc, ng, nc);
        assert_int_equal(p.layout_change, p.n_destroy > 0 || ng > 0 || nc > 0);

        apply_plan(&g, &p, c->name);
        if (g.mig_capable)
                check_converged(&g, c->model, !c->disable, &l, c->name);
        mk_gpu_plan_done(&p);
out:
        mk_layout_done(&l);
        mk_gpu_done(&g);
}

/* --- direct tests ---------------------------------------------------------------------- */

static void test_resolve(void **state) {
        struct mk_gpu g;
        struct mk_profile_name n;
        const struct mk_gi_profile *gp = (const void *) &n;
        const struct mk_ci_profile *cp = (const void *) &n;

        build_gpu(&g, A100_40GB, false);
        assert_int_equal(mk_profile_name_parse("1c.2g.10gb", &n, NULL), 0);
        assert_int_equal(mk_plan_resolve(&g, &n, &gp, &cp), 0);
        assert_int_equal(gp->id, 14);
        assert_int_equal(cp->slices, 1);
        assert_string_equal(cp->name, "1c.2g.10gb");

        assert_int_equal(mk_profile_name_parse("7c.7g.40gb", &n, NULL), 0);
        assert_int_equal(mk_plan_resolve(&g, &n, &gp, &cp), 0);
        assert_int_equal(gp->id, 0);
        assert_int_equal(cp->slices, 7);

        assert_int_equal(mk_profile_name_parse("1g.5gb+me", &n, NULL), 0);
        assert_int_equal(mk_plan_resolve(&g, &n, &gp, NULL), 0);
        assert_int_equal(gp->id, 20);

        /* Not there: outputs untouched. */
        const struct mk_gi_profile *gp0 = gp;
        const struct mk_ci_profile *cp0 = cp;
        assert_int_equal(mk_profile_name_parse("1g.20gb", &n, NULL), 0);
        assert_int_equal(mk_plan_resolve(&g, &n, &gp, &cp), -ENOENT);
        assert_ptr_equal(gp, gp0);
        assert_ptr_equal(cp, cp0);
        assert_int_equal(mk_profile_name_parse("1g.5gb-me", &n, NULL), 0);
        assert_int_equal(mk_plan_resolve(&g, &n, &gp, &cp), -ENOENT);
        mk_gpu_done(&g);
}

static void test_plan_done(void **state) {
        struct mk_gpu_plan p = {0};
        mk_gpu_plan_done(&p);
        mk_gpu_plan_done(&p);
        mk_gpu_plan_done(NULL);
}

/* Queried CI placements win over the rule: with 3c at 0 and 3 (not 0 and 4)
 * two 3c CIs still share the 7g, at other slices; with 3c only at 0 they
 * need two 7g GIs, which the GPU does not allow. */
static void test_queried_ci_placements(void **state) {
        struct mk_gpu g;
        struct mk_layout l;
        struct mk_gpu_plan p;
        struct mk_error e = {0};
        char got[TEXT_MAX];

        build_gpu(&g, A100_40GB, true);
        struct mk_gi_profile *gp = (struct mk_gi_profile *) profile_named(&g, "7g.40gb");
        struct mk_ci_profile *cp = (struct mk_ci_profile *) ci_profile_named(gp, "3c.7g.40gb");
        free(cp->placements);
        cp->placements = placements_from_starts(0x09, 3, &cp->n_placements);

        parse_layout("3c.7g.40gb:2", &l);
        assert_int_equal(mk_plan_gpu(&g, true, &l, &p, &e), 0);
        target_text(&p, got, sizeof(got));
        expect_text("target", "3c at 0 and 3", got, "7g.40gb@0(3c.7g.40gb@0,3c.7g.40gb@3)");
        mk_gpu_plan_done(&p);

        cp->n_placements = 1;
        assert_int_equal(mk_plan_gpu(&g, true, &l, &p, &e), -ENOSPC);
        if (!strstr(e.msg, "7g.40gb: 2 exceeds the GPU's limit of 1"))
                fail_msg("message: '%s'", e.msg);
        mk_layout_done(&l);
        mk_gpu_done(&g);
}

/* A GPU whose 3g may only start at 0: 3g + 4g passes every count but has no
 * placement. */
static void test_no_placement(void **state) {
        struct mk_gpu g;
        struct mk_layout l;
        struct mk_gpu_plan p;
        struct mk_error e = {0};

        build_gpu(&g, A100_40GB, false);
        struct mk_gi_profile *gp = (struct mk_gi_profile *) profile_named(&g, "3g.20gb");
        gp->n_placements = 1;
        parse_layout("3g.20gb:1, 4g.20gb:1", &l);
        assert_int_equal(mk_plan_gpu(&g, true, &l, &p, &e), -ENOSPC);
        const char *want = "GPU 0 (NVIDIA A100-SXM4-40GB): layout '4g.20gb:1, 3g.20gb:1' does not fit: no "
                           "non-overlapping placement exists for the GPU instances 4g.20gb:1, 3g.20gb:1";
        expect_text("message", "3g only at 0", e.msg, want);
        mk_layout_done(&l);
        mk_gpu_done(&g);
}

/* A GPU reporting no memory-unit count: the units come from the placements. */
static void test_units_from_placements(void **state) {
        struct mk_gpu g;
        struct mk_layout l;
        struct mk_gpu_plan p;
        struct mk_error e = {0};

        build_gpu(&g, A100_40GB, false);
        g.memory_units = 0;
        parse_layout("1g.10gb:4, 1g.5gb:3", &l);
        assert_int_equal(mk_plan_gpu(&g, true, &l, &p, &e), -ENOSPC);
        if (!strstr(e.msg, "needs 11 memory units, the GPU has 8"))
                fail_msg("message: '%s'", e.msg);
        mk_layout_done(&l);
        parse_layout("1g.10gb:4", &l);
        assert_int_equal(mk_plan_gpu(&g, true, &l, &p, &e), 0);
        assert_int_equal(p.n_new_gis, 4);
        mk_gpu_plan_done(&p);
        mk_layout_done(&l);
        mk_gpu_done(&g);
}

/* --- exhaustive check against a brute force ------------------------------------------ */

/* Places left[row..] instances, each row's instances at increasing starts. */
static bool brute_fit(const struct model *m, unsigned *left, size_t row, unsigned min_start, uint32_t used) {
        while (row < m->n_rows && left[row] == 0) {
                row++;
                min_start = 0;
        }
        if (row == m->n_rows)
                return true;
        const struct gi_row *r = &m->rows[row];
        for (unsigned s = min_start; s + r->units <= m->units; s++) {
                uint32_t mask = ((1u << r->units) - 1) << s;
                if (!(r->starts >> s & 1) || (mask & used))
                        continue;
                left[row]--;
                bool ok = brute_fit(m, left, row, s + 1, used | mask);
                left[row]++;
                if (ok)
                        return true;
        }
        return false;
}

static bool brute_feasible(const struct model *m, const unsigned *count) {
        unsigned slices = 0, left[16];
        for (size_t i = 0; i < m->n_rows; i++) {
                if (count[i] > m->rows[i].max_count)
                        return false;
                slices += count[i] * m->rows[i].slices;
                left[i] = count[i];
        }
        return slices <= m->slices && brute_fit(m, left, 0, 0, 0);
}

struct layouts {
        unsigned (*counts)[16];
        size_t n, cap;
};

static void enumerate(const struct model *m, size_t row, unsigned *count, unsigned slices, struct layouts *out) {
        if (row == m->n_rows) {
                if (out->n == out->cap) {
                        out->cap = out->cap ? 2 * out->cap : 64;
                        out->counts = realloc(out->counts, out->cap * sizeof(*out->counts));
                        assert_non_null(out->counts);
                }
                memcpy(out->counts[out->n++], count, sizeof(out->counts[0]));
                return;
        }
        for (unsigned k = 0; slices + k * m->rows[row].slices <= m->slices; k++) {
                count[row] = k;
                enumerate(m, row + 1, count, slices + k * m->rows[row].slices, out);
        }
        count[row] = 0;
}

static void layout_of(const struct model *m, const unsigned *count, struct mk_layout *l, char *text, size_t size) {
        *l = (struct mk_layout){0};
        text[0] = 0;
        for (size_t i = 0; i < m->n_rows; i++) {
                if (count[i] == 0)
                        continue;
                struct mk_profile_name n;
                assert_int_equal(mk_profile_name_parse(m->rows[i].name, &n, NULL), 0);
                assert_int_equal(mk_layout_add(l, &n, count[i]), 0);
                append(text, size, "%s%s:%u", text[0] ? ", " : "", m->rows[i].name, count[i]);
        }
}

/* Every GI-level layout with at most 7 slices, planned from empty: the
 * verdict equals the brute force's, and feasible plans are valid. */
static void enumerate_model(int model, bool queried) {
        const struct model *m = &models[model];
        struct layouts all = {0};
        unsigned count[16] = {0};
        size_t n_feasible = 0, n_reason[4] = {0};
        static const char *const reasons[] = {"exceeds the GPU's limit", "compute slices", "memory units",
                                              "no non-overlapping placement"};

        enumerate(m, 0, count, 0, &all);
        for (size_t i = 0; i < all.n; i++) {
                struct mk_gpu g;
                struct mk_layout l;
                struct mk_gpu_plan p;
                struct mk_error e = {0};
                char text[512];

                build_gpu(&g, model, queried);
                layout_of(m, all.counts[i], &l, text, sizeof(text));
                bool want = brute_feasible(m, all.counts[i]);
                int r = mk_plan_gpu(&g, true, &l, &p, &e);
                if ((r == 0) != want)
                        fail_msg("%s '%s': planner says %s (%d: %s), brute force says %s", m->gpu_name, text,
                                 r == 0 ? "feasible" : "infeasible", r, e.msg, want ? "feasible" : "infeasible");
                if (r == 0) {
                        n_feasible++;
                        note_nodes(&p, text);
                        for (size_t k = 0; k < p.n_target; k++)
                                if (p.target[k].n_cis != 1 || p.target[k].cis[0].profile->slices !=
                                                                      p.target[k].profile->slices)
                                        fail_msg("'%s': GI %zu should hold one full CI", text, k);
                        apply_plan(&g, &p, text);
                        check_converged(&g, model, true, &l, text);
                        mk_gpu_plan_done(&p);
                } else if (r != -ENOSPC || !strstr(e.msg, "does not fit"))
                        fail_msg("'%s': returned %d: %s", text, r, e.msg);
                else
                        for (size_t k = 0; k < ELEMENTSOF(reasons); k++)
                                if (strstr(e.msg, reasons[k])) {
                                        n_reason[k]++;
                                        break;
                                }
                mk_layout_done(&l);
                mk_gpu_done(&g);
        }
        print_message("%s%s: %zu layouts, %zu feasible; refused for: %zu limit, %zu slices, %zu units, %zu "
                      "placement\n",
                      m->gpu_name, queried ? " (queried CIs)" : "", all.n, n_feasible, n_reason[0], n_reason[1],
                      n_reason[2], n_reason[3]);
        assert_int_equal(n_feasible + n_reason[0] + n_reason[1] + n_reason[2] + n_reason[3], all.n);
        assert_true(n_feasible > 100);
        free(all.counts);
}

static void test_enumerate_a100(void **state) {
        enumerate_model(A100_40GB, false);
}

static void test_enumerate_h100(void **state) {
        enumerate_model(H100_80GB, true);
}

/* Most GIs of `have` (existing: row, start) that a placement of `want` can
 * keep, by brute force over subsets. */
static unsigned brute_max_keep(const struct model *m, const unsigned (*have)[2], size_t n_have, const unsigned *want) {
        unsigned best = 0;
        for (uint32_t set = 0; set < (1u << n_have); set++) {
                unsigned n = (unsigned) __builtin_popcount(set), left[16];
                uint32_t used = 0;
                bool ok = true;
                if (n <= best)
                        continue;
                memcpy(left, want, m->n_rows * sizeof(left[0]));
                for (size_t i = 0; i < n_have && ok; i++) {
                        if (!(set >> i & 1))
                                continue;
                        const struct gi_row *r = &m->rows[have[i][0]];
                        if (left[have[i][0]] == 0)
                                ok = false;
                        else {
                                left[have[i][0]]--;
                                used |= ((1u << r->units) - 1) << have[i][1];
                        }
                }
                if (ok && brute_fit(m, left, 0, 0, used))
                        best = n;
        }
        return best;
}

/* From every feasible A100 layout to every other: the plan keeps as many GIs
 * as the brute force can, and converges. */
static void test_transitions_a100(void **state) {
        const struct model *m = &models[A100_40GB];
        struct layouts all = {0}, ok = {0};
        unsigned count[16] = {0};
        size_t n_pairs = 0;

        enumerate(m, 0, count, 0, &all);
        for (size_t i = 0; i < all.n; i++)
                if (brute_feasible(m, all.counts[i])) {
                        if (ok.n == ok.cap) {
                                ok.cap = ok.cap ? 2 * ok.cap : 64;
                                ok.counts = realloc(ok.counts, ok.cap * sizeof(*ok.counts));
                                assert_non_null(ok.counts);
                        }
                        memcpy(ok.counts[ok.n++], all.counts[i], sizeof(all.counts[0]));
                }

        for (size_t a = 0; a < ok.n; a++) {
                struct mk_gpu base;
                struct mk_layout la;
                char ta[512];

                build_gpu(&base, A100_40GB, false);
                layout_of(m, ok.counts[a], &la, ta, sizeof(ta));
                {
                        struct mk_gpu_plan p;
                        assert_int_equal(mk_plan_gpu(&base, true, &la, &p, NULL), 0);
                        apply_plan(&base, &p, ta);
                        mk_gpu_plan_done(&p);
                }
                unsigned have[8][2];
                size_t n_have = 0;
                for (size_t k = 0; k < base.n_gis; k++) {
                        const struct gi_row *r = row_of(A100_40GB, base.gis[k].profile_id);
                        have[n_have][0] = (unsigned) (r - m->rows);
                        have[n_have][1] = base.gis[k].placement.start;
                        n_have++;
                }

                for (size_t b = 0; b < ok.n; b++) {
                        struct mk_gpu g;
                        struct mk_layout lb;
                        struct mk_gpu_plan p;
                        struct mk_error e = {0};
                        char tb[512], what[1100];

                        build_gpu(&g, A100_40GB, false);
                        g.gis = calloc(base.n_gis + 1, sizeof(*g.gis));
                        assert_non_null(g.gis);
                        for (size_t k = 0; k < base.n_gis; k++) {
                                g.gis[k] = base.gis[k];
                                g.gis[k].cis = calloc(1, sizeof(*g.gis[k].cis));
                                assert_non_null(g.gis[k].cis);
                                memcpy(g.gis[k].cis, base.gis[k].cis, sizeof(*g.gis[k].cis));
                        }
                        g.n_gis = base.n_gis;

                        layout_of(m, ok.counts[b], &lb, tb, sizeof(tb));
                        snprintf(what, sizeof(what), "'%s' -> '%s'", ta, tb);
                        int r = mk_plan_gpu(&g, true, &lb, &p, &e);
                        if (r < 0)
                                fail_msg("%s: %d: %s", what, r, e.msg);
                        note_nodes(&p, what);
                        unsigned best = brute_max_keep(m, (const unsigned(*)[2]) have, n_have, ok.counts[b]);
                        if (p.n_kept_gis != best || p.n_kept_cis != best)
                                fail_msg("%s: kept %zu GIs and %zu CIs, brute force keeps %u", what, p.n_kept_gis,
                                         p.n_kept_cis, best);
                        apply_plan(&g, &p, what);
                        check_converged(&g, A100_40GB, true, &lb, what);
                        mk_gpu_plan_done(&p);
                        mk_layout_done(&lb);
                        mk_gpu_done(&g);
                        n_pairs++;
                }
                mk_layout_done(&la);
                mk_gpu_done(&base);
        }
        print_message("%zu transitions checked\n", n_pairs);
        free(all.counts);
        free(ok.counts);
}

/* A deterministic random walk over A100 layouts with shared GIs (every name
 * the GPU offers): each step plans from the state the previous one left, and
 * either converges or is refused as not fitting. */
static void test_random_walk_a100(void **state) {
        static const char *const names[] = {"1g.5gb",     "1g.5gb+me",  "1g.10gb",    "2g.10gb",
                                            "1c.2g.10gb", "3g.20gb",    "2c.3g.20gb", "1c.3g.20gb",
                                            "4g.20gb",    "2c.4g.20gb", "1c.4g.20gb", "7g.40gb",
                                            "4c.7g.40gb", "3c.7g.40gb", "2c.7g.40gb", "1c.7g.40gb"};
        uint64_t seed = 0x9e3779b97f4a7c15u;
        size_t n_ok = 0, n_refused = 0;
        struct mk_gpu g;

        for (int queried = 0; queried < 2; queried++) {
                build_gpu(&g, A100_40GB, queried);
                for (int step = 0; step < 3000; step++) {
                        char text[512] = "", what[600];
                        struct mk_layout l = {0};
                        struct mk_gpu_plan p;
                        struct mk_error e = {0};
                        unsigned n = 0;

                        /* 1 to 4 names, counts 1 to 3, at most 7 CI slices. */
                        seed = seed * 6364136223846793005u + 1442695040888963407u;
                        for (unsigned k = 0, want = 1 + (unsigned) (seed >> 60) % 4; k < want; k++) {
                                seed = seed * 6364136223846793005u + 1442695040888963407u;
                                const char *nm = names[(seed >> 33) % ELEMENTSOF(names)];
                                unsigned count = 1 + (unsigned) (seed >> 20) % 3;
                                struct mk_profile_name pn;
                                assert_int_equal(mk_profile_name_parse(nm, &pn, NULL), 0);
                                if (n + count * pn.c > 7)
                                        continue;
                                n += count * pn.c;
                                assert_int_equal(mk_layout_add(&l, &pn, count), 0);
                                append(text, sizeof(text), "%s%s:%u", text[0] ? ", " : "", nm, count);
                        }
                        snprintf(what, sizeof(what), "step %d%s '%s'", step, queried ? " (queried)" : "", text);
                        int r = mk_plan_gpu(&g, true, &l, &p, &e);
                        if (r == 0) {
                                note_nodes(&p, what);
                                apply_plan(&g, &p, what);
                                check_converged(&g, A100_40GB, true, &l, what);
                                mk_gpu_plan_done(&p);
                                n_ok++;
                        } else if (r == -ENOSPC && strstr(e.msg, "does not fit"))
                                n_refused++;
                        else
                                fail_msg("%s: returned %d: %s", what, r, e.msg);
                        mk_layout_done(&l);
                }
                mk_gpu_done(&g);
        }
        print_message("random walk: %zu applied, %zu refused\n", n_ok, n_refused);
        assert_true(n_ok > 1000);
}

/* The hardest searches seen so far (this runs last) stay tiny. */
static void test_search_size(void **state) {
        print_message("largest search: %" PRIu64 " nodes (%s)\n", max_nodes_seen, max_nodes_case);
        assert_true(max_nodes_seen > 0);
        assert_true(max_nodes_seen < 20000);
}

int main(void) {
        static const struct CMUnitTest direct[] = {
                cmocka_unit_test(test_resolve),
                cmocka_unit_test(test_plan_done),
                cmocka_unit_test(test_queried_ci_placements),
                cmocka_unit_test(test_no_placement),
                cmocka_unit_test(test_units_from_placements),
                cmocka_unit_test(test_enumerate_a100),
                cmocka_unit_test(test_enumerate_h100),
                cmocka_unit_test(test_transitions_a100),
                cmocka_unit_test(test_random_walk_a100),
                cmocka_unit_test(test_search_size),
        };
        struct CMUnitTest *tests = calloc(ELEMENTSOF(cases) + ELEMENTSOF(direct), sizeof(*tests));
        size_t n = 0;

        if (!tests)
                return 1;
        for (size_t i = 0; i < ELEMENTSOF(cases); i++)
                tests[n++] = (struct CMUnitTest){.name = cases[i].name,
                                                 .test_func = run_case,
                                                 .initial_state = (void *) &cases[i]};
        for (size_t i = 0; i < ELEMENTSOF(direct); i++)
                tests[n++] = direct[i];
        int r = _cmocka_run_group_tests("plan", tests, n, NULL, NULL);
        free(tests);
        return r;
}

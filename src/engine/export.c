#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/macro.h"
#include "engine/export.h"

static int cmp_u32(const void *a, const void *b) {
        uint32_t x = *(const uint32_t *) a, y = *(const uint32_t *) b;
        return x < y ? -1 : x > y;
}

static int cmp_uint(const void *a, const void *b) {
        unsigned x = *(const unsigned *) a, y = *(const unsigned *) b;
        return x < y ? -1 : x > y;
}

static void entry_done(struct mk_export_entry *x) {
        free(x->filters);
        free(x->devices);
        mk_layout_done(&x->layout);
        memset(x, 0, sizeof(*x));
}

void mk_export_done(struct mk_export *x) {
        if (!x)
                return;
        for (size_t i = 0; i < x->n_entries; i++)
                entry_done(&x->entries[i]);
        free(x->entries);
        memset(x, 0, sizeof(*x));
}

static bool has_u32(const uint32_t *l, size_t n, uint32_t v) {
        for (size_t i = 0; i < n; i++)
                if (l[i] == v)
                        return true;
        return false;
}

static int push_u32(uint32_t **l, size_t *n, uint32_t v) {
        if (has_u32(*l, *n, v))
                return 0;
        uint32_t *nl = realloc(*l, (*n + 1) * sizeof(**l));
        if (!nl)
                return -ENOMEM;
        nl[(*n)++] = v;
        *l = nl;
        return 0;
}

static int push_uint(unsigned **l, size_t *n, unsigned v) {
        unsigned *nl = realloc(*l, (*n + 1) * sizeof(**l));
        if (!nl)
                return -ENOMEM;
        nl[(*n)++] = v;
        *l = nl;
        return 0;
}

static int copy_layout(struct mk_layout *dst, const struct mk_layout *src) {
        for (size_t i = 0; i < src->n_items; i++) {
                int r = mk_layout_add(dst, &src->items[i].name, src->items[i].count);
                if (r < 0)
                        return r;
        }
        mk_layout_canonicalize(dst);
        return 0;
}

int mk_export_build(const struct mk_snapshot *s, struct mk_export *ret, struct mk_error *e) {
        struct mk_export x = {0};
        int r = 0;

        /* 1. One entry per GPU, merged at once with an entry of equal
         *    (mig-enabled, mig-devices). */
        for (size_t i = 0; i < s->n_gpus; i++) {
                const struct mk_gpu *g = &s->gpus[i];
                struct mk_layout l = {0};
                bool enabled = g->mig_current == MK_MIG_ENABLED;
                if (enabled) {
                        r = mk_gpu_current_layout(g, &l);
                        if (r < 0)
                                goto fail;
                        for (size_t k = 0; k < g->n_gis; k++)
                                if (g->gis[k].n_cis == 0)
                                        x.n_gis_without_ci++;
                }
                struct mk_export_entry *m = NULL;
                for (size_t k = 0; k < x.n_entries && !m; k++)
                        if (x.entries[k].mig_enabled == enabled && mk_layout_equal(&x.entries[k].layout, &l))
                                m = &x.entries[k];
                if (!m) {
                        struct mk_export_entry *ne = realloc(x.entries, (x.n_entries + 1) * sizeof(*ne));
                        if (!ne) {
                                mk_layout_done(&l);
                                r = -ENOMEM;
                                goto fail;
                        }
                        x.entries = ne;
                        m = &x.entries[x.n_entries++];
                        *m = (struct mk_export_entry){.mig_enabled = enabled};
                        r = copy_layout(&m->layout, &l);
                }
                mk_layout_done(&l);
                if (r >= 0)
                        r = push_u32(&m->filters, &m->n_filters, g->pci_device_id);
                if (r >= 0)
                        r = push_uint(&m->devices, &m->n_devices, g->index);
                if (r < 0)
                        goto fail;
        }

        /* 2. A node with a single GPU type needs no filters. */
        uint32_t *types = NULL;
        size_t n_types = 0;
        for (size_t i = 0; i < s->n_gpus; i++)
                if (push_u32(&types, &n_types, s->gpus[i].pci_device_id) < 0) {
                        free(types);
                        r = -ENOMEM;
                        goto fail;
                }
        free(types);
        bool single_type = n_types <= 1 || x.n_entries == 1;

        for (size_t k = 0; k < x.n_entries; k++) {
                struct mk_export_entry *m = &x.entries[k];
                qsort(m->filters, m->n_filters, sizeof(*m->filters), cmp_u32);
                qsort(m->devices, m->n_devices, sizeof(*m->devices), cmp_uint);
                if (single_type) {
                        free(m->filters);
                        m->filters = NULL;
                        m->n_filters = 0;
                }
                /* 3. An entry holding every GPU its filters select is `all`. */
                size_t selected = 0;
                for (size_t i = 0; i < s->n_gpus; i++)
                        if (m->n_filters == 0 || has_u32(m->filters, m->n_filters, s->gpus[i].pci_device_id))
                                selected++;
                if (selected == m->n_devices) {
                        m->all_devices = true;
                        free(m->devices);
                        m->devices = NULL;
                        m->n_devices = 0;
                }
        }

        *ret = x;
        return 0;
fail:
        mk_export_done(&x);
        return mk_error_set(e, r, "Failed to build the export: %s", strerror(-r));
}

/* Layouts (multisets of profile names) and placement arithmetic. Pure. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mig/layout.h"

uint32_t mk_placement_mask(struct mk_placement p) {
        /* Written so that start + size cannot wrap. */
        if (p.size == 0 || p.size > 32 || p.start > 32 - p.size)
                return 0;
        return (uint32_t) ((((uint64_t) 1 << p.size) - 1) << p.start);
}

bool mk_placement_overlaps(struct mk_placement a, struct mk_placement b) {
        /* Interval arithmetic rather than masks, so that placements beyond
         * 32 units still compare correctly. 64-bit: no wrap. */
        if (a.size == 0 || b.size == 0)
                return false;
        return (uint64_t) a.start < (uint64_t) b.start + b.size &&
               (uint64_t) b.start < (uint64_t) a.start + a.size;
}

int mk_layout_add(struct mk_layout *l, const struct mk_profile_name *name, unsigned count) {
        for (size_t i = 0; i < l->n_items; i++)
                if (mk_profile_name_equal(&l->items[i].name, name)) {
                        if (count > UINT_MAX - l->items[i].count)
                                return -EOVERFLOW;
                        l->items[i].count += count;
                        return 0;
                }

        /* One more slot per new name: layouts hold a handful of names (at most
         * one per profile of a GPU), and struct mk_layout has no capacity field. */
        struct mk_layout_item *items = reallocarray(l->items, l->n_items + 1, sizeof(*items));
        if (!items)
                return -ENOMEM;
        items[l->n_items] = (struct mk_layout_item){.name = *name, .count = count};
        l->items = items;
        l->n_items++;
        return 0;
}

static int item_compare(const void *a, const void *b) {
        const struct mk_layout_item *x = a, *y = b;
        return mk_profile_name_compare(&x->name, &y->name);
}

void mk_layout_canonicalize(struct mk_layout *l) {
        size_t n = 0;

        for (size_t i = 0; i < l->n_items; i++)
                if (l->items[i].count > 0)
                        l->items[n++] = l->items[i];
        if (n > 1)
                qsort(l->items, n, sizeof(l->items[0]), item_compare);

        /* Merge equal names that were not added through mk_layout_add(). */
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
                if (m > 0 && mk_profile_name_equal(&l->items[m - 1].name, &l->items[i].name)) {
                        unsigned *c = &l->items[m - 1].count;
                        *c = l->items[i].count > UINT_MAX - *c ? UINT_MAX : *c + l->items[i].count;
                } else
                        l->items[m++] = l->items[i];
        }
        l->n_items = m;
}

/* Total count of `name` in `l`, over all items with an equal name. */
static uint64_t layout_count(const struct mk_layout *l, const struct mk_profile_name *name) {
        uint64_t total = 0;
        for (size_t i = 0; i < l->n_items; i++)
                if (mk_profile_name_equal(&l->items[i].name, name))
                        total += l->items[i].count;
        return total;
}

/* True when every name of `a` has the same total count in `b`. */
static bool layout_covered(const struct mk_layout *a, const struct mk_layout *b) {
        for (size_t i = 0; i < a->n_items; i++) {
                if (a->items[i].count == 0)
                        continue;
                if (layout_count(a, &a->items[i].name) != layout_count(b, &a->items[i].name))
                        return false;
        }
        return true;
}

bool mk_layout_equal(const struct mk_layout *a, const struct mk_layout *b) {
        /* Quadratic without allocation: the inputs are const and small. */
        return layout_covered(a, b) && layout_covered(b, a);
}

/* The smallest name of `l` (in mk_profile_name_compare order) with a non-zero
 * total that sorts after `prev` (any, when prev is NULL); NULL when none. */
static const struct mk_profile_name *next_name(const struct mk_layout *l, const struct mk_profile_name *prev) {
        const struct mk_profile_name *best = NULL;

        for (size_t i = 0; i < l->n_items; i++) {
                const struct mk_profile_name *n = &l->items[i].name;
                if (l->items[i].count == 0)
                        continue;
                if (prev && mk_profile_name_compare(n, prev) <= 0)
                        continue;
                if (!best || mk_profile_name_compare(n, best) < 0)
                        best = n;
        }
        return best;
}

int mk_layout_format(const struct mk_layout *l, char *buf, size_t size) {
        size_t off = 0;

        if (size == 0)
                return -ENOBUFS;
        buf[0] = 0;

        /* Walks the names in canonical order without sorting the const input. */
        for (const struct mk_profile_name *n = next_name(l, NULL); n; n = next_name(l, n)) {
                char name[MK_PROFILE_NAME_MAX];
                int k = mk_profile_name_format(n, name, sizeof(name));
                if (k < 0) {
                        buf[0] = 0;
                        return k;
                }
                k = snprintf(buf + off, size - off, "%s%s:%" PRIu64, off > 0 ? ", " : "", name,
                             layout_count(l, n));
                if (k < 0 || (size_t) k >= size - off)
                        goto fail;
                off += (size_t) k;
        }

        if (off > INT_MAX)
                goto fail;
        return (int) off;

fail:
        buf[0] = 0;
        return -ENOBUFS;
}

void mk_layout_done(struct mk_layout *l) {
        if (!l)
                return;
        free(l->items);
        l->items = NULL;
        l->n_items = 0;
}

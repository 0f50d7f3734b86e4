/* Layouts (a multiset of profile names, as in a config's `mig-devices`) and
 * placement arithmetic in memory-slice units. Pure: no I/O. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "mig/profile.h"

struct mk_placement {
        unsigned start; /* first unit */
        unsigned size;  /* units */
};

/* Bit mask of the units a placement covers (units < 32), 0 for an empty or
 * out-of-range placement. */
uint32_t mk_placement_mask(struct mk_placement p);
bool mk_placement_overlaps(struct mk_placement a, struct mk_placement b);

struct mk_layout_item {
        struct mk_profile_name name;
        unsigned count;
};

struct mk_layout {
        struct mk_layout_item *items;
        size_t n_items;
};

/* Adds `count` of `name`, merging with an equal name. -ENOMEM on failure. */
int mk_layout_add(struct mk_layout *l, const struct mk_profile_name *name, unsigned count);
/* Drops zero counts and sorts with mk_profile_name_compare. */
void mk_layout_canonicalize(struct mk_layout *l);
/* Equal after canonicalisation (zero counts ignored, order-free). */
bool mk_layout_equal(const struct mk_layout *a, const struct mk_layout *b);
/* `3g.20gb:1, 2g.10gb:1, 1g.5gb:2` style, canonical order (larger G first). Returns length or -ENOBUFS. */
int mk_layout_format(const struct mk_layout *l, char *buf, size_t size);
void mk_layout_done(struct mk_layout *l);

/* MIG profile names: the grammar `[<C>c.]<G>g.<GB>gb[+attr[,attr...]|-attr[,attr...]]`,
 * the canonical form, and the rules that derive a name from what NVML reports
 * (GI/CI profile enums, GI memory, device memory). Pure: no I/O.
 * Facts: go-nvlib v0.12 pkg/nvlib/device/mig_profile.go. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#define MK_PROFILE_NAME_MAX 64  /* longest canonical name, with NUL */
#define MK_PROFILE_ATTRS_MAX 4  /* attributes in one name */
#define MK_PROFILE_ATTR_MAX 16  /* one attribute, with NUL */

struct mk_profile_name {
        unsigned c;        /* compute slices of the compute instance (== g for a full GI) */
        unsigned g;        /* compute slices of the GPU instance */
        unsigned gb;       /* memory part of the name, in GB as named */
        bool negative;     /* attributes written after '-' rather than '+' */
        unsigned n_attrs;
        char attrs[MK_PROFILE_ATTRS_MAX][MK_PROFILE_ATTR_MAX]; /* sorted ascending */
};

/* Parses a profile string as upstream accepts it (leading zeros, `7c.7g.40gb`
 * and unsorted attributes are accepted and canonicalised). Returns 0, or
 * -EINVAL with the reason in `e` (message names the input in quotes). */
int mk_profile_name_parse(const char *s, struct mk_profile_name *ret, struct mk_error *e);

/* Writes the canonical form: `<G>g.<GB>gb` when C == G, else `<C>c.<G>g.<GB>gb`,
 * then `+a,b` or `-a`. Returns the length, or -ENOBUFS when it does not fit. */
int mk_profile_name_format(const struct mk_profile_name *p, char *buf, size_t size);

/* Same C, G, GB, sign and attribute set. */
bool mk_profile_name_equal(const struct mk_profile_name *a, const struct mk_profile_name *b);

/* Total order (G desc, C desc, GB desc, attributes) used to sort layouts. */
int mk_profile_name_compare(const struct mk_profile_name *a, const struct mk_profile_name *b);

/* Slice counts and attributes of NVML profile enums (go-nvlib v0.12 pkg/nvlib/device/mig_profile.go). Unknown enums
 * (e.g. GI 17, 3_SLICE_GFX, which upstream cannot name) give 0 / NULL. */
unsigned mk_gi_enum_slices(unsigned gi_enum);
unsigned mk_ci_enum_slices(unsigned ci_enum);
/* "+me", "+me.all", "+gfx", "-me" or "" for enums without attributes; NULL when unknown. */
const char *mk_gi_enum_attr(unsigned gi_enum);

/* The memory-rounding rule: round(ceil(mem/total*8)/8 * ceil(total/GiB)),
 * ties away from zero, in exact integer arithmetic. 0 when total is 0. */
unsigned mk_memory_gb(uint64_t gi_memory_mib, uint64_t device_total_bytes);

/* The name NVML facts give (GI enum, CI enum, GI memory, device memory). For a
 * GI profile alone pass ci_enum = MK_CI_ENUM_FULL (C = G). Returns -EINVAL for
 * an enum the naming rules do not cover. */
#define MK_CI_ENUM_FULL UINT32_MAX
int mk_profile_name_from_nvml(unsigned gi_enum, unsigned ci_enum, uint64_t gi_memory_mib,
                              uint64_t device_total_bytes, struct mk_profile_name *ret);

/* Upstream's rule for the CI sizes a GI offers: C <= G and (C == G or 2C <= G + 1). */
bool mk_ci_size_offered(unsigned c, unsigned g);

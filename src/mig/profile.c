/* MIG profile names. Grammar, canonical form and the naming rules follow
 * go-nvlib pkg/nvlib/device/mig_profile.go (go-nvlib v0.12 pkg/nvlib/device/mig_profile.go,
 * go-nvlib v0.12 pkg/nvlib/device/mig_profile.go). Pure: no I/O, no allocation. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mig/profile.h"

/* Bounds on the numbers of a name, far above any GPU (at most 8 slices, a few
 * hundred GB): parsing cannot overflow, and a typo cannot name a 10^20 GB GPU. */
#define MK_PROFILE_SLICES_MAX 1000u
#define MK_PROFILE_GB_MAX 100000u

/* Longest name accepted on input; the canonical form is never longer than the
 * input (leading zeros and a `<C>c.` equal to G are dropped, attributes keep
 * their length), so every parsed name formats into MK_PROFILE_NAME_MAX. */
#define MK_PROFILE_INPUT_MAX (MK_PROFILE_NAME_MAX - 1)

static bool is_ascii_digit(unsigned char ch) {
        return ch >= '0' && ch <= '9';
}

static bool is_ascii_alpha(unsigned char ch) {
        return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
}

static bool is_space(unsigned char ch) {
        return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\v' || ch == '\f' || ch == '\r';
}

/* Parses one `<number><suffix>` field of `len` bytes. Decimal digits only,
 * leading zeros allowed, value in [1, max]. On failure returns -EINVAL and
 * writes the reason to `why`; `ret` is written only on success. */
static int parse_field(const char *p, size_t len, const char *suffix, const char *what, unsigned max,
                       unsigned *ret, char *why, size_t why_size) {
        size_t slen = strlen(suffix);

        if (len < slen || memcmp(p + len - slen, suffix, slen) != 0) {
                snprintf(why, why_size, "%s field must end in '%s'", what, suffix);
                return -EINVAL;
        }
        len -= slen;
        if (len == 0) {
                snprintf(why, why_size, "%s field has no number before '%s'", what, suffix);
                return -EINVAL;
        }

        unsigned v = 0;
        for (size_t i = 0; i < len; i++) {
                unsigned char ch = (unsigned char) p[i];
                if (!is_ascii_digit(ch)) {
                        snprintf(why, why_size, "%s field must be a decimal number followed by '%s'",
                                 what, suffix);
                        return -EINVAL;
                }
                /* v <= max <= 100000 before each step, so v * 10 + 9 cannot overflow. */
                v = v * 10 + (unsigned) (ch - '0');
                if (v > max) {
                        snprintf(why, why_size, "%s number is out of range (1..%u)", what, max);
                        return -EINVAL;
                }
        }
        if (v == 0) {
                snprintf(why, why_size, "%s number must be at least 1", what);
                return -EINVAL;
        }

        *ret = v;
        return 0;
}

static int attr_cmp(const void *a, const void *b) {
        return strcmp((const char *) a, (const char *) b);
}

/* Parses the attribute list after the sign: `a[,b...]`. */
static int parse_attrs(const char *p, struct mk_profile_name *n, char *why, size_t why_size) {
        for (;;) {
                size_t len = strcspn(p, ",");

                if (len == 0) {
                        snprintf(why, why_size, "empty attribute");
                        return -EINVAL;
                }
                if (n->n_attrs >= MK_PROFILE_ATTRS_MAX) {
                        snprintf(why, why_size, "too many attributes (at most %d)", MK_PROFILE_ATTRS_MAX);
                        return -EINVAL;
                }
                if (len >= MK_PROFILE_ATTR_MAX) {
                        snprintf(why, why_size, "attribute '%.*s' is too long (at most %d characters)",
                                 (int) len, p, MK_PROFILE_ATTR_MAX - 1);
                        return -EINVAL;
                }
                for (size_t i = 0; i < len; i++) {
                        unsigned char ch = (unsigned char) p[i];
                        if (!is_ascii_alpha(ch) && !is_ascii_digit(ch) && ch != '.') {
                                snprintf(why, why_size,
                                         "attribute '%.*s' contains an invalid character "
                                         "(only letters, digits and '.')",
                                         (int) len, p);
                                return -EINVAL;
                        }
                }
                if (is_ascii_digit((unsigned char) p[0])) {
                        snprintf(why, why_size, "attribute '%.*s' must not start with a digit", (int) len, p);
                        return -EINVAL;
                }
                if (p[0] == '.' || p[len - 1] == '.') {
                        snprintf(why, why_size, "attribute '%.*s' must not start or end with '.'", (int) len,
                                 p);
                        return -EINVAL;
                }
                for (unsigned i = 0; i < n->n_attrs; i++)
                        if (strlen(n->attrs[i]) == len && memcmp(n->attrs[i], p, len) == 0) {
                                snprintf(why, why_size, "duplicate attribute '%.*s'", (int) len, p);
                                return -EINVAL;
                        }

                memcpy(n->attrs[n->n_attrs], p, len);
                n->attrs[n->n_attrs][len] = 0;
                n->n_attrs++;

                if (p[len] == 0)
                        break;
                p += len + 1; /* skip ',' */
        }

        qsort(n->attrs, n->n_attrs, sizeof(n->attrs[0]), attr_cmp);
        return 0;
}

int mk_profile_name_parse(const char *s, struct mk_profile_name *ret, struct mk_error *e) {
        struct mk_profile_name n = {0};
        char why[128];
        int r;

        if (!s)
                return mk_error_set(e, -EINVAL, "invalid MIG profile: no name given");

        size_t len = strnlen(s, MK_PROFILE_INPUT_MAX + 1);
        if (len > MK_PROFILE_INPUT_MAX)
                return mk_error_set(e, -EINVAL, "invalid MIG profile '%.*s...': too long (at most %d bytes)",
                                    MK_PROFILE_INPUT_MAX, s, MK_PROFILE_INPUT_MAX);
        if (len == 0)
                return mk_error_set(e, -EINVAL, "invalid MIG profile '': empty name");
        for (size_t i = 0; i < len; i++)
                if (is_space((unsigned char) s[i]))
                        return mk_error_set(e, -EINVAL, "invalid MIG profile '%s': must not contain spaces", s);

        /* Split the attributes off first: `me.all` contains a '.'. */
        size_t base_len = strcspn(s, "+-");
        if (base_len == 0)
                return mk_error_set(e, -EINVAL, "invalid MIG profile '%s': missing '<G>g.<GB>gb' before the attributes",
                                    s);

        /* Two or three '.'-separated fields before the attributes. */
        const char *field[3];
        size_t field_len[3], n_fields = 0;
        for (const char *p = s, *end = s + base_len; p <= end;) {
                const char *dot = memchr(p, '.', (size_t) (end - p));
                const char *stop = dot ? dot : end;
                if (n_fields >= ELEMENTSOF(field))
                        return mk_error_set(e, -EINVAL,
                                            "invalid MIG profile '%s': expected 2 or 3 '.'-separated fields "
                                            "('[<C>c.]<G>g.<GB>gb'), got more",
                                            s);
                field[n_fields] = p;
                field_len[n_fields] = (size_t) (stop - p);
                n_fields++;
                p = stop + 1;
        }
        if (n_fields < 2)
                return mk_error_set(e, -EINVAL,
                                    "invalid MIG profile '%s': expected 2 or 3 '.'-separated fields "
                                    "('[<C>c.]<G>g.<GB>gb'), got %zu",
                                    s, n_fields);

        size_t gi = n_fields - 2;
        if (n_fields == 3) {
                r = parse_field(field[0], field_len[0], "c", "compute", MK_PROFILE_SLICES_MAX, &n.c, why,
                                sizeof(why));
                if (r < 0)
                        return mk_error_set(e, r, "invalid MIG profile '%s': %s", s, why);
        }
        r = parse_field(field[gi], field_len[gi], "g", "GPU-instance", MK_PROFILE_SLICES_MAX, &n.g, why,
                        sizeof(why));
        if (r < 0)
                return mk_error_set(e, r, "invalid MIG profile '%s': %s", s, why);
        r = parse_field(field[gi + 1], field_len[gi + 1], "gb", "memory", MK_PROFILE_GB_MAX, &n.gb, why,
                        sizeof(why));
        if (r < 0)
                return mk_error_set(e, r, "invalid MIG profile '%s': %s", s, why);

        if (n_fields == 2)
                n.c = n.g;
        else if (n.c > n.g)
                return mk_error_set(e, -EINVAL,
                                    "invalid MIG profile '%s': compute slices (%u) exceed GPU-instance slices (%u)",
                                    s, n.c, n.g);

        if (s[base_len] != 0) {
                char sign = s[base_len], other = sign == '+' ? '-' : '+';
                const char *attrs = s + base_len + 1;

                if (strchr(attrs, other))
                        return mk_error_set(e, -EINVAL,
                                            "invalid MIG profile '%s': both '+' and '-' attributes given", s);
                n.negative = sign == '-';
                r = parse_attrs(attrs, &n, why, sizeof(why));
                if (r < 0)
                        return mk_error_set(e, r, "invalid MIG profile '%s': %s", s, why);
        }

        *ret = n;
        return 0;
}

/* Attributes of `p` as pointers in ascending order, whatever order the struct
 * holds them in (the struct promises sorted, but callers may fill it by hand).
 * Returns the count, clamped to MK_PROFILE_ATTRS_MAX. */
static unsigned sorted_attrs(const struct mk_profile_name *p, const char *out[static MK_PROFILE_ATTRS_MAX]) {
        unsigned n = MIN(p->n_attrs, (unsigned) MK_PROFILE_ATTRS_MAX);

        for (unsigned i = 0; i < n; i++) {
                const char *a = p->attrs[i];
                unsigned j = i;
                /* Insertion sort: at most four entries. */
                while (j > 0 && strncmp(out[j - 1], a, MK_PROFILE_ATTR_MAX) > 0) {
                        out[j] = out[j - 1];
                        j--;
                }
                out[j] = a;
        }
        return n;
}

/* The sign only means something when there are attributes. */
static bool effective_negative(const struct mk_profile_name *p) {
        return p->negative && p->n_attrs > 0;
}

int mk_profile_name_format(const struct mk_profile_name *p, char *buf, size_t size) {
        const char *attrs[MK_PROFILE_ATTRS_MAX];
        size_t off = 0;
        int k;

        if (size > 0)
                buf[0] = 0;
        if (p->n_attrs > MK_PROFILE_ATTRS_MAX)
                return -EINVAL;

        if (p->c == p->g)
                k = snprintf(buf, size, "%ug.%ugb", p->g, p->gb);
        else
                k = snprintf(buf, size, "%uc.%ug.%ugb", p->c, p->g, p->gb);
        if (k < 0 || (size_t) k >= size)
                goto nobufs;
        off = (size_t) k;

        unsigned n = sorted_attrs(p, attrs);
        for (unsigned i = 0; i < n; i++) {
                char sep = i > 0 ? ',' : effective_negative(p) ? '-' : '+';
                /* Bounded: an attribute filled in by hand may lack its NUL. */
                k = snprintf(buf + off, size - off, "%c%.*s", sep, MK_PROFILE_ATTR_MAX - 1, attrs[i]);
                if (k < 0 || (size_t) k >= size - off)
                        goto nobufs;
                off += (size_t) k;
        }

        if (off > INT_MAX)
                goto nobufs;
        return (int) off;

nobufs:
        if (size > 0)
                buf[0] = 0;
        return -ENOBUFS;
}

/* Compares attribute lists element by element; a shorter list that is a prefix
 * of a longer one sorts first, so "1g.5gb" < "1g.5gb+me". */
static int attrs_compare(const struct mk_profile_name *a, const struct mk_profile_name *b) {
        const char *aa[MK_PROFILE_ATTRS_MAX], *bb[MK_PROFILE_ATTRS_MAX];
        unsigned na = sorted_attrs(a, aa), nb = sorted_attrs(b, bb);

        for (unsigned i = 0; i < na && i < nb; i++) {
                int r = strncmp(aa[i], bb[i], MK_PROFILE_ATTR_MAX);
                if (r != 0)
                        return r < 0 ? -1 : 1;
        }
        return na < nb ? -1 : na > nb ? 1 : 0;
}

#define CMP_DESC(x, y) ((x) > (y) ? -1 : (x) < (y) ? 1 : 0)

int mk_profile_name_compare(const struct mk_profile_name *a, const struct mk_profile_name *b) {
        int r;

        if ((r = CMP_DESC(a->g, b->g)) != 0)
                return r;
        if ((r = CMP_DESC(a->c, b->c)) != 0)
                return r;
        if ((r = CMP_DESC(a->gb, b->gb)) != 0)
                return r;
        /* Positive (or no) attributes before negative ones. */
        bool na = effective_negative(a), nb = effective_negative(b);
        if (na != nb)
                return na ? 1 : -1;
        return attrs_compare(a, b);
}

bool mk_profile_name_equal(const struct mk_profile_name *a, const struct mk_profile_name *b) {
        return mk_profile_name_compare(a, b) == 0;
}

/* go-nvlib v0.12 pkg/nvlib/device/mig_profile.go: G and the attribute of each NVML GPU-instance profile enum
 * (NVML_GPU_INSTANCE_PROFILE_*). Enum 17 (3_SLICE_GFX) is absent on purpose:
 * upstream cannot name it. */
static const struct {
        unsigned slices;
        const char *attr;
} gi_enum_table[] = {
        [0] = {1, ""},         /* 1_SLICE */
        [1] = {2, ""},         /* 2_SLICE */
        [2] = {3, ""},         /* 3_SLICE */
        [3] = {4, ""},         /* 4_SLICE */
        [4] = {7, ""},         /* 7_SLICE */
        [5] = {8, ""},         /* 8_SLICE */
        [6] = {6, ""},         /* 6_SLICE */
        [7] = {1, "+me"},      /* 1_SLICE_REV1 */
        [8] = {2, "+me"},      /* 2_SLICE_REV1 */
        [9] = {1, ""},         /* 1_SLICE_REV2 (double memory) */
        [10] = {1, "+gfx"},    /* 1_SLICE_GFX */
        [11] = {2, "+gfx"},    /* 2_SLICE_GFX */
        [12] = {4, "+gfx"},    /* 4_SLICE_GFX */
        [13] = {1, "-me"},     /* 1_SLICE_NO_ME */
        [14] = {2, "-me"},     /* 2_SLICE_NO_ME */
        [15] = {1, "+me.all"}, /* 1_SLICE_ALL_ME */
        [16] = {2, "+me.all"}, /* 2_SLICE_ALL_ME */
};

/* go-nvlib v0.12 pkg/nvlib/device/mig_profile.go: C of each NVML compute-instance profile enum. 7 (1_SLICE_REV1) and
 * 8 (7_SLICE_NVL) repeat the slice counts of 0 and 4. */
static const unsigned ci_enum_table[] = {
        [0] = 1, [1] = 2, [2] = 3, [3] = 4, [4] = 7, [5] = 8, [6] = 6, [7] = 1, [8] = 7,
};

unsigned mk_gi_enum_slices(unsigned gi_enum) {
        return gi_enum < ELEMENTSOF(gi_enum_table) ? gi_enum_table[gi_enum].slices : 0;
}

unsigned mk_ci_enum_slices(unsigned ci_enum) {
        return ci_enum < ELEMENTSOF(ci_enum_table) ? ci_enum_table[ci_enum] : 0;
}

const char *mk_gi_enum_attr(unsigned gi_enum) {
        return gi_enum < ELEMENTSOF(gi_enum_table) ? gi_enum_table[gi_enum].attr : NULL;
}

unsigned mk_memory_gb(uint64_t gi_memory_mib, uint64_t device_total_bytes) {
        typedef unsigned __int128 u128;
        const u128 gib = (u128) 1 << 30;

        if (device_total_bytes == 0)
                return 0;

        /* eighths = ceil(mem_bytes * 8 / total): mem_bytes < 2^84, so no overflow. */
        u128 total = device_total_bytes;
        u128 eighths = (((u128) gi_memory_mib << 23) + total - 1) / total;
        /* total_gib = ceil(total / 2^30) < 2^35. */
        u128 total_gib = (total + gib - 1) / gib;
        /* round(eighths * total_gib / 8), ties away from zero. eighths <= 2^87
         * only when total_gib == 1; the product stays below 2^90. */
        u128 gb = (eighths * total_gib + 4) / 8;

        return gb > UINT_MAX ? UINT_MAX : (unsigned) gb;
}

int mk_profile_name_from_nvml(unsigned gi_enum, unsigned ci_enum, uint64_t gi_memory_mib,
                              uint64_t device_total_bytes, struct mk_profile_name *ret) {
        struct mk_profile_name n = {0};

        n.g = mk_gi_enum_slices(gi_enum);
        if (n.g == 0)
                return -EINVAL;
        n.c = ci_enum == MK_CI_ENUM_FULL ? n.g : mk_ci_enum_slices(ci_enum);
        /* A CI larger than its GI, or a memory size that rounds to 0 GB or past
         * what parse accepts, would give a name that does not parse back. */
        if (n.c == 0 || n.c > n.g)
                return -EINVAL;
        n.gb = mk_memory_gb(gi_memory_mib, device_total_bytes);
        if (n.gb == 0 || n.gb > MK_PROFILE_GB_MAX)
                return -EINVAL;

        const char *attr = mk_gi_enum_attr(gi_enum);
        if (attr[0] != 0) {
                n.negative = attr[0] == '-';
                size_t len = strlen(attr + 1);
                if (len >= MK_PROFILE_ATTR_MAX)
                        return -EINVAL;
                memcpy(n.attrs[0], attr + 1, len + 1);
                n.n_attrs = 1;
        }

        *ret = n;
        return 0;
}

bool mk_ci_size_offered(unsigned c, unsigned g) {
        /* 64-bit: 2 * c must not wrap. */
        return c >= 1 && c <= g && (c == g || 2 * (uint64_t) c <= (uint64_t) g + 1);
}

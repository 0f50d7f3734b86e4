/* Unit tests of the pure mig/ model: profile-name grammar and canonical form,
 * NVML enum tables, the memory-rounding rule, the CI-size heuristic
 * (go-nvlib v0.12 pkg/nvlib/device/mig_profile.go), layouts and placements. */
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

#include "mig/layout.h"
#include "mig/profile.h"

#define MIB (UINT64_C(1) << 20)

/* --- helpers -------------------------------------------------------------- */

static struct mk_profile_name parse_ok(const char *s) {
        struct mk_profile_name n;
        struct mk_error e = {0};
        int r = mk_profile_name_parse(s, &n, &e);
        if (r < 0)
                fail_msg("parsing '%s' failed (%d): %s", s, r, e.msg);
        assert_int_equal(e.code, 0);
        return n;
}

static const char *fmt(const struct mk_profile_name *n, char buf[static MK_PROFILE_NAME_MAX]) {
        int r = mk_profile_name_format(n, buf, MK_PROFILE_NAME_MAX);
        assert_true(r >= 0);
        assert_int_equal((size_t) r, strlen(buf));
        return buf;
}

/* Attributes joined with ',' (for comparing against a table column). */
static const char *join_attrs(const struct mk_profile_name *n, char *buf, size_t size) {
        size_t off = 0;
        buf[0] = 0;
        for (unsigned i = 0; i < n->n_attrs; i++) {
                int k = snprintf(buf + off, size - off, "%s%s", i ? "," : "", n->attrs[i]);
                assert_true(k >= 0 && (size_t) k < size - off);
                off += (size_t) k;
        }
        return buf;
}

/* --- go-nvlib v0.12 pkg/nvlib/device/mig_profile.go grammar: valid names and their canonical form ------------------- */

static const struct {
        const char *in;
        const char *canonical;
        unsigned c, g, gb;
        bool negative;
        const char *attrs; /* sorted, ','-joined */
} valid_names[] = {
        /* 2 fields: C = G */
        {"1g.5gb", "1g.5gb", 1, 1, 5, false, ""},
        {"2g.10gb", "2g.10gb", 2, 2, 10, false, ""},
        {"3g.20gb", "3g.20gb", 3, 3, 20, false, ""},
        {"7g.40gb", "7g.40gb", 7, 7, 40, false, ""},
        {"7g.141gb", "7g.141gb", 7, 7, 141, false, ""},
        /* 3 fields */
        {"1c.2g.10gb", "1c.2g.10gb", 1, 2, 10, false, ""},
        {"2c.3g.20gb", "2c.3g.20gb", 2, 3, 20, false, ""},
        {"4c.7g.40gb", "4c.7g.40gb", 4, 7, 40, false, ""},
        /* canonicalisation */
        {"7c.7g.40gb", "7g.40gb", 7, 7, 40, false, ""},
        {"1c.1g.5gb", "1g.5gb", 1, 1, 5, false, ""},
        {"01g.5gb", "1g.5gb", 1, 1, 5, false, ""},
        {"001c.02g.010gb", "1c.2g.10gb", 1, 2, 10, false, ""},
        {"1g.05gb+me", "1g.5gb+me", 1, 1, 5, false, "me"},
        /* known attributes */
        {"1g.5gb+me", "1g.5gb+me", 1, 1, 5, false, "me"},
        {"1g.5gb+me.all", "1g.5gb+me.all", 1, 1, 5, false, "me.all"},
        {"1g.24gb+gfx", "1g.24gb+gfx", 1, 1, 24, false, "gfx"},
        {"1g.24gb-me", "1g.24gb-me", 1, 1, 24, true, "me"},
        {"7c.7g.40gb+me", "7g.40gb+me", 7, 7, 40, false, "me"},
        {"1c.2g.10gb+me.all", "1c.2g.10gb+me.all", 1, 2, 10, false, "me.all"},
        /* several attributes: sorted, order-free */
        {"1g.5gb+me,gfx", "1g.5gb+gfx,me", 1, 1, 5, false, "gfx,me"},
        {"1g.5gb+gfx,me", "1g.5gb+gfx,me", 1, 1, 5, false, "gfx,me"},
        {"1c.4g.20gb-me,gfx", "1c.4g.20gb-gfx,me", 1, 4, 20, true, "gfx,me"},
        {"1g.5gb+me.all,me", "1g.5gb+me,me.all", 1, 1, 5, false, "me,me.all"},
        {"1g.5gb+d,C,b,A", "1g.5gb+A,C,b,d", 1, 1, 5, false, "A,C,b,d"}, /* strcmp order, 4 = max */
        /* unknown but well-formed attributes are accepted, as upstream */
        {"2g.10gb+foo", "2g.10gb+foo", 2, 2, 10, false, "foo"},
        {"1g.5gb+a1.b2", "1g.5gb+a1.b2", 1, 1, 5, false, "a1.b2"},
        {"1g.5gb+abcdefghijklmno", "1g.5gb+abcdefghijklmno", 1, 1, 5, false, "abcdefghijklmno"},
        /* bounds */
        {"1000g.100000gb", "1000g.100000gb", 1000, 1000, 100000, false, ""},
        {"1000c.1000g.1gb", "1000g.1gb", 1000, 1000, 1, false, ""},
        /* 63 bytes, the longest input accepted */
        {"0000000000000000000000000000000000000000000000000000000001g.5gb", "1g.5gb", 1, 1, 5, false, ""},
};

static void test_parse_valid(void **state) {
        (void) state;
        for (size_t i = 0; i < ELEMENTSOF(valid_names); i++) {
                char buf[MK_PROFILE_NAME_MAX], attrs[128];
                struct mk_profile_name n = parse_ok(valid_names[i].in);

                print_message("valid: '%s'\n", valid_names[i].in);
                assert_int_equal(n.c, valid_names[i].c);
                assert_int_equal(n.g, valid_names[i].g);
                assert_int_equal(n.gb, valid_names[i].gb);
                assert_int_equal(n.negative, valid_names[i].negative);
                assert_string_equal(join_attrs(&n, attrs, sizeof(attrs)), valid_names[i].attrs);
                assert_string_equal(fmt(&n, buf), valid_names[i].canonical);

                /* The canonical form parses back to an equal name and is a fixed point. */
                struct mk_profile_name again = parse_ok(buf);
                assert_true(mk_profile_name_equal(&n, &again));
                char buf2[MK_PROFILE_NAME_MAX];
                assert_string_equal(fmt(&again, buf2), buf);

                /* No detail wanted: NULL error is fine. */
                assert_int_equal(mk_profile_name_parse(valid_names[i].in, &again, NULL), 0);
        }
}

/* --- go-nvlib v0.12 pkg/nvlib/device/mig_profile.go grammar: every invalid form, with its message ------------------- */

static const struct {
        const char *in;
        const char *why; /* message is "invalid MIG profile '<in>': <why>" */
} invalid_names[] = {
        {"", "empty name"},
        /* spaces anywhere */
        {" 1g.5gb", "must not contain spaces"},
        {"1g.5gb ", "must not contain spaces"},
        {"1g. 5gb", "must not contain spaces"},
        {"1 g.5gb", "must not contain spaces"},
        {"1g.5gb+ me", "must not contain spaces"},
        {"1g.5gb+me ,gfx", "must not contain spaces"},
        {"1g.5gb\t", "must not contain spaces"},
        {"1g.5gb\n", "must not contain spaces"},
        /* field count */
        {"1g5gb", "expected 2 or 3 '.'-separated fields ('[<C>c.]<G>g.<GB>gb'), got 1"},
        {"1g", "expected 2 or 3 '.'-separated fields ('[<C>c.]<G>g.<GB>gb'), got 1"},
        {"5gb", "expected 2 or 3 '.'-separated fields ('[<C>c.]<G>g.<GB>gb'), got 1"},
        {"1g5gb+me", "expected 2 or 3 '.'-separated fields ('[<C>c.]<G>g.<GB>gb'), got 1"},
        {"1c.1g.5gb.1x", "expected 2 or 3 '.'-separated fields ('[<C>c.]<G>g.<GB>gb'), got more"},
        {"1c.1g.5gb.", "expected 2 or 3 '.'-separated fields ('[<C>c.]<G>g.<GB>gb'), got more"},
        {"1c.1g.1g.5gb", "expected 2 or 3 '.'-separated fields ('[<C>c.]<G>g.<GB>gb'), got more"},
        {"1g..5gb", "compute field must end in 'c'"},
        {"-1g.5gb", "missing '<G>g.<GB>gb' before the attributes"},
        {"+me", "missing '<G>g.<GB>gb' before the attributes"},
        /* suffixes */
        {"3g.20", "memory field must end in 'gb'"},
        {"1g.5g", "memory field must end in 'gb'"},
        {"1g.5GB", "memory field must end in 'gb'"},
        {"1g.5gb.", "compute field must end in 'c'"},
        {"1g.", "memory field must end in 'gb'"},
        {"1c.1g.", "memory field must end in 'gb'"},
        {"1.5gb", "GPU-instance field must end in 'g'"},
        {"1G.5gb", "GPU-instance field must end in 'g'"},
        {"1gb.5gb", "GPU-instance field must end in 'g'"},
        {".5gb", "GPU-instance field must end in 'g'"},
        {"1.1g.5gb", "compute field must end in 'c'"},
        {"1c.1.5gb", "GPU-instance field must end in 'g'"},
        {"1g.-5gb", "memory field must end in 'gb'"},
        /* numbers */
        {"c.1g.5gb", "compute field has no number before 'c'"},
        {"g.5gb", "GPU-instance field has no number before 'g'"},
        {"1g.gb", "memory field has no number before 'gb'"},
        {"1x.5gb", "GPU-instance field must end in 'g'"},
        {"0x1g.5gb", "GPU-instance field must be a decimal number followed by 'g'"},
        {"1gg.5gb", "GPU-instance field must be a decimal number followed by 'g'"},
        {"1g.5.0gb", "compute field must end in 'c'"},
        {"1g.5xgb", "memory field must be a decimal number followed by 'gb'"},
        {"1c.1g.5gbgb", "memory field must be a decimal number followed by 'gb'"},
        {"0g.5gb", "GPU-instance number must be at least 1"},
        {"00g.5gb", "GPU-instance number must be at least 1"},
        {"0c.1g.5gb", "compute number must be at least 1"},
        {"1g.0gb", "memory number must be at least 1"},
        {"1001g.5gb", "GPU-instance number is out of range (1..1000)"},
        {"1001c.1g.5gb", "compute number is out of range (1..1000)"},
        {"1g.100001gb", "memory number is out of range (1..100000)"},
        {"99999999999999999999g.5gb", "GPU-instance number is out of range (1..1000)"},
        {"1g.18446744073709551621gb", "memory number is out of range (1..100000)"},
        {"4294967297g.5gb", "GPU-instance number is out of range (1..1000)"},
        /* C > G */
        {"2c.1g.5gb", "compute slices (2) exceed GPU-instance slices (1)"},
        {"8c.7g.40gb", "compute slices (8) exceed GPU-instance slices (7)"},
        /* attributes */
        {"1g.5gb+", "empty attribute"},
        {"1g.5gb-", "empty attribute"},
        {"1g.5gb+me,", "empty attribute"},
        {"1g.5gb+,me", "empty attribute"},
        {"1g.5gb+me,,gfx", "empty attribute"},
        {"1g.5gb+me,me", "duplicate attribute 'me'"},
        {"1g.5gb+gfx,me,gfx", "duplicate attribute 'gfx'"},
        {"1g.5gb-me,me", "duplicate attribute 'me'"},
        {"1g.5gb+1me", "attribute '1me' must not start with a digit"},
        {"1g.5gb+me,9", "attribute '9' must not start with a digit"},
        {"1g.5gb+.me", "attribute '.me' must not start or end with '.'"},
        {"1g.5gb+me.", "attribute 'me.' must not start or end with '.'"},
        {"1g.5gb+.", "attribute '.' must not start or end with '.'"},
        {"1g.5gb+me-gfx", "both '+' and '-' attributes given"},
        {"1g.5gb-me+gfx", "both '+' and '-' attributes given"},
        {"1g.5gb+me,-gfx", "both '+' and '-' attributes given"},
        {"1g.5gb+me_all", "attribute 'me_all' contains an invalid character (only letters, digits and '.')"},
        {"1g.5gb+m$", "attribute 'm$' contains an invalid character (only letters, digits and '.')"},
        {"1g.5gb+me+gfx", "attribute 'me+gfx' contains an invalid character (only letters, digits and '.')"},
        {"1g.5gb++me", "attribute '+me' contains an invalid character (only letters, digits and '.')"},
        {"1g.5gb+m\xc3\xa9", "attribute 'm\xc3\xa9' contains an invalid character (only letters, digits and '.')"},
        {"1g.5gb+me;gfx", "attribute 'me;gfx' contains an invalid character (only letters, digits and '.')"},
        {"1g.5gb+a,b,c,d,e", "too many attributes (at most 4)"},
        {"1g.5gb+abcdefghijklmnop", "attribute 'abcdefghijklmnop' is too long (at most 15 characters)"},
};

static void test_parse_invalid(void **state) {
        (void) state;
        for (size_t i = 0; i < ELEMENTSOF(invalid_names); i++) {
                const char *in = invalid_names[i].in;
                struct mk_error e = {0};
                struct mk_profile_name n, sentinel;
                char expected[MK_ERROR_MSG_MAX];

                print_message("invalid: '%s'\n", in);
                memset(&n, 0xa5, sizeof(n));
                memcpy(&sentinel, &n, sizeof(n));

                assert_int_equal(mk_profile_name_parse(in, &n, &e), -EINVAL);
                assert_int_equal(e.code, -EINVAL);
                snprintf(expected, sizeof(expected), "invalid MIG profile '%s': %s", in, invalid_names[i].why);
                assert_string_equal(e.msg, expected);
                /* ret_* written only on success */
                assert_memory_equal(&n, &sentinel, sizeof(n));

                assert_int_equal(mk_profile_name_parse(in, &n, NULL), -EINVAL);
        }
}

static void test_parse_limits(void **state) {
        (void) state;
        struct mk_error e = {0};
        struct mk_profile_name n;
        char buf[128];

        /* the message from the brief, verbatim */
        assert_int_equal(mk_profile_name_parse("3g.20", &n, &e), -EINVAL);
        assert_string_equal(e.msg, "invalid MIG profile '3g.20': memory field must end in 'gb'");

        /* 64 bytes: one over the limit */
        memset(buf, '0', 58);
        memcpy(buf + 58, "1g.5gb", 7);
        assert_int_equal(strlen(buf), 64);
        assert_int_equal(mk_profile_name_parse(buf, &n, &e), -EINVAL);
        assert_int_equal(e.code, -EINVAL);
        assert_non_null(strstr(e.msg, "too long (at most 63 bytes)"));
        assert_true(strncmp(e.msg, "invalid MIG profile '000", 24) == 0);

        /* far longer, not NUL-terminated within the limit */
        memset(buf, 'x', sizeof(buf) - 1);
        buf[sizeof(buf) - 1] = 0;
        assert_int_equal(mk_profile_name_parse(buf, &n, &e), -EINVAL);
        assert_non_null(strstr(e.msg, "too long"));

        /* NULL input */
        assert_int_equal(mk_profile_name_parse(NULL, &n, &e), -EINVAL);
        assert_string_equal(e.msg, "invalid MIG profile: no name given");
}

/* --- canonical format ----------------------------------------------------- */

static void test_format(void **state) {
        (void) state;
        char buf[MK_PROFILE_NAME_MAX];

        static const struct {
                struct mk_profile_name n;
                const char *out;
        } rows[] = {
                {{.c = 1, .g = 1, .gb = 5}, "1g.5gb"},
                {{.c = 1, .g = 2, .gb = 10}, "1c.2g.10gb"},
                {{.c = 7, .g = 7, .gb = 40, .n_attrs = 1, .attrs = {"me"}}, "7g.40gb+me"},
                {{.c = 1, .g = 1, .gb = 24, .negative = true, .n_attrs = 1, .attrs = {"me"}}, "1g.24gb-me"},
                /* filled by hand, unsorted: printed sorted */
                {{.c = 1, .g = 1, .gb = 5, .n_attrs = 3, .attrs = {"me", "gfx", "a"}}, "1g.5gb+a,gfx,me"},
                /* a sign without attributes prints nothing */
                {{.c = 1, .g = 1, .gb = 5, .negative = true}, "1g.5gb"},
        };
        for (size_t i = 0; i < ELEMENTSOF(rows); i++)
                assert_string_equal(fmt(&rows[i].n, buf), rows[i].out);

        /* -ENOBUFS: the NUL must fit too; buf left empty */
        struct mk_profile_name n = parse_ok("1c.2g.10gb+me");
        assert_int_equal(mk_profile_name_format(&n, buf, 14), 13);
        assert_string_equal(buf, "1c.2g.10gb+me");
        assert_int_equal(mk_profile_name_format(&n, buf, 13), -ENOBUFS);
        assert_string_equal(buf, "");
        assert_int_equal(mk_profile_name_format(&n, buf, 10), -ENOBUFS);
        assert_string_equal(buf, "");
        assert_int_equal(mk_profile_name_format(&n, buf, 0), -ENOBUFS);

        /* more attributes than the struct holds */
        struct mk_profile_name bad = {.c = 1, .g = 1, .gb = 5, .n_attrs = MK_PROFILE_ATTRS_MAX + 1};
        assert_int_equal(mk_profile_name_format(&bad, buf, sizeof(buf)), -EINVAL);
}

/* --- equality and order --------------------------------------------------- */

static void test_equal(void **state) {
        (void) state;
        static const struct {
                const char *a, *b;
                bool equal;
        } rows[] = {
                {"1g.5gb+me,gfx", "1g.5gb+gfx,me", true},
                {"7c.7g.40gb", "7g.40gb", true},
                {"1c.1g.5gb", "1g.5gb", true},
                {"01g.5gb", "1g.5gb", true},
                {"1g.5gb+me", "1g.5gb+me", true},
                {"1g.5gb", "1g.5gb+me", false},
                {"1g.5gb+me", "1g.5gb-me", false},
                {"1g.5gb+me", "1g.5gb+me.all", false},
                {"1g.5gb+me", "1g.5gb+me,gfx", false},
                {"1g.5gb+me", "1g.5gb+gfx", false},
                {"1c.2g.10gb", "2g.10gb", false},
                {"2g.10gb", "1g.10gb", false},
                {"1g.5gb", "1g.10gb", false},
        };
        for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
                struct mk_profile_name a = parse_ok(rows[i].a), b = parse_ok(rows[i].b);
                print_message("equal: '%s' '%s'\n", rows[i].a, rows[i].b);
                assert_int_equal(mk_profile_name_equal(&a, &b), rows[i].equal);
                assert_int_equal(mk_profile_name_equal(&b, &a), rows[i].equal);
                assert_int_equal(mk_profile_name_compare(&a, &b) == 0, rows[i].equal);
        }

        /* attribute order in the struct does not matter; a sign without attributes is no sign */
        struct mk_profile_name x = {.c = 1, .g = 1, .gb = 5, .n_attrs = 2, .attrs = {"me", "gfx"}};
        struct mk_profile_name y = parse_ok("1g.5gb+gfx,me");
        assert_true(mk_profile_name_equal(&x, &y));
        struct mk_profile_name z = {.c = 1, .g = 1, .gb = 5, .negative = true};
        struct mk_profile_name w = parse_ok("1g.5gb");
        assert_true(mk_profile_name_equal(&z, &w));
}

/* In mk_profile_name_compare order: G desc, C desc, GB desc, positive before
 * negative, then attribute lists (strcmp, a prefix first). */
static const char *const compare_order[] = {
        "8g.96gb",   "7g.80gb",       "7g.40gb",   "4c.7g.40gb", "1c.7g.40gb", "4g.20gb",
        "3g.20gb",   "1c.3g.20gb",    "2g.10gb",   "1c.2g.10gb", "1g.10gb",    "1g.5gb",
        "1g.5gb+gfx", "1g.5gb+gfx,me", "1g.5gb+me", "1g.5gb+me.all", "1g.5gb-gfx", "1g.5gb-me",
};

static int sign(int x) {
        return (x > 0) - (x < 0);
}

static void test_compare(void **state) {
        (void) state;
        size_t n = ELEMENTSOF(compare_order);
        struct mk_profile_name names[ELEMENTSOF(compare_order)];

        for (size_t i = 0; i < n; i++)
                names[i] = parse_ok(compare_order[i]);
        for (size_t i = 0; i < n; i++)
                for (size_t j = 0; j < n; j++) {
                        int expected = i < j ? -1 : i > j ? 1 : 0;
                        int got = sign(mk_profile_name_compare(&names[i], &names[j]));
                        if (got != expected)
                                fail_msg("compare('%s', '%s') = %d, expected %d", compare_order[i],
                                         compare_order[j], got, expected);
                }
}

/* --- go-nvlib v0.12 pkg/nvlib/device/mig_profile.go enum tables ----------------------------------------------------- */

static void test_gi_enums(void **state) {
        (void) state;
        static const struct {
                unsigned e, g;
                const char *attr; /* NULL: unknown */
        } rows[] = {
                {0, 1, ""},       {1, 2, ""},        {2, 3, ""},         {3, 4, ""},
                {4, 7, ""},       {5, 8, ""},        {6, 6, ""},         {7, 1, "+me"},
                {8, 2, "+me"},    {9, 1, ""},        {10, 1, "+gfx"},    {11, 2, "+gfx"},
                {12, 4, "+gfx"},  {13, 1, "-me"},    {14, 2, "-me"},     {15, 1, "+me.all"},
                {16, 2, "+me.all"}, {17, 0, NULL},   {18, 0, NULL},      {19, 0, NULL},
                {1000, 0, NULL},  {UINT_MAX, 0, NULL},
        };
        for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
                print_message("GI enum %u\n", rows[i].e);
                assert_int_equal(mk_gi_enum_slices(rows[i].e), rows[i].g);
                const char *attr = mk_gi_enum_attr(rows[i].e);
                if (rows[i].attr)
                        assert_string_equal(attr, rows[i].attr);
                else
                        assert_null(attr);
        }
}

static void test_ci_enums(void **state) {
        (void) state;
        static const struct {
                unsigned e, c;
        } rows[] = {
                {0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 7}, {5, 8}, {6, 6}, {7, 1}, {8, 7},
                {9, 0}, {10, 0}, {MK_CI_ENUM_FULL, 0},
        };
        for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
                print_message("CI enum %u\n", rows[i].e);
                assert_int_equal(mk_ci_enum_slices(rows[i].e), rows[i].c);
        }
}

/* --- go-nvlib v0.12 pkg/nvlib/device/mig_profile.go memory-rounding rule -------------------------------------------- */

static void test_memory_gb(void **state) {
        (void) state;
        static const struct {
                const char *gpu;
                uint64_t mem_mib, total_bytes;
                unsigned gb;
        } rows[] = {
                {"A100-40GB 1g", 4864, 40960 * MIB, 5},
                {"A100-40GB 2g", 9856, 40960 * MIB, 10},
                {"A100-40GB 3g", 19968, 40960 * MIB, 20},
                {"A100-40GB 7g", 40192, 40960 * MIB, 40},
                {"H200 1g", 16384, 143771 * MIB, 18},
                {"H200 2g", 33024, 143771 * MIB, 35},
                {"H200 3g (70.5, tie away from zero)", 71168, 143771 * MIB, 71},
                {"H200 7g", 143104, 143771 * MIB, 141},
                {"H100 1g", 9984, 81559 * MIB, 10},
                {"H100 2g", 20096, 81559 * MIB, 20},
                {"H100 3g", 40448, 81559 * MIB, 40},
                {"H100 7g", 81152, 81559 * MIB, 80},
                {"B200 1g", 22528, 183359 * MIB, 23},
                {"B200 2g", 45312, 183359 * MIB, 45},
                {"A100-80GB 1g", 9728, 81920 * MIB, 10},
                {"A100-80GB 2g", 19968, 81920 * MIB, 20},
                {"A100-80GB 3g", 40192, 81920 * MIB, 40},
                /* exact eighths: no rounding up of the fraction */
                {"exact eighth", 5120, 40960 * MIB, 5},
                {"whole device", 40960, 40960 * MIB, 40},
                /* one byte over a GiB rounds the GiB count up: ceil(1/8)=1 eighth of 2 GiB = 0.25 -> 0 */
                {"GiB rounded up", 1, (UINT64_C(1) << 30) + 1, 0},
                /* 1/8 of 12 GiB = 1.5 -> 2 (tie away from zero) */
                {"tie 1.5", 1536, 12288 * MIB, 2},
                /* 1/8 of 4 GiB = 0.5 -> 1 */
                {"tie 0.5", 512, 4096 * MIB, 1},
                {"no memory", 0, 40960 * MIB, 0},
                {"no total", 4864, 0, 0},
                {"saturates", UINT64_MAX, 1, UINT_MAX},
                {"huge total", UINT64_C(1) << 40, UINT64_MAX, 1u << 31},    /* 1/16 of 2^34 GiB, rounded up to 1/8 */
                {"saturates at 2^34", (UINT64_C(1) << 44) - 1, UINT64_MAX, UINT_MAX},
        };
        for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
                print_message("memory: %s\n", rows[i].gpu);
                assert_int_equal(mk_memory_gb(rows[i].mem_mib, rows[i].total_bytes), rows[i].gb);
        }
}

/* --- go-nvlib v0.12 pkg/nvlib/device/mig_profile.go names from NVML facts ------------------------------------------- */

static void test_from_nvml(void **state) {
        (void) state;
        const uint64_t a100 = 40960 * MIB, h200 = 143771 * MIB;
        const unsigned full = MK_CI_ENUM_FULL;
        const struct {
                unsigned gi, ci;
                uint64_t mem_mib, total;
                int r;
                const char *name;
        } rows[] = {
                {0, full, 4864, a100, 0, "1g.5gb"},
                {0, 0, 4864, a100, 0, "1g.5gb"},
                {0, 7, 4864, a100, 0, "1g.5gb"}, /* CI 1_SLICE_REV1 */
                {7, full, 4864, a100, 0, "1g.5gb+me"},
                {9, full, 9856, a100, 0, "1g.10gb"},
                {1, full, 9856, a100, 0, "2g.10gb"},
                {1, 0, 9856, a100, 0, "1c.2g.10gb"},
                {8, full, 9856, a100, 0, "2g.10gb+me"},
                {2, full, 19968, a100, 0, "3g.20gb"},
                {2, 0, 19968, a100, 0, "1c.3g.20gb"},
                {2, 1, 19968, a100, 0, "2c.3g.20gb"},
                {2, 2, 19968, a100, 0, "3g.20gb"},
                {3, 3, 19968, a100, 0, "4g.20gb"},
                {3, 1, 19968, a100, 0, "2c.4g.20gb"},
                {4, 4, 40192, a100, 0, "7g.40gb"},
                {4, 8, 40192, a100, 0, "7g.40gb"}, /* CI 7_SLICE_NVL */
                {4, 0, 40192, a100, 0, "1c.7g.40gb"},
                {4, 3, 40192, a100, 0, "4c.7g.40gb"},
                {10, full, 4864, a100, 0, "1g.5gb+gfx"},
                {11, full, 9856, a100, 0, "2g.10gb+gfx"},
                {12, full, 19968, a100, 0, "4g.20gb+gfx"},
                {13, full, 4864, a100, 0, "1g.5gb-me"},
                {14, full, 9856, a100, 0, "2g.10gb-me"},
                {15, full, 4864, a100, 0, "1g.5gb+me.all"},
                {16, 0, 9856, a100, 0, "1c.2g.10gb+me.all"},
                {6, full, 30720, a100, 0, "6g.30gb"},
                {5, 6, 40960, a100, 0, "6c.8g.40gb"},
                {0, full, 16384, h200, 0, "1g.18gb"},
                {9, full, 33024, h200, 0, "1g.35gb"},
                {2, full, 71168, h200, 0, "3g.71gb"},
                {4, full, 143104, h200, 0, "7g.141gb"},
                /* not covered by the rules */
                {17, full, 19968, a100, -EINVAL, NULL}, /* 3_SLICE_GFX */
                {18, full, 4864, a100, -EINVAL, NULL},
                {0, 9, 4864, a100, -EINVAL, NULL},      /* CI COUNT */
                {0, 1, 4864, a100, -EINVAL, NULL},      /* 2c in a 1g */
                {2, 4, 19968, a100, -EINVAL, NULL},     /* 7c in a 3g */
                {0, full, 4864, 0, -EINVAL, NULL},      /* no device memory */
                {0, full, 0, a100, -EINVAL, NULL},      /* rounds to 0 GB */
                {0, full, UINT64_MAX, 1, -EINVAL, NULL}, /* past what parse accepts */
        };
        for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
                struct mk_profile_name n, sentinel;
                char buf[MK_PROFILE_NAME_MAX];

                print_message("from_nvml: GI %u CI %u %" PRIu64 " MiB\n", rows[i].gi, rows[i].ci,
                              rows[i].mem_mib);
                memset(&n, 0x5a, sizeof(n));
                sentinel = n;
                int r = mk_profile_name_from_nvml(rows[i].gi, rows[i].ci, rows[i].mem_mib, rows[i].total, &n);
                assert_int_equal(r, rows[i].r);
                if (r < 0) {
                        assert_memory_equal(&n, &sentinel, sizeof(n));
                        continue;
                }
                assert_string_equal(fmt(&n, buf), rows[i].name);
                /* the name parses back to the same thing */
                struct mk_profile_name p = parse_ok(buf);
                assert_true(mk_profile_name_equal(&n, &p));
        }
}

/* --- go-nvlib v0.12 pkg/nvlib/device/mig_profile.go CI sizes offered per GI ----------------------------------------- */

static void test_ci_size_offered(void **state) {
        (void) state;
        /* bit C set when C is kept */
        static const struct {
                unsigned g;
                unsigned kept;
        } rows[] = {
                {1, 1u << 1},
                {2, 1u << 1 | 1u << 2},
                {3, 1u << 1 | 1u << 2 | 1u << 3},
                {4, 1u << 1 | 1u << 2 | 1u << 4},
                {5, 1u << 1 | 1u << 2 | 1u << 3 | 1u << 5}, /* not in the table; by the formula */
                {6, 1u << 1 | 1u << 2 | 1u << 3 | 1u << 6},
                {7, 1u << 1 | 1u << 2 | 1u << 3 | 1u << 4 | 1u << 7},
                {8, 1u << 1 | 1u << 2 | 1u << 3 | 1u << 4 | 1u << 8},
        };
        for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
                unsigned kept = 0;
                for (unsigned c = 0; c <= 12; c++)
                        if (mk_ci_size_offered(c, rows[i].g))
                                kept |= 1u << c;
                print_message("CI sizes of %ug\n", rows[i].g);
                assert_int_equal(kept, rows[i].kept);
        }
        assert_false(mk_ci_size_offered(0, 0));
        assert_false(mk_ci_size_offered(1, 0));
        assert_true(mk_ci_size_offered(UINT_MAX, UINT_MAX));
        assert_false(mk_ci_size_offered(UINT_MAX, UINT_MAX - 1));
}

/* --- placements ----------------------------------------------------------- */

static void test_placement_mask(void **state) {
        (void) state;
        static const struct {
                struct mk_placement p;
                uint32_t mask;
        } rows[] = {
                {{0, 1}, 0x1},         {{6, 1}, 0x40},        {{0, 2}, 0x3},
                {{6, 2}, 0xc0},        {{4, 4}, 0xf0},        {{0, 8}, 0xff},
                {{0, 32}, UINT32_MAX}, {{31, 1}, 0x80000000}, {{16, 16}, 0xffff0000},
                /* empty or out of range */
                {{0, 0}, 0},           {{5, 0}, 0},           {{32, 1}, 0},
                {{31, 2}, 0},          {{0, 33}, 0},          {{UINT_MAX, 2}, 0},
                {{1, UINT_MAX}, 0},    {{UINT_MAX, UINT_MAX}, 0},
        };
        for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
                print_message("mask {%u, %u}\n", rows[i].p.start, rows[i].p.size);
                assert_int_equal(mk_placement_mask(rows[i].p), rows[i].mask);
        }
}

static void test_placement_overlaps(void **state) {
        (void) state;
        static const struct {
                struct mk_placement a, b;
                bool overlaps;
        } rows[] = {
                {{0, 4}, {4, 4}, false}, /* 3g at 0 next to 4g at 4 (MIG user guide, placements) */
                {{0, 4}, {3, 1}, true},
                {{0, 8}, {7, 1}, true},
                {{0, 2}, {2, 2}, false},
                {{2, 2}, {3, 2}, true},
                {{0, 1}, {0, 1}, true},
                {{6, 1}, {6, 2}, true},
                {{0, 0}, {0, 8}, false}, /* empty placement overlaps nothing */
                {{3, 0}, {3, 0}, false},
                {{40, 2}, {41, 5}, true}, /* beyond 32 units still compares */
                {{UINT_MAX, 1}, {UINT_MAX, 1}, true},
                {{UINT_MAX, UINT_MAX}, {0, 1}, false},
        };
        for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
                print_message("overlap {%u,%u} {%u,%u}\n", rows[i].a.start, rows[i].a.size, rows[i].b.start,
                              rows[i].b.size);
                assert_int_equal(mk_placement_overlaps(rows[i].a, rows[i].b), rows[i].overlaps);
                assert_int_equal(mk_placement_overlaps(rows[i].b, rows[i].a), rows[i].overlaps);
                /* agrees with the masks where both are in range */
                uint32_t ma = mk_placement_mask(rows[i].a), mb = mk_placement_mask(rows[i].b);
                if (ma && mb)
                        assert_int_equal((ma & mb) != 0, rows[i].overlaps);
        }
}

/* --- layouts -------------------------------------------------------------- */

static void layout_add(struct mk_layout *l, const char *name, unsigned count) {
        struct mk_profile_name n = parse_ok(name);
        assert_int_equal(mk_layout_add(l, &n, count), 0);
}

static const char *layout_fmt(const struct mk_layout *l, char *buf, size_t size) {
        int r = mk_layout_format(l, buf, size);
        assert_true(r >= 0);
        assert_int_equal((size_t) r, strlen(buf));
        return buf;
}

static void test_layout_add(void **state) {
        (void) state;
        struct mk_layout l = {0};
        char buf[256];

        layout_add(&l, "1g.5gb", 1);
        layout_add(&l, "2g.10gb", 1);
        layout_add(&l, "01g.5gb", 1);   /* merges with 1g.5gb */
        layout_add(&l, "1c.1g.5gb", 2); /* so does this */
        layout_add(&l, "1g.5gb+me,gfx", 1);
        layout_add(&l, "1g.5gb+gfx,me", 1); /* same attribute set */
        layout_add(&l, "1g.5gb-me", 1);     /* other sign: another name */
        assert_int_equal(l.n_items, 4);
        assert_int_equal(l.items[0].count, 4);
        assert_int_equal(l.items[1].count, 1);
        assert_int_equal(l.items[2].count, 2);
        assert_int_equal(l.items[3].count, 1);
        assert_string_equal(layout_fmt(&l, buf, sizeof(buf)), "2g.10gb:1, 1g.5gb:4, 1g.5gb+gfx,me:2, 1g.5gb-me:1");

        /* count overflow: refused, layout untouched */
        struct mk_profile_name n = parse_ok("1g.5gb");
        assert_int_equal(mk_layout_add(&l, &n, UINT_MAX), -EOVERFLOW);
        assert_int_equal(l.items[0].count, 4);
        assert_int_equal(l.n_items, 4);

        /* many distinct names grow the array */
        for (unsigned gb = 1; gb <= 100; gb++) {
                struct mk_profile_name m = {.c = 3, .g = 3, .gb = gb};
                assert_int_equal(mk_layout_add(&l, &m, gb), 0);
        }
        assert_int_equal(l.n_items, 104);
        mk_layout_canonicalize(&l);
        assert_int_equal(l.n_items, 104);
        assert_int_equal(l.items[0].name.gb, 100);
        assert_int_equal(l.items[0].count, 100);
        assert_int_equal(l.items[99].name.gb, 1);

        mk_layout_done(&l);
        assert_null(l.items);
        assert_int_equal(l.n_items, 0);
        mk_layout_done(&l); /* twice is fine */
        mk_layout_done(NULL);
}

static void test_layout_canonicalize(void **state) {
        (void) state;
        struct mk_layout l = {0};
        char buf[256], name[MK_PROFILE_NAME_MAX];

        layout_add(&l, "1g.5gb", 2);
        layout_add(&l, "7g.40gb", 0); /* zero count: dropped */
        layout_add(&l, "3g.20gb", 1);
        layout_add(&l, "1c.3g.20gb", 0);
        layout_add(&l, "2g.10gb", 1);
        layout_add(&l, "1c.2g.10gb", 3);
        mk_layout_canonicalize(&l);

        static const struct {
                const char *name;
                unsigned count;
        } expected[] = {{"3g.20gb", 1}, {"2g.10gb", 1}, {"1c.2g.10gb", 3}, {"1g.5gb", 2}};
        assert_int_equal(l.n_items, ELEMENTSOF(expected));
        for (size_t i = 0; i < ELEMENTSOF(expected); i++) {
                assert_string_equal(fmt(&l.items[i].name, name), expected[i].name);
                assert_int_equal(l.items[i].count, expected[i].count);
        }
        /* idempotent */
        mk_layout_canonicalize(&l);
        assert_int_equal(l.n_items, ELEMENTSOF(expected));
        assert_string_equal(layout_fmt(&l, buf, sizeof(buf)), "3g.20gb:1, 2g.10gb:1, 1c.2g.10gb:3, 1g.5gb:2");
        mk_layout_done(&l);

        /* built by hand with a duplicate name: merged */
        struct mk_layout_item items[] = {
                {parse_ok("1g.5gb"), 1},
                {parse_ok("2g.10gb"), 0},
                {parse_ok("1c.1g.5gb"), 2},
        };
        struct mk_layout h = {.items = items, .n_items = ELEMENTSOF(items)};
        mk_layout_canonicalize(&h);
        assert_int_equal(h.n_items, 1);
        assert_string_equal(fmt(&h.items[0].name, name), "1g.5gb");
        assert_int_equal(h.items[0].count, 3);

        /* empty */
        struct mk_layout empty = {0};
        mk_layout_canonicalize(&empty);
        assert_int_equal(empty.n_items, 0);
}

static void test_layout_equal(void **state) {
        (void) state;
        struct mk_layout a = {0}, b = {0}, c = {0}, z = {0}, empty = {0};

        layout_add(&a, "1g.5gb", 2);
        layout_add(&a, "2g.10gb", 1);
        layout_add(&a, "3g.20gb", 1);

        /* other order, other spelling, a zero count */
        layout_add(&b, "3g.20gb", 1);
        layout_add(&b, "4g.20gb", 0);
        layout_add(&b, "2c.2g.10gb", 1);
        layout_add(&b, "01g.5gb", 1);
        layout_add(&b, "1c.1g.5gb", 1);
        assert_true(mk_layout_equal(&a, &b));
        assert_true(mk_layout_equal(&b, &a));
        assert_true(mk_layout_equal(&a, &a));

        /* one count different */
        layout_add(&c, "1g.5gb", 1);
        layout_add(&c, "2g.10gb", 1);
        layout_add(&c, "3g.20gb", 1);
        assert_false(mk_layout_equal(&a, &c));
        assert_false(mk_layout_equal(&c, &a));
        layout_add(&c, "1g.5gb", 1);
        assert_true(mk_layout_equal(&a, &c));
        /* one name more */
        layout_add(&c, "1g.5gb+me", 1);
        assert_false(mk_layout_equal(&a, &c));
        assert_false(mk_layout_equal(&c, &a));

        /* zero counts only == empty */
        layout_add(&z, "7g.40gb", 0);
        assert_true(mk_layout_equal(&z, &empty));
        assert_true(mk_layout_equal(&empty, &z));
        assert_false(mk_layout_equal(&a, &empty));
        assert_true(mk_layout_equal(&empty, &empty));

        /* canonicalising does not change equality */
        mk_layout_canonicalize(&b);
        assert_true(mk_layout_equal(&a, &b));

        mk_layout_done(&a);
        mk_layout_done(&b);
        mk_layout_done(&c);
        mk_layout_done(&z);
}

static void test_layout_format(void **state) {
        (void) state;
        struct mk_layout l = {0};
        char buf[256];

        /* empty */
        assert_int_equal(mk_layout_format(&l, buf, sizeof(buf)), 0);
        assert_string_equal(buf, "");

        /* A100-40GB all-balanced, added in any order: printed in compare order (G desc) */
        layout_add(&l, "2g.10gb", 1);
        layout_add(&l, "1g.5gb", 2);
        layout_add(&l, "3g.20gb", 1);
        assert_string_equal(layout_fmt(&l, buf, sizeof(buf)), "3g.20gb:1, 2g.10gb:1, 1g.5gb:2");
        /* formatting does not reorder the input */
        assert_int_equal(l.items[0].name.g, 2);

        /* exact fit, then one byte short */
        size_t len = strlen("3g.20gb:1, 2g.10gb:1, 1g.5gb:2");
        assert_int_equal(mk_layout_format(&l, buf, len + 1), (int) len);
        assert_int_equal(mk_layout_format(&l, buf, len), -ENOBUFS);
        assert_string_equal(buf, "");
        assert_int_equal(mk_layout_format(&l, buf, 1), -ENOBUFS);
        assert_int_equal(mk_layout_format(&l, buf, 0), -ENOBUFS);

        /* zero counts skipped; names with attributes and 3 fields */
        layout_add(&l, "7g.40gb", 0);
        layout_add(&l, "1c.2g.10gb", 4);
        layout_add(&l, "1g.5gb+me", 1);
        assert_string_equal(layout_fmt(&l, buf, sizeof(buf)),
                            "3g.20gb:1, 2g.10gb:1, 1c.2g.10gb:4, 1g.5gb:2, 1g.5gb+me:1");
        mk_layout_done(&l);

        /* by hand, with duplicates: totals printed once */
        struct mk_layout_item items[] = {
                {parse_ok("1g.5gb"), 1},
                {parse_ok("2g.10gb"), 1},
                {parse_ok("1c.1g.5gb"), 2},
        };
        struct mk_layout h = {.items = items, .n_items = ELEMENTSOF(items)};
        assert_string_equal(layout_fmt(&h, buf, sizeof(buf)), "2g.10gb:1, 1g.5gb:3");
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_parse_valid),
                cmocka_unit_test(test_parse_invalid),
                cmocka_unit_test(test_parse_limits),
                cmocka_unit_test(test_format),
                cmocka_unit_test(test_equal),
                cmocka_unit_test(test_compare),
                cmocka_unit_test(test_gi_enums),
                cmocka_unit_test(test_ci_enums),
                cmocka_unit_test(test_memory_gb),
                cmocka_unit_test(test_from_nvml),
                cmocka_unit_test(test_ci_size_offered),
                cmocka_unit_test(test_placement_mask),
                cmocka_unit_test(test_placement_overlaps),
                cmocka_unit_test(test_layout_add),
                cmocka_unit_test(test_layout_canonicalize),
                cmocka_unit_test(test_layout_equal),
                cmocka_unit_test(test_layout_format),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/parse.h"

static int digit_value(char c) {
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'z')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'Z')
                return c - 'A' + 10;
        return 99;
}

/* Every character of s is a digit of base, and there is at least one. With
 * this checked first, strtoull() sees no blanks, sign or prefix of its own. */
static bool all_digits(const char *s, unsigned base) {
        if (!*s)
                return false;
        for (; *s; s++)
                if ((unsigned) digit_value(*s) >= base)
                        return false;
        return true;
}

int mk_parse_u64_base(const char *s, unsigned base, uint64_t *ret) {
        if (!s)
                return -EINVAL;
        if (base == 0) {
                base = 10;
                if (s[0] == '0' && s[1]) {
                        switch (s[1]) {
                        case 'x': case 'X': base = 16; s += 2; break;
                        case 'b': case 'B': base = 2; s += 2; break;
                        case 'o': case 'O': base = 8; s += 2; break;
                        default: base = 8; s += 1; break;
                        }
                }
        } else if (base < 2 || base > 36)
                return -EINVAL;

        if (!all_digits(s, base))
                return -EINVAL;

        errno = 0;
        char *end = NULL;
        unsigned long long v = strtoull(s, &end, (int) base);
        if (errno == ERANGE)
                return -ERANGE;
        if (errno != 0 || !end || *end != 0)
                return -EINVAL;
        *ret = (uint64_t) v;
        return 0;
}

int mk_parse_u32_base(const char *s, unsigned base, uint32_t *ret) {
        uint64_t v;
        int r = mk_parse_u64_base(s, base, &v);
        if (r < 0)
                return r;
        if (v > UINT32_MAX)
                return -ERANGE;
        *ret = (uint32_t) v;
        return 0;
}

int mk_parse_u64(const char *s, uint64_t *ret) {
        return mk_parse_u64_base(s, 10, ret);
}

int mk_parse_u32(const char *s, uint32_t *ret) {
        return mk_parse_u32_base(s, 10, ret);
}

int mk_parse_long(const char *s, long *ret) {
        if (!s)
                return -EINVAL;
        if (!all_digits(s[0] == '-' ? s + 1 : s, 10))
                return -EINVAL;
        errno = 0;
        char *end = NULL;
        long v = strtol(s, &end, 10);
        if (errno == ERANGE)
                return -ERANGE;
        if (errno != 0 || !end || *end != 0)
                return -EINVAL;
        *ret = v;
        return 0;
}

int mk_parse_int(const char *s, int *ret) {
        long v;
        int r = mk_parse_long(s, &v);
        if (r < 0)
                return r;
        if (v < INT_MIN || v > INT_MAX)
                return -ERANGE;
        *ret = (int) v;
        return 0;
}

int mk_parse_bool(const char *s, bool *ret) {
        static const char *const yes[] = {"1", "true", "yes", "on", "y", "t"};
        static const char *const no[] = {"0", "false", "no", "off", "n", "f"};
        if (!s)
                return -EINVAL;
        for (size_t i = 0; i < ELEMENTSOF(yes); i++)
                if (strcasecmp(s, yes[i]) == 0) {
                        *ret = true;
                        return 0;
                }
        for (size_t i = 0; i < ELEMENTSOF(no); i++)
                if (strcasecmp(s, no[i]) == 0) {
                        *ret = false;
                        return 0;
                }
        return -EINVAL;
}

int mk_parse_duration_ms(const char *s, uint64_t *ret) {
        static const struct {
                const char *name;
                uint64_t ms;
        } units[] = {
                {"ms", 1}, {"s", 1000}, {"m", 60 * 1000}, {"h", 60 * 60 * 1000},
        };
        if (!s || !*s)
                return -EINVAL;
        if (streq(s, "0")) {
                *ret = 0;
                return 0;
        }

        uint64_t total = 0;
        const char *p = s;
        while (*p) {
                size_t nd = strspn(p, "0123456789");
                if (nd == 0 || nd > 20)
                        return nd == 0 ? -EINVAL : -ERANGE;
                char num[21];
                memcpy(num, p, nd);
                num[nd] = 0;
                uint64_t v;
                int r = mk_parse_u64(num, &v);
                if (r < 0)
                        return r;
                p += nd;

                size_t nu = strcspn(p, "0123456789");
                uint64_t mult = 0;
                for (size_t i = 0; i < ELEMENTSOF(units); i++)
                        if (strlen(units[i].name) == nu && strneq(p, units[i].name, nu)) {
                                mult = units[i].ms;
                                break;
                        }
                if (mult == 0)
                        return -EINVAL;
                p += nu;

                if (v > UINT64_MAX / mult || v * mult > UINT64_MAX - total)
                        return -ERANGE;
                total += v * mult;
        }
        *ret = total;
        return 0;
}

static size_t edit_distance(const char *a, const char *b) {
        size_t la = strlen(a), lb = strlen(b), row[64];
        for (size_t j = 0; j <= lb; j++)
                row[j] = j;
        for (size_t i = 1; i <= la; i++) {
                size_t diag = row[0];
                row[0] = i;
                for (size_t j = 1; j <= lb; j++) {
                        size_t up = row[j];
                        size_t sub = diag + (tolower((unsigned char) a[i - 1]) != tolower((unsigned char) b[j - 1]));
                        size_t best = MIN(up + 1, row[j - 1] + 1);
                        row[j] = MIN(best, sub);
                        diag = up;
                }
        }
        return row[lb];
}

const char *mk_closest_word(const char *word, const char *const *candidates, size_t n) {
        if (!word || strlen(word) > 63)
                return NULL;
        const char *best = NULL;
        size_t best_d = SIZE_MAX;
        for (size_t i = 0; i < n; i++) {
                const char *c = candidates[i];
                if (!c || strlen(c) > 63)
                        continue;
                size_t d = edit_distance(word, c), longer = MAX(strlen(word), strlen(c));
                if (d < best_d && d <= 2 && 2 * d < longer) {
                        best = c;
                        best_d = d;
                }
        }
        return best;
}

/* Limit variables -> struct vgpu_config. See config.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "vgpu/config.h"

static const char *const policy_table[_VGPU_POLICY_MAX] = {
        [VGPU_POLICY_DEFAULT] = "default",
        [VGPU_POLICY_FORCE] = "force",
        [VGPU_POLICY_DISABLE] = "disable",
};

const char *vgpu_policy_to_string(enum vgpu_policy p) {
        return p >= 0 && p < _VGPU_POLICY_MAX ? policy_table[p] : NULL;
}

enum vgpu_policy vgpu_policy_from_string(const char *s) {
        if (!s)
                return _VGPU_POLICY_INVALID;
        for (int i = 0; i < _VGPU_POLICY_MAX; i++)
                if (strcasecmp(s, policy_table[i]) == 0)
                        return (enum vgpu_policy) i;
        return _VGPU_POLICY_INVALID;
}

#define PARSE_MAX 4096  /* longest value read (HAMi-core has no bound) */

static bool c_space(char c) {
        return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

static int digit_value(char c) {
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'z')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'Z')
                return c - 'A' + 10;
        return 99;
}

/* C's strtoul(s, NULL, 0) in the C locale, as glibc does it: false when
 * no digit was read. */
static bool c_strtoul(const char *s, size_t n, uint64_t *ret) {
        size_t i = 0;
        while (i < n && c_space(s[i]))
                i++;
        bool neg = false;
        if (i < n && (s[i] == '+' || s[i] == '-'))
                neg = s[i++] == '-';
        unsigned base = 10;
        if (i < n && s[i] == '0') {
                if (i + 2 < n && (s[i + 1] == 'x' || s[i + 1] == 'X') && digit_value(s[i + 2]) < 16) {
                        base = 16;
                        i += 2;
                } else
                        base = 8;
        }
        uint64_t v = 0;
        bool any = false, over = false;
        for (; i < n; i++) {
                int d = digit_value(s[i]);
                if (d >= (int) base)
                        break;
                any = true;
                if (v > (UINT64_MAX - (unsigned) d) / base)
                        over = true;
                else
                        v = v * base + (unsigned) d;
        }
        if (!any)
                return false;
        *ret = over ? UINT64_MAX : neg ? (uint64_t) 0 - v : v;
        return true;
}

int vgpu_parse_size(const char *s, uint64_t *ret) {
        if (!s)
                return -EINVAL;
        size_t n = strnlen(s, PARSE_MAX + 1);
        if (n == 0 || n > PARSE_MAX)
                return -EINVAL;
        unsigned shift = 0;
        switch (s[n - 1]) {
        case 'k': case 'K': shift = 10; break;
        case 'm': case 'M': shift = 20; break;
        case 'g': case 'G': shift = 30; break;
        default: break;
        }
        /* HAMi-core drops the suffix from nothing: strtoul reads the whole
         * text and stops at the first character that is not a digit. */
        uint64_t v;
        if (!c_strtoul(s, n, &v))
                return -EINVAL;
        if (shift && v > (UINT64_MAX >> shift))
                return -ERANGE;
        *ret = v << shift;
        return 0;
}

int vgpu_parse_percent(const char *s, unsigned *ret) {
        uint64_t v;
        int r = vgpu_parse_size(s, &v);
        if (r < 0)
                return r;
        *ret = v > 100 ? 100u : (unsigned) v;
        return 0;
}

int vgpu_parse_int(const char *s) {
        if (!s)
                return 0;
        size_t n = strnlen(s, PARSE_MAX), i = 0;
        while (i < n && c_space(s[i]))
                i++;
        bool neg = false;
        if (i < n && (s[i] == '+' || s[i] == '-'))
                neg = s[i++] == '-';
        int64_t v = 0;
        for (; i < n && s[i] >= '0' && s[i] <= '9'; i++)
                if (v <= (int64_t) INT32_MAX + 1)
                        v = v * 10 + (s[i] - '0');
        v = neg ? -v : v;
        return v > INT32_MAX ? INT32_MAX : v < INT32_MIN ? INT32_MIN : (int) v;
}

static bool parse_true(const char *s) {
        return s && (strcasecmp(s, "true") == 0 || strcmp(s, "1") == 0 || strcasecmp(s, "yes") == 0);
}


__attribute__((format(printf, 3, 4)))
static void warnf(void (*warn)(const char *, void *), void *userdata, const char *fmt, ...) {
        char buf[256];
        va_list ap;
        if (!warn)
                return;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        warn(buf, userdata);
}
/* Values are shown up to VGPU_MAX_VALUE characters. */
#define SHOWN(v) VGPU_MAX_VALUE, (v)

typedef void (*warn_fn)(const char *msg, void *userdata);

/* A memory limit variable into *limit, HAMi-core's reading: returns false
 * when unset or read as 0 (the caller falls back, as HAMi-core); a value
 * with no digit fails closed (a cap of 0 bytes on `scope`); an overflow
 * means no cap. */
static bool load_mem_limit(vgpu_getenv_fn get, void *userdata, warn_fn warn, const char *name, const char *scope,
                           uint64_t *limit, char *text) {
        const char *v = get(name, userdata);
        uint64_t b;
        if (!v || !*v)
                return false;
        snprintf(text, VGPU_MAX_VALUE + 1, "%s", v);
        int r = vgpu_parse_size(v, &b);
        if (r == -ERANGE) {
                warnf(warn, userdata, "%s='%.*s' overflows, no cap on %s (as HAMi-core)", name, SHOWN(v), scope);
                *limit = VGPU_UNLIMITED;
                return true;
        }
        if (r < 0) {
                warnf(warn, userdata, "invalid %s='%.*s', capping %s at 0 bytes", name, SHOWN(v), scope);
                *limit = 0;
                return true;
        }
        if (b == 0)
                return false;
        *limit = b;
        return true;
}

/* An SM limit variable into *limit: false when unset, invalid (logged) or
 * read as 0 (the caller falls back); >= 100 means none. */
static bool load_sm_limit(vgpu_getenv_fn get, void *userdata, warn_fn warn, const char *name, unsigned *limit) {
        const char *v = get(name, userdata);
        unsigned p;
        if (!v || !*v)
                return false;
        if (vgpu_parse_percent(v, &p) < 0) {
                warnf(warn, userdata, "invalid %s='%.*s', ignoring", name, SHOWN(v));
                return false;
        }
        if (p == 0)
                return false;
        *limit = p;
        return true;
}

void vgpu_config_load(struct vgpu_config *c, vgpu_getenv_fn get, void *userdata,
                      void (*warn)(const char *msg, void *userdata)) {
        char name[64];
        const char *v;

        memset(c, 0, sizeof(*c));
        c->policy = VGPU_POLICY_DEFAULT;
        c->log_level = VGPU_LOG_WARNING;
        c->priority = 1;  /* HAMi-core's default */

        /* Device-wide defaults, then per-device overrides (HAMi-core order). */
        uint64_t mem_all = VGPU_UNLIMITED;
        unsigned sm_all = 100;
        bool have_all = load_mem_limit(get, userdata, warn, "CUDA_DEVICE_MEMORY_LIMIT", "every device", &mem_all,
                                       c->mem_text_all);
        load_sm_limit(get, userdata, warn, "CUDA_DEVICE_SM_LIMIT", &sm_all);
        for (unsigned i = 0; i < VGPU_MAX_DEVICES; i++) {
                c->mem_limit[i] = mem_all;
                c->mem_from[i] = have_all ? VGPU_FROM_ALL : VGPU_FROM_NONE;
                c->sm_limit[i] = sm_all;
                snprintf(name, sizeof(name), "CUDA_DEVICE_MEMORY_LIMIT_%u", i);
                if (load_mem_limit(get, userdata, warn, name, "the device", &c->mem_limit[i], c->mem_text[i]))
                        c->mem_from[i] = VGPU_FROM_DEVICE;
                snprintf(name, sizeof(name), "CUDA_DEVICE_SM_LIMIT_%u", i);
                load_sm_limit(get, userdata, warn, name, &c->sm_limit[i]);
                if (c->sm_limit[i] >= 100)
                        c->sm_limit[i] = 100;
        }

        v = get("CUDA_DEVICE_MEMORY_SHARED_CACHE", userdata);
        if (!v || !*v)
                v = VGPU_DEFAULT_REGION;
        if (strlen(v) >= sizeof(c->region_path)) {
                warnf(warn, userdata, "%s is too long ('%.*s...'), using " VGPU_DEFAULT_REGION,
                      "CUDA_DEVICE_MEMORY_SHARED_CACHE", SHOWN(v));
                v = VGPU_DEFAULT_REGION;
        }
        memcpy(c->region_path, v, strlen(v) + 1);

        v = get("GPU_CORE_UTILIZATION_POLICY", userdata);
        if (v && *v) {
                enum vgpu_policy p = vgpu_policy_from_string(v);
                if (p < 0)
                        warnf(warn, userdata, "invalid %s='%.*s' (default, force or disable), using default",
                              "GPU_CORE_UTILIZATION_POLICY", SHOWN(v));
                else
                        c->policy = p;
        }

        v = get("LIBCUDA_LOG_LEVEL", userdata);
        if (v && *v) {
                /* HAMi-core: atoi; 1 and 2 alike; past 4 everything is shown. */
                int l = vgpu_parse_int(v);
                c->log_level = l < 0 ? 0 : l > 4 ? 4 : l == 1 ? VGPU_LOG_WARNING : l;
        }

        v = get("CUDA_TASK_PRIORITY", userdata);
        if (v)
                c->priority = vgpu_parse_int(v);  /* HAMi-core: atoi, whatever the text */

        c->disabled = parse_true(get("CUDA_DISABLE_CONTROL", userdata));
}

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

static int parse_u64_digits(const char *s, size_t n, uint64_t *ret) {
        uint64_t v = 0;
        if (n == 0)
                return -EINVAL;
        for (size_t i = 0; i < n; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return -EINVAL;
                unsigned d = (unsigned) (s[i] - '0');
                if (v > (UINT64_MAX - d) / 10)
                        return -ERANGE;
                v = v * 10 + d;
        }
        *ret = v;
        return 0;
}

int vgpu_parse_size(const char *s, uint64_t *ret) {
        if (!s)
                return -EINVAL;
        size_t n = strnlen(s, VGPU_MAX_VALUE + 1);
        if (n == 0 || n > VGPU_MAX_VALUE)
                return -EINVAL;
        unsigned shift = 0;
        switch (s[n - 1]) {
        case 'k': case 'K': shift = 10; n--; break;
        case 'm': case 'M': shift = 20; n--; break;
        case 'g': case 'G': shift = 30; n--; break;
        default: break;
        }
        uint64_t v;
        int r = parse_u64_digits(s, n, &v);
        if (r < 0)
                return r;
        if (shift && v > (UINT64_MAX >> shift))
                return -ERANGE;
        *ret = v << shift;
        return 0;
}

int vgpu_parse_percent(const char *s, unsigned *ret) {
        if (!s)
                return -EINVAL;
        size_t n = strnlen(s, VGPU_MAX_VALUE + 1);
        if (n > VGPU_MAX_VALUE)
                return -EINVAL;
        uint64_t v;
        int r = parse_u64_digits(s, n, &v);
        if (r < 0)
                return r;
        if (v > 100)
                return -ERANGE;
        *ret = (unsigned) v;
        return 0;
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

/* A memory limit variable, when set, into *limit: 0 means unlimited; an
 * unparsable value caps `scope` at 0 bytes (fail closed). */
static void load_mem_limit(vgpu_getenv_fn get, void *userdata, warn_fn warn, const char *name, const char *scope,
                           uint64_t *limit) {
        const char *v = get(name, userdata);
        uint64_t b;
        if (!v || !*v)
                return;
        if (vgpu_parse_size(v, &b) < 0) {
                warnf(warn, userdata, "invalid %s='%.*s', capping %s at 0 bytes", name, SHOWN(v), scope);
                *limit = 0;
        } else
                *limit = b == 0 ? VGPU_UNLIMITED : b;
}

/* An SM limit variable, when set, into *limit: 0 means 100%; an unparsable
 * value is ignored. */
static void load_sm_limit(vgpu_getenv_fn get, void *userdata, warn_fn warn, const char *name, unsigned *limit) {
        const char *v = get(name, userdata);
        unsigned p;
        if (!v || !*v)
                return;
        if (vgpu_parse_percent(v, &p) < 0)
                warnf(warn, userdata, "invalid %s='%.*s', ignoring", name, SHOWN(v));
        else
                *limit = p == 0 ? 100 : p;
}

void vgpu_config_load(struct vgpu_config *c, vgpu_getenv_fn get, void *userdata,
                      void (*warn)(const char *msg, void *userdata)) {
        char name[64];
        const char *v;

        memset(c, 0, sizeof(*c));
        c->policy = VGPU_POLICY_DEFAULT;
        c->log_level = VGPU_LOG_WARNING;

        /* Device-wide defaults, then per-device overrides (HAMi-core order). */
        uint64_t mem_all = VGPU_UNLIMITED;
        unsigned sm_all = 100;
        load_mem_limit(get, userdata, warn, "CUDA_DEVICE_MEMORY_LIMIT", "every device", &mem_all);
        load_sm_limit(get, userdata, warn, "CUDA_DEVICE_SM_LIMIT", &sm_all);
        for (unsigned i = 0; i < VGPU_MAX_DEVICES; i++) {
                c->mem_limit[i] = mem_all;
                c->sm_limit[i] = sm_all;
                snprintf(name, sizeof(name), "CUDA_DEVICE_MEMORY_LIMIT_%u", i);
                load_mem_limit(get, userdata, warn, name, "the device", &c->mem_limit[i]);
                snprintf(name, sizeof(name), "CUDA_DEVICE_SM_LIMIT_%u", i);
                load_sm_limit(get, userdata, warn, name, &c->sm_limit[i]);
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
                unsigned l;
                if (vgpu_parse_percent(v, &l) < 0 || l > 4)
                        warnf(warn, userdata, "invalid %s='%.*s' (0-4), ignoring", "LIBCUDA_LOG_LEVEL", SHOWN(v));
                else
                        c->log_level = l == 1 ? VGPU_LOG_WARNING : (int) l;  /* 1 and 2 alike */
        }

        v = get("CUDA_TASK_PRIORITY", userdata);
        if (v && *v) {
                unsigned p;
                if (vgpu_parse_percent(v, &p) < 0)
                        warnf(warn, userdata, "invalid %s='%.*s', ignoring", "CUDA_TASK_PRIORITY", SHOWN(v));
                else
                        c->priority = (int) p;
        }

        c->disabled = parse_true(get("CUDA_DISABLE_CONTROL", userdata));
}

/* Helpers of the NVML simulator; see util.h. */
#include <ctype.h>
#include <stdarg.h>
#include <strings.h>
#include <time.h>

#include "lib/util.h"

#define SIM_ERROR_MAX 512

static _Thread_local char error_buf[SIM_ERROR_MAX];

int sim_error(int code, const char *fmt, ...) {
        va_list ap;

        va_start(ap, fmt);
        int n = vsnprintf(error_buf, sizeof(error_buf), fmt, ap);
        va_end(ap);
        if (n >= (int) sizeof(error_buf))
                memcpy(error_buf + sizeof(error_buf) - 4, "...", 4);
        return code;
}

const char *sim_error_get(void) {
        return error_buf;
}

void sim_error_clear(void) {
        error_buf[0] = '\0';
}

int sim_parse_u64(const char *s, bool hex_ok, uint64_t *ret) {
        int base = 10;

        if (!s || !*s)
                return -EINVAL;
        if (hex_ok && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
                base = 16;
                s += 2;
                if (!*s)
                        return -EINVAL;
        }
        for (const char *p = s; *p; p++)
                if (base == 10 ? !isdigit((unsigned char) *p) : !isxdigit((unsigned char) *p))
                        return -EINVAL;
        errno = 0;
        char *end = NULL;
        unsigned long long v = strtoull(s, &end, base);
        if (errno == ERANGE)
                return -ERANGE;
        if (errno != 0 || !end || *end)
                return -EINVAL;
        *ret = v;
        return 0;
}

int sim_parse_u32(const char *s, uint32_t *ret) {
        uint64_t v;
        int r = sim_parse_u64(s, false, &v);
        if (r < 0)
                return r;
        if (v > UINT32_MAX)
                return -ERANGE;
        *ret = (uint32_t) v;
        return 0;
}

int sim_op_latency_ms(unsigned *ret) {
        const char *e = getenv("MIGKIT_SIM_OP_LATENCY_MS");
        uint32_t v = 0;

        if (e && *e && (sim_parse_u32(e, &v) < 0 || v > SIM_MAX_OP_LATENCY_MS))
                return sim_error(-EINVAL, "MIGKIT_SIM_OP_LATENCY_MS='%s': expected milliseconds, 0..%u", e,
                                 SIM_MAX_OP_LATENCY_MS);
        *ret = v;
        return 0;
}

void sim_sleep_ms(unsigned ms) {
        struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long) (ms % 1000) * 1000000L };

        while (ms > 0 && nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

uint64_t sim_hash(const void *data, size_t size, uint64_t seed) {
        const unsigned char *p = data;
        uint64_t h = 0xcbf29ce484222325ULL ^ seed;

        for (size_t i = 0; i < size; i++) {
                h ^= p[i];
                h *= 0x100000001b3ULL;
        }
        /* splitmix64 finaliser: spreads FNV's weak low bits. */
        h ^= h >> 30;
        h *= 0xbf58476d1ce4e5b9ULL;
        h ^= h >> 27;
        h *= 0x94d049bb133111ebULL;
        h ^= h >> 31;
        return h;
}

void sim_format_uuid(char *buf, size_t size, const char *prefix, uint64_t hi, uint64_t lo, bool version5) {
        if (version5) {
                hi = (hi & ~0xF000ULL) | 0x5000ULL;                     /* version 5 */
                lo = (lo & ~(0xC0ULL << 56)) | (0x80ULL << 56);         /* RFC 4122 variant */
        }
        snprintf(buf, size, "%s%08x-%04x-%04x-%04x-%012llx", prefix, (unsigned) (hi >> 32),
                 (unsigned) ((hi >> 16) & 0xFFFF), (unsigned) (hi & 0xFFFF), (unsigned) (lo >> 48),
                 (unsigned long long) (lo & 0xFFFFFFFFFFFFULL));
}

static const struct {
        int code;
        const char *name;
} nvml_errors[] = {
        { 0, "NVML_SUCCESS" },
        { 1, "NVML_ERROR_UNINITIALIZED" },
        { 2, "NVML_ERROR_INVALID_ARGUMENT" },
        { 3, "NVML_ERROR_NOT_SUPPORTED" },
        { 4, "NVML_ERROR_NO_PERMISSION" },
        { 5, "NVML_ERROR_ALREADY_INITIALIZED" },
        { 6, "NVML_ERROR_NOT_FOUND" },
        { 7, "NVML_ERROR_INSUFFICIENT_SIZE" },
        { 8, "NVML_ERROR_INSUFFICIENT_POWER" },
        { 9, "NVML_ERROR_DRIVER_NOT_LOADED" },
        { 10, "NVML_ERROR_TIMEOUT" },
        { 11, "NVML_ERROR_IRQ_ISSUE" },
        { 12, "NVML_ERROR_LIBRARY_NOT_FOUND" },
        { 13, "NVML_ERROR_FUNCTION_NOT_FOUND" },
        { 14, "NVML_ERROR_CORRUPTED_INFOROM" },
        { 15, "NVML_ERROR_GPU_IS_LOST" },
        { 16, "NVML_ERROR_RESET_REQUIRED" },
        { 17, "NVML_ERROR_OPERATING_SYSTEM" },
        { 18, "NVML_ERROR_LIB_RM_VERSION_MISMATCH" },
        { 19, "NVML_ERROR_IN_USE" },
        { 20, "NVML_ERROR_MEMORY" },
        { 21, "NVML_ERROR_NO_DATA" },
        { 22, "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED" },
        { 23, "NVML_ERROR_INSUFFICIENT_RESOURCES" },
        { 24, "NVML_ERROR_FREQ_NOT_SUPPORTED" },
        { 25, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH" },
        { 26, "NVML_ERROR_DEPRECATED" },
        { 27, "NVML_ERROR_NOT_READY" },
        { 28, "NVML_ERROR_GPU_NOT_FOUND" },
        { 29, "NVML_ERROR_INVALID_STATE" },
        { 999, "NVML_ERROR_UNKNOWN" },
};

const char *sim_nvml_error_name(int code) {
        for (size_t i = 0; i < ELEMENTSOF(nvml_errors); i++)
                if (nvml_errors[i].code == code)
                        return nvml_errors[i].name;
        return NULL;
}

int sim_nvml_error_parse(const char *s, int *ret) {
        uint32_t v;

        if (!s || !*s)
                return -EINVAL;
        if (sim_parse_u32(s, &v) >= 0) {
                if (!sim_nvml_error_name((int) v))
                        return -EINVAL;
                *ret = (int) v;
                return 0;
        }
        for (size_t i = 0; i < ELEMENTSOF(nvml_errors); i++) {
                const char *full = nvml_errors[i].name;
                const char *shortname = full + (strncmp(full, "NVML_ERROR_", 11) == 0 ? 11 : 5);
                if (strcasecmp(s, full) == 0 || strcasecmp(s, shortname) == 0 ||
                    (strncasecmp(s, "ERROR_", 6) == 0 && strcasecmp(s + 6, shortname) == 0)) {
                        *ret = nvml_errors[i].code;
                        return 0;
                }
        }
        return -EINVAL;
}

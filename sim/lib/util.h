/* Small helpers of the NVML simulator: checked parsing, hashing, the
 * thread-local error message behind mksim_last_error(), NVML return code
 * names. The simulator is built apart from migkit-core, so it carries its own
 * copies of the few language helpers it needs. */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _printf_(a, b) __attribute__((format(printf, a, b)))
#define ELEMENTSOF(x) (sizeof(x) / sizeof((x)[0]))
#define streq(a, b) (strcmp((a), (b)) == 0)
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

static inline void sim_freep(void *p) {
        free(*(void **) p);
}
#define _cleanup_free_ _cleanup_(sim_freep)

static inline void sim_closep(int *fd) {
        if (*fd >= 0) {
                int saved = errno;
                close(*fd);
                errno = saved;
        }
}
#define _cleanup_close_ _cleanup_(sim_closep)

#define TAKE_PTR(p)                  \
        ({                           \
                typeof(p) _p_ = (p); \
                (p) = NULL;          \
                _p_;                 \
        })

/* Sets the calling thread's last error message and returns `code`. */
int sim_error(int code, const char *fmt, ...) _printf_(2, 3);
const char *sim_error_get(void);
void sim_error_clear(void);

/* Parse a whole string as an unsigned decimal (or 0x hex when hex_ok) number
 * that fits; no sign, no spaces, no trailing garbage. -EINVAL or -ERANGE. */
int sim_parse_u64(const char *s, bool hex_ok, uint64_t *ret);
int sim_parse_u32(const char *s, uint32_t *ret);

/* How long one mutating operation takes (MIGKIT_SIM_OP_LATENCY_MS, at most
 * SIM_MAX_OP_LATENCY_MS): 0 when unset or empty; -EINVAL (with sim_error())
 * for anything but a decimal number in range. */
#define SIM_MAX_OP_LATENCY_MS 60000u
int sim_op_latency_ms(unsigned *ret);
/* Sleeps ms milliseconds (through EINTR). */
void sim_sleep_ms(unsigned ms);

/* 64-bit FNV-1a over the bytes, mixed by splitmix64 finalisation. */
uint64_t sim_hash(const void *data, size_t size, uint64_t seed);

/* Writes PREFIX + an 8-4-4-4-12 lowercase hex UUID derived from the two
 * 64-bit words. version5 sets the version nibble to 5 and the RFC 4122
 * variant bits, as MIG UUIDs show. buf must hold at least strlen(prefix)+37. */
void sim_format_uuid(char *buf, size_t size, const char *prefix, uint64_t hi, uint64_t lo, bool version5);

/* NVML return codes by name. */
const char *sim_nvml_error_name(int code);        /* "NVML_ERROR_IN_USE", NULL when unknown */
int sim_nvml_error_parse(const char *s, int *ret); /* names with or without prefix, any case, or numbers */

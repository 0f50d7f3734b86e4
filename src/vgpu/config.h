/* The limits of one container, from HAMi-core's environment variables and
 * value syntax (HAMi-core src/multiprocess/multiprocess_memory_limit.c,
 * README): CUDA_DEVICE_MEMORY_LIMIT[_<i>], CUDA_DEVICE_SM_LIMIT[_<i>],
 * CUDA_DEVICE_MEMORY_SHARED_CACHE, GPU_CORE_UTILIZATION_POLICY,
 * LIBCUDA_LOG_LEVEL, CUDA_TASK_PRIORITY, CUDA_DISABLE_CONTROL. Pure code: the
 * variables come through a lookup function so tests and the fuzz target feed
 * them without touching the environment. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VGPU_MAX_DEVICES 16          /* per container, as HAMi-core's CUDA_DEVICE_MAX_COUNT */
#define VGPU_MAX_PATH 1024           /* region file path, with its NUL */
#define VGPU_MAX_VALUE 64            /* longest accepted variable value */
#define VGPU_UNLIMITED UINT64_MAX
#define VGPU_DEFAULT_REGION "/tmp/migkit-vgpu.cache"

enum vgpu_policy {
        VGPU_POLICY_DEFAULT,  /* limit while another GPU user is active; a lone container may burst */
        VGPU_POLICY_FORCE,    /* always limit */
        VGPU_POLICY_DISABLE,  /* never limit compute */
        _VGPU_POLICY_MAX,
        _VGPU_POLICY_INVALID = -22,
};

enum vgpu_log_level {
        VGPU_LOG_ERROR = 0,
        VGPU_LOG_WARNING = 2,   /* HAMi-core: 1 and 2 both mean warnings + messages */
        VGPU_LOG_INFO = 3,
        VGPU_LOG_DEBUG = 4,
};

/* Where a device's memory cap came from (the start-up log line names it). */
enum vgpu_limit_source {
        VGPU_FROM_NONE,
        VGPU_FROM_ALL,     /* CUDA_DEVICE_MEMORY_LIMIT */
        VGPU_FROM_DEVICE,  /* CUDA_DEVICE_MEMORY_LIMIT_<i> */
};

struct vgpu_config {
        uint64_t mem_limit[VGPU_MAX_DEVICES];  /* bytes; VGPU_UNLIMITED: none */
        uint8_t mem_from[VGPU_MAX_DEVICES];    /* enum vgpu_limit_source */
        char mem_text_all[VGPU_MAX_VALUE + 1]; /* the values as given (shown, cut at VGPU_MAX_VALUE) */
        char mem_text[VGPU_MAX_DEVICES][VGPU_MAX_VALUE + 1];
        unsigned sm_limit[VGPU_MAX_DEVICES];   /* percent 1..99; 100: unlimited */
        char region_path[VGPU_MAX_PATH];
        enum vgpu_policy policy;
        int log_level;
        int priority;                          /* CUDA_TASK_PRIORITY (HAMi-core: 0 high, default 1); recorded only */
        bool disabled;                         /* CUDA_DISABLE_CONTROL=true */
};

typedef const char *(*vgpu_getenv_fn)(const char *name, void *userdata);

/* A limit value read exactly as HAMi-core reads it (get_limit_from_env in
 * its src/multiprocess/multiprocess_memory_limit.c): a last character g, m
 * or k (either case) multiplies by 2^30, 2^20 or 2^10; the number is C's
 * strtoul(value, base 0) of the whole text: leading white space, a sign
 * (a '-' negates modulo 2^64), 0x for hex, a leading 0 for octal, then the
 * digits up to the first that does not fit; the rest is ignored. So
 * "0x40000000" is 1 GiB, " 1g" 1 GiB, "1.5g" 1 GiB, "1gb" 1 byte, "010"
 * 8 bytes, "1g " 1 byte. Saturates at UINT64_MAX as strtoul does.
 * Returns 0 with the value (0 included), -EINVAL when no digit was read
 * (HAMi-core reads 0 there), -ERANGE when the product overflows (HAMi-core
 * then logs an overflow and reads 0). */
int vgpu_parse_size(const char *s, uint64_t *ret);

/* A percentage with the same reading as vgpu_parse_size: 0 with the value
 * (any size; 0 and >= 100 mean none to the caller), -EINVAL, -ERANGE. */
int vgpu_parse_percent(const char *s, unsigned *ret);

/* C's atoi as HAMi-core uses it for CUDA_TASK_PRIORITY: leading white
 * space, a sign, decimal digits up to the first other character (none: 0);
 * clamped to int instead of undefined. */
int vgpu_parse_int(const char *s);

const char *vgpu_policy_to_string(enum vgpu_policy p);
enum vgpu_policy vgpu_policy_from_string(const char *s);

/* Fills *c from the variables. Never fails: a bad value is reported through
 * warn (one call per problem, text in buf) and handled as documented in
 * docs/vgpu.md. As HAMi-core, CUDA_DEVICE_MEMORY_LIMIT_<i> that reads as 0
 * falls back to CUDA_DEVICE_MEMORY_LIMIT (and the same for SM limits). A
 * memory value with no digit at all fails closed (that device gets a cap of
 * 0 bytes; HAMi-core would drop the cap); one whose product overflows means
 * no cap (HAMi-core's reading); an unparsable SM limit is ignored. */
void vgpu_config_load(struct vgpu_config *c, vgpu_getenv_fn get, void *userdata,
                      void (*warn)(const char *msg, void *userdata));

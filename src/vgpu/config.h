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

struct vgpu_config {
        uint64_t mem_limit[VGPU_MAX_DEVICES];  /* bytes; VGPU_UNLIMITED: none */
        unsigned sm_limit[VGPU_MAX_DEVICES];   /* percent 1..99; 100: unlimited */
        char region_path[VGPU_MAX_PATH];
        enum vgpu_policy policy;
        int log_level;
        int priority;                          /* CUDA_TASK_PRIORITY, 0 high; recorded only */
        bool disabled;                         /* CUDA_DISABLE_CONTROL=true */
};

typedef const char *(*vgpu_getenv_fn)(const char *name, void *userdata);

/* "8000m", "8g", "4096k", "1073741824" (bytes); g/m/k in either case are
 * powers of 1024. -EINVAL on garbage, -ERANGE over UINT64_MAX. */
int vgpu_parse_size(const char *s, uint64_t *ret);

/* "30" -> 30. Over 100 is -ERANGE. */
int vgpu_parse_percent(const char *s, unsigned *ret);

const char *vgpu_policy_to_string(enum vgpu_policy p);
enum vgpu_policy vgpu_policy_from_string(const char *s);

/* Fills *c from the variables. Never fails: a bad value is reported through
 * warn (one call per problem, text in buf) and handled as documented in
 * docs/vgpu.md (an unparsable memory limit fails closed: that device gets a
 * cap of 0 bytes; an unparsable SM limit is ignored). */
void vgpu_config_load(struct vgpu_config *c, vgpu_getenv_fn get, void *userdata,
                      void (*warn)(const char *msg, void *userdata));

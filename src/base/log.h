/* klog-compatible logging to stderr:
 *   I1121 23:17:10.000123    1234 file.c:42] message
 * Levels error < warning < info < debug; debug lines can also be switched on
 * per area (nvml, k8s, plugin, sched, spawn...) with mk_log_parse_debug().
 * Library modules log at debug only; the caller that decides logs failures,
 * once (STYLE.md habits 14-15). Thread-safe: one write(2) per line.
 * A line is always one line: control characters in the message (from
 * names, labels, hook output...) are escaped, see mk_log_escape(). */
#pragma once

#include <stdbool.h>

#include "base/macro.h"

enum mk_log_level {
        MK_LOG_ERROR = 0,
        MK_LOG_WARNING = 1,
        MK_LOG_INFO = 2,
        MK_LOG_DEBUG = 3,
};

void mk_log_set_level(enum mk_log_level level);
enum mk_log_level mk_log_get_level(void);

/* "all", or a comma list of areas ("nvml,k8s") whose debug lines are shown
 * even below MK_LOG_DEBUG ("none": no area). Returns 0, -EINVAL for an empty
 * or over-long list, -ENOENT when it names an area no caller logs (a typo
 * would otherwise show nothing, silently): mk_log_check_areas() says which. */
int mk_log_parse_debug(const char *areas);
/* 0 when every area of the list is known, else -ENOENT with the first unknown
 * one copied to ret_bad (size bytes, may be 0). */
int mk_log_check_areas(const char *areas, char *ret_bad, size_t size);
/* The known areas, for messages: "all, grpc, k8s, ...". */
const char *mk_log_known_areas(void);
bool mk_log_area_enabled(const char *area);

/* Where lines go: a file descriptor (default 2). For tests. */
void mk_log_set_fd(int fd);

/* Copies NUL-terminated s to buf (size bytes, always NUL-terminated when
 * size > 0) with every control character escaped: \n \r \t, other C0
 * bytes and DEL as \xHH, UTF-8 C1 controls (U+0080..U+009F) as \u00HH.
 * Returns how many bytes of s were consumed (strlen(s) when all fit). Every
 * log line goes through it, so a name carrying a newline or a terminal
 * escape cannot forge a line or drive the terminal. */
size_t mk_log_escape(const char *s, char *buf, size_t size) _nonnull_(1, 2);

/* Logs and returns `error` (a negative errno, or 0); `%m` in fmt prints
 * strerror(-error). area may be NULL. */
int mk_log_internal(enum mk_log_level level, const char *area, int error, const char *file, int line,
                    const char *fmt, ...) _printf_(6, 7);

#define mk_log_full(level, area, error, ...) mk_log_internal(level, area, error, __FILE__, __LINE__, __VA_ARGS__)

#define log_error(...) ((void) mk_log_full(MK_LOG_ERROR, NULL, 0, __VA_ARGS__))
#define log_warning(...) ((void) mk_log_full(MK_LOG_WARNING, NULL, 0, __VA_ARGS__))
#define log_info(...) ((void) mk_log_full(MK_LOG_INFO, NULL, 0, __VA_ARGS__))
#define log_debug(...) ((void) mk_log_full(MK_LOG_DEBUG, NULL, 0, __VA_ARGS__))
#define log_error_errno(error, ...) mk_log_full(MK_LOG_ERROR, NULL, (error), __VA_ARGS__)
#define log_warning_errno(error, ...) mk_log_full(MK_LOG_WARNING, NULL, (error), __VA_ARGS__)
#define log_debug_errno(error, ...) mk_log_full(MK_LOG_DEBUG, NULL, (error), __VA_ARGS__)
/* Debug line of an area: shown at MK_LOG_DEBUG or when the area is switched on. */
#define log_debug_area(area, ...) ((void) mk_log_full(MK_LOG_DEBUG, (area), 0, __VA_ARGS__))
#define log_debug_area_errno(area, error, ...) mk_log_full(MK_LOG_DEBUG, (area), (error), __VA_ARGS__)

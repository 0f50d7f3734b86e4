#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/macro.h"

#define MK_LOG_LINE_MAX 4096
#define MK_LOG_AREAS_MAX 256

/* Process-wide settings, written once at start-up by main() before threads
 * exist and only read afterwards. */
static enum mk_log_level log_level = MK_LOG_INFO;
static int log_fd = STDERR_FILENO;
static char log_areas[MK_LOG_AREAS_MAX]; /* ",nvml,k8s," or ",all," */

void mk_log_set_level(enum mk_log_level level) {
        log_level = level;
}

enum mk_log_level mk_log_get_level(void) {
        return log_level;
}

void mk_log_set_fd(int fd) {
        log_fd = fd;
}

/* The areas log_debug_area() callers use ("none" switches every area off). */
static const char *const known_areas[] = {"all", "none", "grpc", "k8s", "nvml", "pci", "plugin", "sched", "service", "spawn"};

const char *mk_log_known_areas(void) {
        return "all, grpc, k8s, nvml, pci, plugin, sched, service, spawn";
}

int mk_log_check_areas(const char *areas, char *ret_bad, size_t size) {
        if (!areas || !*areas)
                return -EINVAL;
        for (const char *p = areas; *p;) {
                size_t len = strcspn(p, ", ");
                bool known = len == 0;
                for (size_t i = 0; i < ELEMENTSOF(known_areas) && !known; i++)
                        known = strlen(known_areas[i]) == len && strncmp(known_areas[i], p, len) == 0;
                if (!known) {
                        if (ret_bad && size)
                                snprintf(ret_bad, size, "%.*s", (int) len, p);
                        return -ENOENT;
                }
                p += len;
                p += strspn(p, ", ");
        }
        return 0;
}

int mk_log_parse_debug(const char *areas) {
        if (!areas || !*areas)
                return -EINVAL;
        size_t n = strlen(areas);
        if (n + 3 > sizeof(log_areas))
                return -EINVAL;
        int r = mk_log_check_areas(areas, NULL, 0);
        if (r < 0)
                return r;
        log_areas[0] = ',';
        for (size_t i = 0; i < n; i++)
                log_areas[i + 1] = areas[i] == ' ' ? ',' : areas[i];
        log_areas[n + 1] = ',';
        log_areas[n + 2] = 0;
        return 0;
}

bool mk_log_area_enabled(const char *area) {
        if (!area || !log_areas[0])
                return false;
        if (strstr(log_areas, ",all,"))
                return true;
        char key[64];
        int k = snprintf(key, sizeof(key), ",%s,", area);
        if (k < 0 || k >= (int) sizeof(key))
                return false;
        return strstr(log_areas, key) != NULL;
}

size_t mk_log_escape(const char *s, char *buf, size_t size) {
        static const char hex[] = "0123456789abcdef";
        size_t i = 0, o = 0;
        if (size == 0)
                return 0;
        for (; s[i]; i++) {
                unsigned char c = (unsigned char) s[i];
                unsigned char c1 = (unsigned char) s[i + 1];
                char esc[7];
                size_t k;
                if (c == '\n' || c == '\r' || c == '\t') {
                        esc[0] = '\\';
                        esc[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
                        k = 2;
                } else if (c < 0x20 || c == 0x7f) {
                        memcpy(esc, "\\x", 2);
                        esc[2] = hex[c >> 4];
                        esc[3] = hex[c & 15];
                        k = 4;
                } else if (c == 0xc2 && c1 >= 0x80 && c1 <= 0x9f) { /* U+0080..U+009F, C1 controls (CSI...) */
                        memcpy(esc, "\\u00", 4);
                        esc[4] = hex[c1 >> 4];
                        esc[5] = hex[c1 & 15];
                        k = 6;
                } else {
                        esc[0] = (char) c;
                        k = 1;
                }
                if (o + k >= size)
                        break;
                memcpy(buf + o, esc, k);
                o += k;
                if (k == 6)
                        i++; /* the C1 control's second byte */
        }
        buf[o] = 0;
        return i;
}

int mk_log_internal(enum mk_log_level level, const char *area, int error, const char *file, int line,
                    const char *fmt, ...) {
        if (level > log_level && !(level == MK_LOG_DEBUG && mk_log_area_enabled(area)))
                return error;

        int saved_errno = errno;
        static const char letters[] = {'E', 'W', 'I', 'D'};
        struct timeval tv;
        struct tm tm;
        gettimeofday(&tv, NULL);
        localtime_r(&tv.tv_sec, &tm);

        const char *base = strrchr(file, '/');
        base = base ? base + 1 : file;

        char buf[MK_LOG_LINE_MAX], msg[MK_LOG_LINE_MAX];
        int n = snprintf(buf, sizeof(buf), "%c%02d%02d %02d:%02d:%02d.%06ld %7d %s:%d] ",
                         letters[level], tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                         (long) tv.tv_usec, (int) getpid(), base, line);
        if (n < 0 || (size_t) n >= sizeof(buf))
                n = 0;
        va_list ap;
        errno = error < 0 ? -error : error;
        va_start(ap, fmt);
        int m = vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        bool cut = m >= (int) sizeof(msg);
        if (m > 0) {
                size_t k = mk_log_escape(msg, buf + n, sizeof(buf) - 1 - (size_t) n);
                cut = cut || k < (size_t) m; /* not all of msg fit, escaped */
                n += (int) strlen(buf + n);
        }
        if (cut) {
                n = MAX(n, 3);
                memcpy(buf + n - 3, "...", 3);
        }
        buf[n++] = '\n';
        ssize_t w = write(log_fd, buf, (size_t) n);
        (void) w;
        errno = saved_errno;
        return error;
}

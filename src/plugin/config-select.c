/* The config manager's choices: plugin/config-select.h. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/macro.h"
#include "plugin/config-select.h"

/* A config name is a file name: no '/', not "." or "..". */
static bool name_ok(const char *n) {
        return *n && !strchr(n, '/') && !streq(n, ".") && !streq(n, "..") && strlen(n) < NAME_MAX;
}

static bool is_config_file(const char *srcdir, const char *name) {
        if (!name_ok(name) || strncmp(name, "..", 2) == 0)
                return false;
        char p[PATH_MAX];
        int n = snprintf(p, sizeof(p), "%s/%s", srcdir, name);
        struct stat st;
        return n > 0 && (size_t) n < sizeof(p) && stat(p, &st) == 0 && !S_ISDIR(st.st_mode);
}

/* The number of config files in srcdir; *ret_only: a copy of the name when
 * there is exactly one. */
static int count_files(const char *srcdir, char **ret_only, struct mk_error *e) {
        DIR *d = opendir(srcdir);
        if (!d)
                return mk_error_set(e, -errno, "Cannot read the config directory '%s': %s", srcdir, strerror(errno));
        int n = 0;
        char *only = NULL;
        struct dirent *de;
        while ((de = readdir(d)) && n <= (int) MK_DP_CONFIG_CHOOSE_MAX_FILES) {
                if (!is_config_file(srcdir, de->d_name))
                        continue;
                if (++n == 1)
                        only = strdup(de->d_name);
        }
        closedir(d);
        if (n == 1 && !only)
                return mk_error_set(e, -ENOMEM, "Out of memory reading '%s'", srcdir);
        if (n != 1)
                free(only), only = NULL;
        *ret_only = only;
        return n;
}

int mk_dp_config_choose(const char *srcdir, const char *label, const char *default_config, const char *fallbacks,
                     char **ret, struct mk_error *e) {
        _cleanup_free_ char *only = NULL;
        int n = count_files(srcdir, &only, e);
        if (n < 0)
                return n;
        if (n == 0)
                return mk_error_set(e, -ENOENT, "No configuration files in '%s'", srcdir);
        const char *pick = NULL;
        if (label && *label) {
                if (!is_config_file(srcdir, label))
                        return mk_error_set(e, -ENOENT, "The selected config '%s' does not exist in '%s'", label,
                                            srcdir);
                pick = label;
        } else if (default_config && *default_config) {
                if (!is_config_file(srcdir, default_config))
                        return mk_error_set(e, -ENOENT, "The default config '%s' does not exist in '%s'",
                                            default_config, srcdir);
                pick = default_config;
        } else {
                bool empty = false;
                for (const char *p = fallbacks ? fallbacks : ""; *p && !pick && !empty;) {
                        size_t len = strcspn(p, ",");
                        while (len && isspace((unsigned char) p[len - 1]))
                                len--;
                        if (len == 5 && strncmp(p, "named", 5) == 0) {
                                if (is_config_file(srcdir, MK_DP_CONFIG_CHOOSE_DEFAULT_NAME))
                                        pick = MK_DP_CONFIG_CHOOSE_DEFAULT_NAME;
                        } else if (len == 6 && strncmp(p, "single", 6) == 0) {
                                if (only)
                                        pick = only;
                        } else if (len == 5 && strncmp(p, "empty", 5) == 0)
                                empty = true;
                        else if (len)
                                return mk_error_set(e, -EINVAL, "Unknown fallback strategy '%.*s' (named, single "
                                                    "or empty)", (int) MIN(len, (size_t) 64), p);
                        p += strcspn(p, ",");
                        p += strspn(p, ", ");
                }
                if (empty && !pick) {
                        *ret = NULL;
                        return 0;
                }
                if (!pick)
                        return mk_error_set(e, -ENOENT, "No config was selected, no default is set, and every "
                                            "fallback strategy failed ('%s')", fallbacks ? fallbacks : "");
        }
        char *s = strdup(pick);
        if (!s)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        *ret = s;
        return 0;
}

int mk_dp_config_link(const char *srcdir, const char *name, const char *dst, bool *ret_updated, struct mk_error *e) {
        char src[PATH_MAX];
        int n = name ? snprintf(src, sizeof(src), "%s/%s", srcdir, name) : snprintf(src, sizeof(src), "/dev/null");
        if (n < 0 || (size_t) n >= sizeof(src))
                return mk_error_set(e, -ENAMETOOLONG, "Config path too long");
        if (name && !name_ok(name))
                return mk_error_set(e, -EINVAL, "Invalid config name '%s'", name);
        struct stat st;
        if (stat(dst, &st) == 0) {
                _cleanup_free_ char *a = realpath(src, NULL), *b = realpath(dst, NULL);
                if (!a)
                        return mk_error_set(e, -errno, "Cannot resolve '%s': %s", src, strerror(errno));
                if (b && streq(a, b)) {
                        *ret_updated = false;
                        return 0;
                }
        }
        if (unlink(dst) < 0 && errno != ENOENT)
                return mk_error_set(e, -errno, "Cannot remove the old config '%s': %s", dst, strerror(errno));
        if (symlink(src, dst) < 0)
                return mk_error_set(e, -errno, "Cannot link '%s' to '%s': %s", dst, src, strerror(errno));
        *ret_updated = true;
        return 0;
}

/* The pid of /proc/<name>'s process in its own PID namespace (the last
 * field of NSpid), or, on kernels without NSpid, the /proc name when that
 * /proc is of our namespace. 0 when unknown. */
static pid_t pid_in_own_ns(const char *name, bool proc_is_ours) {
        char p[PATH_MAX], buf[4096];
        snprintf(p, sizeof(p), "/proc/%s/status", name);
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return 0;
        ssize_t k = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (k <= 0)
                return 0;
        buf[k] = 0;
        const char *ns = strstr(buf, "\nNSpid:");
        if (!ns)
                return proc_is_ours ? (pid_t) strtol(name, NULL, 10) : 0;
        ns += strlen("\nNSpid:");
        long last = 0;
        for (;;) {
                char *end;
                long v = strtol(ns, &end, 10);
                if (end == ns)
                        break;
                last = v;
                ns = end;
        }
        return last > 0 && last <= INT_MAX ? (pid_t) last : 0;
}

int mk_process_find(const char *argv0, pid_t *ret) {
        /* Only processes of our own PID namespace (a pod's, with
         * shareProcessNamespace): a /proc of the host also lists the
         * processes of every container, whose names are not ours to signal. */
        struct stat self_ns;
        if (stat("/proc/self/ns/pid", &self_ns) < 0)
                return -errno;
        /* /proc/self names our pid as this /proc counts: ours when equal. */
        char self[32] = "";
        ssize_t n = readlink("/proc/self", self, sizeof(self) - 1);
        if (n > 0)
                self[n] = 0;
        bool proc_is_ours = n > 0 && strtol(self, NULL, 10) == (long) getpid();
        DIR *d = opendir("/proc");
        if (!d)
                return -errno;
        pid_t best = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
                char *end;
                long pid = strtol(de->d_name, &end, 10);
                if (*end || pid <= 0)
                        continue;
                char p[64], buf[PATH_MAX];
                snprintf(p, sizeof(p), "/proc/%ld/cmdline", pid);
                int fd = open(p, O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        continue;
                ssize_t k = read(fd, buf, sizeof(buf) - 1);
                close(fd);
                if (k <= 0)
                        continue;
                buf[k] = 0; /* argv[0] ends at the first NUL */
                const char *base = strrchr(buf, '/');
                if (!streq(buf, argv0) && !(base && streq(base + 1, argv0)))
                        continue;
                struct stat ns;
                snprintf(p, sizeof(p), "/proc/%ld/ns/pid", pid);
                if (stat(p, &ns) < 0 || ns.st_dev != self_ns.st_dev || ns.st_ino != self_ns.st_ino)
                        continue;
                pid_t own = pid_in_own_ns(de->d_name, proc_is_ours);
                if (own <= 0 || own == getpid() || (best && own >= best))
                        continue;
                best = own;
        }
        closedir(d);
        if (!best)
                return -ESRCH;
        *ret = best;
        return 0;
}

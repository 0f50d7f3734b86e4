/* Whole files: bounded reads, atomic replaces (fileio.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/fileio.h"

#define MK_READ_CHUNK 16384
#define MK_TEMP_NAME_TRIES 16

int mk_read_file(const char *path, size_t cap, char **ret_data, size_t *ret_len, struct mk_error *e) {
        if (streq(path, "-"))
                return mk_read_fd(STDIN_FILENO, path, cap, ret_data, ret_len, e);
        /* O_NONBLOCK: a FIFO (or a device) put where a file should be is
         * refused below instead of holding us in open() or read(), where a
         * daemon would neither start nor heed SIGTERM. */
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd < 0) {
                int r = negative_errno();
                return mk_error_set(e, r, "Failed to open '%s': %s", path, strerror(-r));
        }
        struct stat st;
        if (fstat(fd, &st) < 0) {
                int r = negative_errno();
                return mk_error_set(e, r, "Failed to read '%s': %s", path, strerror(-r));
        }
        if (!S_ISREG(st.st_mode))
                return mk_error_set(e, S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL, "Failed to read '%s': it is %s, not a "
                                    "regular file", path, mk_file_type_name(st.st_mode));
        return mk_read_fd(fd, path, cap, ret_data, ret_len, e);
}

const char *mk_file_type_name(mode_t mode) {
        switch (mode & S_IFMT) {
        case S_IFREG: return "a regular file";
        case S_IFDIR: return "a directory";
        case S_IFIFO: return "a FIFO";
        case S_IFSOCK: return "a socket";
        case S_IFCHR: return "a character device";
        case S_IFBLK: return "a block device";
        case S_IFLNK: return "a symbolic link";
        default: return "of an unknown type";
        }
}

int mk_read_fd(int fd, const char *path, size_t cap, char **ret_data, size_t *ret_len, struct mk_error *e) {
        _cleanup_buf_done_ struct mk_buf b = { .cap = cap };
        char chunk[MK_READ_CHUNK];
        for (;;) {
                ssize_t n = read(fd, chunk, sizeof(chunk));
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        int r = negative_errno();
                        return mk_error_set(e, r, "Failed to read '%s': %s", path, strerror(-r));
                }
                if (n == 0)
                        break;
                int r = mk_buf_append(&b, chunk, (size_t) n);
                if (r == -E2BIG)
                        return mk_error_set(e, r, "'%s' is larger than %zu bytes", path, cap);
                if (r < 0)
                        return mk_error_set(e, r, "Failed to read '%s': %s", path, strerror(-r));
        }

        size_t len = b.len;
        char *data = mk_buf_take(&b);
        if (!data)
                return mk_error_set(e, -ENOMEM, "Failed to read '%s': %s", path, strerror(ENOMEM));
        *ret_data = data;
        if (ret_len)
                *ret_len = len;
        return 0;
}

int mk_read_sysfs_attr(const char *path, char **ret_value, struct mk_error *e) {
        char *data;
        size_t len;
        int r = mk_read_file(path, MK_MAX_SYSFS_BYTES, &data, &len, e);
        if (r < 0)
                return r;
        while (len > 0 && (data[len - 1] == '\n' || data[len - 1] == ' ' || data[len - 1] == '\t'))
                data[--len] = 0;
        *ret_value = data;
        return 0;
}

int mk_read_text_file(const char *path, size_t cap, char **ret, struct mk_error *e) {
        _cleanup_free_ char *data = NULL;
        size_t len = 0;
        int r = mk_read_file(path, cap, &data, &len, e);
        if (r < 0)
                return r;
        if (strlen(data) != len)
                return mk_error_set(e, -EINVAL, "'%s' is corrupt: it contains a NUL byte", path);
        while (len > 0 && strchr("\n\r\t ", data[len - 1]))
                data[--len] = 0;
        *ret = TAKE_PTR(data);
        return 0;
}

int mk_mkdir_parents(const char *dir, mode_t mode, struct mk_error *e) {
        _cleanup_free_ char *d = strdup(dir);
        if (!d)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        for (char *s = d + 1;; s++) {
                bool end = *s == 0;
                if (*s != '/' && !end)
                        continue;
                *s = 0;
                if (mkdir(d, mode) < 0 && errno != EEXIST) {
                        int r = negative_errno();
                        return mk_error_set(e, r, "Failed to create directory '%s': %s", d, strerror(-r));
                }
                if (end)
                        break;
                *s = '/';
        }
        struct stat st;
        if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
                return mk_error_set(e, -ENOTDIR, "'%s' is not a directory", dir);
        return 0;
}

int mk_fsync_parent_dir(const char *path) {
        _cleanup_free_ char *copy = strdup(path);
        if (!copy)
                return -ENOMEM;
        _cleanup_close_ int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0 || fsync(fd) < 0)
                return negative_errno();
        return 0;
}

/* 32 bits for a temporary file's name; they need not be secret, only unlikely
 * to meet another writer's (O_EXCL settles a meeting). */
static uint32_t temp_name_bits(void) {
        uint32_t v;
        if (getrandom(&v, sizeof(v), GRND_NONBLOCK) == (ssize_t) sizeof(v))
                return v;
        struct timespec ts;
        (void) clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint32_t) ts.tv_nsec ^ (uint32_t) ts.tv_sec * 2654435761u;
}

/* Creates "<path>.tmp.<pid>.<8 hex>" with O_EXCL; the name in *ret_name. */
static int open_temp_beside(const char *path, char **ret_name, struct mk_error *e) {
        for (int i = 0; i < MK_TEMP_NAME_TRIES; i++) {
                _cleanup_free_ char *name = NULL;
                if (asprintf(&name, "%s" MK_TEMP_FILE_INFIX "%ld.%08x", path, (long) getpid(), temp_name_bits()) < 0)
                        return mk_error_set(e, -ENOMEM, "Out of memory");
                int fd = open(name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0600);
                if (fd >= 0) {
                        *ret_name = TAKE_PTR(name);
                        return fd;
                }
                if (errno != EEXIST) {
                        int r = negative_errno();
                        return mk_error_set(e, r, "Failed to create a temporary file for '%s': %s", path,
                                            strerror(-r));
                }
        }
        return mk_error_set(e, -EEXIST, "Failed to create a temporary file for '%s': %s", path, strerror(EEXIST));
}

static int write_all(int fd, const char *data, size_t len) {
        for (size_t done = 0; done < len;) {
                ssize_t n = write(fd, data + done, len - done);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return n < 0 ? negative_errno() : -EIO;
                done += (size_t) n;
        }
        return 0;
}

int mk_write_file_atomic(const char *path, const void *data, size_t len, mode_t mode, struct mk_error *e) {
        /* rename() would replace a device node or a FIFO as well (root writing
         * to /dev/full replaced the device): only a file or a link is replaced. */
        struct stat st;
        if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
                return mk_error_set(e, S_ISDIR(st.st_mode) ? -EISDIR : -EEXIST,
                                    "Failed to write '%s': it exists and is not a regular file", path);
        _cleanup_free_ char *tmp = NULL;
        _cleanup_close_ int fd = open_temp_beside(path, &tmp, e);
        if (fd < 0)
                return fd;
        const char *what = "write";
        int r = write_all(fd, (const char *) data, len);
        if (r >= 0 && fchmod(fd, mode) < 0) {
                r = negative_errno();
                what = "chmod";
        }
        if (r >= 0 && fsync(fd) < 0) {
                r = negative_errno();
                what = "fsync";
        }
        if (r >= 0 && rename(tmp, path) < 0) {
                r = negative_errno();
                what = "rename";
        }
        if (r < 0) {
                (void) unlink(tmp);
                return mk_error_set(e, r, "Failed to write '%s' (%s): %s", path, what, strerror(-r));
        }
        r = mk_fsync_parent_dir(path);
        if (r < 0)
                return mk_error_set(e, r, "Failed to sync the directory of '%s': %s", path, strerror(-r));
        return 0;
}

/* Whether `name` is "<base>.tmp.<pid>.<8 hex>", the exact form of
 * open_temp_beside(): nothing else (a person's "x.tmp.backup") is touched. */
static bool is_temp_of(const char *name, const char *base) {
        size_t n = strlen(base), infix = strlen(MK_TEMP_FILE_INFIX);
        if (!strneq(name, base, n) || !strneq(name + n, MK_TEMP_FILE_INFIX, infix))
                return false;
        const char *s = name + n + infix;
        size_t digits = strspn(s, "0123456789");
        if (digits == 0 || s[digits] != '.')
                return false;
        s += digits + 1;
        return strspn(s, "0123456789abcdef") == 8 && s[8] == 0;
}

static int remove_stale_temps(const char *path) {
        _cleanup_free_ char *dir_copy = strdup(path), *base_copy = strdup(path);
        if (!dir_copy || !base_copy)
                return -ENOMEM;
        const char *base = basename(base_copy);
        DIR *d = opendir(dirname(dir_copy));
        if (!d)
                return negative_errno();
        int removed = 0;
        for (struct dirent *de; (de = readdir(d));)
                if (is_temp_of(de->d_name, base) && unlinkat(dirfd(d), de->d_name, 0) == 0)
                        removed++;
        closedir(d);
        return removed;
}

int mk_lock_for_write(const char *path, int *ret_fd, struct mk_error *e) {
        _cleanup_free_ char *lock = NULL;
        if (asprintf(&lock, "%s.lock", path) < 0)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        _cleanup_close_ int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOCTTY, 0644);
        if (fd < 0) {
                int r = negative_errno();
                return mk_error_set(e, r, "Failed to open the lock file '%s': %s", lock, strerror(-r));
        }
        while (flock(fd, LOCK_EX) < 0)
                if (errno != EINTR) {
                        int r = negative_errno();
                        return mk_error_set(e, r, "Failed to lock '%s': %s", lock, strerror(-r));
                }
        /* Every writer of `path` holds this lock while its temporary file
         * exists, so any temporary file seen now belongs to a dead one. */
        int r = remove_stale_temps(path);
        if (r < 0)
                return mk_error_set(e, r, "Failed to remove the temporary files left beside '%s': %s", path,
                                    strerror(-r));
        *ret_fd = TAKE_FD(fd);
        return r;
}

/* Per-container directories of soft slices (dirs.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "base/error.h"
#include "base/fileio.h"
#include "base/log.h"
#include "base/macro.h"
#include "vgpunode/dirs.h"

#define AREA "vgpu"

static bool uid_valid(const char *uid, size_t len) {
        if (len == 0 || len >= MK_VGPU_UID_MAX)
                return false;
        for (size_t i = 0; i < len; i++) {
                char c = uid[i];
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-'))
                        return false;
        }
        return true;
}

int mk_vgpu_container_dir(const char *root, const char *pod_uid, unsigned index, char **ret) {
        if (!uid_valid(pod_uid, strlen(pod_uid)))
                return -EINVAL;
        char *p = NULL;
        if (asprintf(&p, "%s/" MK_VGPU_CONTAINERS "/%s_%u", root, pod_uid, index) < 0)
                return -ENOMEM;
        *ret = p;
        return 0;
}

int mk_vgpu_container_name_parse(const char *name, char ret_uid[MK_VGPU_UID_MAX], unsigned *ret_index) {
        const char *us = strrchr(name, '_');
        if (!us || !uid_valid(name, (size_t) (us - name)) || !us[1] || strlen(us + 1) > 5)
                return -EINVAL;
        unsigned v = 0;
        for (const char *p = us + 1; *p; p++) {
                if (*p < '0' || *p > '9')
                        return -EINVAL;
                v = v * 10 + (unsigned) (*p - '0');
        }
        if (us[1] == '0' && us[2])
                return -EINVAL;  /* one spelling per index */
        memcpy(ret_uid, name, (size_t) (us - name));
        ret_uid[us - name] = 0;
        *ret_index = v;
        return 0;
}

static json_t *identity_json(const struct mk_vgpu_container *c) {
        json_t *devs = json_array();
        for (size_t i = 0; devs && i < c->n_slices; i++) {
                const struct mk_vgpu_slice *s = &c->slices[i];
                if (json_array_append_new(devs, json_pack("{s:s,s:I,s:I}", "gpu", s->gpu_uuid ? s->gpu_uuid : "",
                                                          "memoryMiB", (json_int_t) s->memory_mib, "cores",
                                                          (json_int_t) s->cores)) < 0) {
                        json_decref(devs);
                        return NULL;
                }
        }
        if (!devs)
                return NULL;
        return json_pack("{s:s,s:s,s:s,s:s,s:I,s:o}", "podUID", c->pod_uid, "namespace", c->namespace, "name", c->name,
                         "container", c->container ? c->container : "", "index", (json_int_t) c->index, "devices",
                         devs);
}

int mk_vgpu_container_prepare(const char *root, const struct mk_vgpu_container *c, char **ret_dir,
                              struct mk_error *e) {
        if (c->n_slices > MK_VGPU_MAX_DEVICES)
                return mk_error_set(e, -E2BIG, "pod %s/%s: %zu soft slices in one container, at most %u",
                                    c->namespace, c->name, c->n_slices, MK_VGPU_MAX_DEVICES);
        _cleanup_free_ char *dir = NULL, *info = NULL, *text = NULL;
        int r = mk_vgpu_container_dir(root, c->pod_uid, c->index, &dir);
        if (r < 0)
                return mk_error_set(e, r, "pod %s/%s: uid '%.64s' cannot name a directory", c->namespace, c->name,
                                    c->pod_uid);
        r = mk_mkdir_parents(dir, 0755, e);
        if (r < 0)
                return r;
        /* Any user of the container creates the region file here; mkdir's
         * mode went through the umask. */
        if (chmod(dir, 0777) < 0) {
                r = -errno;
                return mk_error_set(e, r, "Cannot make '%s' writable by the container: %s", dir, strerror(-r));
        }
        json_t *j = identity_json(c);
        text = j ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
        json_decref(j);
        if (!text || asprintf(&info, "%s" MK_VGPU_INFO_SUFFIX, dir) < 0)
                return mk_error_set(e, -ENOMEM, "out of memory");
        r = mk_write_file_atomic(info, text, strlen(text), 0644, e);
        if (r < 0)
                return r;
        if (ret_dir)
                *ret_dir = TAKE_PTR(dir);
        return 0;
}

int mk_vgpu_preload_file_ensure(const char *root, const char *library, char **ret_path, struct mk_error *e) {
        _cleanup_free_ char *path = NULL, *want = NULL, *have = NULL;
        if (asprintf(&path, "%s/" MK_VGPU_PRELOAD_FILE, root) < 0 || asprintf(&want, "%s\n", library) < 0)
                return mk_error_set(e, -ENOMEM, "out of memory");
        struct mk_error ignored = {0};
        if (mk_read_file(path, 4096, &have, NULL, &ignored) < 0 || !streq(have, want)) {
                int r = mk_mkdir_parents(root, 0755, e);
                if (r >= 0)
                        r = mk_write_file_atomic(path, want, strlen(want), 0644, e);
                if (r < 0)
                        return r;
        }
        if (ret_path)
                *ret_path = TAKE_PTR(path);
        return 0;
}

/* Removes `name` in dirfd: a directory with what it holds (depth levels at
 * most), anything else as a link/file. 0 or -errno. */
static int remove_at(int at, const char *name, unsigned depth) {
        if (unlinkat(at, name, 0) == 0)
                return 0;
        if (errno != EISDIR && errno != EPERM)
                return errno == ENOENT ? 0 : -errno;
        if (depth == 0)
                return -ELOOP;
        int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        DIR *d = fdopendir(fd);
        if (!d) {
                int r = -errno;
                close(fd);
                return r;
        }
        int r = 0;
        for (struct dirent *de; (de = readdir(d));) {
                if (streq(de->d_name, ".") || streq(de->d_name, ".."))
                        continue;
                int q = remove_at(dirfd(d), de->d_name, depth - 1);
                if (q < 0 && r == 0)
                        r = q;
        }
        closedir(d);
        if (r < 0)
                return r;
        return unlinkat(at, name, AT_REMOVEDIR) < 0 && errno != ENOENT ? -errno : 0;
}

static bool is_live(const char *uid, const char *const *live, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (live[i] && streq(live[i], uid))
                        return true;
        return false;
}

int mk_vgpu_containers_open(const char *root, DIR **ret_dir, char **ret_path, struct mk_error *e) {
        _cleanup_free_ char *path = NULL;
        if (asprintf(&path, "%s/" MK_VGPU_CONTAINERS, root) < 0)
                return mk_error_set(e, -ENOMEM, "out of memory");
        DIR *d = opendir(path);
        if (!d) {
                int r = -errno;
                return r == -ENOENT ? 0 : mk_error_set(e, r, "Cannot read '%s': %s", path, strerror(-r));
        }
        *ret_dir = d;
        *ret_path = TAKE_PTR(path);
        return 1;
}

int mk_vgpu_prune(const char *root, const char *const *live, size_t n_live, int64_t now, unsigned min_age_s,
                  unsigned *ret_failed, struct mk_error *e) {
        _cleanup_free_ char *path = NULL;
        DIR *d = NULL;
        int k = mk_vgpu_containers_open(root, &d, &path, e);
        if (k <= 0) {
                if (k == 0 && ret_failed)
                        *ret_failed = 0;
                return k;
        }
        unsigned removed = 0, failed = 0, seen = 0;
        for (struct dirent *de; (de = readdir(d)) && seen < MK_VGPU_MAX_ENTRIES; seen++) {
                char name[256], uid[MK_VGPU_UID_MAX];
                unsigned index;
                snprintf(name, sizeof(name), "%s", de->d_name);
                size_t len = strlen(name), sl = strlen(MK_VGPU_INFO_SUFFIX);
                bool info = len > sl && streq(name + len - sl, MK_VGPU_INFO_SUFFIX);
                if (info)
                        name[len - sl] = 0;
                if (mk_vgpu_container_name_parse(name, uid, &index) < 0 || is_live(uid, live, n_live))
                        continue;
                struct stat st;
                if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue;
                if ((int64_t) st.st_mtime + (int64_t) min_age_s > now)
                        continue;
                int r = remove_at(dirfd(d), de->d_name, MK_VGPU_MAX_DEPTH);
                if (r < 0) {
                        failed++;
                        log_debug_area_errno(AREA, r, "Cannot remove '%s/%s': %m, skipping", path, de->d_name);
                        continue;
                }
                if (!info)
                        removed++;
                log_debug_area(AREA, "Removed '%s/%s' (pod %s is gone)", path, de->d_name, uid);
        }
        closedir(d);
        if (ret_failed)
                *ret_failed = failed;
        return (int) removed;
}

/* The CDI spec file (cdi.h; CDI SPEC.md v0.5.0, k8s-device-plugin v0.16
 * internal/cdi with nvidia-container-toolkit pkg/nvcdi). */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "base/error.h"
#include "base/fileio.h"
#include "base/host.h"
#include "base/macro.h"
#include "plugin/cdi.h"

/* Where nvcdi looks for the driver's libraries and binaries (below the
 * driver root), most specific first: the first hit of a name wins, so a
 * merged /lib -> /usr/lib gives one mount. */
static const char *const lib_dirs[] = {
        "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
        "/lib/x86_64-linux-gnu",     "/lib/aarch64-linux-gnu",     "/lib64",
};
static const char *const bin_dirs[] = {"/usr/bin", "/usr/sbin", "/bin", "/sbin", "/usr/local/bin"};
/* Driver library names: "<prefix>...so.<driver version>" (the driver's own
 * files carry its version; symlinks like libcuda.so.1 are the runtime's
 * ldconfig business, upstream's create-symlinks hook). */
static const char *const lib_prefixes[] = {
        "libnvidia-",  "libcuda.so",        "libcudadebugger.so",     "libnvcuvid.so",       "libnvoptix.so",
        "libGLX_nvidia.so", "libEGL_nvidia.so", "libGLESv1_CM_nvidia.so", "libGLESv2_nvidia.so", "libvdpau_nvidia.so",
};
/* The driver's binaries nvcdi mounts (nvidia-container-toolkit internal/discover). */
static const char *const bin_names[] = {
        "nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server",
};
static const char *const control_nodes[] = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"};

struct host_files {
        char **paths;           /* below the root, "/usr/bin/nvidia-smi" */
        size_t n;
};

static void host_files_done(struct host_files *f) {
        for (size_t i = 0; i < f->n; i++)
                free(f->paths[i]);
        free(f->paths);
        *f = (struct host_files) {0};
}

static const char *base_name(const char *p) {
        const char *s = strrchr(p, '/');
        return s ? s + 1 : p;
}

static bool have_name(const struct host_files *f, const char *name) {
        for (size_t i = 0; i < f->n; i++)
                if (streq(base_name(f->paths[i]), name))
                        return true;
        return false;
}

static int host_files_add(struct host_files *f, const char *dir, const char *name) {
        if (have_name(f, name))
                return 0;
        if (f->n >= MK_CDI_MAX_HOST_FILES)
                return -E2BIG;
        char **m = realloc(f->paths, (f->n + 1) * sizeof(*m));
        if (!m)
                return -ENOMEM;
        f->paths = m;
        if (asprintf(&f->paths[f->n], "%s/%s", dir, name) < 0)
                return -ENOMEM;
        f->n++;
        return 0;
}

static bool is_driver_lib(const char *name, const char *version) {
        size_t n = strlen(name), v = strlen(version);
        if (v == 0 || n <= v + 4 || !streq(name + n - v, version) || !strneq(name + n - v - 4, ".so.", 4))
                return false;
        for (size_t i = 0; i < ELEMENTSOF(lib_prefixes); i++)
                if (strneq(name, lib_prefixes[i], strlen(lib_prefixes[i])))
                        return true;
        return false;
}

static int cmp_str(const void *a, const void *b) {
        return strcmp(*(const char *const *) a, *(const char *const *) b);
}

/* Is root+path a regular file (after symlinks)? */
static bool regular_file(const char *root, const char *path) {
        _cleanup_free_ char *p = NULL;
        struct stat st;
        return mk_path_join(root, path, &p) >= 0 && stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* The driver's libraries (for `version`) and binaries under `root`, sorted. */
static int find_host_files(const char *root, const char *version, struct host_files *ret) {
        _cleanup_(host_files_done) struct host_files f = {0};
        int r = 0;
        for (size_t d = 0; d < ELEMENTSOF(lib_dirs) && r >= 0 && *version; d++) {
                _cleanup_free_ char *dir = NULL;
                if (mk_path_join(root, lib_dirs[d], &dir) < 0)
                        return -ENOMEM;
                DIR *dh = opendir(dir);
                if (!dh)
                        continue;
                /* Names of one directory sorted, so which copy wins never depends on readdir order. */
                _cleanup_(strv_freep) char **names = NULL;
                size_t n = 0;
                struct dirent *de;
                while (r >= 0 && (de = readdir(dh))) {
                        if (!is_driver_lib(de->d_name, version) || !regular_file(dir, de->d_name))
                                continue;
                        if (n >= MK_CDI_MAX_HOST_FILES) {
                                r = -E2BIG;
                                break;
                        }
                        char **m = realloc(names, (n + 2) * sizeof(*m));
                        if (!m) {
                                r = -ENOMEM;
                                break;
                        }
                        names = m;
                        names[n] = strdup(de->d_name);
                        names[n + 1] = NULL;
                        if (!names[n])
                                r = -ENOMEM;
                        else
                                n++;
                }
                closedir(dh);
                if (names)
                        qsort(names, n, sizeof(*names), cmp_str);
                for (size_t i = 0; i < n && r >= 0; i++)
                        r = host_files_add(&f, lib_dirs[d], names[i]);
        }
        for (size_t b = 0; b < ELEMENTSOF(bin_names) && r >= 0; b++)
                for (size_t d = 0; d < ELEMENTSOF(bin_dirs); d++) {
                        _cleanup_free_ char *rel = NULL;
                        if (asprintf(&rel, "%s/%s", bin_dirs[d], bin_names[b]) < 0)
                                return -ENOMEM;
                        if (regular_file(root, rel)) {
                                r = host_files_add(&f, bin_dirs[d], bin_names[b]);
                                break;
                        }
                }
        if (r < 0)
                return r;
        if (f.n)
                qsort(f.paths, f.n, sizeof(*f.paths), cmp_str);
        *ret = f;
        f = (struct host_files) {0};
        return 0;
}

/* {"path": p, "hostPath": <dev_root>p} appended to arr. */
static int add_node(json_t *arr, const char *dev_root, const char *path) {
        _cleanup_free_ char *host = NULL;
        if (mk_path_join(dev_root, path, &host) < 0)
                return -ENOMEM;
        return json_array_append_new(arr, json_pack("{s:s,s:s}", "path", path, "hostPath", host)) < 0 ? -ENOMEM : 0;
}

/* One CDI device `name` with the nodes of d. */
static int add_device(json_t *devices, const char *name, const struct mk_dp_device *d, const char *dev_root) {
        json_t *nodes = json_array();
        json_t *dev = json_pack("{s:s,s:{s:o}}", "name", name, "containerEdits", "deviceNodes", nodes);
        if (!dev)
                return -ENOMEM;
        char path[64];
        snprintf(path, sizeof(path), "/dev/nvidia%u", d->minor);
        int r = add_node(nodes, dev_root, path);
        if (r >= 0 && d->mig) {
                snprintf(path, sizeof(path), "/dev/nvidia-caps/nvidia-cap%d", d->gi_cap);
                r = add_node(nodes, dev_root, path);
                snprintf(path, sizeof(path), "/dev/nvidia-caps/nvidia-cap%d", d->ci_cap);
                if (r >= 0)
                        r = add_node(nodes, dev_root, path);
        }
        if (r >= 0 && json_array_append(devices, dev) < 0)
                r = -ENOMEM;
        json_decref(dev);
        return r;
}

int mk_cdi_spec_path(const char *dir, const char *kind, char **ret) {
        const char *k = kind && *kind ? kind : MK_CDI_DEFAULT_KIND;
        const char *slash = strchr(k, '/');
        if (!slash || slash == k || !slash[1] || strchr(slash + 1, '/'))
                return -EINVAL;
        _cleanup_free_ char *name = NULL;
        if (asprintf(&name, "%.*s-%s.json", (int) (slash - k), k, slash + 1) < 0)
                return -ENOMEM;
        return mk_path_join(dir, name, ret);
}

int mk_cdi_spec_render(const struct mk_snapshot *s, const struct mk_dp_options *o, char **ret_text,
                       struct mk_cdi_stats *ret_stats, struct mk_error *e) {
        const char *kind = o->cdi_kind && *o->cdi_kind ? o->cdi_kind : MK_CDI_DEFAULT_KIND;
        const char *slash = strchr(kind, '/');
        if (!slash || slash == kind || !slash[1] || strchr(slash + 1, '/'))
                return mk_error_set(e, -EINVAL, "CDI kind '%s' is not <vendor>/<class>", kind);
        const char *driver_root = o->driver_root && *o->driver_root ? o->driver_root : "/";
        const char *dev_root = o->dev_root && *o->dev_root ? o->dev_root : driver_root;

        _cleanup_free_ struct mk_dp_device *devs = NULL;
        size_t n = 0;
        int r = mk_dp_all_devices(s, o->host, &devs, &n, e);
        if (r < 0)
                return r;
        _cleanup_(host_files_done) struct host_files files = {0};
        r = find_host_files(driver_root, s->driver_version, &files);
        if (r < 0)
                return mk_error_set(e, r, r == -E2BIG ? "More than %u driver files under '%s'" : "Out of memory",
                                    MK_CDI_MAX_HOST_FILES, driver_root);

        struct mk_cdi_stats st = {.mounts = files.n};
        _cleanup_(json_decrefp) json_t *spec = json_object();
        json_t *devices = json_array(), *nodes = json_array(), *mounts = json_array();
        json_t *env = json_pack("[s]", "NVIDIA_VISIBLE_DEVICES=void");
        json_t *edits = json_pack("{s:o,s:o,s:o}", "env", env, "deviceNodes", nodes, "mounts", mounts);
        if (!spec || !devices || !edits || json_object_set_new(spec, "cdiVersion", json_string(MK_CDI_SPEC_VERSION)) < 0 ||
            json_object_set_new(spec, "kind", json_string(kind)) < 0 || json_object_set_new(spec, "devices", devices) < 0 ||
            json_object_set_new(spec, "containerEdits", edits) < 0)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        for (size_t i = 0; i < n && r >= 0; i++) {
                const struct mk_dp_device *d = &devs[i];
                if (d->mig && (d->gi_cap < 0 || d->ci_cap < 0)) {
                        st.mig_without_caps++;
                        continue;
                }
                r = add_device(devices, d->base_id, d, dev_root);
                if (r >= 0)
                        r = add_device(devices, d->index, d, dev_root);
                st.devices += 2;
        }
        for (size_t i = 0; i < ELEMENTSOF(control_nodes) && r >= 0; i++) {
                char path[64];
                snprintf(path, sizeof(path), "/dev/%s", control_nodes[i]);
                _cleanup_free_ char *host = NULL;
                struct stat sb;
                if (mk_path_join(dev_root, path, &host) < 0)
                        r = -ENOMEM;
                else if (stat(host, &sb) == 0)
                        r = add_node(nodes, dev_root, path);
        }
        for (size_t i = 0; i < files.n && r >= 0; i++) {
                _cleanup_free_ char *host = NULL;
                if (mk_path_join(driver_root, files.paths[i], &host) < 0) {
                        r = -ENOMEM;
                        break;
                }
                json_t *m = json_pack("{s:s,s:s,s:[ssss]}", "hostPath", host, "containerPath", files.paths[i],
                                      "options", "ro", "nosuid", "nodev", "bind");
                if (json_array_append_new(mounts, m) < 0)
                        r = -ENOMEM;
        }
        if (r < 0)
                return mk_error_set(e, r, "Out of memory");
        char *text = json_dumps(spec, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (!text)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        *ret_text = text;
        if (ret_stats)
                *ret_stats = st;
        return 0;
}

int mk_cdi_spec_write(const char *path, const char *text, struct mk_error *e) {
        _cleanup_free_ char *dir = strdup(path);
        if (!dir)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        char *slash = strrchr(dir, '/');
        if (slash && slash != dir) {
                *slash = 0;
                int r = mk_mkdir_parents(dir, 0755, e);
                if (r < 0)
                        return r;
        }
        return mk_write_file_atomic(path, text, strlen(text), 0644, e);
}

struct mk_cdi_file {
        char *path;
        char *text;             /* what was written last; NULL: nothing yet */
        pthread_mutex_t lock;
};

int mk_cdi_file_new(const char *dir, const char *kind, struct mk_cdi_file **ret, struct mk_error *e) {
        _cleanup_free_ struct mk_cdi_file *f = calloc(1, sizeof(*f));
        if (!f)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        int r = mk_cdi_spec_path(dir && *dir ? dir : MK_CDI_DEFAULT_SPEC_DIR, kind, &f->path);
        if (r < 0)
                return mk_error_set(e, r, r == -EINVAL ? "CDI kind '%s' is not <vendor>/<class>" : "Out of memory",
                                    kind ? kind : "");
        pthread_mutex_init(&f->lock, NULL);
        *ret = TAKE_PTR(f);
        return 0;
}

const char *mk_cdi_file_path(const struct mk_cdi_file *f) {
        return f->path;
}

int mk_cdi_file_update(struct mk_cdi_file *f, const struct mk_snapshot *s, const struct mk_dp_options *o,
                       struct mk_cdi_stats *ret_stats, struct mk_error *e) {
        _cleanup_free_ char *text = NULL;
        int r = mk_cdi_spec_render(s, o, &text, ret_stats, e);
        if (r < 0)
                return r;
        pthread_mutex_lock(&f->lock);
        if (f->text && streq(f->text, text))
                r = 0;
        else if ((r = mk_cdi_spec_write(f->path, text, e)) >= 0) {
                free(f->text);
                f->text = TAKE_PTR(text);
                r = 1;
        }
        pthread_mutex_unlock(&f->lock);
        return r;
}

struct mk_cdi_file *mk_cdi_file_free(struct mk_cdi_file *f, int *ret_error) {
        int r = 0;
        if (f) {
                if (f->text && unlink(f->path) < 0 && errno != ENOENT)
                        r = -errno;
                pthread_mutex_destroy(&f->lock);
                free(f->text);
                free(f->path);
                free(f);
        }
        if (ret_error)
                *ret_error = r;
        return NULL;
}

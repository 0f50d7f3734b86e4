/* The soft slice monitor (monitor.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/fileio.h"
#include "base/log.h"
#include "base/macro.h"
#include "base/prom.h"
#include "vgpu/region.h"
#include "vgpunode/dirs.h"
#include "vgpunode/monitor.h"

#define AREA "vgpu"

/* One device of one container. */
struct row {
        char *labels;                   /* podnamespace="…",…,deviceuuid="…" */
        uint64_t used, limit;           /* limit: VGPU_UNLIMITED for none */
        unsigned sm;
        uint64_t admitted_ns;
};

struct ctr {
        char *labels;                   /* podnamespace, podname, ctrname, poduid */
        unsigned procs;
};

struct scan {
        struct row *rows;
        size_t n_rows;
        struct ctr *ctrs;
        size_t n_ctrs;
        unsigned unreadable;
};

static void scan_done(struct scan *s) {
        for (size_t i = 0; i < s->n_rows; i++)
                free(s->rows[i].labels);
        for (size_t i = 0; i < s->n_ctrs; i++)
                free(s->ctrs[i].labels);
        free(s->rows);
        free(s->ctrs);
}

/* A label: valid UTF-8 and escaped, whatever the region or identity file holds (base/prom.h). */
static int put_label(struct mk_buf *b, const char *key, const char *v, bool first) {
        return mk_prom_label(b, key, v, first);
}

static const char *jstr(const json_t *o, const char *key) {
        const char *s = json_string_value(json_object_get(o, key));
        return s ? s : "";
}

/* The identity file of container directory `name` (NULL when unreadable). */
static json_t *read_identity(const char *containers, const char *name) {
        _cleanup_free_ char *path = NULL, *data = NULL;
        size_t len = 0;
        struct mk_error e = {0};
        if (asprintf(&path, "%s/%s" MK_VGPU_INFO_SUFFIX, containers, name) < 0 ||
            mk_read_file(path, MK_VGPU_MAX_INFO_BYTES, &data, &len, &e) < 0)
                return NULL;
        json_t *j = json_loadb(data, len, 0, NULL);
        if (!json_is_object(j)) {
                json_decref(j);
                return NULL;
        }
        return j;
}

/* Reads <containers>/<name>/<region file> into a malloc'd copy: 1 and
 * *ret, 0 when there is none, -EPROTO/-errno when it is not a region of
 * ours. A copy, not a mapping: the container owns the file and could
 * truncate it under a mapping (SIGBUS in the agent); a copy read while
 * processes charge is what a scrape sees at one moment per counter. */
static int read_region(int containers_fd, const char *name, struct vgpu_region **ret) {
        _cleanup_close_ int dfd = openat(containers_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd < 0)
                return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
        /* The container owns this directory: no symlink is followed, no FIFO opened blocking. */
        _cleanup_close_ int fd = openat(dfd, MK_VGPU_REGION_FILE, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0)
                return errno == ENOENT ? 0 : -errno;
        struct stat st;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode) || (uint64_t) st.st_size != sizeof(struct vgpu_region))
                return -EPROTO;
        _cleanup_free_ struct vgpu_region *m = malloc(sizeof(*m));
        if (!m)
                return -ENOMEM;
        size_t got = 0;
        while (got < sizeof(*m)) {
                ssize_t n = pread(fd, (char *) m + got, sizeof(*m) - got, (off_t) got);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return n < 0 ? -errno : -EPROTO;  /* truncated meanwhile */
                got += (size_t) n;
        }
        char err[256];
        if (vgpu_region_validate(m, sizeof(*m), err, sizeof(err)) < 0)
                return -EPROTO;
        *ret = TAKE_PTR(m);
        return 1;
}

static int push(void **arr, size_t *n, size_t size, const void *item) {
        void *m = realloc(*arr, (*n + 1) * size);
        if (!m)
                return -ENOMEM;
        *arr = m;
        memcpy((char *) m + *n * size, item, size);
        (*n)++;
        return 0;
}

/* The rows of one container's region. */
static int scan_one(struct scan *s, const struct vgpu_region *reg, const json_t *id, const char *uid) {
        const json_t *devs = json_object_get(id, "devices");
        _cleanup_buf_done_ struct mk_buf b;
        mk_buf_init(&b, 4096);
        int r = put_label(&b, "podnamespace", jstr(id, "namespace"), true);
        if (r >= 0)
                r = put_label(&b, "podname", jstr(id, "name"), false);
        if (r >= 0)
                r = put_label(&b, "ctrname", jstr(id, "container"), false);
        if (r >= 0)
                r = put_label(&b, "poduid", uid, false);
        if (r < 0)
                return r;
        struct ctr c = {.labels = strdup(mk_buf_str(&b))};
        unsigned hwm = MIN(atomic_load(&((struct vgpu_region *) reg)->slot_hwm), (unsigned) VGPU_MAX_SLOTS);
        for (unsigned i = 0; i < hwm; i++) {
                uint64_t o = atomic_load(&((struct vgpu_region *) reg)->slots[i].owner);
                if (o && VGPU_OWNER_STATE(o) == VGPU_OWNER_LIVE)
                        c.procs++;
        }
        if (!c.labels || push((void **) &s->ctrs, &s->n_ctrs, sizeof(c), &c) < 0) {
                free(c.labels);
                return -ENOMEM;
        }
        size_t base = b.len;
        for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++) {
                struct row w = {
                        .used = vgpu_region_used(reg, d),
                        .limit = reg->mem_limit[d],
                        .sm = reg->sm_limit[d],
                        .admitted_ns = atomic_load(&((struct vgpu_region *) reg)->share[d].admitted_ns),
                };
                bool known = atomic_load(&((struct vgpu_region *) reg)->uuid_set[d]) != 0;
                if (!known && d >= json_array_size(devs) && w.limit == VGPU_UNLIMITED && w.sm >= 100 && w.used == 0)
                        continue;
                char uuid[VGPU_UUID_LEN + 1] = "";
                if (known)
                        snprintf(uuid, sizeof(uuid), "%.*s", VGPU_UUID_LEN, reg->uuid[d]);
                else
                        snprintf(uuid, sizeof(uuid), "%s", jstr(json_array_get(devs, d), "gpu"));
                char vdev[16];
                snprintf(vdev, sizeof(vdev), "%u", d);
                b.len = base;
                r = put_label(&b, "vdeviceid", vdev, false);
                if (r >= 0)
                        r = put_label(&b, "deviceuuid", uuid, false);
                if (r < 0)
                        return r;
                w.labels = strdup(mk_buf_str(&b));
                if (!w.labels || push((void **) &s->rows, &s->n_rows, sizeof(w), &w) < 0) {
                        free(w.labels);
                        return -ENOMEM;
                }
        }
        return 0;
}

static int scan_root(const char *root, struct scan *s, struct mk_error *e) {
        _cleanup_free_ char *containers = NULL;
        DIR *dir = NULL;
        int r = mk_vgpu_containers_open(root, &dir, &containers, e);
        if (r <= 0)
                return r;
        unsigned seen = 0;
        for (struct dirent *de; r >= 0 && (de = readdir(dir)) && seen < MK_VGPU_MAX_ENTRIES; seen++) {
                char uid[MK_VGPU_UID_MAX];
                unsigned index;
                if (mk_vgpu_container_name_parse(de->d_name, uid, &index) < 0)
                        continue;
                struct vgpu_region *reg = NULL;
                int q = read_region(dirfd(dir), de->d_name, &reg);
                if (q < 0) {
                        s->unreadable++;
                        log_debug_area_errno(AREA, q, "Region of '%s/%s' skipped: %m", containers, de->d_name);
                }
                if (q <= 0)
                        continue;
                json_t *id = read_identity(containers, de->d_name);
                r = scan_one(s, reg, id, uid);
                json_decref(id);
                free(reg);
        }
        closedir(dir);
        return r < 0 ? mk_error_set(e, r, "out of memory") : 0;
}

/* The per-device families, in the order written. */
enum row_metric { M_USED, M_LIMIT, M_DESC, M_SM, M_ADMITTED, _M_MAX };
static const struct {
        const char *name, *type, *help;
} row_families[_M_MAX] = {
        [M_USED] = {"vGPU_device_memory_usage_in_bytes", "gauge",
                    "GPU memory the container's processes hold on the device (bytes, libmigkit-vgpu's accounting)"},
        [M_LIMIT] = {"vGPU_device_memory_limit_in_bytes", "gauge",
                     "The container's memory cap on the device (bytes; absent: no cap)"},
        [M_DESC] = {"Device_memory_desc_of_container", "gauge",
                    "The container's device memory by kind as HAMi's labels (only data is charged here)"},
        [M_SM] = {"migkit_vgpu_device_core_limit_percent", "gauge",
                  "The container's compute share of the device (percent; 100: none)"},
        [M_ADMITTED] = {"migkit_vgpu_device_admitted_gpu_seconds_total", "counter",
                        "Estimated GPU time of the kernel launches the compute share admitted (seconds)"},
};

static int emit_row(struct mk_buf *b, enum row_metric m, const struct row *w) {
        const char *n = row_families[m].name;
        switch (m) {
        case M_USED:
                return mk_buf_printf(b, "%s{%s} %llu\n", n, w->labels, (unsigned long long) w->used);
        case M_LIMIT:
                return w->limit == VGPU_UNLIMITED
                               ? 0
                               : mk_buf_printf(b, "%s{%s} %llu\n", n, w->labels, (unsigned long long) w->limit);
        case M_DESC:
                return mk_buf_printf(b, "%s{%s,context=\"0\",module=\"0\",data=\"%llu\",offset=\"0\"} %llu\n", n,
                                     w->labels, (unsigned long long) w->used, (unsigned long long) w->used);
        case M_SM:
                return mk_buf_printf(b, "%s{%s} %u\n", n, w->labels, w->sm);
        default:
                return mk_buf_printf(b, "%s{%s} %.6f\n", n, w->labels, (double) w->admitted_ns / 1e9);
        }
}

static int family(struct mk_buf *b, const char *name, const char *type, const char *help) {
        return mk_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static int emit(const struct scan *s, struct mk_buf *b) {
        int r = 0;
        for (int m = 0; r >= 0 && m < _M_MAX; m++) {
                r = family(b, row_families[m].name, row_families[m].type, row_families[m].help);
                for (size_t i = 0; r >= 0 && i < s->n_rows; i++)
                        r = emit_row(b, (enum row_metric) m, &s->rows[i]);
        }
        if (r >= 0)
                r = family(b, "migkit_vgpu_container_processes", "gauge",
                           "Processes holding a slot of the container's region");
        for (size_t i = 0; r >= 0 && i < s->n_ctrs; i++)
                r = mk_buf_printf(b, "migkit_vgpu_container_processes{%s} %u\n", s->ctrs[i].labels, s->ctrs[i].procs);
        if (r >= 0)
                r = family(b, "migkit_vgpu_regions_unreadable", "gauge",
                           "Container directories whose region file is not libmigkit-vgpu's or cannot be read");
        if (r >= 0)
                r = mk_buf_printf(b, "migkit_vgpu_regions_unreadable %u\n", s->unreadable);
        return r;
}

int mk_vgpu_metrics(const char *root, struct mk_buf *b, struct mk_error *e) {
        struct scan s = {0};
        int r = scan_root(root, &s, e);
        if (r >= 0) {
                r = emit(&s, b);
                if (r < 0)
                        r = mk_error_set(e, r, r == -E2BIG ? "metrics larger than the cap" : "out of memory");
        }
        scan_done(&s);
        return r;
}

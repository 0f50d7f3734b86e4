/* The soft slice monitor (monitor.h). */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <microhttpd.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/fileio.h"
#include "base/log.h"
#include "base/macro.h"
#include "base/parse.h"
#include "vgpu/region.h"
#include "vgpunode/dirs.h"
#include "vgpunode/monitor.h"

#define AREA "vgpu"
#define MAX_METRICS_BYTES (64u << 20)   /* one /metrics answer */

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

/* A label value with Prometheus text escapes (\\, \", \n). */
static int put_label(struct mk_buf *b, const char *key, const char *v, bool first) {
        int r = mk_buf_printf(b, "%s%s=\"", first ? "" : ",", key);
        for (const char *p = v; r >= 0 && *p; p++)
                r = *p == '\\' ? mk_buf_puts(b, "\\\\")
                    : *p == '"' ? mk_buf_puts(b, "\\\"")
                    : *p == '\n' ? mk_buf_puts(b, "\\n")
                                 : mk_buf_putc(b, *p);
        return r < 0 ? r : mk_buf_putc(b, '"');
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

/* Maps <containers>/<name>/<region file> read-only: 1 and *ret, 0 when
 * there is none, -EPROTO/-errno when it is not a region of ours. */
static int map_region(int containers_fd, const char *name, const struct vgpu_region **ret) {
        _cleanup_close_ int dfd = openat(containers_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd < 0)
                return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
        /* The container owns this directory: no symlink is followed. */
        _cleanup_close_ int fd = openat(dfd, MK_VGPU_REGION_FILE, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0)
                return errno == ENOENT ? 0 : -errno;
        struct stat st;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode) || (uint64_t) st.st_size != sizeof(struct vgpu_region))
                return -EPROTO;
        void *m = mmap(NULL, sizeof(struct vgpu_region), PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED)
                return -errno;
        char err[256];
        if (vgpu_region_validate(m, (uint64_t) st.st_size, err, sizeof(err)) < 0) {
                munmap(m, sizeof(struct vgpu_region));
                return -EPROTO;
        }
        *ret = m;
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
        if (asprintf(&containers, "%s/" MK_VGPU_CONTAINERS, root) < 0)
                return mk_error_set(e, -ENOMEM, "out of memory");
        DIR *dir = opendir(containers);
        if (!dir) {
                int r = -errno;
                return r == -ENOENT ? 0 : mk_error_set(e, r, "Cannot read '%s': %s", containers, strerror(-r));
        }
        int r = 0;
        unsigned seen = 0;
        for (struct dirent *de; r >= 0 && (de = readdir(dir)) && seen < MK_VGPU_MAX_ENTRIES; seen++) {
                char uid[MK_VGPU_UID_MAX];
                unsigned index;
                if (mk_vgpu_container_name_parse(de->d_name, uid, &index) < 0)
                        continue;
                const struct vgpu_region *reg = NULL;
                int q = map_region(dirfd(dir), de->d_name, &reg);
                if (q < 0) {
                        s->unreadable++;
                        log_debug_area_errno(AREA, q, "Region of '%s/%s' skipped: %m", containers, de->d_name);
                }
                if (q <= 0)
                        continue;
                json_t *id = read_identity(containers, de->d_name);
                r = scan_one(s, reg, id, uid);
                json_decref(id);
                munmap((void *) reg, sizeof(*reg));
        }
        closedir(dir);
        return r < 0 ? mk_error_set(e, r, "out of memory") : 0;
}

static int family(struct mk_buf *b, const char *name, const char *type, const char *help) {
        return mk_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static int emit(const struct scan *s, struct mk_buf *b) {
        int r = family(b, "vGPU_device_memory_usage_in_bytes", "gauge",
                       "GPU memory the container's processes hold on the device (bytes, libmigkit-vgpu's accounting)");
        for (size_t i = 0; r >= 0 && i < s->n_rows; i++)
                r = mk_buf_printf(b, "vGPU_device_memory_usage_in_bytes{%s} %llu\n", s->rows[i].labels,
                                  (unsigned long long) s->rows[i].used);
        if (r >= 0)
                r = family(b, "vGPU_device_memory_limit_in_bytes", "gauge",
                           "The container's memory cap on the device (bytes; absent: no cap)");
        for (size_t i = 0; r >= 0 && i < s->n_rows; i++)
                if (s->rows[i].limit != VGPU_UNLIMITED)
                        r = mk_buf_printf(b, "vGPU_device_memory_limit_in_bytes{%s} %llu\n", s->rows[i].labels,
                                          (unsigned long long) s->rows[i].limit);
        if (r >= 0)
                r = family(b, "Device_memory_desc_of_container", "gauge",
                           "The container's device memory by kind as HAMi's labels (only data is charged here)");
        for (size_t i = 0; r >= 0 && i < s->n_rows; i++)
                r = mk_buf_printf(b,
                                  "Device_memory_desc_of_container{%s,context=\"0\",module=\"0\",data=\"%llu\","
                                  "offset=\"0\"} %llu\n",
                                  s->rows[i].labels, (unsigned long long) s->rows[i].used,
                                  (unsigned long long) s->rows[i].used);
        if (r >= 0)
                r = family(b, "migkit_vgpu_device_core_limit_percent", "gauge",
                           "The container's compute share of the device (percent; 100: none)");
        for (size_t i = 0; r >= 0 && i < s->n_rows; i++)
                r = mk_buf_printf(b, "migkit_vgpu_device_core_limit_percent{%s} %u\n", s->rows[i].labels,
                                  s->rows[i].sm);
        if (r >= 0)
                r = family(b, "migkit_vgpu_device_admitted_gpu_seconds_total", "counter",
                           "Estimated GPU time of the kernel launches the compute share admitted (seconds)");
        for (size_t i = 0; r >= 0 && i < s->n_rows; i++)
                r = mk_buf_printf(b, "migkit_vgpu_device_admitted_gpu_seconds_total{%s} %.6f\n", s->rows[i].labels,
                                  (double) s->rows[i].admitted_ns / 1e9);
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

/* --- HTTP --- */

struct mk_vgpu_monitor {
        struct MHD_Daemon *mhd;
        char *root;
        unsigned port;
};

static enum MHD_Result respond(struct MHD_Connection *conn, unsigned status, const char *type, char *text) {
        if (!text)
                return MHD_NO;
        struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
        if (!resp) {
                free(text);
                return MHD_NO;
        }
        MHD_add_response_header(resp, "Content-Type", type);
        enum MHD_Result ret = MHD_queue_response(conn, status, resp);
        MHD_destroy_response(resp);
        return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
        struct mk_vgpu_monitor *m = cls;
        (void) version;
        (void) upload_data;
        (void) upload_data_size;
        (void) con_cls;
        if (!streq(method, "GET"))
                return respond(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain", strdup("use GET\n"));
        if (streq(url, "/healthz"))
                return respond(conn, MHD_HTTP_OK, "text/plain", strdup("ok\n"));
        if (!streq(url, "/metrics"))
                return respond(conn, MHD_HTTP_NOT_FOUND, "text/plain", strdup("not found\n"));
        struct mk_buf b;
        mk_buf_init(&b, MAX_METRICS_BYTES);
        struct mk_error e = {0};
        if (mk_vgpu_metrics(m->root, &b, &e) < 0) {
                mk_buf_done(&b);
                char *msg = NULL;
                if (asprintf(&msg, "%s\n", e.msg) < 0)
                        msg = NULL;
                return respond(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "text/plain", msg);
        }
        char *text = mk_buf_take(&b);
        mk_buf_done(&b);
        return respond(conn, MHD_HTTP_OK, "text/plain; version=0.0.4", text ? text : strdup(""));
}

int mk_vgpu_monitor_start(const char *address, const char *root, struct mk_vgpu_monitor **ret, struct mk_error *e) {
        const char *colon = strrchr(address, ':');
        char host[64];
        uint32_t port;
        struct sockaddr_in sa = {.sin_family = AF_INET};
        if (!colon || (size_t) (colon - address) >= sizeof(host) || mk_parse_u32(colon + 1, &port) < 0 || port > 65535)
                return mk_error_set(e, -EINVAL, "metrics address '%.128s': not HOST:PORT", address);
        memcpy(host, address, (size_t) (colon - address));
        host[colon - address] = 0;
        if (inet_pton(AF_INET, *host ? host : "0.0.0.0", &sa.sin_addr) != 1)
                return mk_error_set(e, -EINVAL, "metrics address '%.128s': not an IPv4 address", address);
        sa.sin_port = htons((uint16_t) port);
        struct mk_vgpu_monitor *m = calloc(1, sizeof(*m));
        if (!m || !(m->root = strdup(root))) {
                free(m);
                return mk_error_set(e, -ENOMEM, "out of memory");
        }
        m->mhd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL, on_request, m,
                                  MHD_OPTION_SOCK_ADDR, (struct sockaddr *) &sa, MHD_OPTION_CONNECTION_TIMEOUT,
                                  (unsigned) 30, MHD_OPTION_END);
        if (!m->mhd) {
                mk_vgpu_monitor_stop(m);
                return mk_error_set(e, -EADDRINUSE, "cannot listen on '%.128s'", address);
        }
        const union MHD_DaemonInfo *info = MHD_get_daemon_info(m->mhd, MHD_DAEMON_INFO_BIND_PORT);
        m->port = info ? info->port : (unsigned) port;
        *ret = m;
        return 0;
}

unsigned mk_vgpu_monitor_port(const struct mk_vgpu_monitor *m) {
        return m->port;
}

struct mk_vgpu_monitor *mk_vgpu_monitor_stop(struct mk_vgpu_monitor *m) {
        if (!m)
                return NULL;
        if (m->mhd)
                MHD_stop_daemon(m->mhd);
        free(m->root);
        free(m);
        return NULL;
}

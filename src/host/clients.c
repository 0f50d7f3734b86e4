/* GPU clients: the lists, their files, stop and restart (clients.h). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/dynbuf.h"
#include "base/fileio.h"
#include "base/log.h"
#include "base/macro.h"
#include "base/spawn.h"
#include "host/clients.h"
#include "spec/yaml.h"

#define MK_CLIENT_MSG_OUTPUT_CAP (16u * 1024) /* output kept for messages */
#define MK_CTR_NAMESPACE "k8s.io"             /* where kubelet's containerd containers live */

/* Driver clients and Kubernetes components, in the order they start; they
 * are stopped in reverse (kubelet first). mig-parted's hooks.sh lists and the
 * operator's default-gpu-clients (mig-parted v0.15.0 deployments/systemd/hooks.sh and cmd/nvidia-mig-manager). */
const char *const mk_gpu_clients_default_units[] = {
        "nvsm.service",
        "nvsm-mqtt.service",
        "nvsm-core.service",
        "nvsm-api-gateway.service",
        "nvsm-notifier.service",
        "nv_peer_mem.service",
        "nvidia-dcgm.service",
        "dcgm.service",
        "dcgm-exporter.service",
        "kubelet.service",
        NULL,
};

const char *const mk_gpu_clients_default_images[] = {
        "k8s-device-plugin",
        "gpu-feature-discovery",
        "dcgm-exporter",
        NULL,
};

static char **strv_copy(const char *const *l, size_t *ret_n) {
        size_t n = 0;
        while (l[n])
                n++;
        _cleanup_strv_free_ char **c = calloc(n + 1, sizeof(char *));
        if (!c)
                return NULL;
        for (size_t i = 0; i < n; i++) {
                c[i] = strdup(l[i]);
                if (!c[i])
                        return NULL;
        }
        *ret_n = n;
        return TAKE_PTR(c);
}

bool mk_unit_name_valid(const char *s) {
        static const char *const types[] = {".service", ".socket", ".device", ".mount", ".automount", ".swap",
                                            ".target",  ".path",   ".timer",  ".slice", ".scope"};
        size_t n = strlen(s);
        if (n == 0 || n > MK_MAX_CLIENT_NAME || s[0] == '-' || s[0] == '.')
                return false;
        for (const char *p = s; *p; p++)
                if (!strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789:_.\\@-", *p))
                        return false;
        for (size_t i = 0; i < ELEMENTSOF(types); i++) {
                size_t k = strlen(types[i]);
                if (n > k && streq(s + n - k, types[i]))
                        return true;
        }
        return false;
}

bool mk_image_name_valid(const char *s) {
        size_t n = strlen(s);
        if (n == 0 || n > MK_MAX_CLIENT_NAME || s[0] == '-')
                return false;
        for (const unsigned char *p = (const unsigned char *) s; *p; p++)
                if (*p <= ' ' || *p >= 0x7f)
                        return false;
        return true;
}

int mk_gpu_clients_parse_list(struct mk_yaml_ctx *c, const struct mk_yaml_node *n, bool units, char ***ret,
                              size_t *ret_n) {
        struct mk_yaml_scalar v;
        int r = mk_yaml_resolve(c, n, &v);
        if (r < 0)
                return r;
        size_t count = 0;
        if (v.type == MK_YAML_SEQ)
                count = n->n_items;
        else if (v.type != MK_YAML_NULL)
                return mk_yaml_error(c, n, "must be a list of %s names, not %s", units ? "systemd unit" : "image",
                                     mk_yaml_type_json(v.type));
        if (count > MK_MAX_GPU_CLIENTS)
                return mk_yaml_error(c, n, "too many entries (at most %d)", MK_MAX_GPU_CLIENTS);
        _cleanup_strv_free_ char **l = calloc(count + 1, sizeof(char *));
        if (!l)
                return mk_yaml_error_code(c, -ENOMEM, n, "out of memory");
        for (size_t i = 0; i < count; i++) {
                const struct mk_yaml_node *it = n->items[i];
                size_t old = mk_yaml_path_push_index(c, i);
                r = mk_yaml_get_str(c, it, units ? "a unit name" : "an image name", &l[i]);
                if (r < 0)
                        return r;
                if (strlen(l[i]) > MK_MAX_CLIENT_NAME)
                        return mk_yaml_error(c, it, "name too long (at most %d bytes)", MK_MAX_CLIENT_NAME);
                if (units && !mk_unit_name_valid(l[i]))
                        return mk_yaml_error(c, it,
                                             "invalid systemd unit name '%s' (want NAME.TYPE such as "
                                             "'kubelet.service')",
                                             l[i]);
                if (!units && !mk_image_name_valid(l[i]))
                        return mk_yaml_error(c, it, "invalid image name '%s'", l[i]);
                for (size_t k = 0; k < i; k++)
                        if (streq(l[k], l[i]))
                                return mk_yaml_error(c, it, "'%s' is listed twice", l[i]);
                mk_yaml_path_pop(c, old);
        }
        *ret = TAKE_PTR(l);
        *ret_n = count;
        return 0;
}


void mk_gpu_clients_done(struct mk_gpu_clients *c) {
        if (!c)
                return;
        strv_free(c->systemd_services);
        strv_free(c->container_images);
        *c = (struct mk_gpu_clients){0};
}

int mk_gpu_clients_init_default(struct mk_gpu_clients *ret) {
        _cleanup_(mk_gpu_clients_done) struct mk_gpu_clients c = {
                .stop_timeout_ms = MK_CLIENTS_DEFAULT_STOP_MS,
                .start_timeout_ms = MK_CLIENTS_DEFAULT_START_MS,
        };
        c.systemd_services = strv_copy(mk_gpu_clients_default_units, &c.n_systemd_services);
        c.container_images = strv_copy(mk_gpu_clients_default_images, &c.n_container_images);
        if (!c.systemd_services || !c.container_images)
                return -ENOMEM;
        *ret = c;
        c = (struct mk_gpu_clients){0};
        return 0;
}

/* The document into *userdata (a struct mk_gpu_clients). */
static int clients_file_walk(struct mk_yaml_ctx *c, const struct mk_yaml_node *root, void *userdata) {
        _cleanup_(mk_gpu_clients_done) struct mk_gpu_clients g = {
                .stop_timeout_ms = MK_CLIENTS_DEFAULT_STOP_MS,
                .start_timeout_ms = MK_CLIENTS_DEFAULT_START_MS,
        };
        const struct mk_yaml_node *units = NULL;
        _cleanup_yaml_map_done_ struct mk_yaml_map m = {0};
        if (root && root->kind == MK_YAML_MAPPING) {
                int r = mk_yaml_map_load(c, root, &m);
                if (r < 0)
                        return r;
                for (size_t i = 0; i < m.n; i++)
                        if (streq(m.pairs[i].name, "systemd-services"))
                                units = m.pairs[i].value;
        }
        size_t old = mk_yaml_path_push_key(c, "systemd-services");
        int r = units ? mk_gpu_clients_parse_list(c, units, true, &g.systemd_services, &g.n_systemd_services) : 0;
        if (r < 0)
                return r;
        mk_yaml_path_pop(c, old);
        if (!g.systemd_services)
                g.systemd_services = calloc(1, sizeof(char *));
        g.container_images = calloc(1, sizeof(char *));
        if (!g.systemd_services || !g.container_images)
                return mk_yaml_error_code(c, -ENOMEM, NULL, "out of memory");
        *(struct mk_gpu_clients *) userdata = g;
        g = (struct mk_gpu_clients){0};
        return 0;
}

int mk_gpu_clients_file_load(const char *path, struct mk_gpu_clients *ret, struct mk_error *e) {
        return mk_yaml_load_walk(path, MK_MAX_GPU_CLIENTS_FILE_BYTES, clients_file_walk, ret, e);
}

/* Is `cmd` an executable file in one of PATH's directories? */
static bool in_path(const char *cmd) {
        const char *path = secure_getenv("PATH");
        if (!path || !*path)
                path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
        for (const char *p = path; *p;) {
                size_t n = strcspn(p, ":");
                if (n > 0) {
                        char buf[PATH_MAX];
                        int k = snprintf(buf, sizeof(buf), "%.*s/%s", (int) n, p, cmd);
                        if (k > 0 && (size_t) k < sizeof(buf) && access(buf, X_OK) == 0)
                                return true;
                }
                p += n;
                if (*p == ':')
                        p++;
        }
        return false;
}

static void argv_join(const char *const *argv, char *buf, size_t size) {
        size_t used = 0;
        buf[0] = 0;
        for (const char *const *a = argv; *a && used < size; a++) {
                int k = snprintf(buf + used, size - used, "%s%s", a == argv ? "" : " ", *a);
                if (k < 0)
                        break;
                used += (size_t) k;
        }
}

/* Runs argv, capturing output (cap bytes). Returns 0 with *ret filled when
 * the command ran (whatever its status); the spawn error otherwise. */
static int run(const char *const *argv, uint64_t timeout_ms, size_t cap, struct mk_spawn_result *ret,
               struct mk_error *e) {
        struct mk_spawn_opts so = {
                .argv = argv,
                .timeout_ms = timeout_ms > INT_MAX ? INT_MAX : (int) timeout_ms,
                .capture = true,
                .output_cap = cap,
        };
        char cmd[512];
        argv_join(argv, cmd, sizeof(cmd));
        log_debug_area("service", "Running '%s'", cmd);
        struct mk_error se = {0};
        int r = mk_spawn(&so, ret, &se);
        if (r < 0) {
                char buf[MK_ERROR_MSG_MAX];
                return mk_error_set(e, r, "Cannot run '%s': %s", cmd, mk_error_format(&se, buf, sizeof(buf)));
        }
        return 0;
}

/* Runs argv and requires exit status 0; the error names the command, its
 * status or timeout, and its last output line. */
static int run_ok(const char *const *argv, uint64_t timeout_ms, size_t cap, char **ret_output, struct mk_error *e) {
        struct mk_spawn_result res = {0};
        int r = run(argv, timeout_ms, cap, &res, e);
        if (r < 0)
                return r;
        char cmd[512];
        argv_join(argv, cmd, sizeof(cmd));
        if (res.timed_out)
                r = mk_error_set(e, -ETIMEDOUT, "'%s' did not finish within %llu ms (killed)", cmd,
                                 (unsigned long long) timeout_ms);
        else if (res.exit_status != 0)
                r = mk_error_set(e, -EIO, "'%s' failed with exit status %d: %s", cmd, res.exit_status,
                                 mk_spawn_output_last_line(&res));
        else if (res.output_truncated)
                r = mk_error_set(e, -E2BIG, "'%s' printed more than %zu bytes", cmd, cap);
        if (r >= 0 && ret_output) {
                *ret_output = res.output;
                res.output = NULL;
        }
        mk_spawn_result_done(&res);
        return r;
}

/* `systemctl is-active --quiet UNIT`: 1 active, 0 not, negative when it
 * could not tell (timeout, cannot run). */
static int unit_active(const char *unit, uint64_t timeout_ms, struct mk_error *e) {
        const char *argv[] = {"systemctl", "is-active", "--quiet", unit, NULL};
        struct mk_spawn_result res = {0};
        int r = run(argv, timeout_ms, MK_CLIENT_MSG_OUTPUT_CAP, &res, e);
        if (r < 0)
                return r;
        if (res.timed_out)
                r = mk_error_set(e, -ETIMEDOUT, "'systemctl is-active %s' did not answer within %llu ms", unit,
                                 (unsigned long long) timeout_ms);
        else
                r = res.exit_status == 0;
        mk_spawn_result_done(&res);
        return r;
}

bool mk_image_matches(const char *image, const char *name) {
        size_t n = strcspn(image, "@"); /* digest */
        const char *slash = memrchr(image, '/', n);
        const char *last = slash ? slash + 1 : image;
        const char *colon = memchr(last, ':', n - (size_t) (last - image)); /* tag */
        if (colon)
                n = (size_t) (colon - image);
        size_t k = strlen(name);
        if (k == 0 || k > n)
                return false;
        return memcmp(image + n - k, name, k) == 0 && (n == k || image[n - k - 1] == '/');
}

static int strv_push(char ***l, size_t *n, const char *s, size_t len) {
        if (*n >= MK_MAX_CONTAINERS)
                return -E2BIG;
        char **nl = realloc(*l, (*n + 2) * sizeof(char *));
        if (!nl)
                return -ENOMEM;
        *l = nl;
        nl[*n] = strndup(s, len);
        if (!nl[*n])
                return -ENOMEM;
        nl[++*n] = NULL;
        return 0;
}

/* Splits a line into blank-separated fields (at most max; a field is
 * start/len pairs). Returns the number of fields. */
static size_t fields(const char *line, size_t len, const char **f, size_t *fl, size_t max) {
        size_t k = 0, i = 0;
        while (i < len && k < max) {
                while (i < len && (line[i] == ' ' || line[i] == '\t'))
                        i++;
                if (i >= len)
                        break;
                size_t s = i;
                while (i < len && line[i] != ' ' && line[i] != '\t')
                        i++;
                f[k] = line + s;
                fl[k] = i - s;
                k++;
        }
        return k;
}

static bool any_image(const char *image, char *const *images) {
        for (char *const *p = images; p && *p; p++)
                if (mk_image_matches(image, *p))
                        return true;
        return false;
}

/* One line of a command's table output, split at blanks. */
struct table_line {
        const char *next;       /* where the next line starts */
        unsigned lineno;        /* 1-based */
        const char *text;       /* this line, len bytes, without its newline */
        size_t len;
        const char *f[4];       /* its first k fields */
        size_t fl[4];
        size_t k;
};

/* Moves to the next line, split into at most max_fields (<= 4) fields;
 * false at the end of the text. */
static bool table_next(struct table_line *l, size_t max_fields) {
        if (!*l->next)
                return false;
        l->text = l->next;
        l->len = strcspn(l->text, "\n");
        l->lineno++;
        l->k = fields(l->text, l->len, l->f, l->fl, max_fields);
        l->next = l->text + l->len + (l->text[l->len] == '\n');
        return true;
}

/* Does field i (an image reference) match one of `images`? -EINVAL for one
 * too long to be an image name. */
static int field_image_matches(const struct table_line *l, size_t i, char *const *images, bool *ret) {
        char image[1024];
        if (l->fl[i] >= sizeof(image))
                return -EINVAL;
        memcpy(image, l->f[i], l->fl[i]);
        image[l->fl[i]] = 0;
        *ret = any_image(image, images);
        return 0;
}

int mk_docker_ps_select(const char *output, char *const *images, char ***ret, struct mk_error *e) {
        _cleanup_strv_free_ char **ids = calloc(1, sizeof(char *));
        size_t n = 0;
        if (!ids)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        for (struct table_line l = {.next = output}; table_next(&l, 3);) {
                if (l.k == 1 || l.k > 2)
                        return mk_error_set(e, -EINVAL, "docker ps: line %u: want 'ID IMAGE', got '%.*s'", l.lineno,
                                            (int) MIN(l.len, 200), l.text);
                if (l.k == 0)
                        continue;
                bool match = false;
                if (field_image_matches(&l, 1, images, &match) < 0)
                        return mk_error_set(e, -EINVAL, "docker ps: line %u: image name too long", l.lineno);
                int r = match ? strv_push(&ids, &n, l.f[0], l.fl[0]) : 0;
                if (r < 0)
                        return mk_error_set(e, r, "docker ps: too many containers");
        }
        *ret = TAKE_PTR(ids);
        return 0;
}

/* Is `id` RUNNING in `ctr tasks list` output? */
static int task_running(const char *tasks, const char *id, size_t id_len, bool *ret, struct mk_error *e) {
        *ret = false;
        for (struct table_line l = {.next = tasks}; table_next(&l, 4);) {
                bool header = l.lineno == 1 && l.k > 0 && l.fl[0] == 4 && strneq(l.f[0], "TASK", 4);
                if (!header && l.k != 0 && l.k != 3)
                        return mk_error_set(e, -EINVAL, "ctr tasks list: line %u: want 'TASK PID STATUS', got '%.*s'",
                                            l.lineno, (int) MIN(l.len, 200), l.text);
                if (!header && l.k == 3 && l.fl[0] == id_len && memcmp(l.f[0], id, id_len) == 0)
                        *ret = l.fl[2] == 7 && strneq(l.f[2], "RUNNING", 7);
        }
        return 0;
}

int mk_ctr_select(const char *containers, const char *tasks, char *const *images, char ***ret, struct mk_error *e) {
        _cleanup_strv_free_ char **ids = calloc(1, sizeof(char *));
        size_t n = 0;
        if (!ids)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        for (struct table_line l = {.next = containers}; table_next(&l, 4);) {
                bool header = l.lineno == 1 && l.k > 0 && l.fl[0] == 9 && strneq(l.f[0], "CONTAINER", 9);
                if (!header && l.k != 0 && l.k != 3)
                        return mk_error_set(e, -EINVAL,
                                            "ctr containers list: line %u: want 'CONTAINER IMAGE RUNTIME', got '%.*s'",
                                            l.lineno, (int) MIN(l.len, 200), l.text);
                if (header || l.k != 3)
                        continue;
                bool match = false, running = false;
                if (field_image_matches(&l, 1, images, &match) < 0)
                        return mk_error_set(e, -EINVAL, "ctr containers list: line %u: image name too long", l.lineno);
                int r = match ? task_running(tasks, l.f[0], l.fl[0], &running, e) : 0;
                if (r < 0)
                        return r;
                r = running ? strv_push(&ids, &n, l.f[0], l.fl[0]) : 0;
                if (r < 0)
                        return mk_error_set(e, r, "ctr: too many containers");
        }
        *ret = TAKE_PTR(ids);
        return 0;
}

/* Containers run by docker: `docker rm -f` each matching one. */
static int stop_docker(const struct mk_gpu_clients *s, struct mk_error *e) {
        const char *ps[] = {"docker", "ps", "--format", "{{.ID}} {{.Image}}", NULL};
        _cleanup_free_ char *out = NULL;
        int r = run_ok(ps, s->stop_timeout_ms, MK_MAX_RUNTIME_OUTPUT, &out, e);
        if (r < 0)
                return r;
        _cleanup_strv_free_ char **ids = NULL;
        r = mk_docker_ps_select(out ? out : "", s->container_images, &ids, e);
        if (r < 0)
                return r;
        for (char **id = ids; *id; id++) {
                log_info("Removing docker container %s (a GPU client image)", *id);
                const char *rm[] = {"docker", "rm", "-f", *id, NULL};
                r = run_ok(rm, s->stop_timeout_ms, MK_CLIENT_MSG_OUTPUT_CAP, NULL, e);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* Containers run by containerd (kubelet's, namespace k8s.io): SIGKILL the
 * running task of each matching one; kubelet restarts it when it runs again. */
static int stop_containerd(const struct mk_gpu_clients *s, struct mk_error *e) {
        const char *ls[] = {"ctr", "-n", MK_CTR_NAMESPACE, "containers", "list", NULL};
        const char *ts[] = {"ctr", "-n", MK_CTR_NAMESPACE, "tasks", "list", NULL};
        _cleanup_free_ char *containers = NULL, *tasks = NULL;
        int r = run_ok(ls, s->stop_timeout_ms, MK_MAX_RUNTIME_OUTPUT, &containers, e);
        if (r >= 0)
                r = run_ok(ts, s->stop_timeout_ms, MK_MAX_RUNTIME_OUTPUT, &tasks, e);
        if (r < 0)
                return r;
        _cleanup_strv_free_ char **ids = NULL;
        r = mk_ctr_select(containers ? containers : "", tasks ? tasks : "", s->container_images, &ids, e);
        if (r < 0)
                return r;
        for (char **id = ids; *id; id++) {
                log_info("Killing containerd task %s (a GPU client image)", *id);
                const char *kill[] = {"ctr", "-n", MK_CTR_NAMESPACE, "tasks", "kill", "-s", "SIGKILL", *id, NULL};
                r = run_ok(kill, s->stop_timeout_ms, MK_CLIENT_MSG_OUTPUT_CAP, NULL, e);
                if (r < 0)
                        return r;
        }
        return 0;
}

int mk_clients_stop(const struct mk_clients_stop_opts *o, struct mk_error *e) {
        const struct mk_gpu_clients *s = o->clients;
        if (!in_path("systemctl")) {
                if (s->n_systemd_services > 0 || s->n_container_images > 0)
                        log_warning("systemctl is not on PATH: GPU clients are not stopped, ignoring");
                return 0;
        }
        for (size_t i = s->n_systemd_services; i-- > 0;) {
                const char *unit = s->systemd_services[i];
                int r = unit_active(unit, s->stop_timeout_ms, e);
                if (r < 0)
                        return r;
                if (r == 0) {
                        log_debug_area("service", "GPU client '%s' is not active", unit);
                        continue;
                }
                log_debug_area("service", "Stopping GPU client '%s'", unit);
                if (o->stopping)
                        o->stopping(o->userdata, unit);
                const char *argv[] = {"systemctl", "stop", unit, NULL};
                r = run_ok(argv, s->stop_timeout_ms, MK_CLIENT_MSG_OUTPUT_CAP, NULL, e);
                if (r < 0)
                        return r;
        }
        if (s->n_container_images == 0)
                return 0;
        static const struct {
                const char *cli, *unit;
                int (*stop)(const struct mk_gpu_clients *s, struct mk_error *e);
        } runtimes[] = {
                {"docker", "docker.service", stop_docker},
                {"ctr", "containerd.service", stop_containerd},
        };
        for (size_t i = 0; i < ELEMENTSOF(runtimes); i++) {
                if (!in_path(runtimes[i].cli))
                        continue;
                int r = unit_active(runtimes[i].unit, s->stop_timeout_ms, e);
                if (r < 0)
                        return r;
                if (r == 0) {
                        log_debug_area("service", "'%s' is not active, not looking at its containers", runtimes[i].unit);
                        continue;
                }
                r = runtimes[i].stop(s, e);
                if (r < 0)
                        return r;
        }
        return 0;
}

static unsigned start_one(const struct mk_gpu_clients *s, const char *unit) {
        const char *argv[] = {"systemctl", "start", "--no-block", unit, NULL};
        log_info("Starting GPU client '%s' (queued)", unit);
        struct mk_error e = {0};
        int r = run_ok(argv, s->start_timeout_ms, MK_CLIENT_MSG_OUTPUT_CAP, NULL, &e);
        if (r < 0) {
                char buf[MK_ERROR_MSG_MAX];
                log_error("Failed to start GPU client '%s': %s, ignoring", unit, mk_error_format(&e, buf, sizeof(buf)));
                return 1;
        }
        return 0;
}

unsigned mk_clients_start(const struct mk_gpu_clients *s, char *const *units, size_t n_units) {
        if (n_units == 0)
                return 0;
        _cleanup_free_ bool *done = calloc(n_units, sizeof(bool));
        unsigned failed = 0;
        /* The list's order first (dependencies before dependants). */
        for (size_t i = 0; done && i < s->n_systemd_services; i++) {
                bool started = false;
                for (size_t k = 0; k < n_units; k++)
                        if (!done[k] && streq(units[k], s->systemd_services[i])) {
                                if (!started)
                                        failed += start_one(s, units[k]);
                                started = done[k] = true;
                        }
        }
        for (size_t k = 0; k < n_units; k++)
                if (!done || !done[k]) {
                        bool dup = false;
                        for (size_t j = 0; j < k && !dup; j++)
                                dup = streq(units[j], units[k]);
                        if (!dup)
                                failed += start_one(s, units[k]);
                }
        return failed;
}

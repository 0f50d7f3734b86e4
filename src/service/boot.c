/* `migkit service boot` (boot.h, docs/service.md).
 *
 * The apply runs in a child process so that a hung driver call or command
 * cannot keep the clients down or hold the boot: past the apply timeout
 * the child is killed, and in every case this process restarts the units
 * the child stopped. The child reports each unit before stopping it and its
 * result at the end over a pipe, in frames (kind byte, length, payload). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/dynbuf.h"
#include "base/log.h"
#include "base/macro.h"
#include "base/parse.h"
#include "engine/engine.h"
#include "host/clients.h"
#include "host/reboot.h"
#include "service/boot.h"
#include "service/settings.h"
#include "spec/hooks.h"

#define MK_BOOT_PIPE_CAP (1u << 20)     /* what the apply child may report */
#define MK_BOOT_DRAIN_MS 5000           /* reading what is left after killing it */
#define MK_BOOT_DEFAULT_CONFIG "all-disabled"

int mk_service_check(const struct mk_config *c, const char *name, bool mode_only, size_t *ret_differ,
                     struct mk_error *e) {
        struct mk_snapshot *s = NULL;
        struct mk_gpu_plan *p = NULL;
        int r = mk_engine_plan_selected(c, name, &s, &p, e);
        if (r < 0)
                return r;
        size_t differ = 0;
        for (size_t i = 0; i < s->n_gpus; i++)
                if (p[i].mode_change || (!mode_only && p[i].layout_change))
                        differ++;
        mk_gpu_plans_free(p, s->n_gpus);
        mk_snapshot_free(s);
        *ret_differ = differ;
        return 0;
}

int mk_service_validate_selection(const struct mk_service_paths *p, const char *name, const char *apply_config_file,
                                  struct mk_error *e) {
        int r = mk_service_check_name(name, e);
        if (r < 0)
                return r;
        if (apply_config_file && *apply_config_file) {
                struct stat a, b;
                bool same = !streq(apply_config_file, "-") && stat(apply_config_file, &a) == 0 &&
                            stat(p->config_file, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
                if (!same)
                        return mk_error_set(e, -EXDEV,
                                            "This apply uses '%s', but the node service applies '%s' at boot: "
                                            "'%s' is not persisted. Put the layout into '%s' and apply from there, "
                                            "or apply without the service's hooks file",
                                            apply_config_file, p->config_file, name, p->config_file);
        }
        _cleanup_(mk_config_freep) struct mk_config *c = NULL;
        r = mk_config_load(p->config_file, &c, e);
        if (r < 0)
                return r;
        for (size_t i = 0; i < c->n_configs; i++)
                if (streq(c->configs[i].name, name))
                        return 0;
        char list[256];
        (void) mk_config_names(c, list, sizeof(list));
        const char *names[64]; /* "did you mean": the closest of the first 64 */
        size_t n = c->n_configs < ELEMENTSOF(names) ? c->n_configs : ELEMENTSOF(names);
        for (size_t k = 0; k < n; k++)
                names[k] = c->configs[k].name;
        const char *near = mk_closest_word(name, names, n);
        return mk_error_set(e, -ENOENT, "'%s' has no config named '%s' (%s%s%sit has: %s)", p->config_file, name,
                            near ? "did you mean '" : "", near ? near : "", near ? "'? " : "",
                            c->n_configs ? list : "none");
}

/* ---- the apply child ---- */

struct child_result {
        int r;
        struct mk_error e;
        bool reboot_needed, nothing_to_do, changed, driverless, mode_ok;
        unsigned mode_changes, resets;
        size_t destroyed_gis, destroyed_cis, created_gis, created_cis;
};

struct child_ctx {
        int fd;
        const struct mk_service_settings *settings;
};

static void write_all(int fd, const void *data, size_t n) {
        const char *p = data;
        while (n > 0) {
                ssize_t k = write(fd, p, n);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        return; /* the parent is gone; nothing to tell */
                p += k;
                n -= (size_t) k;
        }
}

static void send_frame(int fd, char kind, const void *data, uint32_t len) {
        char head[5];
        head[0] = kind;
        memcpy(head + 1, &len, sizeof(len));
        write_all(fd, head, sizeof(head));
        write_all(fd, data, len);
}

static void child_stopping(void *userdata, const char *unit) {
        struct child_ctx *x = userdata;
        send_frame(x->fd, 'S', unit, (uint32_t) strlen(unit));
        mk_progress_client_stopped(&mk_progress_klog_sink, unit);
}

static int child_before_change(void *userdata, struct mk_error *e) {
        struct child_ctx *x = userdata;
        struct mk_clients_stop_opts o = {.clients = &x->settings->clients, .stopping = child_stopping, .userdata = x};
        mk_progress_waiting(&mk_progress_klog_sink, -1, "the GPU clients to stop");
        int r = mk_clients_stop(&o, e);
        if (r < 0)
                mk_error_prefix(e, "Cannot stop the GPU clients, so no GPU was changed");
        return r;
}

_noreturn_ static void child_main(int fd, const struct mk_service_paths *p, const struct mk_service_settings *s,
                                  const struct mk_config *c, const struct mk_hooks *h, const char *name) {
        struct child_ctx x = {.fd = fd, .settings = s};
        struct mk_engine_opts o = {
                .config_file = p->config_file,
                .selected_config = name,
                .hooks_file = h ? p->hooks_file : NULL,
                .mode_only_without_driver = true,
                .hook_output = true,
                .hook_timeout_ms = (int) s->apply_timeout_ms,
                .before_change = child_before_change,
                .userdata = &x,
                .progress = &mk_progress_klog_sink,
                .lock_who = "the boot service (migkit service boot)",
        };
        struct child_result res = {0};
        struct mk_apply_report rep = {0};
        res.r = mk_engine_apply(c, h, &o, &rep, &res.e);
        res.reboot_needed = rep.reboot_needed;
        res.nothing_to_do = rep.nothing_to_do;
        res.changed = rep.changed;
        res.driverless = rep.driverless;
        res.mode_changes = rep.mode_changes;
        res.resets = rep.resets;
        res.destroyed_gis = rep.destroyed_gis;
        res.destroyed_cis = rep.destroyed_cis;
        res.created_gis = rep.created_gis;
        res.created_cis = rep.created_cis;
        mk_apply_report_done(&rep);
        if (res.r < 0 && !res.reboot_needed && !res.driverless) {
                /* Are the modes right at least? Then the reboot marker can go. */
                size_t differ = 0;
                struct mk_error ce = {0};
                res.mode_ok = mk_service_check(c, name, true, &differ, &ce) >= 0 && differ == 0;
        }
        send_frame(fd, 'R', &res, sizeof(res));
        _exit(0);
}

static uint64_t now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

struct apply_outcome {
        bool have_result;
        struct child_result res;
        char **stopped;         /* units the child stopped (or was stopping) */
        size_t n_stopped;
        char why[MK_ERROR_MSG_MAX]; /* without a result: what happened to the child */
};

static void apply_outcome_done(struct apply_outcome *a) {
        strv_free(a->stopped);
        a->stopped = NULL;
        a->n_stopped = 0;
}

static int parse_frames(const char *data, size_t len, struct apply_outcome *a) {
        size_t i = 0;
        while (len - i >= 5) {
                char kind = data[i];
                uint32_t n;
                memcpy(&n, data + i + 1, sizeof(n));
                if (len - i - 5 < n)
                        break; /* cut short by a kill */
                const char *payload = data + i + 5;
                if (kind == 'S') {
                        char **l = realloc(a->stopped, (a->n_stopped + 2) * sizeof(char *));
                        if (!l)
                                return -ENOMEM;
                        a->stopped = l;
                        l[a->n_stopped] = strndup(payload, n);
                        if (!l[a->n_stopped])
                                return -ENOMEM;
                        l[++a->n_stopped] = NULL;
                } else if (kind == 'R' && n == sizeof(struct child_result)) {
                        memcpy(&a->res, payload, sizeof(a->res));
                        a->have_result = true;
                }
                i += 5 + n;
        }
        return 0;
}

/* The parent and process group of `pid` from /proc/PID/stat ("pid (comm)
 * state ppid pgrp ..."; comm may hold blanks and parentheses). */
static int proc_parent(const char *pid, pid_t *ret_ppid, pid_t *ret_pgrp) {
        char path[300], buf[1024];
        snprintf(path, sizeof(path), "/proc/%.256s/stat", pid);
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        if (n <= 0)
                return -EIO;
        buf[n] = 0;
        char *p = strrchr(buf, ')');
        if (!p || p[1] != ' ' || !p[2] || p[3] != ' ')
                return -EINVAL;
        char *ppid = p + 4, *sp = strchr(ppid, ' ');
        if (!sp)
                return -EINVAL;
        *sp = 0;
        char *pgrp = sp + 1, *sp2 = strchr(pgrp, ' ');
        if (!sp2)
                return -EINVAL;
        *sp2 = 0;
        int a, b;
        if (mk_parse_int(ppid, &a) < 0 || mk_parse_int(pgrp, &b) < 0)
                return -EINVAL;
        *ret_ppid = a;
        *ret_pgrp = b;
        return 0;
}

/* After the apply child was killed: the commands it ran (systemctl, hooks,
 * nvidia-smi, each in a process group of its own) lost the parent that
 * enforced their timeouts. As the child subreaper we inherited them: kill
 * their groups and reap them, so nothing of the apply outlives it. */
static void kill_orphans(void) {
        pid_t self = getpid();
        DIR *d = opendir("/proc");
        if (!d) {
                (void) log_warning_errno(negative_errno(),
                                         "Cannot list /proc to find what the killed apply left running: %m, ignoring");
                return;
        }
        struct dirent *de;
        while ((de = readdir(d))) {
                int pid;
                pid_t ppid = 0, pgrp = 0; /* gcc -Os cannot see proc_parent sets them */
                if (mk_parse_int(de->d_name, &pid) < 0 || proc_parent(de->d_name, &ppid, &pgrp) < 0 || ppid != self)
                        continue;
                log_warning("Killing process %d (group %d) left running by the apply", pid, pgrp);
                if (pgrp == pid)
                        (void) kill(-pgrp, SIGKILL);
                (void) kill(pid, SIGKILL);
                while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                        ;
        }
        closedir(d);
}

/* "3 s", "1500 ms" */
static void format_ms(uint64_t ms, char *buf, size_t size) {
        if (ms % 1000 == 0)
                snprintf(buf, size, "%llu s", (unsigned long long) (ms / 1000));
        else
                snprintf(buf, size, "%llu ms", (unsigned long long) ms);
}

/* Forks the apply child and collects what it reports, within the apply
 * timeout. Returns negative only when the child could not be run. */
static int run_apply(const struct mk_service_paths *p, const struct mk_service_settings *s, const struct mk_config *c,
                     const struct mk_hooks *h, const char *name, struct apply_outcome *a, struct mk_error *e) {
        int pfd[2];
        if (pipe2(pfd, O_CLOEXEC) < 0) {
                int r = negative_errno();
                return mk_error_set(e, r, "Cannot create a pipe: %s", strerror(-r));
        }
        /* Orphans of the child become ours, for kill_orphans(). */
        if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0)
                (void) log_debug_area_errno("service", negative_errno(), "Cannot become a child subreaper: %m, ignoring");
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid < 0) {
                int r = negative_errno();
                close(pfd[0]);
                close(pfd[1]);
                return mk_error_set(e, r, "Cannot fork the apply: %s", strerror(-r));
        }
        if (pid == 0) {
                close(pfd[0]);
                child_main(pfd[1], p, s, c, h, name);
        }
        close(pfd[1]);
        _cleanup_close_ int fd = pfd[0];

        struct mk_buf b;
        mk_buf_init(&b, MK_BOOT_PIPE_CAP);
        bool killed = false, overflow = false;
        uint64_t deadline = now_ms() + s->apply_timeout_ms;
        for (;;) {
                uint64_t now = now_ms();
                if (!killed && now >= deadline) {
                        char limit[32];
                        format_ms(s->apply_timeout_ms, limit, sizeof(limit));
                        log_error("The apply did not finish within %s: killing it", limit);
                        (void) kill(pid, SIGKILL);
                        killed = true;
                        deadline = now + MK_BOOT_DRAIN_MS;
                } else if (killed && now >= deadline)
                        break;
                struct pollfd pf = {.fd = fd, .events = POLLIN};
                uint64_t wait = deadline > now ? deadline - now : 0;
                int k = poll(&pf, 1, (int) MIN(wait, (uint64_t) INT_MAX));
                if (k < 0 && errno != EINTR)
                        break;
                if (k <= 0)
                        continue;
                char chunk[4096];
                ssize_t n = read(fd, chunk, sizeof(chunk));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break;
                if (!overflow && mk_buf_append(&b, chunk, (size_t) n) < 0)
                        overflow = true;
        }
        int status = 0;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
        int r = parse_frames(b.data ? b.data : "", b.len, a);
        mk_buf_done(&b);
        if (r < 0)
                log_error("Out of memory reading the apply's report, ignoring");
        if (killed || !a->have_result)
                kill_orphans();
        char limit[32];
        format_ms(s->apply_timeout_ms, limit, sizeof(limit));
        if (killed)
                snprintf(a->why, sizeof(a->why),
                         "the apply did not finish within the apply timeout (%s; service.yaml timeouts.apply) and "
                         "was killed; the GPUs may be half-way, the next apply converges",
                         limit);
        else if (!a->have_result && WIFSIGNALED(status))
                snprintf(a->why, sizeof(a->why), "the apply process was killed by signal %d", WTERMSIG(status));
        else if (!a->have_result)
                snprintf(a->why, sizeof(a->why), "the apply process exited with status %d without a result",
                         WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        if (killed)
                a->have_result = false;
        return 0;
}

/* ---- the boot run ---- */

static void log_err(const char *what, const struct mk_error *e) {
        char buf[MK_ERROR_MSG_MAX + 2 * MK_ERROR_LOC_MAX];
        log_error("%s%s%s", what ? what : "", what ? ": " : "", mk_error_format(e, buf, sizeof(buf)));
}

/* Reads the selection, or picks all-disabled when none was made. */
static int pick_config(const struct mk_service_paths *p, const struct mk_config *c, char **ret) {
        struct mk_error e = {0};
        _cleanup_free_ char *name = NULL;
        int r = mk_service_selection_read(p, &name, &e);
        if (r == -ENOENT) {
                const struct mk_named_config *nc = NULL;
                struct mk_error se = {0};
                if (mk_config_select(c, MK_BOOT_DEFAULT_CONFIG, &nc, &se) < 0) {
                        log_error("No MIG config is selected ('%s' does not exist) and '%s' has no '%s' config to "
                                  "fall back on: select one with 'migkit service select NAME'",
                                  p->selection_file, p->config_file, MK_BOOT_DEFAULT_CONFIG);
                        return -ENOENT;
                }
                log_info("No MIG config selected yet ('%s' does not exist): applying '%s'", p->selection_file,
                         MK_BOOT_DEFAULT_CONFIG);
                name = strdup(MK_BOOT_DEFAULT_CONFIG);
                if (!name)
                        return log_error_errno(-ENOMEM, "Out of memory");
        } else if (r < 0) {
                log_err("Cannot read the selected MIG config", &e);
                return r;
        } else {
                const struct mk_named_config *nc = NULL;
                if (mk_config_select(c, name, &nc, &e) < 0) {
                        log_error("The selected MIG config '%s' (from '%s') is not in '%s': select another with "
                                  "'migkit service select NAME'",
                                  name, p->selection_file, p->config_file);
                        return -ENOENT;
                }
        }
        *ret = TAKE_PTR(name);
        return 0;
}

static void marker_text(const char *name, const struct mk_error *e, const char *marker, char *buf, size_t size) {
        char when[64] = "?";
        time_t t = time(NULL);
        struct tm tm;
        if (gmtime_r(&t, &tm))
                strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
        char err[MK_ERROR_MSG_MAX + 2 * MK_ERROR_LOC_MAX];
        snprintf(buf, size,
                 "migkit rebooted this node at %s to apply the MIG mode of config '%s':\n"
                 "%s\n"
                 "It will not reboot the node again for this until an apply succeeds or this file is removed\n"
                 "('migkit service clear-reboot-marker', or rm %s).\n",
                 when, name, mk_error_format(e, err, sizeof(err)), marker);
}

/* service.yaml (defaults when missing), config.yaml and hooks.yaml (when
 * present); failures logged. */
static int load_inputs(const struct mk_service_paths *p, struct mk_service_settings **ret_s, struct mk_config **ret_c,
                       struct mk_hooks **ret_h) {
        struct mk_error e = {0};
        _cleanup_(mk_service_settings_freep) struct mk_service_settings *s = NULL;
        int r = mk_service_settings_load(p->settings_file, &s, &e);
        if (r == -ENOENT) {
                log_info("'%s' does not exist: using the default GPU client lists, no reboot", p->settings_file);
                r = mk_service_settings_default(&s);
                if (r < 0)
                        return log_error_errno(r, "Out of memory");
        } else if (r < 0) {
                log_err("Invalid service settings", &e);
                return r;
        }
        _cleanup_(mk_config_freep) struct mk_config *c = NULL;
        r = mk_config_load(p->config_file, &c, &e);
        if (r < 0) {
                log_err("Cannot load the MIG configs", &e);
                return r;
        }
        _cleanup_(mk_hooks_freep) struct mk_hooks *h = NULL;
        if (access(p->hooks_file, F_OK) == 0) {
                r = mk_hooks_load(p->hooks_file, &h, &e);
                if (r < 0) {
                        log_err("Cannot load the hooks", &e);
                        return r;
                }
        }
        *ret_s = TAKE_PTR(s);
        *ret_c = TAKE_PTR(c);
        *ret_h = TAKE_PTR(h);
        return 0;
}

static enum mk_reboot_outcome outcome_of(const struct apply_outcome *a) {
        if (!a->have_result)
                return MK_REBOOT_FAILED;
        if (a->res.r >= 0)
                return MK_REBOOT_APPLIED;
        if (a->res.reboot_needed)
                return MK_REBOOT_NEEDED;
        return a->res.mode_ok ? MK_REBOOT_FAILED_MODE_OK : MK_REBOOT_FAILED;
}

/* What the apply did, and why the node does or does not reboot. */
static void log_outcome(enum mk_reboot_outcome o, const struct mk_reboot_decision *d, const struct apply_outcome *a,
                        const struct mk_service_settings *s, const struct mk_service_paths *p, const char *name) {
        switch (o) {
        case MK_REBOOT_APPLIED:
                if (a->res.driverless)
                        log_info("MIG mode of config '%s' set through PCI (the NVIDIA driver is not loaded); its "
                                 "instances are created by the next apply once the driver is up",
                                 name);
                else if (a->res.nothing_to_do)
                        log_info("MIG config '%s' already applied, nothing to do", name);
                else
                        log_info("MIG config '%s' applied (%u mode change(s), %u reset(s); destroyed %zu GPU and %zu "
                                 "compute instances, created %zu and %zu)",
                                 name, a->res.mode_changes, a->res.resets, a->res.destroyed_gis, a->res.destroyed_cis,
                                 a->res.created_gis, a->res.created_cis);
                break;
        case MK_REBOOT_NEEDED:
                if (d->reboot) {
                        char buf[MK_ERROR_MSG_MAX + 2 * MK_ERROR_LOC_MAX];
                        log_warning("MIG config '%s' needs a reboot: %s", name,
                                    mk_error_format(&a->res.e, buf, sizeof(buf)));
                        break;
                }
                log_err("MIG config could not be applied", &a->res.e);
                if (!s->reboot)
                        log_error("A reboot is needed to change the MIG mode of config '%s' (no GPU reset is possible "
                                  "on this node), and rebooting is disabled ('reboot: false' in '%s'): reboot the "
                                  "node yourself",
                                  name, s->file);
                else
                        log_error("This node already rebooted once to change the MIG mode of config '%s' (marker "
                                  "'%s') and the mode is still not applied: NOT rebooting again. Find out why the "
                                  "mode does not change; migkit reboots again only after an apply succeeds or the "
                                  "marker is removed ('migkit service clear-reboot-marker')",
                                  name, p->marker_file);
                break;
        case MK_REBOOT_FAILED_MODE_OK:
        case MK_REBOOT_FAILED:
        default:
                if (a->have_result)
                        log_err("MIG config could not be applied", &a->res.e);
                else
                        log_error("MIG config could not be applied: %s", a->why);
                if (a->n_stopped > 0)
                        log_error("The GPU clients stopped for the change were started again");
                break;
        }

}

/* Creates the marker, then runs `reboot`. The exit code of the boot run:
 * 0 when the reboot is on its way, 1 when not (no marker: no reboot, as it
 * could loop). */
static int reboot_once(const struct mk_service_paths *p, const char *name, const struct mk_error *why) {
        char text[2048];
        marker_text(name, why, p->marker_file, text, sizeof(text));
        struct mk_error ce = {0};
        if (mk_reboot_marker_create(p->marker_file, text, &ce) < 0) {
                /* Without the marker a reboot could loop: do not reboot. */
                log_err("Cannot create the reboot marker, so NOT rebooting", &ce);
                return 1;
        }
        log_warning("REBOOTING the node once to apply the MIG mode of config '%s' (no GPU reset is possible here); "
                    "marker '%s'",
                    name, p->marker_file);
        struct mk_error be = {0};
        if (mk_reboot_run(&be) < 0) {
                log_err(NULL, &be);
                log_error("The reboot failed; the marker '%s' stays, so the next boot will not try again: remove it "
                          "to allow one more reboot",
                          p->marker_file);
                return 1;
        }
        return 0;
}

int mk_service_boot(const struct mk_service_paths *p) {
        _cleanup_(mk_service_settings_freep) struct mk_service_settings *s = NULL;
        _cleanup_(mk_config_freep) struct mk_config *c = NULL;
        _cleanup_(mk_hooks_freep) struct mk_hooks *h = NULL;
        if (load_inputs(p, &s, &c, &h) < 0)
                return 1;
        _cleanup_free_ char *name = NULL;
        if (pick_config(p, c, &name) < 0)
                return 1;

        _cleanup_free_ char *marker_content = NULL;
        struct mk_error me = {0};
        int r = mk_reboot_marker_read(p->marker_file, &marker_content, &me);
        if (r < 0 && r != -ENOENT) {
                log_err("Cannot read the reboot marker", &me);
                return 1;
        }
        bool marker = r >= 0;

        log_info("Applying MIG config '%s' from '%s'", name, p->config_file);
        _cleanup_(apply_outcome_done) struct apply_outcome a = {0};
        struct mk_error e = {0};
        r = run_apply(p, s, c, h, name, &a, &e);
        if (r < 0) {
                log_err("Cannot run the apply", &e);
                return 1;
        }

        /* Whatever happened: the clients that were running run again. */
        if (a.n_stopped > 0) {
                unsigned failed = mk_clients_start(&s->clients, a.stopped, a.n_stopped);
                if (failed > 0)
                        log_error("%u GPU client(s) could not be started again, see above", failed);
        }

        enum mk_reboot_outcome o = outcome_of(&a);
        struct mk_reboot_decision d = mk_reboot_decide(o, s->reboot, marker);
        log_debug_area("service", "Boot outcome %s, reboot %s, marker %s: reboot=%d exit=%d marker_after=%d",
                       mk_reboot_outcome_to_string(o), s->reboot ? "enabled" : "disabled", marker ? "present" : "absent",
                       d.reboot, d.exit_code, d.marker_after);
        log_outcome(o, &d, &a, s, p, name);

        if (marker && !d.marker_after) {
                bool removed = false;
                struct mk_error re = {0};
                if (mk_reboot_marker_remove(p->marker_file, &removed, &re) < 0)
                        log_err("Cannot remove the reboot marker, ignoring", &re);
                else if (removed)
                        log_info("The MIG modes are as selected: removed the reboot marker '%s'", p->marker_file);
        }
        return d.reboot ? reboot_once(p, name, &a.res.e) : d.exit_code;
}

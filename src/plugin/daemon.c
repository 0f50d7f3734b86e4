/* The device plugin daemon's run loop (daemon.h, docs/device-plugin.md,
 * kubelet v1.20 pkg/kubelet/cm/devicemanager; k8s-device-plugin v0.20.0
 * cmd/nvidia-device-plugin): start, stop and restart of everything that
 * serves, signals, the kubelet restart watch and timers; its other parts
 * are listed in daemon-internal.h. Threads: the main thread runs the loop
 * (signalfd, inotify, timers); gRPC's threads call the handlers
 * (daemon-service.c); the health monitor's thread calls dp_on_health()
 * (daemon-listwatch.c); one registrar thread per start runs the Register
 * calls (daemon-register.c), since the kubelet calls GetDevicePluginOptions
 * back before it answers (kubelet v1.20 pkg/kubelet/cm/devicemanager);
 * the labeller thread patches the Node (daemon-labels.c). `lock` guards
 * the snapshot and the resources against the handlers and the health
 * callback; the main thread replaces them only with every server, the
 * registrar and the monitor stopped. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "base/fileio.h"
#include "base/host.h"
#include "base/log.h"
#include "base/macro.h"
#include "gfd/labels.h"
#include "grpc/server.h"
#include "nvml/nvml.h"
#include "plugin/cdi.h"
#include "plugin/daemon-internal.h"
#include "plugin/daemon.h"
#include "plugin/dynamic/dynamic.h"
#include "plugin/dynamic/follow.h"
#include "plugin/dynamic/handout.h"
#include "plugin/health.h"
#include "plugin/resources.h"
#include "spec/plugin-config.h"

#define MK_DP_MAX_NODE_NAME 253

/* ---- start, stop, restart ---- */

/* Loads the config file and --resource-config into d (replacing what was
 * there only on success). */
static int load_config(struct dp_daemon *d, struct mk_error *e) {
        _cleanup_(mk_plugin_config_freep) struct mk_plugin_config *file = NULL, *rc = NULL;
        if (d->o->config_file) {
                int r = mk_plugin_config_load(d->o->config_file, &file, e);
                if (r < 0)
                        return r;
        }
        if (d->o->resource_config) {
                int r = mk_plugin_config_parse_resource_config(d->o->resource_config, &rc, e);
                if (r < 0)
                        return r;
                if (file && file->n_resources > 0)
                        log_warning("--resource-config replaces the sharing section of '%s'", d->o->config_file);
        }
        mk_plugin_config_free(d->file_cfg);
        mk_plugin_config_free(d->rc_cfg);
        d->file_cfg = TAKE_PTR(file);
        d->rc_cfg = TAKE_PTR(rc);
        d->dp = d->o->dp;
        if (!d->o->mig_strategy_given)
                d->dp.mig_strategy = d->file_cfg && d->file_cfg->has_mig_strategy ? d->file_cfg->mig_strategy
                                                                                 : MK_MIG_STRATEGY_NONE;
        d->dp.config = d->rc_cfg ? d->rc_cfg : d->file_cfg;
        d->dp.host = &d->host;
        return 0;
}

/* Stops what serves: the registrar, the servers, and with `health` the
 * health monitor, last: joining it can take up to its NVML event wait
 * (MK_HEALTH_WAIT_MS), and the kubelet should see the streams end at once.
 * Kept over a kubelet restart. */
static void plugin_stop(struct dp_daemon *d, bool health) {
        dp_registrar_stop(d);
        dp_servers_stop(d);
        if (health) {
                d->health = mk_health_stop(d->health);
                dp_mps_stop(d);
        }
        d->up = false;
}

/* Everything from NVML on: (re)open NVML, snapshot, resources, servers,
 * health, registration, labels. With reload false only the servers and
 * the registration are redone (a kubelet restart); health states stay. */
static int plugin_start(struct dp_daemon *d, bool reload, struct mk_error *e) {
        int r;
        bool fresh = reload || !d->resources;
        if (fresh) {
                r = load_config(d, e);
                if (r < 0)
                        return r;
                d->nvml = mk_nvml_close(d->nvml);
                _cleanup_(mk_snapshot_freep) struct mk_snapshot *snap = NULL;
                _cleanup_(mk_dp_resources_freep) struct mk_dp_resources *res = NULL;
                r = mk_nvml_open(d->o->nvml_lib, &d->nvml, e);
                if (r >= 0)
                        r = mk_nvml_snapshot(d->nvml, &snap, e);
                if (r < 0) {
                        mk_error_prefix(e, "NVML");
                        return r;
                }
                r = d->o->dynamic_mig ? mk_dp_dynamic_resources_build(snap, d->o->soft.split, &res, e)
                                      : mk_dp_resources_build(snap, &d->dp, &res, e);
                if (r < 0)
                        return r;
                pthread_mutex_lock(&d->lock);
                mk_dp_resources_free(d->resources);
                mk_snapshot_free(d->snapshot);
                d->resources = TAKE_PTR(res);
                d->snapshot = TAKE_PTR(snap);
                pthread_mutex_unlock(&d->lock);
                dp_cdi_refresh(d, d->snapshot);
                if (d->o->dynamic_mig)
                        log_info("%zu GPU(s), dynamic MIG for node '%s': %zu resource(s)", d->snapshot->n_gpus,
                                 d->o->node_name, d->resources->n);
                else
                        log_info("%zu GPU(s), MIG strategy %s: %zu resource(s)", d->snapshot->n_gpus,
                                 mk_mig_strategy_to_string(d->dp.mig_strategy), d->resources->n);
                if (d->resources->warning)
                        log_warning("%s", d->resources->warning);
        }
        if (fresh) {
                dp_mps_stop(d);
                r = dp_mps_start(d, e);
                if (r < 0) {
                        mk_error_prefix(e, "MPS");
                        return r;
                }
        }
        if (d->resources->n == 0)
                log_warning("No devices found. Waiting indefinitely.");
        r = dp_servers_start(d, e);
        if (r < 0)
                return r;
        if (reload || !d->health) {
                d->health = mk_health_stop(d->health);
                struct mk_health_options ho = {0};
                r = mk_health_options_from_env(&ho, e);
                if (r >= 0)
                        r = mk_health_start(d->nvml, d->snapshot, &ho, dp_on_health, d, &d->health, e);
                mk_health_options_done(&ho);
                if (r >= 0 && mk_health_disabled_reason(d->health))
                        log_warning("Health checks disabled: %s", mk_health_disabled_reason(d->health));
                if (r < 0) {
                        mk_error_prefix(e, "Health monitor");
                        return r;
                }
        }
        r = dp_registrar_start(d, e);
        if (r < 0)
                return r;
        d->up = true;
        if (reload)
                dp_labels_refresh(d);
        return 0;
}

static void daemon_done(struct dp_daemon *d) {
        dp_labeller_stop(d);
        d->follower = mk_dp_follower_stop(d->follower);
        free(d->handout_path);
        plugin_stop(d, true);
        mk_dp_resources_free(d->resources);
        mk_snapshot_free(d->snapshot);
        d->nvml = mk_nvml_close(d->nvml);
        int k = 0;
        d->cdi = mk_cdi_file_free(d->cdi, &k);
        if (k < 0)
                log_warning_errno(k, "Cannot remove the CDI spec: %m, ignoring");
        mk_plugin_config_free(d->file_cfg);
        mk_plugin_config_free(d->rc_cfg);
        mk_host_done(&d->host);
        free(d->dir);
        free(d->kubelet_socket);
        pthread_mutex_destroy(&d->dyn_lock);
        pthread_mutex_destroy(&d->lock);
}

/* After a failed (re)start: fatal only for the first start with
 * fail-on-init-error; otherwise logged, nothing served, retried after
 * retry_ms (or on SIGHUP). `reload`: the retry re-reads everything; else
 * only the servers and the registration are redone (health states kept). */
static int start_failed(struct dp_daemon *d, int r, struct mk_error *e, bool initial, bool reload,
                        unsigned retry_ms) {
        plugin_stop(d, reload);
        if (initial && d->o->fail_on_init_error)
                return r;
        log_error_errno(r, "Cannot start the device plugin: %s; serving nothing, retrying in %.1fs (or on SIGHUP)",
                        e->msg, retry_ms / 1000.0);
        d->retry_at_ms = dp_now_ms() + retry_ms;
        d->retry_reload = reload;
        mk_error_clear(e);
        return 0;
}

/* The daemon's state from its options: the plugin directory, the kubelet
 * socket, the host roots; the options checked. On failure *d is for
 * daemon_done(). */
static int daemon_init(struct dp_daemon *d, const struct mk_dp_daemon_options *o, struct mk_error *e) {
        *d = (struct dp_daemon){.o = o};
        pthread_mutex_init(&d->lock, NULL);
        pthread_mutex_init(&d->dyn_lock, NULL);
        const char *dir = o->plugin_dir ? o->plugin_dir : MK_DP_DEFAULT_PLUGIN_DIR;
        if (!*dir)
                return mk_error_set(e, -EINVAL, "The device plugin directory is empty");
        d->dir = strdup(dir);
        if (!d->dir)
                return mk_error_set(e, -ENOMEM, "out of memory");
        for (size_t n = strlen(d->dir); n > 1 && d->dir[n - 1] == '/'; n--)
                d->dir[n - 1] = 0;
        /* --kubelet-socket: NULL the default in the plugin directory, "" no registration. */
        int r = o->kubelet_socket ? ((d->kubelet_socket = strdup(o->kubelet_socket)) ? 0 : -ENOMEM)
                                  : mk_path_join(d->dir, MK_DP_KUBELET_SOCKET, &d->kubelet_socket);
        if (r < 0 || mk_host_init_from_env(&d->host) < 0)
                return mk_error_set(e, -ENOMEM, "out of memory");
        bool have_node = o->kube && o->node_name && *o->node_name && strlen(o->node_name) <= MK_DP_MAX_NODE_NAME;
        if (o->labels == MK_DP_LABELS_NODE && !have_node)
                return mk_error_set(e, -EINVAL, "--labels node needs a Kubernetes client and a node name (NODE_NAME)");
        if (o->dynamic_mig && !have_node)
                return mk_error_set(e, -EINVAL, "--dynamic-mig needs a Kubernetes client and a node name (NODE_NAME)");
        if (o->dp.list_strategies & (MK_DP_LIST_CDI_ANNOTATIONS | MK_DP_LIST_CDI_CRI))
                return mk_cdi_file_new(o->cdi_spec_dir, o->dp.cdi_kind, &d->cdi, e);
        return 0;
}

/* Dynamic MIG: whether a GPU's MIG mode is no longer the snapshot's (the
 * node agent switched an idle GPU, docs/scheduler.md "Unified pool"). A
 * MIG GPU offers as many ids as its largest instance count, a shared one
 * the split count: the device list must be rebuilt and re-sent. Looked at
 * every MK_DP_MODE_CHECK_MS, one NVML call per GPU. */
static bool modes_changed(struct dp_daemon *d, uint64_t now) {
        if (!d->o->dynamic_mig || !d->up || !d->snapshot || !d->nvml || now < d->mode_check_at_ms)
                return false;
        d->mode_check_at_ms = now + MK_DP_MODE_CHECK_MS;
        for (size_t i = 0; i < d->snapshot->n_gpus; i++) {
                const struct mk_gpu *g = &d->snapshot->gpus[i];
                enum mk_mig_mode m;
                struct mk_error e = {0};
                if (mk_nvml_mig_mode(d->nvml, g->index, &m, &e) < 0 || m == g->mig_current)
                        continue; /* an error is the health monitor's to report */
                log_info("GPU %u: MIG mode is now %s (was %s): rebuilding the device list", g->index,
                         m == MK_MIG_ENABLED ? "enabled" : "disabled",
                         g->mig_current == MK_MIG_ENABLED ? "enabled" : "disabled");
                return true;
        }
        return false;
}

/* Serves until a termination signal (0) or a failure that retrying does
 * not cure: reloads on SIGHUP, restarts the plugin when kubelet restarts,
 * retries failed starts and label updates when due. */
static int daemon_loop(struct dp_daemon *d, int sfd, int ifd, struct mk_error *e) {
        for (;;) {
                uint64_t now = dp_now_ms(), next = UINT64_MAX;
                if (d->retry_at_ms)
                        next = MIN(next, d->retry_at_ms);
                if (d->labels_retry_at_ms)
                        next = MIN(next, d->labels_retry_at_ms);
                /* While registering, poll for kubelet.sock changes too: an
                 * inotify event may come before the registrar recorded it. */
                int timeout = next == UINT64_MAX ? 1000 : (int) MIN(next > now ? next - now : 0, 1000u);
                struct pollfd p[2] = {{.fd = sfd, .events = POLLIN}, {.fd = ifd, .events = POLLIN}};
                if (poll(p, 2, timeout) < 0 && errno != EINTR)
                        return mk_error_set(e, negative_errno(), "poll: %m");
                if (p[1].revents & POLLIN) {
                        char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
                        while (read(ifd, buf, sizeof(buf)) > 0)
                                ; /* the state is checked below, not the events */
                }
                bool reload = false, quit = false;
                struct signalfd_siginfo si;
                while (read(sfd, &si, sizeof(si)) == (ssize_t) sizeof(si)) {
                        if (si.ssi_signo == SIGHUP)
                                reload = true;
                        else
                                quit = true;
                }
                if (quit) {
                        log_info("Received a termination signal, shutting down");
                        return 0;
                }
                now = dp_now_ms();
                bool restart = false;
                if (d->retry_at_ms && now >= d->retry_at_ms) {
                        d->retry_at_ms = 0;
                        if (d->retry_reload)
                                reload = true;
                        else
                                restart = true;
                }
                if (!reload && !d->retry_at_ms && modes_changed(d, now))
                        reload = true;
                if (reload) {
                        log_info("Reloading: config, NVML, resources");
                        d->retry_at_ms = 0;
                        plugin_stop(d, true);
                        int r = plugin_start(d, true, e);
                        if (r < 0 && (r = start_failed(d, r, e, false, true, dp_retry_ms(d))) < 0)
                                return r;
                        continue;
                }
                if (restart || dp_kubelet_restarted(d)) {
                        plugin_stop(d, false);
                        int r = plugin_start(d, false, e);
                        /* A kubelet wiping its directory while we bind: soon again. */
                        if (r < 0 && (r = start_failed(d, r, e, false, false, 1000)) < 0)
                                return r;
                        continue;
                }
                if (d->labels_retry_at_ms && now >= d->labels_retry_at_ms)
                        dp_labels_refresh(d);
                dp_mps_check(d);
        }
}

int mk_dp_daemon_run(const struct mk_dp_daemon_options *o, struct mk_error *e) {
        sigset_t mask;
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGHUP);
        /* Before gRPC and the monitor start threads: they inherit the mask. */
        int r = pthread_sigmask(SIG_BLOCK, &mask, NULL);
        if (r != 0)
                return mk_error_set(e, -r, "Cannot block signals");
        _cleanup_close_ int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
        if (sfd < 0)
                return mk_error_set(e, negative_errno(), "signalfd: %m");

        struct dp_daemon d;
        r = daemon_init(&d, o, e);
        if (r < 0) {
                daemon_done(&d);
                return r;
        }
        /* The directory is watched, not the files: kubelet.sock is
         * re-created on a kubelet restart (IN_CREATE, IN_MOVED_TO), our
         * sockets are deleted by it (IN_DELETE). */
        _cleanup_close_ int ifd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
        if (ifd < 0 || inotify_add_watch(ifd, d.dir, IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM) < 0) {
                r = negative_errno();
                daemon_done(&d);
                return mk_error_set(e, r, "Cannot watch the device plugin directory '%s': %m",
                                    o->plugin_dir ? o->plugin_dir : MK_DP_DEFAULT_PLUGIN_DIR);
        }

        if (o->labels == MK_DP_LABELS_NODE && (r = dp_labeller_start(&d, e)) < 0) {
                daemon_done(&d);
                return r;
        }
        mk_grpc_global_init();
        if (o->dynamic_mig && o->follow_handouts) {
                r = mk_path_join(d.dir, MK_DP_HANDOUT_FILE, &d.handout_path);
                const struct mk_dp_follower_options fo = {
                        .kube = o->kube,
                        .node = o->node_name,
                        .socket = o->pod_resources_socket,
                        .state_path = d.handout_path,
                        .serialize = &d.dyn_lock,
                };
                if (r >= 0)
                        r = mk_dp_follower_start(&fo, &d.follower, e);
                else
                        mk_error_set(e, r, "out of memory");
                if (r < 0) {
                        daemon_done(&d);
                        mk_grpc_global_shutdown();
                        return r;
                }
        }
        r = plugin_start(&d, true, e);
        if (r < 0)
                r = start_failed(&d, r, e, true, true, dp_retry_ms(&d));
        if (r < 0) {
                daemon_done(&d);
                mk_grpc_global_shutdown();
                return r;
        }
        r = daemon_loop(&d, sfd, ifd, e);
        if (r < 0)
                log_error_errno(r, "Device plugin failed: %s", e->msg);
        daemon_done(&d);
        if (r >= 0 && o->labels == MK_DP_LABELS_NFD_FILE) {
                /* As GFD: the file goes with the plugin, so stale labels do not stay. */
                const char *path = o->nfd_features_file ? o->nfd_features_file : MK_DP_DEFAULT_NFD_FILE;
                if (unlink(path) < 0 && errno != ENOENT)
                        log_warning("Cannot remove '%s': %m, ignoring", path);
        }
        mk_grpc_global_shutdown();
        return r;
}

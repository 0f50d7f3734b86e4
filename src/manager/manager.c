/* migkit manager: the nvidia.com/mig.config state machine (manager.h,
 * docs/manager.md, mig-parted v0.15.0 cmd/nvidia-mig-manager without pitfall P9). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "base/error.h"
#include "base/log.h"
#include "base/host.h"
#include "base/macro.h"
#include "engine/engine.h"
#include "host/clients.h"
#include "host/reboot.h"
#include "kube/informer.h"
#include "kube/kube.h"
#include "kube/object.h"
#include "manager/manager.h"
#include "spec/config.h"

#define MK_MANAGER_REBOOT_WAIT_S 300u
#define MK_MAX_EVENT_MESSAGE 1024
#define MK_MAX_NODE_NAME 253

static const char *const mig_state_table[_MK_MIG_STATE_MAX] = {
        [MK_MIG_STATE_PENDING] = "pending",
        [MK_MIG_STATE_REBOOTING] = "rebooting",
        [MK_MIG_STATE_SUCCESS] = "success",
        [MK_MIG_STATE_FAILED] = "failed",
};

const char *mk_mig_state_to_string(enum mk_mig_state s) {
        return s >= 0 && s < _MK_MIG_STATE_MAX ? mig_state_table[s] : NULL;
}

enum mk_mig_state mk_mig_state_from_string(const char *s) {
        if (!s)
                return _MK_MIG_STATE_INVALID;
        for (int i = 0; i < _MK_MIG_STATE_MAX; i++)
                if (streq(s, mig_state_table[i]))
                        return (enum mk_mig_state) i;
        return _MK_MIG_STATE_INVALID;
}

/* The GPU operator's components, by the "app" label of their pods (mig-parted v0.15.0 cmd/nvidia-mig-manager step 8). */
static const char *const gpu_component_apps[] = {
        "nvidia-device-plugin-daemonset", "gpu-feature-discovery", "nvidia-dcgm-exporter", "nvidia-dcgm",
        "nvidia-cuda-validator", "nvidia-device-plugin-validator", "nvidia-operator-validator",
};

/* ---- pure helpers ---- */

static int cmp_str(const void *a, const void *b) {
        return strcmp(*(const char *const *) a, *(const char *const *) b);
}

/* A sorted, duplicate-free JSON array of the strings of `a` and `b` (either may be NULL). */
static json_t *sorted_union(const json_t *a, const json_t *b) {
        size_t n = (a ? json_array_size(a) : 0) + (b ? json_array_size(b) : 0);
        const char **v = calloc(n + 1, sizeof(char *));
        if (!v)
                return NULL;
        size_t k = 0;
        const json_t *lists[2] = {a, b};
        for (size_t l = 0; l < 2; l++) {
                size_t i;
                json_t *x;
                if (!lists[l])
                        continue;
                json_array_foreach(lists[l], i, x) if (json_is_string(x)) v[k++] = json_string_value(x);
        }
        qsort(v, k, sizeof(char *), cmp_str);
        json_t *out = json_array();
        for (size_t i = 0; out && i < k; i++)
                if (i == 0 || !streq(v[i], v[i - 1]))
                        json_array_append_new(out, json_string(v[i]));
        free(v);
        return out;
}

json_t *mk_manager_labels_to_pause(const json_t *labels) {
        json_t *names = json_array();
        const char *key;
        json_t *val;
        if (!names || !json_is_object(labels))
                return names;
        json_object_foreach((json_t *) labels, key, val) {
                if (strncmp(key, MK_MANAGER_DEPLOY_PREFIX, strlen(MK_MANAGER_DEPLOY_PREFIX)) != 0)
                        continue;
                if (streq(key + strlen(MK_MANAGER_DEPLOY_PREFIX), "mig-manager"))
                        continue; /* our own DaemonSet's selector */
                if (json_is_string(val) && streq(json_string_value(val), "true"))
                        json_array_append_new(names, json_string(key));
        }
        json_t *sorted = sorted_union(names, NULL);
        json_decref(names);
        return sorted;
}

json_t *mk_manager_paused_from_annotations(const json_t *annotations) {
        const json_t *v = json_is_object(annotations) ? json_object_get(annotations, MK_MANAGER_PAUSED_ANNOTATION)
                                                      : NULL;
        if (!json_is_string(v))
                return json_array();
        /* Read whole: a NUL byte in the value (the apiserver allows one) is
         * invalid JSON, not the end of a shorter list; so is a "\u0000". */
        json_t *parsed = json_loadb(json_string_value(v), json_string_length(v), JSON_REJECT_DUPLICATES, NULL);
        json_t *out = json_array();
        if (json_is_array(parsed) && out) {
                size_t i;
                json_t *x;
                json_array_foreach(parsed, i, x) {
                        const char *s = json_string_value(x);
                        if (s && i < MK_MAX_PAUSED_LABELS &&
                            strncmp(s, MK_MANAGER_DEPLOY_PREFIX, strlen(MK_MANAGER_DEPLOY_PREFIX)) == 0)
                                json_array_append_new(out, json_string(s));
                }
        }
        json_decref(parsed);
        return out;
}

json_t *mk_manager_restore_patch(const json_t *labels, const json_t *paused) {
        json_t *l = json_object(), *a = json_object();
        size_t i;
        json_t *x;
        json_array_foreach(paused, i, x) {
                const char *name = json_string_value(x);
                const json_t *cur = json_is_object(labels) ? json_object_get(labels, name) : NULL;
                if (name && json_is_string(cur) && streq(json_string_value(cur), MK_MANAGER_PAUSED_VALUE))
                        json_object_set_new(l, name, json_string("true"));
        }
        json_object_set_new(a, MK_MANAGER_PAUSED_ANNOTATION, json_null());
        return json_pack("{s:o,s:o}", "labels", l, "annotations", a);
}

bool mk_manager_pod_is_gpu_client(const json_t *pod, const char *own_pod_name) {
        const json_t *md = json_object_get(pod, "metadata");
        const char *name = json_string_value(json_object_get(md, "name"));
        if (own_pod_name && name && streq(name, own_pod_name))
                return false;
        const char *phase = json_string_value(json_object_get(json_object_get(pod, "status"), "phase"));
        if (phase && (streq(phase, "Succeeded") || streq(phase, "Failed")))
                return false;
        /* Only the GPU operator's components: user workloads are never waited
         * for, so those on GPUs the plan keeps are not disturbed; one on a GPU
         * that changes holds its MIG device, NVML refuses to destroy it, and
         * the run fails and retries with backoff. */
        const char *app = json_string_value(json_object_get(json_object_get(md, "labels"), "app"));
        for (size_t i = 0; app && i < ELEMENTSOF(gpu_component_apps); i++)
                if (streq(app, gpu_component_apps[i]))
                        return true;
        return false;
}

unsigned mk_manager_backoff_s(unsigned failures, unsigned initial_s, unsigned max_s) {
        unsigned b = initial_s ? initial_s : 1;
        for (unsigned i = 1; i < failures && b < max_s; i++)
                b = b > max_s / 2 ? max_s : b * 2;
        return b > max_s ? max_s : b;
}

/* ---- the manager ---- */

struct mgr {
        struct mk_kube *k;
        const struct mk_config *c;
        const struct mk_hooks *h;
        const struct mk_gpu_clients *clients;
        const struct mk_manager_opts *o;
        atomic_bool *cancel;             /* o->cancel, or our own */
        char node_path[64 + MK_MAX_NODE_NAME];
        char field_selector[64 + MK_MAX_NODE_NAME];
        char *marker_file;               /* the reboot marker on the host */

        pthread_mutex_t lock;
        pthread_cond_t cond;
        char *desired;                   /* latest label value; NULL: absent or empty */
        bool seen_node, changed, informer_done;
        int informer_r;
        struct mk_error informer_e;

        /* A label naming a config the file does not have: no retry can fix
         * it, so none until the label or the config file changes. */
        bool no_retry;
        struct stat cfg_st;              /* the config file when that failure happened */
        struct mk_config *reloaded;      /* the config file read again after it changed */

        /* retries after a failed run (main thread only) */
        unsigned failures;               /* failed runs in a row */
        struct timespec retry_at;        /* CLOCK_MONOTONIC */
        unsigned backoff_initial_s, backoff_max_s;

        /* per run */
        const char *run_config;
        char **stopped;                  /* host units stopped, for restarting */
        size_t n_stopped;
};

static void log_err(const char *what, const struct mk_error *e) {
        char buf[MK_ERROR_MSG_MAX + 2 * MK_ERROR_LOC_MAX];
        log_error("%s: %s", what, mk_error_format(e, buf, sizeof(buf)));
}

/* Posts an Event on our Node; failures are only warnings. The involvedObject
 * uid is the node name, the kubelet's convention for Node events (kubelet
 * pkg/kubelet/kubelet.go: nodeRef UID = nodeName): `kubectl describe node` of
 * kubectl <= 1.2x selects node events by that uid, newer ones by name. */
static void post_event(struct mgr *m, bool warning, const char *reason, const char *fmt, ...) _printf_(4, 5);
static void post_event(struct mgr *m, bool warning, const char *reason, const char *fmt, ...) {
        char msg[MK_MAX_EVENT_MESSAGE], path[128];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        const char *ns = m->o->event_namespace ? m->o->event_namespace : "default";
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/events", ns);
        json_t *ev = mk_kube_event_new(ns, "Node", m->o->node, m->o->node, warning, reason, msg,
                                       MK_MANAGER_EVENT_COMPONENT, m->o->node);
        if (!ev)
                return;
        struct mk_error e = {0};
        if (mk_kube_post(m->k, path, ev, NULL, &e) < 0) {
                char buf[MK_ERROR_MSG_MAX + 2 * MK_ERROR_LOC_MAX];
                log_warning("Cannot post Event '%s' on node '%s', ignoring: %s", reason, m->o->node,
                            mk_error_format(&e, buf, sizeof(buf)));
        }
        json_decref(ev);
}

static int get_node(struct mgr *m, json_t **ret, struct mk_error *e) {
        return mk_kube_get(m->k, m->node_path, ret, e);
}

static json_t *node_labels(const json_t *node) {
        return json_object_get(json_object_get(node, "metadata"), "labels");
}

static json_t *node_annotations(const json_t *node) {
        return json_object_get(json_object_get(node, "metadata"), "annotations");
}

/* Sets the state label; with it, in the same PATCH, the failure annotation:
 * `reason` for failed, removed on success, untouched otherwise. */
static int set_state_reason(struct mgr *m, enum mk_mig_state s, const char *reason) {
        struct mk_error e = {0};
        json_t *ann = s == MK_MIG_STATE_FAILED ? json_pack("{s:s}", MK_MANAGER_FAILURE_ANNOTATION, reason ? reason : "")
                      : s == MK_MIG_STATE_SUCCESS ? json_pack("{s:n}", MK_MANAGER_FAILURE_ANNOTATION)
                                                  : json_object();
        json_t *body = ann ? json_pack("{s:{s:{s:s},s:o}}", "metadata", "labels", MK_MANAGER_STATE_LABEL,
                                       mk_mig_state_to_string(s), "annotations", ann)
                           : NULL;
        int r = body ? mk_kube_patch(m->k, m->node_path, MK_KUBE_PATCH_MERGE, body, NULL, &e) : -ENOMEM;
        json_decref(body);
        if (r < 0) {
                char buf[MK_ERROR_MSG_MAX + 2 * MK_ERROR_LOC_MAX];
                return log_error_errno(r, "Cannot set %s=%s on node '%s': %s", MK_MANAGER_STATE_LABEL,
                                       mk_mig_state_to_string(s), m->o->node, mk_error_format(&e, buf, sizeof(buf)));
        }
        log_info("Node '%s': %s=%s", m->o->node, MK_MANAGER_STATE_LABEL, mk_mig_state_to_string(s));
        return 0;
}

static int set_state(struct mgr *m, enum mk_mig_state s) {
        return set_state_reason(m, s, NULL);
}

static char *join_names(const json_t *a) {
        size_t i, len = 1;
        json_t *x;
        json_array_foreach(a, i, x) len += strlen(json_string_value(x)) + 2;
        char *s = calloc(1, len);
        if (!s)
                return NULL;
        size_t used = 0;
        json_array_foreach(a, i, x) {
                const char *v = json_string_value(x);
                size_t l = strlen(v);
                if (i) {
                        memcpy(s + used, ", ", 2);
                        used += 2;
                }
                memcpy(s + used, v, l);
                used += l;
        }
        s[used] = 0;
        return s;
}

/* Restores the labels named in the Node's paused-labels annotation (fresh
 * read) and removes the annotation. Nothing to do: 0 without a request. */
static int restore_labels(struct mgr *m) {
        struct mk_error e = {0};
        json_t *node = NULL;
        int r = get_node(m, &node, &e);
        if (r < 0) {
                log_err("Cannot read the node to restore its paused labels", &e);
                return r;
        }
        json_t *paused = mk_manager_paused_from_annotations(node_annotations(node));
        bool has_annotation = json_object_get(node_annotations(node), MK_MANAGER_PAUSED_ANNOTATION) != NULL;
        if (!has_annotation) {
                json_decref(paused);
                json_decref(node);
                return 0;
        }
        json_t *patch = mk_manager_restore_patch(node_labels(node), paused);
        json_t *body = json_pack("{s:o}", "metadata", patch);
        r = body ? mk_kube_patch(m->k, m->node_path, MK_KUBE_PATCH_MERGE, body, NULL, &e) : -ENOMEM;
        _cleanup_free_ char *names = join_names(paused);
        if (r < 0)
                log_err("Cannot restore the paused GPU component labels", &e);
        else if (json_array_size(paused) > 0) {
                log_info("Restored GPU component labels on node '%s': %s", m->o->node, names ? names : "");
                post_event(m, false, "MigComponentsResumed", "Restored GPU component labels: %s",
                           names ? names : "");
        }
        json_decref(body);
        json_decref(paused);
        json_decref(node);
        return r;
}

static void restart_clients(struct mgr *m) {
        if (m->n_stopped == 0 || !m->clients)
                return;
        unsigned failed = mk_clients_start(m->clients, m->stopped, m->n_stopped);
        log_info("Started %zu host GPU client(s) again%s", m->n_stopped, failed ? " (some failed, see above)" : "");
        m->stopped = strv_free(m->stopped);
        m->n_stopped = 0;
}

static void client_stopping(void *userdata, const char *unit) {
        struct mgr *m = userdata;
        mk_progress_client_stopped(&mk_progress_klog_sink, unit);
        char **n = realloc(m->stopped, (m->n_stopped + 2) * sizeof(char *));
        if (!n)
                return;
        m->stopped = n;
        n[m->n_stopped] = strdup(unit);
        if (n[m->n_stopped])
                m->n_stopped++;
        n[m->n_stopped] = NULL;
}

/* Waits (bounded) until no GPU pod is left on the node. */
static int wait_pods(struct mgr *m, struct mk_error *e) {
        unsigned timeout_s = m->o->pod_wait_timeout_s ? m->o->pod_wait_timeout_s : MK_MANAGER_DEFAULT_POD_WAIT_S;
        struct timespec start, now;
        clock_gettime(CLOCK_MONOTONIC, &start);
        char fs[64 + MK_MAX_NODE_NAME];
        snprintf(fs, sizeof(fs), "spec.nodeName=%s", m->o->node);
        bool logged = false;
        for (;;) {
                json_t *list = NULL;
                struct mk_kube_list_opts lo = {.field_selector = fs};
                int r = mk_kube_list(m->k, "/api/v1/pods", &lo, &list, e);
                if (r < 0) {
                        mk_error_prefix(e, "Cannot list the pods of node '%s'", m->o->node);
                        return r;
                }
                size_t i, n = 0;
                json_t *pod;
                char names[400] = "";
                size_t used = 0;
                json_array_foreach(json_object_get(list, "items"), i, pod) {
                        if (!mk_manager_pod_is_gpu_client(pod, m->o->pod_name))
                                continue;
                        n++;
                        const json_t *md = json_object_get(pod, "metadata");
                        if (used < sizeof(names) - 1) {
                                int w = snprintf(names + used, sizeof(names) - used, "%s%s/%s", used ? ", " : "",
                                                 json_string_value(json_object_get(md, "namespace")),
                                                 json_string_value(json_object_get(md, "name")));
                                used = w > 0 ? MIN(used + (size_t) w, sizeof(names) - 1) : used;
                        }
                }
                json_decref(list);
                if (n == 0) {
                        if (logged)
                                log_info("No GPU pods left on node '%s'", m->o->node);
                        return 0;
                }
                clock_gettime(CLOCK_MONOTONIC, &now);
                double waited = (double) (now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9;
                if (waited >= timeout_s)
                        return mk_error_set(e, -ETIMEDOUT,
                                            "Timed out after %u s waiting for %zu GPU pod(s) to leave node '%s': %s",
                                            timeout_s, n, m->o->node, names);
                if (!logged) {
                        char what[600];
                        snprintf(what, sizeof(what), "%zu GPU pod(s) to leave node '%s' (up to %u s): %s", n,
                                 m->o->node, timeout_s, names);
                        mk_progress_waiting(&mk_progress_klog_sink, -1, what);
                        logged = true;
                }
                if (mk_kube_sleep_ms(MK_MANAGER_POD_POLL_MS, m->cancel) < 0)
                        return mk_error_set(e, -ECANCELED, "Cancelled while waiting for GPU pods to leave");
        }
}

/* The engine's before_change: right before the first GPU change. */
static int before_change(void *userdata, struct mk_error *e) {
        struct mgr *m = userdata;
        json_t *node = NULL;
        int r = get_node(m, &node, e);
        if (r < 0) {
                mk_error_prefix(e, "Cannot read node '%s' to pause its GPU components", m->o->node);
                return r;
        }
        json_t *to_pause = mk_manager_labels_to_pause(node_labels(node));
        json_t *before = mk_manager_paused_from_annotations(node_annotations(node));
        json_t *all = sorted_union(to_pause, before);
        json_decref(node);
        json_decref(before);
        if (!to_pause || !all) {
                json_decref(to_pause);
                json_decref(all);
                return mk_error_set(e, -ENOMEM, "Out of memory");
        }
        if (json_array_size(all) > MK_MAX_PAUSED_LABELS) {
                json_decref(to_pause);
                json_decref(all);
                return mk_error_set(e, -E2BIG, "More than %u GPU component labels to pause", MK_MAX_PAUSED_LABELS);
        }
        if (json_array_size(to_pause) > 0) {
                /* One merge patch: the labels and the record of what was paused
                 * change together, so a crash never leaves a pause unrecorded. */
                json_t *labels = json_object(), *ann = json_object();
                size_t i;
                json_t *x;
                json_array_foreach(to_pause, i, x)
                        json_object_set_new(labels, json_string_value(x), json_string(MK_MANAGER_PAUSED_VALUE));
                char *rec = json_dumps(all, JSON_COMPACT);
                json_object_set_new(ann, MK_MANAGER_PAUSED_ANNOTATION, json_string(rec ? rec : "[]"));
                free(rec);
                json_t *body = json_pack("{s:{s:o,s:o}}", "metadata", "labels", labels, "annotations", ann);
                r = body ? mk_kube_patch(m->k, m->node_path, MK_KUBE_PATCH_MERGE, body, NULL, e) : -ENOMEM;
                json_decref(body);
                if (r < 0) {
                        mk_error_prefix(e, "Cannot pause the GPU components of node '%s'", m->o->node);
                        json_decref(to_pause);
                        json_decref(all);
                        return r;
                }
                _cleanup_free_ char *names = join_names(to_pause);
                log_info("Paused GPU components on node '%s': %s", m->o->node, names ? names : "");
                post_event(m, false, "MigComponentsPaused", "Paused GPU components for MIG config '%s': %s",
                           m->run_config, names ? names : "");
        } else
                log_info("No GPU component label to pause on node '%s'", m->o->node);
        json_decref(to_pause);
        json_decref(all);

        r = wait_pods(m, e);
        if (r < 0)
                return r;

        if (m->o->with_shutdown_host_gpu_clients && m->clients) {
                struct mk_clients_stop_opts so = {.clients = m->clients, .stopping = client_stopping, .userdata = m};
                r = mk_clients_stop(&so, e);
                if (r < 0) {
                        mk_error_prefix(e, "Cannot stop the host GPU clients");
                        return r;
                }
        }
        return 0;
}

/* Ends a run in failed: restart host clients, restore labels, state failed,
 * a Warning event. Returns `r` (negative). */
static int fail_run(struct mgr *m, int r, const char *name, const struct mk_error *e) {
        char buf[MK_ERROR_MSG_MAX + 2 * MK_ERROR_LOC_MAX];
        mk_error_format(e, buf, sizeof(buf));
        log_error("MIG config '%s' failed on node '%s': %s", name, m->o->node, buf);
        restart_clients(m);
        /* The paused components must come back even when the apiserver is
         * away right now (the run may have failed because of it): retry the
         * restore with backoff, up to about two minutes, before the state. */
        unsigned delay_ms = 500, waited_ms = 0;
        while (restore_labels(m) < 0 && waited_ms < MK_MANAGER_RESTORE_RETRY_MS) {
                log_warning("Cannot restore the paused labels of node '%s' yet; retrying in %u ms", m->o->node,
                            delay_ms);
                if (mk_kube_sleep_ms(delay_ms, m->cancel) < 0)
                        break;
                waited_ms += delay_ms;
                delay_ms = MIN(delay_ms * 2, 8000u);
        }
        char reason[MK_MAX_EVENT_MESSAGE];
        if (snprintf(reason, sizeof(reason), "MIG config '%s' failed: %s", name, buf) >= (int) sizeof(reason))
                memcpy(reason + sizeof(reason) - 4, "...", 4);
        (void) set_state_reason(m, MK_MIG_STATE_FAILED, reason);
        post_event(m, true, "MigConfigFailed", "%s", reason);
        return r < 0 ? r : -EIO;
}

static bool marker_present(struct mgr *m) {
        _cleanup_free_ char *content = NULL;
        return mk_reboot_marker_read(m->marker_file, &content, NULL) >= 0;
}

static void marker_remove(struct mgr *m) {
        bool removed = false;
        struct mk_error e = {0};
        if (mk_reboot_marker_remove(m->marker_file, &removed, &e) < 0)
                log_warning("Cannot remove the reboot marker '%s', ignoring: %s", m->marker_file, e.msg);
        else if (removed)
                log_info("Removed the reboot marker '%s'", m->marker_file);
}

/* The end of a run whose mode change needs a reboot: the reboot-once rule
 * (host/reboot.h), the marker, state rebooting, `reboot`, then wait to be
 * stopped by it. `e` says why the reboot is needed. */
static int reboot_for(struct mgr *m, const char *name, struct mk_error *e) {
        struct mk_reboot_decision d = mk_reboot_decide(MK_REBOOT_NEEDED, m->o->with_reboot, marker_present(m));
        if (!d.reboot) {
                mk_error_set(e, -EAGAIN, "a MIG mode change needs a reboot (%s)",
                             m->o->with_reboot ? "already rebooted once for it; remove the marker "
                                                 "to allow another"
                                               : "WITH_REBOOT is not set");
                return fail_run(m, -EAGAIN, name, e);
        }
        char buf[MK_ERROR_MSG_MAX + 2 * MK_ERROR_LOC_MAX];
        log_warning("MIG config '%s' needs a reboot (%s): REBOOTING node '%s' once", name,
                    mk_error_format(e, buf, sizeof(buf)), m->o->node);
        char text[512];
        snprintf(text, sizeof(text), "migkit manager rebooted node '%s' to apply the MIG mode of '%s'\n",
                 m->o->node, name);
        struct mk_error me = {0};
        int r = mk_reboot_marker_create(m->marker_file, text, &me);
        if (r < 0)
                return fail_run(m, r, name, &me);
        r = set_state(m, MK_MIG_STATE_REBOOTING);
        if (r < 0)
                return fail_run(m, r, name, e);
        post_event(m, false, "MigConfigRebooting", "Rebooting the node for the MIG mode of '%s'", name);
        /* The labels stay paused across the reboot; the next start restores them. */
        struct mk_error be = {0};
        r = mk_reboot_run(&be);
        if (r < 0)
                return fail_run(m, r, name, &be);
        /* The reboot stops us (SIGTERM: leave everything as it is for
         * the manager after the reboot). Still running long after it:
         * the reboot did not happen, which must not wedge the node. */
        mk_progress_waiting(&mk_progress_klog_sink, -1, "the node to reboot");
        if (mk_kube_sleep_ms(MK_MANAGER_REBOOT_WAIT_S * 1000u, m->cancel) < 0)
                return 0;
        mk_error_set(e, -ETIMEDOUT, "the node did not reboot within %u s of 'reboot'",
                     MK_MANAGER_REBOOT_WAIT_S);
        return fail_run(m, -ETIMEDOUT, name, e);
}

/* One reconfigure run for label value `name` (NULL: no label: only restore). */
/* The label names a config the file lacks: fails the run, and does not retry
 * until the label or the file changes (the file's stat is kept to notice). */
static int fail_no_such_config(struct mgr *m, const char *name, struct mk_error *e) {
        const char *file = m->o->config_file ? m->o->config_file : m->c->file;
        char names[256];
        (void) mk_config_names(m->c, names, sizeof(names));
        mk_error_set(e, -ENOENT,
                     "no config named '%s' in '%s' (it has: %s); not retried until the label or that file "
                     "changes",
                     name, file, m->c->n_configs ? names : "none");
        m->no_retry = true;
        if (!file || stat(file, &m->cfg_st) < 0)
                m->cfg_st = (struct stat){0};
        return fail_run(m, -ENOENT, name, e);
}

/* Plans config `name` against the GPUs: how many GPUs change, and how many of
 * them change MIG mode. */
static int count_changes(struct mgr *m, const char *name, size_t *ret_differ, size_t *ret_mode_differ,
                         struct mk_error *e) {
        struct mk_snapshot *snap = NULL;
        struct mk_gpu_plan *plans = NULL;
        int r = mk_engine_plan_selected(m->c, name, &snap, &plans, e);
        if (r < 0)
                return r;
        size_t n = snap->n_gpus, differ = 0, mode_differ = 0;
        for (size_t i = 0; i < n; i++) {
                if (plans[i].mode_change)
                        mode_differ++;
                if (plans[i].mode_change || plans[i].layout_change)
                        differ++;
        }
        mk_gpu_plans_free(plans, n);
        mk_snapshot_free(snap);
        *ret_differ = differ;
        *ret_mode_differ = mode_differ;
        return 0;
}

/* The run ended with config `name` in place: the paused labels back, the
 * state label success, and an Event ("MIG config 'x' <how>"). */
static int finish_success(struct mgr *m, const char *name, const char *how) {
        int r = restore_labels(m);
        int q = set_state(m, MK_MIG_STATE_SUCCESS);
        if (r < 0 || q < 0)
                return r < 0 ? r : q;
        post_event(m, false, "MigConfigApplied", "MIG config '%s' %s", name, how);
        return 0;
}

static int reconcile(struct mgr *m, const char *name) {
        struct mk_error e = {0};
        m->no_retry = false;
        json_t *node = NULL;
        int r = get_node(m, &node, &e);
        if (r < 0) {
                log_err("Cannot read the node", &e);
                return r;
        }
        const char *prev_state = json_string_value(json_object_get(node_labels(node), MK_MANAGER_STATE_LABEL));
        bool was_rebooting = prev_state && streq(prev_state, "rebooting");
        json_decref(node);

        if (!name) {
                log_info("Node '%s' has no %s label: nothing to apply", m->o->node, MK_MANAGER_CONFIG_LABEL);
                return restore_labels(m);
        }
        m->run_config = name;
        log_info("Reconfiguring node '%s' to MIG config '%s'", m->o->node, name);

        const struct mk_named_config *nc = NULL;
        r = mk_config_select(m->c, name, &nc, &e);
        if (r < 0)
                return fail_no_such_config(m, name, &e);

        size_t differ = 0, mode_differ = 0;
        r = count_changes(m, name, &differ, &mode_differ, &e);
        if (r < 0)
                return fail_run(m, r, name, &e);
        if (differ == 0) {
                log_info("MIG config '%s' is already applied on node '%s'", name, m->o->node);
                marker_remove(m);
                return finish_success(m, name, "is applied");
        }
        if (was_rebooting && mode_differ > 0 && marker_present(m)) {
                mk_error_set(&e, -EIO, "the MIG mode change did not take effect after rebooting");
                return fail_run(m, -EIO, name, &e);
        }
        log_info("MIG config '%s' changes %zu GPU(s) on node '%s'", name, differ, m->o->node);

        r = set_state(m, MK_MIG_STATE_PENDING);
        if (r < 0)
                return r;
        post_event(m, false, "MigConfigPending", "Applying MIG config '%s' (%zu GPU(s) change)", name, differ);

        struct mk_engine_opts eo = {
                .config_file = m->o->config_file,
                .selected_config = name,
                .hooks_file = m->o->hooks_file,
                .before_change = before_change,
                .userdata = m,
                .progress = &mk_progress_klog_sink,
                .lock_who = "the MIG manager",
                .cancel = m->o->cancel,
        };
        struct mk_apply_report rep = {0};
        r = mk_engine_apply(m->c, m->h, &eo, &rep, &e);
        bool reboot_needed = rep.reboot_needed;
        mk_apply_report_done(&rep);

        if (reboot_needed)
                return reboot_for(m, name, &e);
        if (r < 0)
                return fail_run(m, r, name, &e);

        marker_remove(m);
        restart_clients(m);
        r = finish_success(m, name, "applied");
        if (r < 0)
                return r;
        log_info("MIG config '%s' applied on node '%s'", name, m->o->node);
        return 0;
}

static int on_node(enum mk_kube_event_type type, json_t *object, json_t *old, void *userdata) {
        struct mgr *m = userdata;
        (void) old;
        if (type != MK_KUBE_EVENT_ADDED && type != MK_KUBE_EVENT_MODIFIED)
                return 0;
        const char *v = json_string_value(json_object_get(node_labels(object), MK_MANAGER_CONFIG_LABEL));
        if (v && !*v)
                v = NULL;
        pthread_mutex_lock(&m->lock);
        bool differs = (!v) != (!m->desired) || (v && !streq(v, m->desired));
        if (!m->seen_node || differs) {
                if (differs)
                        log_info("Node '%s': %s='%s'", m->o->node, MK_MANAGER_CONFIG_LABEL, v ? v : "");
                free(m->desired);
                m->desired = v ? strdup(v) : NULL;
                m->changed = true;
                m->seen_node = true;
                pthread_cond_broadcast(&m->cond);
        }
        pthread_mutex_unlock(&m->lock);
        return 0;
}

/* The Node went malformed (a NUL byte where we read): the informer keeps
 * its last readable version; say so on the Node. */
static void on_bad_node(json_t *object, const char *why, void *userdata) {
        (void) object;
        post_event(userdata, true, "MalformedNode",
                   "the MIG manager skips this version of the node: %s; it keeps the last readable one", why);
}

static void *informer_thread(void *userdata) {
        struct mgr *m = userdata;
        struct mk_kube_informer_opts io = {
                .field_selector = m->field_selector, .cancel = m->cancel, .on_bad = on_bad_node};
        struct mk_error e = {0};
        int r = mk_kube_informer_run(m->k, "/api/v1/nodes", &io, on_node, m, &e);
        pthread_mutex_lock(&m->lock);
        m->informer_done = true;
        m->informer_r = r;
        m->informer_e = e;
        pthread_cond_broadcast(&m->cond);
        pthread_mutex_unlock(&m->lock);
        return NULL;
}

/* After an unknown config: has the config file changed since? Then read it
 * again (a ConfigMap update, an edited file) so the label gets another try. */
static bool config_file_changed(struct mgr *m) {
        const char *file = m->o->config_file;
        struct stat st;
        if (!file || stat(file, &st) < 0)
                return false;
        if (st.st_ino == m->cfg_st.st_ino && st.st_dev == m->cfg_st.st_dev && st.st_size == m->cfg_st.st_size &&
            st.st_mtim.tv_sec == m->cfg_st.st_mtim.tv_sec && st.st_mtim.tv_nsec == m->cfg_st.st_mtim.tv_nsec)
                return false;
        m->cfg_st = st;
        struct mk_config *c = NULL;
        struct mk_error e = {0};
        if (mk_config_load(file, &c, &e) < 0) {
                log_err("The MIG config file changed but cannot be read", &e);
                return false;
        }
        log_info("MIG config file '%s' changed: trying the label again", file);
        mk_config_free(m->reloaded);
        m->reloaded = c;
        m->c = c;
        return true;
}

static bool node_name_valid(const char *s) {
        size_t n = strlen(s);
        if (n == 0 || n > MK_MAX_NODE_NAME)
                return false;
        for (const char *p = s; *p; p++)
                if (!strchr("abcdefghijklmnopqrstuvwxyz0123456789.-", *p))
                        return false;
        return true;
}

/* A mistyped -n or a node not registered yet: say why nothing happens. */
static void probe_node(struct mgr *m) {
        json_t *probe = NULL;
        struct mk_error e = {0};
        if (get_node(m, &probe, &e) == -ENOENT)
                log_info("Node '%s' does not exist yet: waiting for it (is -n the node's name?)", m->o->node);
        json_decref(probe);
}

static bool retry_due(const struct mgr *m) {
        if (m->failures == 0)
                return false;
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        return now.tv_sec > m->retry_at.tv_sec ||
               (now.tv_sec == m->retry_at.tv_sec && now.tv_nsec >= m->retry_at.tv_nsec);
}

/* Waits until a run is due: a new label value, a retry, or a changed config
 * file after an unknown config. Returns false when the manager is to stop
 * (cancelled, the watch ended, out of memory); else true with the label value
 * to apply in *ret_name (NULL: no label). */
static bool wait_for_run(struct mgr *m, char **ret_name) {
        pthread_mutex_lock(&m->lock);
        bool go = false;
        while (!atomic_load(m->cancel) && !m->informer_done) {
                if (m->seen_node && (m->changed || retry_due(m))) {
                        go = true;
                        break;
                }
                if (m->seen_node && m->no_retry && config_file_changed(m)) {
                        m->changed = true;
                        go = true;
                        break;
                }
                struct timespec until;
                clock_gettime(CLOCK_REALTIME, &until);
                until.tv_nsec += 500 * 1000 * 1000;
                if (until.tv_nsec >= 1000000000) {
                        until.tv_sec++;
                        until.tv_nsec -= 1000000000;
                }
                pthread_cond_timedwait(&m->cond, &m->lock, &until);
        }
        char *name = NULL;
        if (go) {
                if (m->changed)
                        m->failures = 0; /* a new label value: a new run, not a retry */
                m->changed = false;
                name = m->desired ? strdup(m->desired) : NULL;
                if (m->desired && !name)
                        go = false;
        }
        pthread_mutex_unlock(&m->lock);
        *ret_name = name;
        return go;
}

/* After a run: schedule the retry of a failure, or say what comes next. */
static void after_run(struct mgr *m, int r, const char *name) {
        if (r < 0 && m->no_retry) {
                m->failures = 0;
                log_info("Not retrying MIG config '%s' until the %s label or the config file changes",
                         name ? name : "", MK_MANAGER_CONFIG_LABEL);
        } else if (r < 0) {
                m->failures++;
                unsigned b = mk_manager_backoff_s(m->failures, m->backoff_initial_s, m->backoff_max_s);
                clock_gettime(CLOCK_MONOTONIC, &m->retry_at);
                m->retry_at.tv_sec += b;
                log_info("Will retry MIG config '%s' in %u s (failure %u in a row), or on a label change",
                         name ? name : "", b, m->failures);
        } else {
                m->failures = 0;
                log_info("Waiting for a change of %s on node '%s'", MK_MANAGER_CONFIG_LABEL, m->o->node);
        }
}

int mk_manager_run(struct mk_kube *k, const struct mk_config *c, const struct mk_hooks *h,
                   const struct mk_gpu_clients *clients, const struct mk_manager_opts *o) {
        if (!o->node || !node_name_valid(o->node))
                return log_error_errno(-EINVAL, "Invalid node name '%s'", o->node ? o->node : "");
        atomic_bool own_cancel = false;
        struct mgr m = {.k = k, .c = c, .h = h, .clients = clients, .o = o,
                        .cancel = o->cancel ? o->cancel : &own_cancel,
                        .backoff_initial_s = o->backoff_initial_s ? o->backoff_initial_s
                                                                  : MK_MANAGER_DEFAULT_BACKOFF_INITIAL_S,
                        .backoff_max_s = o->backoff_max_s ? o->backoff_max_s : MK_MANAGER_DEFAULT_BACKOFF_MAX_S};
        snprintf(m.node_path, sizeof(m.node_path), "/api/v1/nodes/%s", o->node);
        snprintf(m.field_selector, sizeof(m.field_selector), "metadata.name=%s", o->node);
        const char *root = o->host_root && *o->host_root ? o->host_root : "/";
        int r = mk_path_join(root, "var/lib/migkit/" MK_REBOOT_MARKER_NAME, &m.marker_file);
        if (r < 0)
                return log_error_errno(r, "Out of memory");
        pthread_mutex_init(&m.lock, NULL);
        pthread_cond_init(&m.cond, NULL);

        pthread_t th;
        r = -pthread_create(&th, NULL, informer_thread, &m);
        if (r < 0) {
                free(m.marker_file);
                return log_error_errno(r, "Cannot start the node watch: %m");
        }
        log_info("Watching node '%s' for %s", o->node, MK_MANAGER_CONFIG_LABEL);
        probe_node(&m);

        char *name;
        while (wait_for_run(&m, &name)) {
                r = reconcile(&m, name);
                restart_clients(&m); /* never left stopped, whatever the path */
                m.run_config = NULL;
                after_run(&m, r, name);
                free(name);
        }

        int ret = 0;
        pthread_mutex_lock(&m.lock);
        bool informer_done = m.informer_done;
        pthread_mutex_unlock(&m.lock);
        if (informer_done && !atomic_load(m.cancel)) {
                char buf[MK_ERROR_MSG_MAX + 2 * MK_ERROR_LOC_MAX];
                ret = log_error_errno(m.informer_r < 0 ? m.informer_r : -EIO, "Watch of node '%s' ended: %s",
                                      o->node, mk_error_format(&m.informer_e, buf, sizeof(buf)));
        }
        atomic_store(m.cancel, true);
        pthread_join(th, NULL);
        pthread_cond_destroy(&m.cond);
        pthread_mutex_destroy(&m.lock);
        free(m.desired);
        mk_config_free(m.reloaded);
        strv_free(m.stopped);
        free(m.marker_file);
        return ret;
}

int mk_manager_publish_config(struct mk_kube *k, const char *ns, const char *node, const char *pod_name,
                              const char *yaml, struct mk_error *e) {
        if (!node_name_valid(node) || !node_name_valid(ns))
                return mk_error_set(e, -EINVAL, "Invalid node or namespace name");
        char name[MK_MAX_NODE_NAME + 16], path[2 * MK_MAX_NODE_NAME + 64];
        snprintf(name, sizeof(name), "%s-mig-config", node);
        json_t *cm = json_pack("{s:s,s:s,s:{s:s,s:s,s:{s:s,s:s}},s:{s:s}}", "apiVersion", "v1", "kind", "ConfigMap",
                               "metadata", "name", name, "namespace", ns, "labels",
                               "app.kubernetes.io/component", "nvidia-mig-manager", "nvidia.com/node-name", node,
                               "data", "config.yaml", yaml);
        if (!cm)
                return mk_error_set(e, -ENOMEM, "Out of memory");
        if (pod_name && *pod_name && node_name_valid(pod_name)) {
                json_t *pod = NULL;
                snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", ns, pod_name);
                if (mk_kube_get(k, path, &pod, NULL) >= 0) {
                        const char *uid = json_string_value(json_object_get(json_object_get(pod, "metadata"), "uid"));
                        if (uid)
                                json_object_set_new(json_object_get(cm, "metadata"), "ownerReferences",
                                                    json_pack("[{s:s,s:s,s:s,s:s}]", "apiVersion", "v1", "kind",
                                                              "Pod", "name", pod_name, "uid", uid));
                        json_decref(pod);
                }
        }
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/configmaps", ns);
        int r = mk_kube_post(k, path, cm, NULL, e);
        if (r == -EEXIST) {
                snprintf(path, sizeof(path), "/api/v1/namespaces/%s/configmaps/%s", ns, name);
                json_t *patch = json_pack("{s:O,s:O}", "metadata", json_object_get(cm, "metadata"), "data",
                                          json_object_get(cm, "data"));
                json_object_del(json_object_get(patch, "metadata"), "namespace");
                r = patch ? mk_kube_patch(k, path, MK_KUBE_PATCH_MERGE, patch, NULL, e) : -ENOMEM;
                json_decref(patch);
        }
        json_decref(cm);
        return r;
}

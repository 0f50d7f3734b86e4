/* The device plugin's GPU feature labels (plugin/daemon.h, gfd/labels.h):
 * the --labels modes, the NFD feature file, the Node merge patch and the
 * labeller thread that publishes it, so a slow apiserver never holds the
 * run loop. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/fileio.h"
#include "base/log.h"
#include "base/macro.h"
#include "base/thread.h"
#include "gfd/labels.h"
#include "kube/kube.h"
#include "kube/object.h"
#include "plugin/daemon-internal.h"
#include "plugin/daemon.h"

#define MK_DP_MAX_LABEL_KEYS_BYTES (256u << 10) /* our annotation; the apiserver's cap on all annotations */

static const char *const labels_mode_table[_MK_DP_LABELS_MODE_MAX] = {
        [MK_DP_LABELS_NONE] = "none",
        [MK_DP_LABELS_NODE] = "node",
        [MK_DP_LABELS_NFD_FILE] = "nfd-file",
};

const char *mk_dp_labels_mode_to_string(enum mk_dp_labels_mode m) {
        return m >= 0 && m < _MK_DP_LABELS_MODE_MAX ? labels_mode_table[m] : NULL;
}

enum mk_dp_labels_mode mk_dp_labels_mode_from_string(const char *s) {
        if (!s)
                return _MK_DP_LABELS_MODE_INVALID;
        for (int i = 0; i < _MK_DP_LABELS_MODE_MAX; i++)
                if (streq(s, labels_mode_table[i]))
                        return (enum mk_dp_labels_mode) i;
        return _MK_DP_LABELS_MODE_INVALID;
}

/* ---- labels: NFD file and Node patch (pure parts testable) ---- */
int mk_dp_write_features_file(const char *path, const struct mk_labels *l, struct mk_error *e) {
        _cleanup_buf_done_ struct mk_buf b;
        mk_buf_init(&b, (size_t) MK_MAX_LABELS * 1024);
        for (size_t i = 0; i < l->n; i++) {
                int r = mk_buf_printf(&b, "%s=%s\n", l->items[i].key, l->items[i].value);
                if (r < 0)
                        return mk_error_set(e, r, "Cannot write the feature file '%s': %s", path, strerror(-r));
        }
        return mk_write_file_atomic(path, mk_buf_str(&b), b.len, 0644, e);
}

int mk_dp_node_labels_patch(const json_t *node, const struct mk_labels *l, json_t **ret) {
        const char *owned = mk_kube_annotation(node, MK_DP_LABELS_ANNOTATION);

        json_t *labels = json_object();
        _cleanup_buf_done_ struct mk_buf keys;
        mk_buf_init(&keys, MK_DP_MAX_LABEL_KEYS_BYTES);
        if (!labels)
                return -ENOMEM;
        bool changed = false;
        int r = 0;
        for (size_t i = 0; i < l->n && r >= 0; i++) {
                const char *cur = mk_kube_label(node, l->items[i].key);
                if (!cur || !streq(cur, l->items[i].value)) {
                        changed = true;
                        r = json_object_set_new(labels, l->items[i].key, json_string(l->items[i].value));
                }
                if (r >= 0)
                        r = mk_buf_printf(&keys, "%s%s", i ? "," : "", l->items[i].key);
        }
        /* Keys we set before and no longer compute: removed, if still there. */
        for (const char *p = owned; r >= 0 && p && *p;) {
                const char *c = strchr(p, ',');
                size_t n = c ? (size_t) (c - p) : strlen(p);
                _cleanup_free_ char *k = strndup(p, n);
                if (!k) {
                        r = -ENOMEM;
                        break;
                }
                if (*k && !mk_labels_get(l, k) && mk_kube_label(node, k)) {
                        changed = true;
                        r = json_object_set_new(labels, k, json_null());
                }
                p = c ? c + 1 : p + n;
        }
        if (r < 0) {
                json_decref(labels);
                return r == -E2BIG ? -E2BIG : -ENOMEM;
        }
        if (!owned || !streq(owned, mk_buf_str(&keys)))
                changed = true;
        if (!changed) {
                json_decref(labels);
                *ret = NULL;
                return 0;
        }
        json_t *patch = json_pack("{s:{s:o,s:{s:s}}}", "metadata", "labels", labels, "annotations",
                                  MK_DP_LABELS_ANNOTATION, mk_buf_str(&keys));
        if (!patch)
                return -ENOMEM;
        *ret = patch;
        return 0;
}

/* Merge-patches `l` onto the Node (GET, compute, PATCH when something
 * changed). Runs on the labeller thread. */
static int node_labels_publish(struct dp_daemon *d, const struct mk_labels *l) {
        char path[MK_K8S_PATH_MAX];
        struct mk_error e = {0};
        _cleanup_(json_decrefp) json_t *node = NULL, *patch = NULL;
        int r = mk_kube_core_path(NULL, "nodes", d->o->node_name, path, sizeof(path));
        if (r < 0)
                mk_error_set(&e, r, "Invalid node name");
        else
                r = mk_kube_get(d->o->kube, path, &node, &e);
        if (r >= 0) {
                r = mk_dp_node_labels_patch(node, l, &patch);
                if (r < 0)
                        mk_error_set(&e, r, "Cannot build the label patch");
        }
        if (r >= 0 && patch) {
                r = mk_kube_patch(d->o->kube, path, MK_KUBE_PATCH_MERGE, patch, NULL, &e);
                if (r >= 0)
                        log_info("Labelled node '%s' with %zu labels", d->o->node_name, l->n);
        }
        if (r < 0)
                log_warning_errno(r, "Cannot label node '%s': %s; retrying in %.3gs", d->o->node_name, e.msg,
                                  dp_retry_ms(d) / 1000.0);
        return r;
}

/* The labeller thread: the apiserver may be slow or away, and the main loop
 * must keep answering signals and kubelet restarts, so Node labels are
 * published here. It takes the newest labels handed over, and retries a
 * failed publication every dp_retry_ms() until newer labels replace it. */
static void *labeller_main(void *userdata) {
        struct dp_daemon *d = userdata;
        struct mk_labels *cur = NULL;
        struct timespec deadline = {0};
        pthread_mutex_lock(&d->lab_lock);
        for (;;) {
                while (!d->lab_pending && !d->lab_stop) {
                        if (!cur)
                                pthread_cond_wait(&d->lab_cond, &d->lab_lock);
                        else if (pthread_cond_timedwait(&d->lab_cond, &d->lab_lock, &deadline) == ETIMEDOUT)
                                break;
                }
                if (d->lab_stop)
                        break;
                if (d->lab_pending) {
                        mk_labels_free(cur);
                        cur = TAKE_PTR(d->lab_pending);
                }
                pthread_mutex_unlock(&d->lab_lock);
                int r = node_labels_publish(d, cur);
                pthread_mutex_lock(&d->lab_lock);
                if (r >= 0)
                        cur = mk_labels_free(cur);
                else {
                        deadline = mk_deadline_in_ms(dp_retry_ms(d));
                }
        }
        pthread_mutex_unlock(&d->lab_lock);
        mk_labels_free(cur);
        return NULL;
}

int dp_labeller_start(struct dp_daemon *d, struct mk_error *e) {
        mk_cond_init_monotonic(&d->lab_cond);
        pthread_mutex_init(&d->lab_lock, NULL);
        d->lab_init = true;
        int r = pthread_create(&d->lab_thread, NULL, labeller_main, d);
        if (r != 0)
                return mk_error_set(e, -r, "Cannot start the labeller thread");
        d->lab_running = true;
        return 0;
}

/* Joins the labeller (after the request in flight, bounded by the
 * client's timeouts). */
void dp_labeller_stop(struct dp_daemon *d) {
        if (d->lab_running) {
                pthread_mutex_lock(&d->lab_lock);
                d->lab_stop = true;
                pthread_cond_signal(&d->lab_cond);
                pthread_mutex_unlock(&d->lab_lock);
                pthread_join(d->lab_thread, NULL);
                d->lab_running = false;
        }
        if (d->lab_init) {
                d->lab_pending = mk_labels_free(d->lab_pending);
                pthread_cond_destroy(&d->lab_cond);
                pthread_mutex_destroy(&d->lab_lock);
                d->lab_init = false;
        }
}

/* Computes the GFD labels and puts them where o->labels says: the NFD file
 * at once (retried every dp_retry_ms() on failure), the Node through the
 * labeller thread. Failures never stop the plugin. */
void dp_labels_refresh(struct dp_daemon *d) {
        d->labels_retry_at_ms = 0;
        if (d->o->labels == MK_DP_LABELS_NONE || !d->snapshot)
                return;
        _cleanup_free_ char *machine = NULL;
        struct mk_error me = {0};
        if (!d->o->machine_type_file || mk_read_sysfs_attr(d->o->machine_type_file, &machine, &me) < 0)
                machine = NULL;
        struct mk_labels_host host = {.vgpu_present = -1};
        if (d->dp.host)
                mk_labels_host_read(d->dp.host, d->snapshot, &host);
        struct mk_labels_input in = {
                .snapshot = d->snapshot,
                .host = &host,
                .strategy = d->dp.mig_strategy,
                .config = d->dp.config,
                .cuda_driver_version = d->snapshot->cuda_driver_version,
                .machine_type = machine ? machine : "unknown",
                .timestamp = d->o->labels == MK_DP_LABELS_NFD_FILE ? (uint64_t) time(NULL) : 0,
        };
        struct mk_error e = {0};
        _cleanup_(mk_labels_freep) struct mk_labels *l = NULL;
        int r = mk_labels_compute(&in, &l, &e);
        if (r < 0) {
                log_warning_errno(r, "Cannot compute the GPU feature labels: %s, ignoring", e.msg);
                return;
        }
        if (d->o->labels == MK_DP_LABELS_NODE) {
                pthread_mutex_lock(&d->lab_lock);
                mk_labels_free(d->lab_pending);
                d->lab_pending = TAKE_PTR(l);
                pthread_cond_signal(&d->lab_cond);
                pthread_mutex_unlock(&d->lab_lock);
                return;
        }
        const char *path = d->o->nfd_features_file ? d->o->nfd_features_file : MK_DP_DEFAULT_NFD_FILE;
        r = mk_dp_write_features_file(path, l, &e);
        if (r >= 0)
                log_info("Wrote %zu labels to '%s'", l->n, path);
        else {
                log_warning_errno(r, "%s; retrying in %.3gs", e.msg, dp_retry_ms(d) / 1000.0);
                d->labels_retry_at_ms = dp_now_ms() + dp_retry_ms(d);
        }
}

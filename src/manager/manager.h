/* The Kubernetes MIG manager (`migkit manager`, docs/manager.md): follows
 * its own Node's nvidia.com/mig.config label and applies the named config
 * through the engine, reporting nvidia.com/mig.config.state = pending /
 * rebooting / success / failed. Around a change that touches a GPU it
 * pauses the GPU operator's components (nvidia.com/gpu.deploy.* labels that
 * are exactly "true"), records what it paused in an annotation so that a
 * restarted manager restores exactly those, waits (bounded) for the GPU
 * pods of the node to leave, and stops host GPU clients when asked. Every
 * run ends in success or failed with the labels restored; failed runs are
 * retried with exponential backoff and on every label change. */
#pragma once

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>

#include <jansson.h>

#include "base/macro.h"

struct mk_config;
struct mk_error;
struct mk_hooks;
struct mk_kube;
struct mk_gpu_clients;

#define MK_MANAGER_CONFIG_LABEL "nvidia.com/mig.config"
#define MK_MANAGER_STATE_LABEL "nvidia.com/mig.config.state"
#define MK_MANAGER_DEPLOY_PREFIX "nvidia.com/gpu.deploy."
#define MK_MANAGER_PAUSED_VALUE "paused-for-mig-change"
#define MK_MANAGER_PAUSED_ANNOTATION "migkit.io/paused-labels"
#define MK_MANAGER_FAILURE_ANNOTATION "migkit.io/mig.config.failure"  /* the last failure's reason; gone on success */
#define MK_MANAGER_EVENT_COMPONENT "migkit-manager"

#define MK_MANAGER_DEFAULT_POD_WAIT_S 300
#define MK_MANAGER_DEFAULT_BACKOFF_INITIAL_S 10
#define MK_MANAGER_DEFAULT_BACKOFF_MAX_S 300
#define MK_MANAGER_POD_POLL_MS 1000
#define MK_MANAGER_RESTORE_RETRY_MS 120000u  /* a failed run retries restoring paused labels this long */
#define MK_MAX_PAUSED_LABELS 64          /* entries of the paused-labels annotation */

enum mk_mig_state {
        MK_MIG_STATE_PENDING,
        MK_MIG_STATE_REBOOTING,
        MK_MIG_STATE_SUCCESS,
        MK_MIG_STATE_FAILED,
        _MK_MIG_STATE_MAX,
        _MK_MIG_STATE_INVALID = -EINVAL,
};
const char *mk_mig_state_to_string(enum mk_mig_state s);
enum mk_mig_state mk_mig_state_from_string(const char *s);

struct mk_manager_opts {
        const char *node;                       /* NODE_NAME, required */
        const char *config_file;                /* for hooks (MIG_PARTED_CONFIG_FILE) and messages */
        const char *hooks_file;                 /* NULL: no hooks */
        const char *host_root;                  /* reboot marker below <host_root>/var/lib/migkit */
        const char *pod_name;                   /* our own Pod (never waited for); NULL */
        const char *event_namespace;            /* where Events go; NULL: "default" */
        bool with_reboot;
        bool with_shutdown_host_gpu_clients;
        unsigned pod_wait_timeout_s;            /* 0: MK_MANAGER_DEFAULT_POD_WAIT_S */
        unsigned backoff_initial_s;             /* 0: MK_MANAGER_DEFAULT_BACKOFF_INITIAL_S */
        unsigned backoff_max_s;                 /* 0: MK_MANAGER_DEFAULT_BACKOFF_MAX_S */
        atomic_bool *cancel;                    /* set (e.g. from a signal handler) to stop */
};

/* Runs until *cancel is set (returns 0) or a non-transient apiserver error
 * ends the Node watch (negative errno, logged). The config, hooks and
 * host GPU clients (NULL when host clients are not managed) are borrowed
 * for the whole run. */
int mk_manager_run(struct mk_kube *k, const struct mk_config *c, const struct mk_hooks *h,
                   const struct mk_gpu_clients *clients, const struct mk_manager_opts *o) _nonnull_(1, 2, 5);

/* ---- pure helpers (tests/unit/test-manager.c) ---- */

/* The deploy labels to pause from a Node's metadata.labels object: every
 * nvidia.com/gpu.deploy.* label (but .mig-manager) whose value is exactly
 * "true", sorted, as a JSON array of names (new reference). */
json_t *mk_manager_labels_to_pause(const json_t *labels);

/* The merge patch of metadata that restores `paused` (an array of label
 * names): each label whose current value is still "paused-for-mig-change"
 * goes back to "true" (labels another controller changed meanwhile are left
 * alone) and the paused-labels annotation is removed. New reference. */
json_t *mk_manager_restore_patch(const json_t *labels, const json_t *paused);

/* The annotation's list: a JSON array of label names; malformed or missing
 * gives an empty array (new reference). */
json_t *mk_manager_paused_from_annotations(const json_t *annotations);

/* Does this Pod count as a GPU component that must leave before a change:
 * not finished (phase Succeeded/Failed), not our own pod, and its "app"
 * label is one of the GPU operator's components. User workloads (pods that
 * merely request nvidia.com/ resources) are never waited for. */
bool mk_manager_pod_is_gpu_client(const json_t *pod, const char *own_pod_name);

/* Backoff after `failures` failed runs in a row (>= 1): initial doubling to max. */
unsigned mk_manager_backoff_s(unsigned failures, unsigned initial_s, unsigned max_s);

/* Creates or updates ConfigMap <node>-mig-config in `ns` with key
 * config.yaml = `yaml` and labels app.kubernetes.io/component=nvidia-mig-manager
 * and nvidia.com/node-name=<node>; owned by Pod `pod_name` when it is given
 * and can be read. Errors are returned with e (callers warn). */
int mk_manager_publish_config(struct mk_kube *k, const char *ns, const char *node, const char *pod_name,
                              const char *yaml, struct mk_error *e) _nonnull_(1, 2, 3, 5);

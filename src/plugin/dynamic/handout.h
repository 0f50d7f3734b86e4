/* What the dynamic MIG device plugin handed out, and how a reservation
 * follows it (docs/device-plugin.md "Dynamic MIG mode", docs/scheduler.md
 * "How the device plugin's Allocate finds its reservation").
 *
 * kubelet's Allocate names no pod, so dynamic.c answers with the devices
 * of the earliest-reserved ready pod of the request's shape. When kubelet
 * admits two such pods out of order, each gets the other's instances. Each
 * dynamic Allocate is recorded here (a "handout": the container requests'
 * device ids -> the pod assumed and the devices answered); kubelet's
 * PodResources List later says which pod holds those ids, and
 * mk_dp_handouts_decide() says which reservations to move so that they
 * name what each pod really got. Pure: no I/O but the state file's
 * load/save; the daemon does the List and the patches. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/error.h"
#include "base/macro.h"
#include "claim/claim.h"

#define MK_DP_HANDOUT_MAX 4096u                /* handouts kept; the oldest is dropped beyond */
#define MK_DP_HANDOUT_FILE "migkit-dynamic-handouts.json" /* in the plugin directory */
#define MK_DP_HANDOUT_MAX_FILE (32u << 20)     /* the state file read back */
#define MK_DP_HANDOUT_MAX_ID 256u              /* one device id */
#define MK_DP_HANDOUT_TTL_S 3600               /* a handout kubelet never reported is forgotten after */
#define MK_DP_HANDOUT_UNSEEN_S 120             /* ... or after this when no List has answered since it was made */
#define MK_DP_HANDOUT_FILE_VERSION 1

/* One dynamic Allocate answered. */
struct mk_dp_handout {
        uint64_t seq;                   /* order of the Allocates, from 1 */
        int64_t time;                   /* unix seconds */
        char **keys;                    /* per container request: its device ids sorted, joined by ',' */
        size_t n_keys;
        struct mk_claim *slot;          /* the pod assumed (namespace, name, uid) and the devices answered
                                         * (its reservation, MIG UUIDs), as it was then */
        struct mk_claim *displaced;     /* the reservation of the pod that really got slot, saved before it
                                         * is moved (the assumed pod gets it); NULL until then */
        char *holder;                   /* "namespace/name" of the pod kubelet's List showed holding the
                                         * ids; NULL until then ("resolved"). A later pod holding the
                                         * same ids without a newer handout is not this one's. */
};

struct mk_dp_handouts {
        struct mk_dp_handout *v;        /* oldest first */
        size_t n;
        uint64_t next_seq;
};

/* Frees every handout and empties h (h itself is the caller's). */
void mk_dp_handouts_done(struct mk_dp_handouts *h);

/* Records one Allocate: ids[i] (n_ids[i] of them, 1..MK_MAX_CLAIM_DEVICES)
 * are container request i's device ids (1..MK_MAX_POD_CONTAINERS requests),
 * `assumed` the claim answered (copied). Drops the oldest handout beyond
 * MK_DP_HANDOUT_MAX. -EINVAL for counts or ids out of bounds, -ENOMEM; h
 * is unchanged on failure. */
int mk_dp_handouts_add(struct mk_dp_handouts *h, const char *const *const *ids, const size_t *n_ids,
                       size_t n_containers, const struct mk_claim *assumed, int64_t now, struct mk_error *e)
        _nonnull_(1, 2, 3, 5) _wur_;

/* The key of a container's device ids (sorted, joined by ','), malloc'd in
 * *ret. -EINVAL for 0 or over MK_MAX_CLAIM_DEVICES ids, an empty id, one
 * over MK_DP_HANDOUT_MAX_ID or with a ','; -ENOMEM. */
int mk_dp_handout_key(const char *const *ids, size_t n, char **ret) _nonnull_(3) _wur_;

/* The newest handout all of whose keys are among keys[0..n) (one pod's
 * containers as kubelet reports them), or NULL. */
struct mk_dp_handout *mk_dp_handouts_find(const struct mk_dp_handouts *h, const char *const *keys, size_t n)
        _nonnull_(1);

/* A pod as kubelet's PodResources List reports it: its containers' keys
 * for the dynamic resource (containers without it left out). */
struct mk_dp_held {
        const char *namespace, *name;
        char **keys;
        size_t n_keys;
};

/* A pod of the node as the apiserver has it. */
struct mk_dp_pod {
        struct mk_claim claim;          /* with a reservation (mk_claim_from_pod() returned 1) */
        const char *handed;             /* migkit.io/mig-handed, NULL when absent */
};

enum mk_dp_fix_kind {
        MK_DP_FIX_HANDED,               /* write migkit.io/mig-handed = to's MIG UUIDs (first) */
        MK_DP_FIX_RESERVATION,          /* move the reservation: devices, migkit.io/mig-devices, mig-allocated */
};

/* One patch to make. */
struct mk_dp_fix {
        enum mk_dp_fix_kind kind;
        size_t pod;                     /* index in the pods given */
        struct mk_claim to;             /* the pod's claim as it must become (devices, allocated) */
};

/* The corrections one kubelet List calls for. For each pod X that kubelet
 * reports with a handout's ids (mk_dp_handouts_find; a handout already
 * resolved to another holder is stale: skipped) answered assuming another
 * pod Y: X must hold the handout's devices, allocated. Y, when not
 * admitted (not in `held`) and still holding them, must get X's devices of
 * before (saved in the handout's `displaced` first, so a correction cut
 * short is finished by the next call) with X's allocated mark. Order, so
 * that no instance in use is ever unnamed (the node agent destroys MIG
 * instances no active pod reserves or hands): while a pod X lacks
 * migkit.io/mig-handed naming what it holds, only MK_DP_FIX_HANDED fixes
 * are returned; then the MK_DP_FIX_RESERVATION ones. Marks handouts
 * resolved; *ret_changed says whether h changed (to be saved before the
 * patches). *ret (free()) holds *ret_n fixes; none when everything already
 * matches. -ENOMEM. */
int mk_dp_handouts_decide(struct mk_dp_handouts *h, const struct mk_dp_held *held, size_t n_held,
                          const struct mk_dp_pod *pods, size_t n_pods, struct mk_dp_fix **ret, size_t *ret_n,
                          bool *ret_changed) _nonnull_(1, 6, 7, 8) _wur_;

/* Whether a handout younger than MK_DP_HANDOUT_TTL_S waits for kubelet to
 * report it (the reconciler keeps polling while one does). */
bool mk_dp_handouts_pending(const struct mk_dp_handouts *h, int64_t now) _nonnull_(1);

/* Drops handouts no pod needs any more: resolved ones whose ids no pod of
 * `held` holds and whose assumed pod is not among `pods`, and unresolved
 * ones older than MK_DP_HANDOUT_TTL_S. Returns how many were dropped. */
size_t mk_dp_handouts_prune(struct mk_dp_handouts *h, const struct mk_dp_held *held, size_t n_held,
                            const struct mk_dp_pod *pods, size_t n_pods, int64_t now) _nonnull_(1);

/* Drops the unresolved handouts made after `listed` (the last time
 * kubelet's PodResources List answered, unix seconds; 0: never) that are
 * MK_DP_HANDOUT_UNSEEN_S old: no List has answered since they were made,
 * so nothing can resolve them (the API is off or kubelet is down), and
 * kept for MK_DP_HANDOUT_TTL_S they would only hold memory, up to
 * MK_DP_HANDOUT_MAX of about 6 KiB each. Returns how many were dropped. */
size_t mk_dp_handouts_expire_unseen(struct mk_dp_handouts *h, int64_t listed, int64_t now) _nonnull_(1);

/* The state file's text: {"version":1,"next":N,"handouts":[{"seq","time",
 * "containers":[[ids]...],"pod":{"namespace","name","uid"},"reservation":
 * "<annotation>","devices":"<annotation>","allocated"},"holder":"ns/name"
 * or null,"displaced":{...as pod} or null}]}. *ret malloc'd. */
int mk_dp_handouts_format(const struct mk_dp_handouts *h, char **ret) _nonnull_(1, 2) _wur_;

/* Parses the state file's text (untrusted: strict, bounded by
 * MK_DP_HANDOUT_MAX_FILE and MK_DP_HANDOUT_MAX handouts, every field
 * checked, reservations through mk_claim_reservation_parse). -EINVAL with
 * the field in e, -E2BIG, -ENOMEM; *ret (empty before) filled only on
 * success. */
int mk_dp_handouts_parse(const char *s, size_t len, struct mk_dp_handouts *ret, struct mk_error *e)
        _nonnull_(1, 3) _wur_;

/* Loads <path> (absent: empty, 0) / saves it atomically. */
int mk_dp_handouts_load(const char *path, struct mk_dp_handouts *ret, struct mk_error *e) _nonnull_(1, 2) _wur_;
int mk_dp_handouts_save(const struct mk_dp_handouts *h, const char *path, struct mk_error *e)
        _nonnull_(1, 2) _wur_;

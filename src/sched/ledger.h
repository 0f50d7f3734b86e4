/* The bind ledger: a Node annotation, migkit.io/mig-binds, holding the
 * reservations that any extender replica's bind made on that Node in the
 * last MK_SCHED_LEDGER_TTL_S seconds. It is what lets replicas share the
 * work: a bind reads the Node, takes the ledger's reservations into its
 * cache (one its pod informer has not delivered yet still counts), decides,
 * and writes the ledger back as a compare-and-swap of the annotation (a
 * JSON patch testing the value it read; the first one with the Node's
 * resourceVersion as the precondition), so two binds on one Node are
 * serialised by the apiserver and never both get a slot (docs/scheduler.md,
 * "Replicas").
 *
 * Value: a JSON array of {"uid":U,"namespace":NS,"name":N,"reservation":R},
 * R the pod's migkit.io/mig-reservation value (claim.h) as a string; at most
 * MK_SCHED_LEDGER_MAX entries. Pure: JSON in and out, no I/O. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/error.h"
#include "base/macro.h"
#include "claim/claim.h"

#define MK_ANN_BINDS "migkit.io/mig-binds"
#define MK_SCHED_LEDGER_TTL_S 30        /* an entry is kept this long after its reservation's time */
#define MK_SCHED_LEDGER_MAX 128u        /* entries in one Node's ledger */
#define MK_SCHED_LEDGER_BYTES (MK_SCHED_LEDGER_MAX * 1024u) /* the annotation's cap (a 1-device entry: ~400) */

/* The entries of `node`'s ledger (a Node object) whose reservation is on
 * that node and at most MK_SCHED_LEDGER_TTL_S old at `now`, as a new JSON
 * array. A missing annotation is an empty ledger. A malformed annotation
 * or entry is left out (the ledger is rewritten without it) and reported
 * in `e` with -EINVAL; *ret is set all the same. -ENOMEM. */
int mk_sched_ledger_read(const json_t *node, int64_t now, json_t **ret, struct mk_error *e)
        _nonnull_(1, 3) _wur_;

/* The reservation of a ledger entry (uid, namespace, name, node, time,
 * devices; active). -EINVAL naming the field. */
int mk_sched_ledger_claim(const json_t *entry, struct mk_claim *ret, struct mk_error *e) _nonnull_(1, 2) _wur_;

/* Puts `c`'s reservation in `ledger`, replacing the entry of its pod.
 * -E2BIG when MK_SCHED_LEDGER_MAX entries are there already, -ENOMEM. */
int mk_sched_ledger_put(json_t *ledger, const struct mk_claim *c) _nonnull_(1, 2) _wur_;

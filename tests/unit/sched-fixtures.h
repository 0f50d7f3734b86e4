/* Fixtures shared by the scheduler and claim unit tests (test-sched*.c,
 * test-claim.c): claims built field by field, and a pending pod as the
 * apiserver sends it. Included by each test binary; needs cmocka first. */
#pragma once

#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "claim/claim.h"

static inline struct mk_placement pl(unsigned s, unsigned n) {
        return (struct mk_placement) {.start = s, .size = n};
}

static inline struct mk_claim make_claim(const char *ns, const char *name, const char *uid, const char *node,
                                         int64_t t) {
        struct mk_claim c = {.time = t, .active = true};
        snprintf(c.namespace, sizeof(c.namespace), "%s", ns);
        snprintf(c.name, sizeof(c.name), "%s", name);
        snprintf(c.uid, sizeof(c.uid), "%s", uid);
        snprintf(c.node, sizeof(c.node), "%s", node);
        return c;
}

/* Appends one device (MIG UUID `mig`, or none when NULL) to `c`. */
static inline void add_dev(struct mk_claim *c, unsigned ctr, const char *gpu, const char *profile, unsigned id,
                           unsigned slices, struct mk_placement p, const char *mig) {
        struct mk_claim_device *d = &c->devices[c->n_devices++];
        *d = (struct mk_claim_device) {.container = ctr, .profile_id = id, .slices = slices, .placement = p};
        snprintf(d->gpu, sizeof(d->gpu), "%s", gpu);
        snprintf(d->profile, sizeof(d->profile), "%s", profile);
        snprintf(d->mig_uuid, sizeof(d->mig_uuid), "%s", mig ? mig : "");
}

/* Pending pod ns/pod-<uid> with one container of `resources` (JSON text)
 * and `annotations` (JSON members, or NULL). */
static inline json_t *pod_json(const char *uid, const char *resources, const char *annotations) {
        char buf[4096];
        snprintf(buf, sizeof(buf),
                 "{\"metadata\":{\"namespace\":\"ns\",\"name\":\"pod-%s\",\"uid\":\"%s\",\"annotations\":{%s}},"
                 "\"spec\":{\"containers\":[{\"name\":\"c\",\"resources\":%s}]},\"status\":{\"phase\":\"Pending\"}}",
                 uid, uid, annotations ? annotations : "", resources);
        json_error_t je;
        json_t *j = json_loads(buf, 0, &je);
        if (!j)
                fail_msg("bad test pod: %s", je.text);
        return j;
}

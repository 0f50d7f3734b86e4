/* Fixtures shared by the scheduler and claim unit tests (test-sched*.c,
 * test-claim.c): a GPU's profiles in an inventory annotation, claims built
 * field by field, and a pending pod as the apiserver sends it. Included by each test binary; needs cmocka first. */
#pragma once

#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "claim/claim.h"

/* The start of an inventory annotation's GPU 0 after its uuid: an
 * A100-40GB-like GPU offering 1g.5gb and 3g.20gb; its instances follow. */
#define FIXTURE_INV_A100_PROFILES                                                                                 \
        "\"model\":\"NVIDIA A100-SXM4-40GB\",\"memoryMiB\":40960,\"units\":8,\"slices\":7,\"sms\":98,"              \
        "\"mig\":true,\"profiles\":[{\"name\":\"1g.5gb\",\"id\":19,\"slices\":1,\"memoryMiB\":4864,"               \
        "\"maxCount\":7,\"sms\":14,\"placements\":[[0,1],[1,1],[2,1],[3,1],[4,1],[5,1],[6,1]]},"                        \
        "{\"name\":\"3g.20gb\",\"id\":9,\"slices\":3,\"memoryMiB\":19968,\"maxCount\":2,\"sms\":42,"              \
        "\"placements\":[[0,4],[4,4]]}],"

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

/* Appends one soft slice (unified pool) of GPU `gpu` to `c`; `uuid` as
 * the agent's mig-devices entry, or none when NULL. */
static inline void add_soft(struct mk_claim *c, unsigned ctr, const char *gpu, uint64_t memory_mib, unsigned cores,
                            const char *uuid) {
        struct mk_claim_device *d = &c->devices[c->n_devices++];
        *d = (struct mk_claim_device) {.container = ctr, .mode = MK_CLAIM_SOFT, .memory_mib = memory_mib,
                                       .cores = cores};
        snprintf(d->gpu, sizeof(d->gpu), "%s", gpu);
        snprintf(d->mig_uuid, sizeof(d->mig_uuid), "%s", uuid ? uuid : "");
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

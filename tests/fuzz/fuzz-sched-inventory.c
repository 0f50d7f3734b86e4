/* libFuzzer target for the node inventory annotation and the pod
 * reservation annotation (sched/inventory.h, claim/claim.h): arbitrary bytes
 * never crash or leak; a parsed inventory has every placement inside its GPU
 * and formats back to a value that parses to the same bytes; a parsed
 * reservation (MIG or soft devices) formats back to a value that parses to
 * the same devices. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "claim/claim.h"
#include "sched/inventory.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Field by field: the struct has padding. */
static bool same_device(const struct mk_claim_device *a, const struct mk_claim_device *b) {
        return a->container == b->container && a->mode == b->mode && strcmp(a->gpu, b->gpu) == 0 &&
               strcmp(a->profile, b->profile) == 0 && a->profile_id == b->profile_id && a->slices == b->slices &&
               a->placement.start == b->placement.start && a->placement.size == b->placement.size &&
               a->memory_mib == b->memory_mib && a->cores == b->cores;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct mk_inventory *inv = NULL;
        struct mk_error e = {0};
        if (mk_inventory_parse((const char *) data, size, &inv, &e) >= 0) {
                for (size_t g = 0; g < inv->n_gpus; g++)
                        for (size_t p = 0; p < inv->gpus[g].n_profiles; p++)
                                for (size_t k = 0; k < inv->gpus[g].profiles[p].n_placements; k++) {
                                        struct mk_placement pl = inv->gpus[g].profiles[p].placements[k];
                                        if (pl.size == 0 || pl.start + pl.size > inv->gpus[g].memory_units)
                                                abort();
                                }
                char *a = NULL, *b = NULL;
                struct mk_inventory *again = NULL;
                if (mk_inventory_format(inv, &a, NULL) >= 0) {
                        if (mk_inventory_parse(a, strlen(a), &again, NULL) < 0 || mk_inventory_format(again, &b, NULL) < 0 ||
                            strcmp(a, b) != 0)
                                abort();
                }
                free(a);
                free(b);
                mk_inventory_free(again);
                mk_inventory_free(inv);
        } else if (e.msg[0] == 0 || inv)
                abort();
        /* The same bytes as a reservation (NUL-terminated copy). */
        char *s = malloc(size + 1);
        if (!s)
                return 0;
        memcpy(s, data, size);
        s[size] = 0;
        struct mk_claim *c = calloc(2, sizeof(*c));
        if (c && mk_claim_reservation_parse(s, c, NULL) >= 0) {
                if (c->n_devices == 0 || c->n_devices > MK_MAX_CLAIM_DEVICES)
                        abort();
                for (size_t i = 0; i < c->n_devices; i++)
                        if (c->devices[i].mode == MK_CLAIM_SOFT &&
                            (c->devices[i].memory_mib == 0 || c->devices[i].cores > 100))
                                abort();
                char *r = NULL;
                if (mk_claim_reservation_format(c, &r) >= 0) {
                        if (mk_claim_reservation_parse(r, &c[1], NULL) < 0 || c[1].n_devices != c->n_devices)
                                abort();
                        for (size_t i = 0; i < c->n_devices; i++)
                                if (!same_device(&c->devices[i], &c[1].devices[i]))
                                        abort();
                        free(r);
                }
        }
        free(c);
        free(s);
        return 0;
}

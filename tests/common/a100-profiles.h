/* The A100-SXM4-40GB MIG profiles as the node agent's inventory lists them,
 * and a seeded random generator: shared by tests/unit/test-sched-fast.c and
 * bench/bench-extender.c, which build random inventories from them. */
#pragma once

#include <stdint.h>

#include <jansson.h>

#include "base/macro.h"

/* A100-SXM4-40GB (MIG user guide, "Supported MIG Profiles"). */
static const struct a100_prof {
        const char *name;
        unsigned id, slices, mib, max, sms, size, n_starts, starts[7];
} a100_profs[] = {
        {"1g.5gb", 19, 1, 4864, 7, 14, 1, 7, {0, 1, 2, 3, 4, 5, 6}},
        {"1g.5gb+me", 20, 1, 4864, 1, 14, 1, 7, {0, 1, 2, 3, 4, 5, 6}},
        {"1g.10gb", 15, 1, 9856, 4, 14, 2, 4, {0, 2, 4, 6}},
        {"2g.10gb", 14, 2, 9856, 3, 28, 2, 3, {0, 2, 4}},
        {"3g.20gb", 9, 3, 19968, 2, 42, 4, 2, {0, 4}},
        {"4g.20gb", 5, 4, 19968, 1, 56, 4, 1, {0}},
        {"7g.40gb", 0, 7, 40448, 1, 98, 8, 1, {0}},
};

/* splitmix64: a fixed seed gives the same sequence every run. */
static inline uint64_t rng_next(uint64_t *s) {
        uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
}

/* The inventory's "profiles" array of an A100 (a new reference). */
static inline json_t *a100_profiles_json(void) {
        json_t *a = json_array();
        for (size_t i = 0; i < ELEMENTSOF(a100_profs); i++) {
                const struct a100_prof *p = &a100_profs[i];
                json_t *pl = json_array();
                for (unsigned k = 0; k < p->n_starts; k++)
                        json_array_append_new(pl, json_pack("[i, i]", (int) p->starts[k], (int) p->size));
                json_array_append_new(a, json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:o}", "name", p->name, "id",
                                                   (int) p->id, "slices", (int) p->slices, "memoryMiB", (int) p->mib,
                                                   "maxCount", (int) p->max, "sms", (int) p->sms, "placements", pl));
        }
        return a;
}

/* A string-keyed hash table of borrowed values: FNV-1a, chained, a power of
 * two of buckets doubled when the load passes 1, the key stored inside its
 * entry (a lookup touches one allocation besides the bucket array). No
 * locking: callers guard a shared map (the scheduler's node cache holds a
 * read-write lock around it). A zeroed struct is an empty map. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "base/macro.h"

struct mk_hashmap_entry;

struct mk_hashmap {
        struct mk_hashmap_entry **buckets;
        size_t n_buckets;               /* 0 or a power of two */
        size_t n;                       /* entries */
};

/* The value of `key`, NULL when absent. */
void *mk_hashmap_get(const struct mk_hashmap *m, const char *key) _nonnull_(1, 2);

/* Adds `key` (copied) with `value` (borrowed). -EEXIST when the key is
 * there already, -ENOMEM; the map is unchanged on failure. */
int mk_hashmap_put(struct mk_hashmap *m, const char *key, void *value) _nonnull_(1, 2) _wur_;

/* Removes `key` and returns its value (NULL when absent). */
void *mk_hashmap_remove(struct mk_hashmap *m, const char *key) _nonnull_(1, 2);

/* Calls fn(key, value, userdata) for every entry, in no given order, until
 * it returns non-zero (returned). The map must not change meanwhile. */
int mk_hashmap_foreach(const struct mk_hashmap *m, int (*fn)(const char *key, void *value, void *userdata),
                       void *userdata) _nonnull_(1, 2);

/* Removes every entry, passing each value to free_value (may be NULL), and
 * releases the buckets: *m is an empty map again. Accepts NULL. */
void mk_hashmap_clear(struct mk_hashmap *m, void (*free_value)(void *));

/* The FNV-1a hash of a string (the map's). */
uint64_t mk_hash_str(const char *s) _nonnull_(1);

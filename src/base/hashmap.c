/* String-keyed hash table (hashmap.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/hashmap.h"

struct mk_hashmap_entry {
        struct mk_hashmap_entry *next;
        void *value;
        uint64_t hash;
        char key[];
};

uint64_t mk_hash_str(const char *s) {
        uint64_t h = 14695981039346656037ull; /* FNV-1a: the 64-bit offset basis and prime */
        for (; *s; s++)
                h = (h ^ (unsigned char) *s) * 1099511628211ull;
        return h;
}

void *mk_hashmap_get(const struct mk_hashmap *m, const char *key) {
        if (!m->n_buckets)
                return NULL;
        uint64_t h = mk_hash_str(key);
        for (struct mk_hashmap_entry *e = m->buckets[h & (m->n_buckets - 1)]; e; e = e->next)
                if (e->hash == h && streq(e->key, key))
                        return e->value;
        return NULL;
}

static int grow(struct mk_hashmap *m) {
        size_t nb = m->n_buckets ? m->n_buckets * 2 : 64;
        struct mk_hashmap_entry **b = calloc(nb, sizeof(*b));
        if (!b)
                return -ENOMEM;
        for (size_t i = 0; i < m->n_buckets; i++)
                for (struct mk_hashmap_entry *e = m->buckets[i], *next; e; e = next) {
                        next = e->next;
                        size_t k = e->hash & (nb - 1);
                        e->next = b[k];
                        b[k] = e;
                }
        free(m->buckets);
        m->buckets = b;
        m->n_buckets = nb;
        return 0;
}

int mk_hashmap_put(struct mk_hashmap *m, const char *key, void *value) {
        if (mk_hashmap_get(m, key))
                return -EEXIST;
        if (m->n + 1 > m->n_buckets && grow(m) < 0)
                return -ENOMEM;
        size_t len = strlen(key);
        struct mk_hashmap_entry *e = malloc(sizeof(*e) + len + 1);
        if (!e)
                return -ENOMEM;
        memcpy(e->key, key, len + 1);
        e->hash = mk_hash_str(key);
        size_t k = e->hash & (m->n_buckets - 1);
        e->value = value;
        e->next = m->buckets[k];
        m->buckets[k] = e;
        m->n++;
        return 0;
}

void *mk_hashmap_remove(struct mk_hashmap *m, const char *key) {
        if (!m->n_buckets)
                return NULL;
        uint64_t h = mk_hash_str(key);
        for (struct mk_hashmap_entry **p = &m->buckets[h & (m->n_buckets - 1)]; *p; p = &(*p)->next)
                if ((*p)->hash == h && streq((*p)->key, key)) {
                        struct mk_hashmap_entry *e = *p;
                        void *v = e->value;
                        *p = e->next;
                        free(e);
                        m->n--;
                        return v;
                }
        return NULL;
}

int mk_hashmap_foreach(const struct mk_hashmap *m, int (*fn)(const char *key, void *value, void *userdata),
                       void *userdata) {
        for (size_t i = 0; i < m->n_buckets; i++)
                for (struct mk_hashmap_entry *e = m->buckets[i]; e; e = e->next) {
                        int r = fn(e->key, e->value, userdata);
                        if (r != 0)
                                return r;
                }
        return 0;
}

void mk_hashmap_clear(struct mk_hashmap *m, void (*free_value)(void *)) {
        if (!m)
                return;
        for (size_t i = 0; i < m->n_buckets; i++)
                for (struct mk_hashmap_entry *e = m->buckets[i], *next; e; e = next) {
                        next = e->next;
                        if (free_value)
                                free_value(e->value);
                        free(e);
                }
        free(m->buckets);
        *m = (struct mk_hashmap) {0};
}

/* See track.h. Linear probing; a removal shifts the following entries
 * back (Knuth's algorithm R), so there are no tombstones and a shard only
 * rehashes to grow (new mapping, twice the size, at 50% load): mapping
 * memory is slow in some sandboxes and must stay off the steady path. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>

#include "vgpu/track.h"

#define SHARDS 64
#define INITIAL_CAP 256u
#define KEY_EMPTY 0ull  /* device pointers and handles are never 0 */

struct entry {
        uint64_t key;
        uint64_t size;
        uint32_t dev;
        uint32_t pad;
        uint64_t aux;
};

struct shard {
        pthread_mutex_t lock;
        struct entry *e;
        uint32_t cap, used;
} __attribute__((aligned(64)));

static struct shard shards[_VGPU_TRACK_MAX][SHARDS] = {
        [0 ... _VGPU_TRACK_MAX - 1] = { [0 ... SHARDS - 1] = { .lock = PTHREAD_MUTEX_INITIALIZER } },
};

static uint64_t mix(uint64_t k) {
        k ^= k >> 33;
        k *= 0xff51afd7ed558ccdull;
        k ^= k >> 33;
        k *= 0xc4ceb9fe1a85ec53ull;
        k ^= k >> 33;
        return k;
}

static inline uint32_t home(uint64_t key, uint32_t cap) {
        return (uint32_t) (mix(key) >> 6) & (cap - 1);
}

static int grow(struct shard *s) {
        uint32_t ncap = s->cap ? s->cap * 2 : INITIAL_CAP;
        if (ncap > VGPU_TRACK_MAX_ENTRIES / SHARDS * 2)
                return -ENOSPC;
        struct entry *n = mmap(NULL, ncap * sizeof(*n), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (n == MAP_FAILED)
                return -ENOSPC;
        for (uint32_t i = 0; i < s->cap; i++) {
                if (s->e[i].key == KEY_EMPTY)
                        continue;
                uint32_t j = home(s->e[i].key, ncap);
                while (n[j].key != KEY_EMPTY)
                        j = (j + 1) & (ncap - 1);
                n[j] = s->e[i];
        }
        if (s->e)
                munmap(s->e, s->cap * sizeof(*s->e));
        s->e = n;
        s->cap = ncap;
        return 0;
}

int vgpu_track_put(enum vgpu_track_kind kind, uint64_t key, uint64_t size, unsigned dev) {
        return vgpu_track_put_aux(kind, key, size, dev, 0);
}

int vgpu_track_put_aux(enum vgpu_track_kind kind, uint64_t key, uint64_t size, unsigned dev, uint64_t aux) {
        if (key == KEY_EMPTY || (unsigned) kind >= _VGPU_TRACK_MAX)
                return -EINVAL;
        uint64_t h = mix(key);
        struct shard *s = &shards[kind][h & (SHARDS - 1)];
        int r = 0;
        pthread_mutex_lock(&s->lock);
        if ((s->used + 1) * 2 > s->cap && (r = grow(s)) < 0)
                goto out;
        uint32_t j = home(key, s->cap);
        while (s->e[j].key != KEY_EMPTY && s->e[j].key != key)
                j = (j + 1) & (s->cap - 1);
        if (s->e[j].key == KEY_EMPTY)
                s->used++;
        /* An existing key: the driver reused an address we missed a free of. */
        s->e[j] = (struct entry) { .key = key, .size = size, .dev = dev, .aux = aux };
out:
        pthread_mutex_unlock(&s->lock);
        return r;
}

/* The slot of key in s, or -1. */
static int64_t find(struct shard *s, uint64_t key) {
        if (s->cap == 0)
                return -1;
        uint32_t mask = s->cap - 1, i = home(key, s->cap);
        while (s->e[i].key != key) {
                if (s->e[i].key == KEY_EMPTY)
                        return -1;
                i = (i + 1) & mask;
        }
        return i;
}

/* Removes the entry at i, shifting back the entries that probed past it. */
static void remove_at(struct shard *s, uint32_t i) {
        uint32_t mask = s->cap - 1;
        s->used--;
        for (;;) {
                s->e[i].key = KEY_EMPTY;
                uint32_t k = i;
                for (;;) {
                        k = (k + 1) & mask;
                        if (s->e[k].key == KEY_EMPTY)
                                return;
                        uint32_t hk = home(s->e[k].key, s->cap);
                        bool stays = i <= k ? (i < hk && hk <= k) : (i < hk || hk <= k);
                        if (!stays)
                                break;
                }
                s->e[i] = s->e[k];
                i = k;
        }
}

int vgpu_track_take_aux(enum vgpu_track_kind kind, uint64_t key, uint64_t *ret_size, unsigned *ret_dev,
                        uint64_t *ret_aux) {
        if (key == KEY_EMPTY || (unsigned) kind >= _VGPU_TRACK_MAX)
                return -ENOENT;
        struct shard *s = &shards[kind][mix(key) & (SHARDS - 1)];
        pthread_mutex_lock(&s->lock);
        int64_t i = find(s, key);
        if (i >= 0) {
                *ret_size = s->e[i].size;
                *ret_dev = s->e[i].dev;
                if (ret_aux)
                        *ret_aux = s->e[i].aux;
                remove_at(s, (uint32_t) i);
        }
        pthread_mutex_unlock(&s->lock);
        return i >= 0 ? 0 : -ENOENT;
}

int vgpu_track_take(enum vgpu_track_kind kind, uint64_t key, uint64_t *ret_size, unsigned *ret_dev) {
        return vgpu_track_take_aux(kind, key, ret_size, ret_dev, NULL);
}

int vgpu_track_handle_adjust(uint64_t key, int refs, int maps, uint64_t *ret_size, unsigned *ret_dev) {
        if (key == KEY_EMPTY)
                return -ENOENT;
        struct shard *s = &shards[VGPU_TRACK_HANDLE][mix(key) & (SHARDS - 1)];
        int r = -ENOENT;
        pthread_mutex_lock(&s->lock);
        int64_t i = find(s, key);
        if (i >= 0) {
                int64_t nr = (int64_t) (uint32_t) s->e[i].aux + refs, nm = (int64_t) (s->e[i].aux >> 32) + maps;
                nr = nr < 0 ? 0 : nr > UINT32_MAX ? UINT32_MAX : nr;
                nm = nm < 0 ? 0 : nm > UINT32_MAX ? UINT32_MAX : nm;
                s->e[i].aux = (uint64_t) nr | (uint64_t) nm << 32;
                r = 0;
                if (nr == 0 && nm == 0) {
                        *ret_size = s->e[i].size;
                        *ret_dev = s->e[i].dev;
                        remove_at(s, (uint32_t) i);
                        r = 1;
                }
        }
        pthread_mutex_unlock(&s->lock);
        return r;
}

uint64_t vgpu_track_count(enum vgpu_track_kind kind) {
        uint64_t n = 0;
        for (unsigned i = 0; i < SHARDS; i++) {
                pthread_mutex_lock(&shards[kind][i].lock);
                n += shards[kind][i].used;
                pthread_mutex_unlock(&shards[kind][i].lock);
        }
        return n;
}

void vgpu_track_atfork_prepare(void) {
        for (unsigned k = 0; k < _VGPU_TRACK_MAX; k++)
                for (unsigned i = 0; i < SHARDS; i++)
                        pthread_mutex_lock(&shards[k][i].lock);
}

void vgpu_track_atfork_parent(void) {
        for (unsigned k = 0; k < _VGPU_TRACK_MAX; k++)
                for (unsigned i = 0; i < SHARDS; i++)
                        pthread_mutex_unlock(&shards[k][i].lock);
}

void vgpu_track_atfork_child(void) {
        for (unsigned k = 0; k < _VGPU_TRACK_MAX; k++)
                for (unsigned i = 0; i < SHARDS; i++) {
                        struct shard *s = &shards[k][i];
                        if (s->e)
                                memset(s->e, 0, s->cap * sizeof(*s->e));
                        s->used = 0;
                        pthread_mutex_init(&s->lock, NULL);
                }
}

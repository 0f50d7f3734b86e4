/* See track.h. Linear probing with tombstones; a shard doubles (new
 * mapping, rehash) at 50% load including tombstones. */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

#include "vgpu/track.h"

#define SHARDS 64
#define INITIAL_CAP 256u
#define KEY_EMPTY 0ull
#define KEY_TOMB 1ull  /* device pointers and handles are never 0 or 1 */

struct entry {
        uint64_t key;
        uint64_t size;
        uint32_t dev;
        uint32_t pad;
};

struct shard {
        pthread_mutex_t lock;
        struct entry *e;
        uint32_t cap, used, tombs;
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

static int grow(struct shard *s) {
        uint32_t ncap = s->cap ? s->cap * 2 : INITIAL_CAP;
        if (ncap > VGPU_TRACK_MAX_ENTRIES / SHARDS * 2)
                return -ENOSPC;
        struct entry *n = mmap(NULL, ncap * sizeof(*n), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (n == MAP_FAILED)
                return -ENOSPC;
        for (uint32_t i = 0; i < s->cap; i++) {
                if (s->e[i].key <= KEY_TOMB)
                        continue;
                uint32_t j = (uint32_t) (mix(s->e[i].key) >> 6) & (ncap - 1);
                while (n[j].key != KEY_EMPTY)
                        j = (j + 1) & (ncap - 1);
                n[j] = s->e[i];
        }
        if (s->e)
                munmap(s->e, s->cap * sizeof(*s->e));
        s->e = n;
        s->cap = ncap;
        s->tombs = 0;
        return 0;
}

int vgpu_track_put(enum vgpu_track_kind kind, uint64_t key, uint64_t size, unsigned dev) {
        if (key <= KEY_TOMB || (unsigned) kind >= _VGPU_TRACK_MAX)
                return -EINVAL;
        uint64_t h = mix(key);
        struct shard *s = &shards[kind][h & (SHARDS - 1)];
        int r = 0;
        pthread_mutex_lock(&s->lock);
        if ((s->used + s->tombs + 1) * 2 > s->cap && (r = grow(s)) < 0)
                goto out;
        uint32_t j = (uint32_t) (h >> 6) & (s->cap - 1), tomb = UINT32_MAX;
        for (;;) {
                uint64_t k = s->e[j].key;
                if (k == key) {            /* the driver reused an address we missed a free of */
                        s->e[j].size = size;
                        s->e[j].dev = dev;
                        goto out;
                }
                if (k == KEY_TOMB && tomb == UINT32_MAX)
                        tomb = j;
                if (k == KEY_EMPTY)
                        break;
                j = (j + 1) & (s->cap - 1);
        }
        if (tomb != UINT32_MAX) {
                j = tomb;
                s->tombs--;
        }
        s->e[j] = (struct entry) { .key = key, .size = size, .dev = dev };
        s->used++;
out:
        pthread_mutex_unlock(&s->lock);
        return r;
}

int vgpu_track_take(enum vgpu_track_kind kind, uint64_t key, uint64_t *ret_size, unsigned *ret_dev) {
        if (key <= KEY_TOMB || (unsigned) kind >= _VGPU_TRACK_MAX)
                return -ENOENT;
        uint64_t h = mix(key);
        struct shard *s = &shards[kind][h & (SHARDS - 1)];
        int r = -ENOENT;
        pthread_mutex_lock(&s->lock);
        if (s->cap == 0)
                goto out;
        for (uint32_t j = (uint32_t) (h >> 6) & (s->cap - 1), n = 0; n < s->cap; j = (j + 1) & (s->cap - 1), n++) {
                uint64_t k = s->e[j].key;
                if (k == KEY_EMPTY)
                        break;
                if (k == key) {
                        *ret_size = s->e[j].size;
                        *ret_dev = s->e[j].dev;
                        s->e[j].key = KEY_TOMB;
                        s->used--;
                        s->tombs++;
                        r = 0;
                        break;
                }
        }
out:
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
                        s->used = s->tombs = 0;
                        pthread_mutex_init(&s->lock, NULL);
                }
}

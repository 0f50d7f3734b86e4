/* The shared accounting region. See region.h for the rules. Nothing here
 * allocates from libc after the file is mapped: the allocation path only
 * does atomic loads and read-modify-writes on the mapping. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "vgpu/region.h"

#define LOCK_WAIT_MS 10000      /* creating/validating the file: bounded wait for the flock */
#define CHARGE_MAX_ROUNDS 100000 /* announce/check rounds before giving up (never seen) */

/* One read of /proc/<pid>/stat: the state letter (field 3) and starttime
 * (field 22). 0 for what could not be read. */
static void proc_stat(pid_t pid, char *ret_state, uint64_t *ret_start) {
        char path[64], buf[1024];
        *ret_state = 0;
        *ret_start = 0;
        snprintf(path, sizeof(path), "/proc/%d/stat", (int) pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return;
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
                return;
        buf[n] = 0;
        /* comm may hold spaces and parentheses: fields start after the last ')'. */
        char *p = strrchr(buf, ')');
        if (!p)
                return;
        p++;
        if (p[0] == ' ')
                *ret_state = p[1];
        /* field 3 (state) is the first after ')'; starttime is field 22. */
        unsigned field = 2;
        uint64_t v = 0;
        for (; *p; p++) {
                if (*p == ' ') {
                        field++;
                        continue;
                }
                if (field == 22) {
                        if (*p < '0' || *p > '9')
                                break;
                        v = v * 10 + (uint64_t) (*p - '0');
                }
                if (field > 22)
                        break;
        }
        *ret_start = v;
}

uint64_t vgpu_proc_start_time(pid_t pid) {
        char st;
        uint64_t start;
        proc_stat(pid, &st, &start);
        return start;
}

bool vgpu_pid_alive(pid_t pid, uint64_t start_time) {
        if (pid <= 0)
                return false;
        if (kill(pid, 0) < 0 && errno == ESRCH)
                return false;
        char st;
        uint64_t now;
        proc_stat(pid, &st, &now);
        if (st == 'Z' || st == 'X')
                return false;
        if (start_time != 0 && st != 0 && now != 0 && now != start_time)
                return false;  /* the pid was reused */
        return true;
}

void vgpu_region_init(struct vgpu_region *r, const struct vgpu_config *c) {
        r->version = VGPU_REGION_VERSION;
        r->n_slots = VGPU_MAX_SLOTS;
        r->n_devices = VGPU_MAX_DEVICES;
        r->size = sizeof(*r);
        for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++) {
                r->mem_limit[d] = c ? c->mem_limit[d] : VGPU_UNLIMITED;
                r->sm_limit[d] = c ? c->sm_limit[d] : 100;
        }
        r->policy = c ? (uint32_t) c->policy : VGPU_POLICY_DEFAULT;
        __atomic_store_n(&r->magic, VGPU_REGION_MAGIC, __ATOMIC_RELEASE);
}

int vgpu_region_validate(const struct vgpu_region *r, uint64_t file_size, char *err, size_t errlen) {
        uint32_t hami;
        memcpy(&hami, r, sizeof(hami));
        if (file_size != sizeof(*r)) {
                snprintf(err, errlen, "is %llu bytes, this library's region (version %u) is %zu bytes%s",
                         (unsigned long long) file_size, VGPU_REGION_VERSION, sizeof(*r),
                         file_size >= sizeof(hami) && hami == VGPU_HAMI_MAGIC ? " (the file is HAMi-core's)" : "");
                return -EPROTO;
        }
        if (r->magic != VGPU_REGION_MAGIC) {
                snprintf(err, errlen, "is not a migkit vgpu region (magic %#llx)", (unsigned long long) r->magic);
                return -EPROTO;
        }
        if (r->version != VGPU_REGION_VERSION || r->size != sizeof(*r) || r->n_slots != VGPU_MAX_SLOTS ||
            r->n_devices != VGPU_MAX_DEVICES) {
                snprintf(err, errlen, "has region version %u (%u slots, %u devices), this library uses version %u",
                         r->version, r->n_slots, r->n_devices, VGPU_REGION_VERSION);
                return -EPROTO;
        }
        for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++)
                if (r->sm_limit[d] > 100) {
                        snprintf(err, errlen, "has an SM limit of %u%% on device %u", r->sm_limit[d], d);
                        return -EPROTO;
                }
        if (r->policy >= _VGPU_POLICY_MAX) {
                snprintf(err, errlen, "has an unknown compute policy %u", r->policy);
                return -EPROTO;
        }
        return 0;
}

void vgpu_region_forget_run(struct vgpu_region *r, unsigned dev) {
        if (dev >= VGPU_MAX_DEVICES)
                return;
        atomic_store(&r->uuid_set[dev], 0);
        memset(r->uuid[dev], 0, sizeof(r->uuid[dev]));
        atomic_store(&r->ctx_size[dev], 0);
        atomic_store(&r->share[dev].tokens, 0);
        atomic_store(&r->share[dev].last_ns, 0);
        atomic_store(&r->share[dev].others_until_ns, 0);
}

static int lock_bounded(int fd) {
        for (unsigned waited = 0;; waited += 10) {
                if (flock(fd, LOCK_EX | LOCK_NB) == 0)
                        return 0;
                if (errno != EWOULDBLOCK && errno != EINTR)
                        return -errno;
                if (waited >= LOCK_WAIT_MS)
                        return -ETIMEDOUT;
                struct timespec ts = { 0, 10 * 1000 * 1000 };
                nanosleep(&ts, NULL);
        }
}

int vgpu_region_open(const char *path, const struct vgpu_config *c, struct vgpu_region **ret, char *err,
                     size_t errlen) {
        int r;
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
        if (fd < 0) {
                r = -errno;
                snprintf(err, errlen, "cannot open: %s", strerror(-r));
                return r;
        }
        (void) fchmod(fd, 0666);  /* every user of the container shares it; best effort */
        r = lock_bounded(fd);
        if (r < 0) {
                snprintf(err, errlen, "cannot lock: %s", strerror(-r));
                close(fd);
                return r;
        }
        struct stat st;
        if (fstat(fd, &st) < 0) {
                r = -errno;
                snprintf(err, errlen, "cannot stat: %s", strerror(-r));
                goto fail;
        }
        bool fresh = st.st_size == 0;
        if (fresh && ftruncate(fd, sizeof(struct vgpu_region)) < 0) {
                r = -errno;
                snprintf(err, errlen, "cannot size: %s", strerror(-r));
                goto fail;
        }
        if (!fresh && (uint64_t) st.st_size != sizeof(struct vgpu_region)) {
                /* Read the first word only to name HAMi-core's file. */
                struct vgpu_region probe = { 0 };
                if (pread(fd, &probe, sizeof(probe.magic), 0) < 0)
                        probe.magic = 0;
                r = vgpu_region_validate(&probe, (uint64_t) st.st_size, err, errlen);
                goto fail;
        }
        struct vgpu_region *m = mmap(NULL, sizeof(*m), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
                r = -errno;
                snprintf(err, errlen, "cannot map: %s", strerror(-r));
                goto fail;
        }
        if (fresh || __atomic_load_n(&m->magic, __ATOMIC_ACQUIRE) == 0) {
                /* New, or created by a process killed before it wrote the magic. */
                memset(m, 0, sizeof(*m));
                vgpu_region_init(m, c);
        } else {
                r = vgpu_region_validate(m, (uint64_t) st.st_size, err, errlen);
                if (r < 0) {
                        munmap(m, sizeof(*m));
                        goto fail;
                }
                /* A region nobody lives in takes the limits of this run, and
                 * forgets what the previous run learnt: the devices' UUIDs
                 * (that run may have seen other devices), their context
                 * sizes and the compute buckets (a credit or debt, a
                 * "another user is active" mark). */
                if (c && vgpu_region_live(m, vgpu_pid_alive) == 0) {
                        for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++) {
                                m->mem_limit[d] = c->mem_limit[d];
                                m->sm_limit[d] = c->sm_limit[d];
                                vgpu_region_forget_run(m, d);
                        }
                        m->policy = (uint32_t) c->policy;
                }
        }
        /* Unlock explicitly: the mapping keeps the open file (and a flock
         * on it) alive after close. */
        flock(fd, LOCK_UN);
        close(fd);
        *ret = m;
        return 0;
fail:
        flock(fd, LOCK_UN);
        close(fd);
        return r;
}

int vgpu_region_new_private(const struct vgpu_config *c, struct vgpu_region **ret) {
        struct vgpu_region *m = mmap(NULL, sizeof(*m), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
                return -errno;
        vgpu_region_init(m, c);
        *ret = m;
        return 0;
}

void vgpu_region_unmap(struct vgpu_region *r) {
        if (r)
                munmap(r, sizeof(*r));
}

static void slot_clear(struct vgpu_slot *s) {
        for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++) {
                atomic_store(&s->dev[d].used, 0);
                atomic_store(&s->dev[d].pending, 0);
                atomic_store(&s->dev[d].ctx, 0);
        }
        atomic_store(&s->launches, 0);
        atomic_store(&s->throttled_ns, 0);
        atomic_store(&s->start_time, 0);
}

/* Reclaims slot i if its owner (or a reclaimer that died) is gone. */
static bool reclaim_one(struct vgpu_region *r, unsigned i, vgpu_alive_fn alive) {
        struct vgpu_slot *s = &r->slots[i];
        uint64_t o = atomic_load(&s->owner);
        if (o == 0)
                return false;
        pid_t pid = VGPU_OWNER_PID(o);
        uint64_t st = VGPU_OWNER_STATE(o) == VGPU_OWNER_LIVE ? atomic_load(&s->start_time) : 0;
        if (alive(pid, st))
                return false;
        uint64_t mine = VGPU_OWNER(VGPU_OWNER_RECLAIM, getpid());
        if (!atomic_compare_exchange_strong(&s->owner, &o, mine))
                return false;
        slot_clear(s);
        atomic_store(&s->owner, 0);
        return true;
}

unsigned vgpu_region_reclaim(struct vgpu_region *r, vgpu_alive_fn alive) {
        unsigned n = 0, hwm = atomic_load(&r->slot_hwm);
        if (hwm > VGPU_MAX_SLOTS)
                hwm = VGPU_MAX_SLOTS;
        for (unsigned i = 0; i < hwm; i++)
                n += reclaim_one(r, i, alive);
        return n;
}

unsigned vgpu_region_live(struct vgpu_region *r, vgpu_alive_fn alive) {
        unsigned n = 0, hwm = atomic_load(&r->slot_hwm);
        if (hwm > VGPU_MAX_SLOTS)
                hwm = VGPU_MAX_SLOTS;
        for (unsigned i = 0; i < hwm; i++) {
                uint64_t o = atomic_load(&r->slots[i].owner);
                if (o && VGPU_OWNER_STATE(o) == VGPU_OWNER_LIVE &&
                    alive(VGPU_OWNER_PID(o), atomic_load(&r->slots[i].start_time)))
                        n++;
        }
        return n;
}

static void hwm_raise(struct vgpu_region *r, uint32_t to) {
        uint32_t cur = atomic_load(&r->slot_hwm);
        while (cur < to && !atomic_compare_exchange_weak(&r->slot_hwm, &cur, to))
                ;
}

int vgpu_region_claim(struct vgpu_region *r, pid_t pid, uint64_t start_time, vgpu_alive_fn alive) {
        for (int pass = 0; pass < 2; pass++) {
                for (unsigned i = 0; i < VGPU_MAX_SLOTS; i++) {
                        struct vgpu_slot *s = &r->slots[i];
                        uint64_t expect = 0;
                        if (atomic_load(&s->owner) != 0)
                                continue;
                        /* The slot is visible to checkers before it can hold a charge. */
                        hwm_raise(r, i + 1);
                        if (!atomic_compare_exchange_strong(&s->owner, &expect, VGPU_OWNER(VGPU_OWNER_LIVE, pid)))
                                continue;
                        atomic_store(&s->start_time, start_time);
                        return (int) i;
                }
                if (vgpu_region_reclaim(r, alive) == 0)
                        break;
        }
        return -ENOSPC;
}

void vgpu_region_release(struct vgpu_region *r, int slot) {
        if (slot < 0 || slot >= VGPU_MAX_SLOTS)
                return;
        struct vgpu_slot *s = &r->slots[slot];
        slot_clear(s);
        atomic_store(&s->owner, 0);
}

/* Sum of committed (and, with pending, announced) bytes on dev. lowest
 * gets the lowest slot other than self with an announcement (-1: none). */
static uint64_t sum_dev(const struct vgpu_region *r, unsigned dev, bool pending, int self, int *lowest) {
        uint64_t s = 0;
        unsigned hwm = atomic_load(&((struct vgpu_region *) r)->slot_hwm);
        if (hwm > VGPU_MAX_SLOTS)
                hwm = VGPU_MAX_SLOTS;
        if (lowest)
                *lowest = -1;
        for (unsigned i = 0; i < hwm; i++) {
                struct vgpu_dev_use *u = (struct vgpu_dev_use *) &r->slots[i].dev[dev];
                uint64_t a = atomic_load(&u->used);
                s = s + a < s ? UINT64_MAX : s + a;
                if (pending) {
                        uint64_t p = atomic_load(&u->pending);
                        s = s + p < s ? UINT64_MAX : s + p;
                        if (p && lowest && *lowest < 0 && (int) i != self)
                                *lowest = (int) i;
                }
        }
        return s;
}

uint64_t vgpu_region_used(const struct vgpu_region *r, unsigned dev) {
        if (dev >= VGPU_MAX_DEVICES)
                return 0;
        return sum_dev(r, dev, false, -1, NULL);
}

uint64_t vgpu_region_used_live(struct vgpu_region *r, unsigned dev, vgpu_alive_fn alive) {
        if (dev >= VGPU_MAX_DEVICES)
                return 0;
        vgpu_region_reclaim(r, alive);
        return sum_dev(r, dev, false, -1, NULL);
}

uint64_t vgpu_region_ctx(const struct vgpu_region *r, unsigned dev) {
        uint64_t s = 0;
        if (dev >= VGPU_MAX_DEVICES)
                return 0;
        unsigned hwm = atomic_load(&((struct vgpu_region *) r)->slot_hwm);
        for (unsigned i = 0; i < hwm && i < VGPU_MAX_SLOTS; i++)
                s += atomic_load(&((struct vgpu_region *) r)->slots[i].dev[dev].ctx);
        return s;
}

uint64_t vgpu_region_slot_ctx(const struct vgpu_region *r, int slot, unsigned dev) {
        if (slot < 0 || slot >= VGPU_MAX_SLOTS || dev >= VGPU_MAX_DEVICES)
                return 0;
        return atomic_load(&((struct vgpu_region *) r)->slots[slot].dev[dev].ctx);
}

void vgpu_region_ctx_add(struct vgpu_region *r, int slot, unsigned dev, int64_t delta) {
        if (slot < 0 || slot >= VGPU_MAX_SLOTS || dev >= VGPU_MAX_DEVICES)
                return;
        _Atomic uint64_t *c = &r->slots[slot].dev[dev].ctx;
        uint64_t cur = atomic_load(c);
        for (;;) {
                uint64_t next = delta < 0 ? (cur >= (uint64_t) -delta ? cur + (uint64_t) delta : 0) : cur + (uint64_t) delta;
                if (atomic_compare_exchange_weak(c, &cur, next))
                        return;
        }
}

uint64_t vgpu_region_slot_used(const struct vgpu_region *r, int slot, unsigned dev) {
        if (slot < 0 || slot >= VGPU_MAX_SLOTS || dev >= VGPU_MAX_DEVICES)
                return 0;
        return atomic_load(&((struct vgpu_region *) r)->slots[slot].dev[dev].used);
}

static uint32_t xorshift(uint32_t *s) {
        uint32_t x = *s ? *s : 0x9e3779b9u;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        return *s = x;
}

int vgpu_region_charge(struct vgpu_region *r, int slot, unsigned dev, uint64_t size, vgpu_alive_fn alive) {
        if (slot < 0 || slot >= VGPU_MAX_SLOTS || dev >= VGPU_MAX_DEVICES)
                return -EINVAL;
        struct vgpu_dev_use *me = &r->slots[slot].dev[dev];
        uint64_t limit = r->mem_limit[dev];
        if (limit == VGPU_UNLIMITED) {
                atomic_fetch_add(&me->used, size);
                return 0;
        }
        if (size > limit)
                return -ENOMEM;
        bool reclaimed = false;
        uint32_t seed = 0;  /* set on the first back-off (no system call on the fast path) */
        for (unsigned round = 0; round < CHARGE_MAX_ROUNDS; round++) {
                int lowest;
                atomic_fetch_add(&me->pending, size);
                uint64_t all = sum_dev(r, dev, true, slot, &lowest);
                if (all <= limit) {
                        atomic_fetch_add(&me->used, size);
                        atomic_fetch_sub(&me->pending, size);
                        return 0;
                }
                atomic_fetch_sub(&me->pending, size);
                uint64_t committed = sum_dev(r, dev, false, slot, NULL);
                if (committed > limit || limit - committed < size) {
                        /* Full for real. Dead processes' charges go first, once. */
                        if (!reclaimed && alive && vgpu_region_reclaim(r, alive) > 0) {
                                reclaimed = true;
                                continue;
                        }
                        return -ENOMEM;
                }
                /* A process killed while announcing leaves a pending charge
                 * that only reclaiming removes. */
                if (alive && (round == 16 || round % 1024 == 1023))
                        vgpu_region_reclaim(r, alive);
                /* It fits but others are announcing: the lowest slot retries at
                 * once, the others back off a random while (bounded). */
                if (lowest >= 0 && (lowest < slot || round > 8)) {
                        unsigned cap = round < 10 ? (1u << round) : 1024u;
                        if (seed == 0)
                                seed = (uint32_t) (uintptr_t) &seed ^ (uint32_t) getpid() ^ (uint32_t) slot;
                        struct timespec ts = { 0, (long) (1000u + xorshift(&seed) % (cap * 1000u)) };
                        if (round < 2)
                                sched_yield();
                        else
                                nanosleep(&ts, NULL);
                }
        }
        return -ENOMEM;
}

int vgpu_region_uncharge(struct vgpu_region *r, int slot, unsigned dev, uint64_t size) {
        if (slot < 0 || slot >= VGPU_MAX_SLOTS || dev >= VGPU_MAX_DEVICES)
                return -EINVAL;
        _Atomic uint64_t *u = &r->slots[slot].dev[dev].used;
        uint64_t cur = atomic_load(u);
        for (;;) {
                uint64_t next = cur >= size ? cur - size : 0;
                if (atomic_compare_exchange_weak(u, &cur, next))
                        return cur >= size ? 0 : -ERANGE;
        }
}

void vgpu_region_set_uuid(struct vgpu_region *r, unsigned dev, const char *uuid) {
        uint32_t expect = 0;
        if (dev >= VGPU_MAX_DEVICES || !uuid)
                return;
        if (!atomic_compare_exchange_strong(&r->uuid_set[dev], &expect, 1))
                return;
        size_t n = strnlen(uuid, VGPU_UUID_LEN - 1);
        memcpy(r->uuid[dev], uuid, n);
        r->uuid[dev][n] = 0;
        atomic_store(&r->uuid_set[dev], 2);
}

int vgpu_region_find_uuid(const struct vgpu_region *r, const char *uuid) {
        for (unsigned d = 0; d < VGPU_MAX_DEVICES; d++)
                if (atomic_load(&((struct vgpu_region *) r)->uuid_set[d]) == 2 &&
                    strncmp(r->uuid[d], uuid, VGPU_UUID_LEN) == 0)
                        return (int) d;
        return -ENOENT;
}

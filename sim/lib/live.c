/* The live region shared by the CUDA and NVML simulators (live.h). */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>

#include "lib/live.h"
#include "lib/state.h"
#include "lib/util.h"

static pthread_mutex_t live_mutex = PTHREAD_MUTEX_INITIALIZER;
static struct sim_live *live_map;
static char *live_path;

uint64_t sim_live_now_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000ULL + (uint64_t) ts.tv_nsec;
}

/* Only the header is written: the rest of a fresh file is a hole that reads
 * as zeros, and stays one until a process uses that part (32 MiB a machine
 * that occupy a few pages on disk). */
static void live_init(struct sim_live *l) {
        l->version = SIM_LIVE_VERSION;
        l->slots = SIM_LIVE_SLOTS;
        l->devices = SIM_LIVE_DEVICES;
        l->buckets = SIM_LIVE_BUCKETS;
        l->size = sizeof(*l);
        atomic_thread_fence(memory_order_release);
        l->magic = SIM_LIVE_MAGIC;
}

int sim_live_open(const char *state_path, struct sim_live **ret) {
        _cleanup_free_ char *path = NULL;
        _cleanup_close_ int fd = -1;
        struct stat st;
        int r = 0;

        if (asprintf(&path, "%s.live", state_path) < 0)
                return sim_error(-ENOMEM, "out of memory");
        pthread_mutex_lock(&live_mutex);
        if (live_map && streq(live_path, path)) {
                *ret = live_map;
                goto out;
        }
        fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) {
                r = sim_error(-errno, "cannot open %s: %m", path);
                goto out;
        }
        if (flock(fd, LOCK_EX) < 0) {
                r = sim_error(-errno, "cannot lock %s: %m", path);
                goto out;
        }
        if (fstat(fd, &st) < 0) {
                r = sim_error(-errno, "cannot stat %s: %m", path);
                goto out;
        }
        bool fresh = st.st_size == 0;
        if (fresh && ftruncate(fd, sizeof(struct sim_live)) < 0) {
                r = sim_error(-errno, "cannot size %s: %m", path);
                goto out;
        }
        if (!fresh && st.st_size != (off_t) sizeof(struct sim_live)) {
                r = sim_error(-EPROTO, "%s: %lld bytes, expected %zu (another simulator version?)", path,
                              (long long) st.st_size, sizeof(struct sim_live));
                goto out;
        }
        struct sim_live *l = mmap(NULL, sizeof(struct sim_live), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (l == MAP_FAILED) {
                r = sim_error(-errno, "cannot map %s: %m", path);
                goto out;
        }
        if (!fresh && l->magic == 0 && (ftruncate(fd, 0) < 0 || ftruncate(fd, sizeof(struct sim_live)) < 0)) {
                /* never initialised (a process died before the magic): zeroed
                 * by cutting it to a hole again, under the lock */
                r = sim_error(-errno, "cannot clear %s: %m", path);
                munmap(l, sizeof(*l));
                goto out;
        }
        if (fresh || l->magic == 0)
                live_init(l);
        else if (l->magic != SIM_LIVE_MAGIC || l->version != SIM_LIVE_VERSION || l->size != sizeof(*l)) {
                munmap(l, sizeof(*l));
                r = sim_error(-EPROTO, "%s: not a live region of this simulator version", path);
                goto out;
        }
        flock(fd, LOCK_UN);
        if (live_map)
                munmap(live_map, sizeof(*live_map));
        free(live_path);
        live_map = l;
        live_path = TAKE_PTR(path);
        *ret = l;
out:
        pthread_mutex_unlock(&live_mutex);
        return r;
}

struct sim_live_device *sim_live_device(struct sim_live *l, uint64_t key) {
        for (unsigned i = 0; i < SIM_LIVE_DEVICES; i++) {
                struct sim_live_device *d = &l->dev[i];
                uint64_t k = atomic_load(&d->key);
                if (k == key)
                        return d;
                if (k == 0) {
                        uint64_t zero = 0;
                        if (atomic_compare_exchange_strong(&d->key, &zero, key) || zero == key)
                                return d;
                }
        }
        return NULL;
}

/* Start time (field 22 of /proc/PID/stat) and state of a process. */
static bool proc_stat(unsigned pid, uint64_t *ret_start, char *ret_state) {
        char path[64], buf[1024];
        int fd;
        ssize_t n;

        snprintf(path, sizeof(path), "/proc/%u/stat", pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return false;
        n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
                return false;
        buf[n] = 0;
        char *p = strrchr(buf, ')');
        if (!p || p[1] != ' ')
                return false;
        p += 2;
        *ret_state = *p;
        /* p is at field 3; skip to field 22. */
        for (int field = 3; field < 22; field++) {
                p = strchr(p, ' ');
                if (!p)
                        return false;
                p++;
        }
        *ret_start = strtoull(p, NULL, 10);
        return true;
}

static _Atomic uint64_t self_word; /* cached; a forked child has another pid and recomputes */
static pid_t my_pid;               /* getpid() is a system call; refreshed in forked children */
static pthread_once_t pid_once = PTHREAD_ONCE_INIT;

static void pid_refresh(void) {
        my_pid = getpid();
}

static void pid_init(void) {
        pid_refresh();
        pthread_atfork(NULL, NULL, pid_refresh);
}

static unsigned current_pid(void) {
        pthread_once(&pid_once, pid_init);
        return (unsigned) my_pid;
}

uint64_t sim_live_self(void) {
        uint64_t start, w = atomic_load(&self_word);
        char state;
        unsigned pid = current_pid();

        if (w != 0 && sim_live_pid(w) == pid)
                return w;
        if (!proc_stat(pid, &start, &state))
                return 0;
        w = ((start & 0xFFFFFFFFULL) << 32) | pid;
        atomic_store(&self_word, w);
        return w;
}

/* Owners found alive by /proc, trusted for LIVE_TRUST_NS while kill(pid, 0)
 * still finds the pid (a reaped process is seen dead at once; a zombie or a
 * recycled pid within that time). Saves a /proc read per slot and query. */
#define LIVE_TRUST_NS 200000000ULL
#define LIVE_TRUST_ENTRIES 64
static struct {
        uint64_t owner, at_ns;
} trust[LIVE_TRUST_ENTRIES];
static unsigned trust_next;
static pthread_mutex_t trust_mutex = PTHREAD_MUTEX_INITIALIZER;

bool sim_live_owner_alive(uint64_t owner) {
        unsigned pid = sim_live_pid(owner);
        uint64_t start, now;
        char state;

        owner &= ~SIM_LIVE_INIT_BIT;
        if (pid == 0)
                return false;
        if (pid == current_pid())
                return owner == sim_live_self();
        if (kill((pid_t) pid, 0) < 0 && errno == ESRCH)
                return false;
        now = sim_live_now_ns();
        pthread_mutex_lock(&trust_mutex);
        for (unsigned i = 0; i < LIVE_TRUST_ENTRIES; i++)
                if (trust[i].owner == owner && now - trust[i].at_ns < LIVE_TRUST_NS) {
                        pthread_mutex_unlock(&trust_mutex);
                        return true;
                }
        pthread_mutex_unlock(&trust_mutex);
        if (!proc_stat(pid, &start, &state))
                return false;
        if (state == 'Z' || state == 'X' || state == 'x')
                return false;
        if ((start & 0xFFFFFFFFULL) != (owner >> 32))
                return false;
        pthread_mutex_lock(&trust_mutex);
        trust[trust_next] = (typeof(trust[0])) { owner, now };
        trust_next = (trust_next + 1) % LIVE_TRUST_ENTRIES;
        pthread_mutex_unlock(&trust_mutex);
        return true;
}

/* Frees a slot its caller has marked INIT_BIT: its bytes leave its memory domain. */
static void slot_free(struct sim_live *l, struct sim_live_slot *s) {
        uint64_t bytes = atomic_exchange(&s->used_bytes, 0);
        if (bytes > 0) {
                struct sim_live_device *d = sim_live_device(l, sim_live_mem_key(s->gpu, s->gi));
                if (d)
                        atomic_fetch_sub(&d->used_bytes, bytes);
        }
        atomic_store(&s->owner, 0);
}

bool sim_live_reap(struct sim_live *l, struct sim_live_slot *s) {
        uint64_t owner = atomic_load(&s->owner);

        if (owner == 0)
                return true;
        if (sim_live_owner_alive(owner))
                return false;
        /* Take it over as "being set up" by nobody, then free it: only the
         * winner of the CAS moves the bytes. */
        uint64_t mark = SIM_LIVE_INIT_BIT; /* pid 0: never alive */
        if (!atomic_compare_exchange_strong(&s->owner, &owner, mark))
                return owner == 0;
        slot_free(l, s);
        return true;
}

bool sim_live_slot_live(struct sim_live *l, struct sim_live_slot *s) {
        uint64_t owner = atomic_load(&s->owner);
        return owner != 0 && !(owner & SIM_LIVE_INIT_BIT) && !sim_live_reap(l, s);
}

struct sim_live_slot *sim_live_claim(struct sim_live *l, uint64_t self, unsigned gpu, unsigned gi, unsigned ci) {
        if (self == 0)
                return NULL;
        for (int pass = 0; pass < 2; pass++)
                for (unsigned i = 0; i < SIM_LIVE_SLOTS; i++) {
                        struct sim_live_slot *s = &l->slot[i];
                        uint64_t owner = atomic_load(&s->owner);
                        if (owner != 0) {
                                /* Second pass: reap dead owners. */
                                if (pass == 0 || !sim_live_reap(l, s))
                                        continue;
                                owner = 0;
                        }
                        if (!atomic_compare_exchange_strong(&s->owner, &owner, self | SIM_LIVE_INIT_BIT))
                                continue;
                        struct sim_live_ring *ring = &l->ring[i];
                        s->gpu = gpu;
                        s->gi = gi;
                        s->ci = ci;
                        s->index = i;
                        atomic_store(&s->used_bytes, 0);
                        atomic_store(&ring->seq, 0);
                        ring->far_head = ring->far_n = 0;
                        /* stored only where not zero: a never used ring stays a hole */
                        for (unsigned b = 0; b < SIM_LIVE_BUCKETS; b++)
                                if (atomic_load_explicit(&ring->bucket[b], memory_order_relaxed) != 0)
                                        atomic_store_explicit(&ring->bucket[b], 0, memory_order_relaxed);
                        atomic_store(&s->owner, self);
                        return s;
                }
        return NULL;
}

void sim_live_release(struct sim_live *l, struct sim_live_slot *s, uint64_t self) {
        uint64_t owner = self;

        if (atomic_compare_exchange_strong(&s->owner, &owner, self | SIM_LIVE_INIT_BIT))
                slot_free(l, s);
}

#define BUCKET_SHIFT 20 /* busy ns of a bucket: at most SIM_LIVE_BUCKET_NS < 2^20 */
#define BUCKET_BUSY_MASK ((1ULL << BUCKET_SHIFT) - 1)

/* The ring of a slot of a mapped region: its index was set when it was claimed. */
static struct sim_live_ring *slot_ring(struct sim_live_slot *s) {
        uint32_t i = s->index;
        if (i >= SIM_LIVE_SLOTS)
                return NULL;
        struct sim_live *l = (struct sim_live *) (void *) ((char *) (s - i) - offsetof(struct sim_live, slot));
        return &l->ring[i];
}

void sim_live_rings_range(struct sim_live *l, void **ret_start, size_t *ret_len) {
        uintptr_t page = (uintptr_t) sysconf(_SC_PAGESIZE);
        uintptr_t start = ((uintptr_t) &l->ring[0] + page - 1) & ~(page - 1); /* not the directory's last page */
        uintptr_t end = (uintptr_t) l + sizeof(*l);
        *ret_start = (void *) start;
        *ret_len = end - start;
}

static void bucket_add(struct sim_live_ring *s, uint64_t num, uint64_t ns) {
        _Atomic uint64_t *b = &s->bucket[num % SIM_LIVE_BUCKETS];
        uint64_t w = atomic_load_explicit(b, memory_order_relaxed), v;

        do {
                uint64_t busy = (w >> BUCKET_SHIFT) == num ? w & BUCKET_BUSY_MASK : 0;
                v = (num << BUCKET_SHIFT) | MIN(busy + ns, SIM_LIVE_BUCKET_NS);
        } while (!atomic_compare_exchange_weak_explicit(b, &w, v, memory_order_release, memory_order_relaxed));
}

/* far[]: a seqlock whose writers (threads of the owner) take turns on the odd value. */
static void far_book(struct sim_live_ring *s, uint64_t start_ns, uint64_t end_ns) {
        uint64_t seq = atomic_load(&s->seq);

        for (;;) {
                if (!(seq & 1) && atomic_compare_exchange_weak(&s->seq, &seq, seq + 1))
                        break;
                seq = atomic_load(&s->seq);
        }
        struct sim_live_interval *last = s->far_n ? &s->far[(s->far_head + SIM_LIVE_FAR - 1) % SIM_LIVE_FAR] : NULL;
        if (last && start_ns == last->end_ns)
                last->end_ns = end_ns;
        else {
                s->far[s->far_head] = (struct sim_live_interval) { start_ns, end_ns };
                s->far_head = (s->far_head + 1) % SIM_LIVE_FAR;
                if (s->far_n < SIM_LIVE_FAR)
                        s->far_n++;
        }
        atomic_store(&s->seq, seq + 2);
}

void sim_live_book(struct sim_live_slot *slot, uint64_t start_ns, uint64_t end_ns) {
        struct sim_live_ring *s = slot_ring(slot);
        if (!s || end_ns <= start_ns)
                return;
        /* A bucket written now must not be one a reader still looks at as an
         * older one: ahead by at most the horizon. */
        if (end_ns > sim_live_now_ns() + SIM_LIVE_HORIZON_NS - SIM_LIVE_BUCKET_NS) {
                far_book(s, start_ns, end_ns);
                return;
        }
        for (uint64_t t = start_ns; t < end_ns;) {
                uint64_t num = t / SIM_LIVE_BUCKET_NS, next = MIN((num + 1) * SIM_LIVE_BUCKET_NS, end_ns);
                bucket_add(s, num, next - t);
                t = next;
        }
}

static uint64_t far_busy(struct sim_live_ring *s, uint64_t from_ns, uint64_t to_ns) {
        struct sim_live_interval far[SIM_LIVE_FAR];
        unsigned n = 0;

        for (int tries = 0; tries < 100; tries++) {
                uint64_t seq = atomic_load(&s->seq);
                if (seq & 1)
                        continue;
                n = MIN(s->far_n, SIM_LIVE_FAR);
                memcpy(far, s->far, sizeof(far));
                atomic_thread_fence(memory_order_acquire);
                if (atomic_load(&s->seq) == seq)
                        break;
                n = 0;
        }
        uint64_t busy = 0;
        for (unsigned i = 0; i < n; i++) {
                uint64_t a = MAX(far[i].start_ns, from_ns), b = MIN(far[i].end_ns, to_ns);
                if (b > a)
                        busy += b - a;
        }
        return busy;
}

uint64_t sim_live_busy(struct sim_live_slot *slot, uint64_t from_ns, uint64_t to_ns) {
        struct sim_live_ring *s = slot_ring(slot);
        from_ns = MAX(from_ns, sim_live_window_from(to_ns, SIM_LIVE_HORIZON_NS));
        if (!s || to_ns <= from_ns)
                return 0;
        uint64_t busy = far_busy(s, from_ns, to_ns);
        for (uint64_t num = from_ns / SIM_LIVE_BUCKET_NS; num <= (to_ns - 1) / SIM_LIVE_BUCKET_NS; num++) {
                uint64_t w = atomic_load_explicit(&s->bucket[num % SIM_LIVE_BUCKETS], memory_order_acquire);
                if ((w >> BUCKET_SHIFT) != num)
                        continue;
                uint64_t a = MAX(num * SIM_LIVE_BUCKET_NS, from_ns), b = MIN((num + 1) * SIM_LIVE_BUCKET_NS, to_ns);
                /* A bucket the window covers in part: its share, as if spread evenly. */
                busy += (w & BUCKET_BUSY_MASK) * (b - a) / SIM_LIVE_BUCKET_NS;
        }
        return MIN(busy, to_ns - from_ns);
}

uint64_t sim_live_used(struct sim_live *l, unsigned gpu, unsigned gi, bool whole_gpu) {
        uint64_t sum = 0;

        for (unsigned i = 0; i < SIM_LIVE_SLOTS; i++) {
                struct sim_live_slot *s = &l->slot[i];
                if (s->gpu == gpu && (whole_gpu || s->gi == gi) && sim_live_slot_live(l, s))
                        sum += atomic_load(&s->used_bytes);
        }
        return sum;
}

static void __attribute__((destructor)) live_unload(void) {
        if (live_map)
                munmap(live_map, sizeof(*live_map));
        live_map = NULL;
        free(live_path);
        live_path = NULL;
}

/* The live region: what running CUDA processes do on the simulated GPUs.
 *
 * The CUDA driver simulator (sim/cuda, libcuda.so.1) charges device memory and
 * books kernel time here; the NVML simulator reads it to answer process,
 * memory and utilisation queries. It is a fixed-size file mapped shared by
 * every process, "<state file>.live", next to the JSON state file, and uses
 * atomics only (no lock on the allocation or launch path).
 *
 * Slots: one per (process, CUDA device). A slot's owner word packs the pid
 * and the low 32 bits of the process's start time (/proc/PID/stat field 22),
 * so a recycled pid never inherits a slot. A slot whose owner is dead (no
 * such process, a zombie, or another start time) counts for nothing; the
 * first process that notices reaps it (one CAS), and a new process may take
 * it over. So a process killed at any instruction leaves no charge behind
 * once it is gone.
 *
 * A slot is an entry of the directory slot[] (owner, device, bytes: what
 * every query scans, 32 KiB for all slots) and a ring[] of its busy time kept
 * apart (32 KiB each), which a query reads only for the live slots it
 * reports. So a process's scan maps 8 pages of the region, not one per slot.
 *
 * Devices: one entry per memory domain (a whole GPU, or a MIG GPU instance:
 * key gpu/gi/SIM_ID_NONE) holding the bytes charged by live and not yet
 * reaped slots, and one per compute domain (whole GPU, or a MIG compute
 * instance: key gpu/gi/ci) holding the time until which its SMs are booked.
 * Kernels on one compute domain run one after another, in the order they
 * were booked, whichever process launched them. */
#pragma once

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SIM_LIVE_MAGIC 0x31766c6d69736b6dULL /* "mksimlv1" */
#define SIM_LIVE_VERSION 3u
#define SIM_LIVE_SLOTS 1024u
#define SIM_LIVE_DEVICES 512u
#define SIM_LIVE_INIT_BIT 0x80000000ULL /* in the owner word: slot being set up */

/* Busy time per slot: one counter per millisecond of CLOCK_MONOTONIC, for the
 * last SIM_LIVE_HORIZON_NS and as far ahead (kernels are booked ahead of
 * time), so the busy time of a window is exact at any kernel rate, to within
 * the two partial buckets at its ends. A counter word is (bucket number <<
 * 20) | busy ns; a word of another bucket number is stale (counts 0). A
 * booking reaching further ahead than the horizon (a long kernel, or one
 * queued behind it) is kept whole in the few exact intervals of far[]. */
#define SIM_LIVE_BUCKET_NS 1000000ULL
#define SIM_LIVE_BUCKETS 4096u
#define SIM_LIVE_HORIZON_NS (SIM_LIVE_BUCKETS / 2 * SIM_LIVE_BUCKET_NS)
#define SIM_LIVE_FAR 16u

struct sim_live_interval {
        uint64_t start_ns, end_ns; /* CLOCK_MONOTONIC */
};

/* A slot's entry in the directory: what a scan of the slots reads (32 bytes a
 * slot, 32 KiB for all, so a query touches 8 pages whatever the slot count). */
struct sim_live_slot {
        _Atomic uint64_t owner;      /* 0 free; (starttime_lo32 << 32) | pid [| INIT_BIT] */
        uint32_t gpu, gi, ci;        /* the CUDA device */
        uint32_t index;              /* its place in slot[] and ring[], set when claimed */
        _Atomic uint64_t used_bytes; /* device memory charged by this process */
};

/* A slot's busy time, apart from the directory: read only for the live slots
 * of the device a query asks about. */
struct sim_live_ring {
        _Atomic uint64_t seq;        /* seqlock over far[] (odd while a thread of the owner writes) */
        uint32_t far_head, far_n;
        struct sim_live_interval far[SIM_LIVE_FAR];
        _Atomic uint64_t bucket[SIM_LIVE_BUCKETS];
};

struct sim_live_device {
        _Atomic uint64_t key;        /* 0 free; see sim_live_key() */
        _Atomic uint64_t used_bytes; /* memory domains: sum over unreaped slots */
        _Atomic uint64_t busy_until; /* compute domains: CLOCK_MONOTONIC ns */
};

struct sim_live {
        uint64_t magic;
        uint32_t version, slots, devices, buckets;
        uint64_t size;
        struct sim_live_device dev[SIM_LIVE_DEVICES];
        struct sim_live_slot slot[SIM_LIVE_SLOTS];
        struct sim_live_ring ring[SIM_LIVE_SLOTS];
};

/* The part of the region a reader of busy times maps page by page: the rings
 * (whole pages only). A reader that must not keep them in its RSS (an NVML
 * client) drops its page-table entries of this range after its query. */
void sim_live_rings_range(struct sim_live *l, void **ret_start, size_t *ret_len);

/* Maps the live region of the state file `state_path` (created when absent).
 * The mapping stays for the life of the process (or the next call with
 * another path). -errno with sim_error() set; -EPROTO for a file of another
 * version or size. */
int sim_live_open(const char *state_path, struct sim_live **ret);

/* Keys of device entries: gi/ci are SIM_ID_NONE for a whole GPU. */
static inline uint64_t sim_live_key(unsigned gpu, unsigned gi, unsigned ci) {
        return ((uint64_t) (gpu + 1) << 32) | ((uint64_t) (gi & 0xFFFF) << 16) | (ci & 0xFFFF);
}
struct sim_live_device *sim_live_device(struct sim_live *l, uint64_t key); /* find or add; NULL when full */

/* The pid in an owner word. */
static inline unsigned sim_live_pid(uint64_t owner) {
        return (unsigned) (owner & 0x7FFFFFFFULL);
}
/* Owner word of the calling process; 0 when /proc cannot tell. */
uint64_t sim_live_self(void);
/* Whether the owner word names a live process (INIT_BIT ignored). */
bool sim_live_owner_alive(uint64_t owner);
/* Reaps the slot when its owner is dead: frees it and takes its bytes off its
 * memory domain. Returns true when the slot is (now) free or dead. */
bool sim_live_reap(struct sim_live *l, struct sim_live_slot *s);
/* Whether a slot is in use by a live process (set up, owner alive); reaps it
 * when its owner is dead. */
bool sim_live_slot_live(struct sim_live *l, struct sim_live_slot *s);
/* Claims a slot for the calling process and device; NULL when all are taken. */
struct sim_live_slot *sim_live_claim(struct sim_live *l, uint64_t self, unsigned gpu, unsigned gi, unsigned ci);
/* Gives the caller's slot back (its bytes are taken off its memory domain). */
void sim_live_release(struct sim_live *l, struct sim_live_slot *s, uint64_t self);

/* Memory domain of a device: MIG compute instances of one GPU instance share it. */
static inline uint64_t sim_live_mem_key(unsigned gpu, unsigned gi) {
        return sim_live_key(gpu, gi, 0xFFFFFFFFu);
}

/* Books the busy interval [start, end) of the owner (any thread of it); start
 * is not before now. The intervals of one slot do not overlap. */
void sim_live_book(struct sim_live_slot *s, uint64_t start_ns, uint64_t end_ns);
/* Nanoseconds of [from, to) the slot was busy (to not after now); from is
 * taken no further back than SIM_LIVE_HORIZON_NS before to (see
 * sim_live_window_from()). */
uint64_t sim_live_busy(struct sim_live_slot *s, uint64_t from_ns, uint64_t to_ns);
/* Start of a utilisation window of window_ns ending at now, within the horizon. */
static inline uint64_t sim_live_window_from(uint64_t now_ns, uint64_t window_ns) {
        if (window_ns > SIM_LIVE_HORIZON_NS)
                window_ns = SIM_LIVE_HORIZON_NS;
        return now_ns > window_ns ? now_ns - window_ns : 0;
}
/* Busy share of [from, to) in percent, rounded. */
static inline unsigned sim_live_percent(uint64_t busy_ns, uint64_t from_ns, uint64_t to_ns) {
        uint64_t span = to_ns > from_ns ? to_ns - from_ns : 1;
        uint64_t pct = (busy_ns * 100 + span / 2) / span;
        return (unsigned) (pct < 100 ? pct : 100);
}

/* Bytes used by live processes in a memory domain, by scanning and reaping
 * (exact; slower than the domain's counter). gi SIM_ID_NONE with
 * whole_gpu=true: every domain of the GPU. */
uint64_t sim_live_used(struct sim_live *l, unsigned gpu, unsigned gi, bool whole_gpu);

uint64_t sim_live_now_ns(void); /* CLOCK_MONOTONIC */

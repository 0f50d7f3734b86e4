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
#define SIM_LIVE_VERSION 1u
#define SIM_LIVE_SLOTS 1024u
#define SIM_LIVE_DEVICES 512u
#define SIM_LIVE_RING 64u               /* busy intervals kept per slot (coalesced) */
#define SIM_LIVE_INIT_BIT 0x80000000ULL /* in the owner word: slot being set up */

struct sim_live_interval {
        uint64_t start_ns, end_ns; /* CLOCK_MONOTONIC */
};

struct sim_live_slot {
        _Atomic uint64_t owner;      /* 0 free; (starttime_lo32 << 32) | pid [| INIT_BIT] */
        uint32_t gpu, gi, ci, pad;   /* the CUDA device */
        _Atomic uint64_t used_bytes; /* device memory charged by this process */
        _Atomic uint64_t seq;        /* seqlock over ring[] (odd while writing) */
        uint32_t ring_head, ring_n;  /* written by the owner only */
        struct sim_live_interval ring[SIM_LIVE_RING];
};

struct sim_live_device {
        _Atomic uint64_t key;        /* 0 free; see sim_live_key() */
        _Atomic uint64_t used_bytes; /* memory domains: sum over unreaped slots */
        _Atomic uint64_t busy_until; /* compute domains: CLOCK_MONOTONIC ns */
};

struct sim_live {
        uint64_t magic;
        uint32_t version, slots, devices, ring;
        uint64_t size;
        struct sim_live_device dev[SIM_LIVE_DEVICES];
        struct sim_live_slot slot[SIM_LIVE_SLOTS];
};

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

/* Owner word of the calling process; 0 when /proc cannot tell. */
uint64_t sim_live_self(void);
/* Whether the owner word names a live process (INIT_BIT ignored). */
bool sim_live_owner_alive(uint64_t owner);
/* Reaps the slot when its owner is dead: frees it and takes its bytes off its
 * memory domain. Returns true when the slot is (now) free or dead. */
bool sim_live_reap(struct sim_live *l, struct sim_live_slot *s);
/* Claims a slot for the calling process and device; NULL when all are taken. */
struct sim_live_slot *sim_live_claim(struct sim_live *l, uint64_t self, unsigned gpu, unsigned gi, unsigned ci);
/* Gives the caller's slot back (its bytes are taken off its memory domain). */
void sim_live_release(struct sim_live *l, struct sim_live_slot *s, uint64_t self);

/* Memory domain of a device: MIG compute instances of one GPU instance share it. */
static inline uint64_t sim_live_mem_key(unsigned gpu, unsigned gi) {
        return sim_live_key(gpu, gi, 0xFFFFFFFFu);
}

/* Books a busy interval in the owner's ring (coalescing with the last one). */
void sim_live_book(struct sim_live_slot *s, uint64_t start_ns, uint64_t end_ns);
/* Nanoseconds of [from, to) covered by the slot's intervals. */
uint64_t sim_live_busy(struct sim_live_slot *s, uint64_t from_ns, uint64_t to_ns);

/* Bytes used by live processes in a memory domain, by scanning and reaping
 * (exact; slower than the domain's counter). gi SIM_ID_NONE with
 * whole_gpu=true: every domain of the GPU. */
uint64_t sim_live_used(struct sim_live *l, unsigned gpu, unsigned gi, bool whole_gpu);

uint64_t sim_live_now_ns(void); /* CLOCK_MONOTONIC */

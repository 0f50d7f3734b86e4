/* The accounting region one container's processes share: a file mapped
 * MAP_SHARED (path from CUDA_DEVICE_MEMORY_SHARED_CACHE), fixed size, one
 * slot per process holding the exact bytes it has charged per device.
 *
 * Rules (docs/vgpu.md, "Accounting"):
 * - A process writes only its own slot, with atomics; there is no lock on
 *   the allocation path. The flock on the file is taken only to create or
 *   validate it.
 * - A charge is announced in the slot's `pending` counter, then the sum of
 *   every slot is compared with the cap (announce-then-check, as Dekker's
 *   algorithm): two racing processes cannot both pass unless both fit, so
 *   the sum of charges never exceeds the cap. A charge that fails only
 *   because of other announcements still being checked retries, so there
 *   is no false out-of-memory either.
 * - Everything a process charged lives in its slot: when it dies (any
 *   instruction, kill -9 included) the slot is reclaimed whole, by pid
 *   liveness plus the process start time (pid reuse), at the next attach,
 *   allocation that would fail, or watcher pass.
 * - Counters never go below zero (uncharge saturates and reports it). */
#pragma once

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "vgpu/config.h"

#define VGPU_REGION_MAGIC 0x31757067766b6d23ULL  /* "#mkvgpu1" */
#define VGPU_REGION_VERSION 2u                   /* 2: contexts charged (ctx, ctx_size) */
#define VGPU_MAX_SLOTS 1024                      /* processes per container */
#define VGPU_UUID_LEN 48
#define VGPU_HAMI_MAGIC 19920718                 /* HAMi-core's region (shared_region_t) */

#define VGPU_OWNER_LIVE 1ull
#define VGPU_OWNER_RECLAIM 2ull
#define VGPU_OWNER(state, pid) (((uint64_t) (state) << 32) | (uint32_t) (pid))
#define VGPU_OWNER_STATE(o) ((o) >> 32)
#define VGPU_OWNER_PID(o) ((pid_t) ((o) & 0xffffffffu))

struct vgpu_dev_use {
        _Atomic uint64_t used;     /* committed bytes (contexts included) */
        _Atomic uint64_t pending;  /* announced, being checked */
        _Atomic uint64_t ctx;      /* of used, the contexts' bytes (the views' breakdown) */
        uint64_t reserved;
};

struct vgpu_slot {
        _Atomic uint64_t owner;       /* 0: free; VGPU_OWNER(state, pid) */
        _Atomic uint64_t start_time;  /* owner's /proc/<pid>/stat starttime; 0: unknown */
        _Atomic uint64_t launches;    /* kernel and graph launches admitted (statistics) */
        _Atomic uint64_t throttled_ns;/* time launches waited for the compute share */
        uint64_t reserved[4];
        struct vgpu_dev_use dev[VGPU_MAX_DEVICES];
} __attribute__((aligned(64)));

/* The compute share of one device, shared by the container's processes: a
 * token bucket in nanoseconds of whole-GPU time (share.h). */
struct vgpu_share_dev {
        _Atomic int64_t tokens;          /* may go negative: debt paid by waiting */
        _Atomic uint64_t last_ns;        /* CLOCK_MONOTONIC of the last refill */
        _Atomic uint64_t others_until_ns;/* another GPU user seen active until then */
        _Atomic uint64_t admitted_ns;    /* estimated GPU time admitted, ever */
        uint64_t reserved[4];
} __attribute__((aligned(64)));

struct vgpu_region {
        uint64_t magic;                  /* written last at creation */
        uint32_t version;
        uint32_t n_slots;
        uint64_t size;                   /* sizeof(struct vgpu_region) */
        uint32_t n_devices;
        _Atomic uint32_t slot_hwm;       /* slots [0, hwm) may be in use */
        uint64_t mem_limit[VGPU_MAX_DEVICES]; /* bytes, VGPU_UNLIMITED: none */
        uint32_t sm_limit[VGPU_MAX_DEVICES];  /* percent, 100: none */
        uint32_t policy;                 /* enum vgpu_policy */
        uint32_t reserved0;
        _Atomic uint32_t uuid_set[VGPU_MAX_DEVICES];
        char uuid[VGPU_MAX_DEVICES][VGPU_UUID_LEN]; /* "GPU-..." of CUDA device i, once known */
        _Atomic uint64_t ctx_size[VGPU_MAX_DEVICES]; /* a context's bytes on device i as measured (0: not yet) */
        struct vgpu_share_dev share[VGPU_MAX_DEVICES];
        struct vgpu_slot slots[VGPU_MAX_SLOTS];
};

/* Whether pid (started at start_time, 0: unknown) still runs; replaceable
 * in tests. A zombie counts as dead: the driver freed its memory already. */
typedef bool (*vgpu_alive_fn)(pid_t pid, uint64_t start_time);
bool vgpu_pid_alive(pid_t pid, uint64_t start_time);
/* /proc/<pid>/stat starttime (clock ticks after boot); 0 when unreadable. */
uint64_t vgpu_proc_start_time(pid_t pid);

/* Maps the region file at path, creating and initialising it from c when
 * it is new or when no process of a previous run is left in it (then its
 * limits are replaced by c's: no stale limits after a change). Refuses a
 * file of another size, magic or version: -EPROTO with the reason in err.
 * Other failures: -errno, reason in err. */
int vgpu_region_open(const char *path, const struct vgpu_config *c, struct vgpu_region **ret,
                     char *err, size_t errlen);
/* Forgets what a run learnt about device dev (its recorded UUID, context
 * size, compute bucket): done when a run adopts a region no live process
 * holds. Limits and slots are not touched. */
void vgpu_region_forget_run(struct vgpu_region *r, unsigned dev);
/* A region private to this process (anonymous mapping): the fallback when
 * the file cannot be used, so caps still hold per process. */
int vgpu_region_new_private(const struct vgpu_config *c, struct vgpu_region **ret);
void vgpu_region_unmap(struct vgpu_region *r);
/* Initialises a zeroed region in memory (tests, fuzz). */
void vgpu_region_init(struct vgpu_region *r, const struct vgpu_config *c);
/* Checks a mapped file's header; 0 or -EPROTO with the reason. */
int vgpu_region_validate(const struct vgpu_region *r, uint64_t file_size, char *err, size_t errlen);

/* Takes a free slot for pid (reclaiming dead ones if none is free). Returns
 * the slot index, or -ENOSPC when VGPU_MAX_SLOTS live processes hold them. */
int vgpu_region_claim(struct vgpu_region *r, pid_t pid, uint64_t start_time, vgpu_alive_fn alive);
/* Gives the slot back (process exit): its charges are dropped. */
void vgpu_region_release(struct vgpu_region *r, int slot);

/* Charges size bytes on dev to slot. 0, or -ENOMEM when the cap would be
 * exceeded (after reclaiming dead slots). Never exceeds the cap. */
int vgpu_region_charge(struct vgpu_region *r, int slot, unsigned dev, uint64_t size, vgpu_alive_fn alive);
/* Returns bytes to the slot; saturates at 0 (returns -ERANGE if it had to). */
int vgpu_region_uncharge(struct vgpu_region *r, int slot, unsigned dev, uint64_t size);

/* Committed bytes on dev summed over all slots. */
uint64_t vgpu_region_used(const struct vgpu_region *r, unsigned dev);
/* The same, after reclaiming the slots of dead processes it meets: what
 * the memory views report (a process killed a moment ago no longer counts). */
uint64_t vgpu_region_used_live(struct vgpu_region *r, unsigned dev, vgpu_alive_fn alive);
/* Of the committed bytes, the contexts' (summed over slots / one slot);
 * vgpu_region_ctx_add moves a slot's context figure (already charged). */
uint64_t vgpu_region_ctx(const struct vgpu_region *r, unsigned dev);
uint64_t vgpu_region_slot_ctx(const struct vgpu_region *r, int slot, unsigned dev);
void vgpu_region_ctx_add(struct vgpu_region *r, int slot, unsigned dev, int64_t delta);
/* Committed bytes of one slot. */
uint64_t vgpu_region_slot_used(const struct vgpu_region *r, int slot, unsigned dev);
/* Reclaims the slots of dead processes; returns how many. */
unsigned vgpu_region_reclaim(struct vgpu_region *r, vgpu_alive_fn alive);
/* Number of slots owned by live processes. */
unsigned vgpu_region_live(struct vgpu_region *r, vgpu_alive_fn alive);
/* Records CUDA device dev's UUID if none is recorded yet. */
void vgpu_region_set_uuid(struct vgpu_region *r, unsigned dev, const char *uuid);
/* The CUDA device index whose recorded UUID is uuid, or -ENOENT. */
int vgpu_region_find_uuid(const struct vgpu_region *r, const char *uuid);

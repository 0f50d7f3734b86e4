/* This process's live allocations: device pointer (or VMM handle) -> bytes
 * charged and device, so a free returns exactly what its allocation took.
 * Sharded open-addressing tables in anonymous mappings: no libc allocation,
 * a mutex per shard (process-local; never held across a driver call). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

enum vgpu_track_kind {
        VGPU_TRACK_PTR,     /* cuMemAlloc*, pitch, managed, async, pool */
        VGPU_TRACK_HANDLE,  /* cuMemCreate, cuMemImportFromShareableHandle: aux = references | mappings << 32 */
        VGPU_TRACK_MAP,     /* cuMemMap: address -> (mapped bytes, aux = the handle) */
        VGPU_TRACK_CTX,     /* cuCtxCreate: context -> (bytes charged, device) */
        _VGPU_TRACK_MAX,
};

#define VGPU_TRACK_MAX_ENTRIES (1u << 24) /* per kind; beyond: the allocation is refused */

/* Records key -> (size, dev). -ENOSPC when full or no memory to grow. */
int vgpu_track_put(enum vgpu_track_kind kind, uint64_t key, uint64_t size, unsigned dev);
int vgpu_track_put_aux(enum vgpu_track_kind kind, uint64_t key, uint64_t size, unsigned dev, uint64_t aux);
/* Removes key; 0 with the size and device, or -ENOENT (not ours). */
int vgpu_track_take(enum vgpu_track_kind kind, uint64_t key, uint64_t *ret_size, unsigned *ret_dev);
int vgpu_track_take_aux(enum vgpu_track_kind kind, uint64_t key, uint64_t *ret_size, unsigned *ret_dev,
                        uint64_t *ret_aux);
/* A VMM handle's counts, under its shard's lock: adds refs and maps (each
 * saturating at 0) to the entry's aux (references in the low 32 bits,
 * mappings in the high). When both reach 0 the entry is removed and 1 is
 * returned with its size and device (the caller uncharges); 0 when it
 * stays; -ENOENT when key is not ours. */
int vgpu_track_handle_adjust(uint64_t key, int refs, int maps, uint64_t *ret_size, unsigned *ret_dev);
/* Entries recorded (tests). */
uint64_t vgpu_track_count(enum vgpu_track_kind kind);
/* fork(): prepare locks every shard, parent unlocks, child empties the
 * tables (the parent's allocations are not the child's). */
void vgpu_track_atfork_prepare(void);
void vgpu_track_atfork_parent(void);
void vgpu_track_atfork_child(void);

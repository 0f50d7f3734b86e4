/* The simulated machine's state: in-memory form, JSON state file, locking.
 *
 * One state file per machine. Every access runs inside a session: the
 * process-wide mutex, then flock() on "<state>.lock" (LOCK_SH to read,
 * LOCK_EX to change). The parsed state is cached per process and re-read
 * when the file changed (inode, mtime, size, and a generation counter the
 * writers keep in the lock file). Saving writes a temporary file in the same
 * directory and renames it over the state, so a process killed at any point
 * leaves either the old or the new state (no fsync: a power loss is not
 * modelled). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/catalog.h"

#define SIM_MAX_STATE_BYTES (4 * 1024 * 1024) /* largest state file accepted */
#define SIM_MAX_PROCESSES 1024                /* per GPU */
#define SIM_MAX_EVENTS 256                    /* queued events kept (oldest dropped) */
#define SIM_MAX_FAULTS 64
#define SIM_FUNCTION_NAME_MAX 96
#define SIM_UUID_MAX 48                       /* "MIG-" + 36 + NUL, with room */
#define SIM_FIRST_FAKE_PID 100000u
#define SIM_ID_NONE 0xFFFFFFFFu
#define SIM_MAX_MPS_LOG 256                   /* MPS control commands kept (oldest dropped) */
#define SIM_MPS_PIPE_MAX 256
#define SIM_MPS_COMMAND_MAX 128

struct sim_ci {
        unsigned id;
        unsigned profile;        /* CI profile enum (= driver id) */
        unsigned start, size;    /* compute slices within the GI */
        char uuid[SIM_UUID_MAX]; /* "MIG-..." */
};

struct sim_gi {
        unsigned id;
        unsigned profile;        /* GI profile NVML enum */
        unsigned start, size;    /* memory units */
        unsigned long long serial;
        struct sim_ci cis[SIM_MAX_CI];
        unsigned n_cis;
};

struct sim_process {
        unsigned pid;
        unsigned long long used_mib;
        unsigned gi, ci;         /* SIM_ID_NONE: on the whole GPU */
};

struct sim_gpu {
        const struct sim_model *model;
        char uuid[SIM_UUID_MAX];
        char bus_id[32];         /* "00000000:07:00.0" */
        unsigned bus;
        unsigned mig_current, mig_pending;
        bool lost;               /* fallen off the bus: calls on it return GPU_IS_LOST */
        unsigned compute_mode;   /* nvmlComputeMode_t: 0 default, 2 prohibited, 3 exclusive process (1 is deprecated) */
        struct sim_gi gis[SIM_MAX_GI];
        unsigned n_gis;          /* sorted by id */
        struct sim_process *procs;
        size_t n_procs;
};

struct sim_event {
        unsigned long long seq;
        unsigned gpu;
        unsigned long long type;
        unsigned long long data;
        unsigned gi, ci;
};

/* A command an MPS control daemon stand-in (sim/mps) was sent. */
struct sim_mps_command {
        char pipe[SIM_MPS_PIPE_MAX];       /* its CUDA_MPS_PIPE_DIRECTORY */
        char command[SIM_MPS_COMMAND_MAX]; /* "set_default_active_thread_percentage 25", "start", "quit" */
};

struct sim_fault {
        char function[SIM_FUNCTION_NAME_MAX];
        unsigned remaining;      /* calls left; the call that brings it to 0 fails */
        int error;               /* NVML return code */
};

struct sim_state {
        char *machine;
        unsigned long long serial;     /* creation serials, MIG UUIDs */
        unsigned long long event_seq;  /* last event sequence number handed out */
        unsigned next_pid;
        unsigned crash_after;          /* 0: disarmed */
        struct sim_fault faults[SIM_MAX_FAULTS];
        size_t n_faults;
        struct sim_event events[SIM_MAX_EVENTS];
        size_t n_events;
        struct sim_mps_command *mps_log; /* SIM_MAX_MPS_LOG entries, oldest first; NULL when none */
        size_t n_mps_log;
        struct sim_gpu *gpus;
        size_t n_gpus;
};

struct sim_session {
        struct sim_state *state;  /* valid until sim_session_end() */
        int lock_fd;
        bool exclusive;
        bool saved;
        char *path;
};

/* Default state path (see mksim_state_path()); malloc'ed. */
char *sim_default_state_path(void);

/* Builds a fresh state for a machine spec; -EINVAL etc. with sim_error(). */
int sim_state_new(const char *machine, struct sim_state **ret);
struct sim_state *sim_state_free(struct sim_state *s);

/* Begins a session on the state file `path`. When the file does not exist it
 * is created from $MIGKIT_SIM_MACHINE (default dgx-a100) unless `create` is
 * false (then -ENOENT). On failure (-errno, message in sim_error()) nothing
 * is held. */
int sim_session_begin(struct sim_session *s, const char *path, bool exclusive, bool create);

/* Begins an exclusive session without reading the state file (to replace
 * it); *ret_exists tells whether a state file is there. s->state is NULL. */
int sim_session_begin_replace(struct sim_session *s, const char *path, bool *ret_exists);

/* Saves the session's state atomically; exclusive sessions only. */
int sim_session_save(struct sim_session *s);

/* Replaces the session's state (ownership taken) and saves it. */
int sim_session_replace(struct sim_session *s, struct sim_state *st);

/* Ends a session: releases the lock and the mutex. An exclusive session that
 * was not saved drops the cache, so changes made in memory are forgotten. */
void sim_session_end(struct sim_session *s);

/* The state as JSON (the state file format), new reference. */
struct json_t;
struct json_t *sim_state_to_json(const struct sim_state *s, bool describe);

/* Lookups in a state. */
struct sim_gi *sim_gpu_find_gi(struct sim_gpu *g, unsigned gi_id);
struct sim_ci *sim_gi_find_ci(struct sim_gi *gi, unsigned ci_id);

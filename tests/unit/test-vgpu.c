/* Unit tests for vgpu/: limit variables, the shared accounting region
 * (races between processes, kill -9, pid reuse, refused files), the
 * allocation table and the compute share's admission arithmetic. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "vgpu/config.h"
#include "vgpu/region.h"
#include "vgpu/share.h"
#include "vgpu/track.h"

#pragma GCC diagnostic ignored "-Wunused-parameter"

#define MIB (1024ull * 1024ull)

/* ---- configuration ---- */

/* HAMi-core's readings (get_limit_from_env: the suffix from the last
 * character, strtoul(value, base 0) of the whole text). */
static void test_parse_size(void **state) {
        static const struct {
                const char *in;
                int r;
                uint64_t v;
        } t[] = {
                { "8000m", 0, 8000 * MIB },  { "8g", 0, 8ull << 30 },     { "8G", 0, 8ull << 30 },
                { "4096k", 0, 4096 * 1024 }, { "123", 0, 123 },           { "0", 0, 0 },
                { "", -EINVAL, 0 },          { "m", -EINVAL, 0 },         { "8x", 0, 8 },
                { "-1", 0, UINT64_MAX },     { " 8m", 0, 8 * MIB },       { "8m ", 0, 8 },
                { "8.5g", 0, 8ull << 30 },   { "1.5g", 0, 1ull << 30 },   { "18446744073709551615", 0, UINT64_MAX },
                { "18446744073709551616", 0, UINT64_MAX },                { "17179869184g", -ERANGE, 0 },
                { "8mb", 0, 8 },             { "1gb", 0, 1 },             { "0x40000000", 0, 1ull << 30 },
                { "0X10m", 0, 16 * MIB },    { "010", 0, 8 },             { "08", 0, 0 },
                { "0x", 0, 0 },              { "+2k", 0, 2048 },          { "\t\n 3", 0, 3 },
                { "abc", -EINVAL, 0 },       { "-", -EINVAL, 0 },         { "-1g", -ERANGE, 0 },
                { "--1", -EINVAL, 0 },       { "0xg", 0, 0 },
        };
        for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
                uint64_t v = 777;
                int r = vgpu_parse_size(t[i].in, &v);
                if (r != t[i].r)
                        fail_msg("'%s': got %d, want %d", t[i].in, r, t[i].r);
                if (r == 0 && v != t[i].v)
                        fail_msg("'%s': got %llu, want %llu", t[i].in, (unsigned long long) v,
                                 (unsigned long long) t[i].v);
                if (r < 0)
                        assert_int_equal(v, 777);
        }
        assert_int_equal(vgpu_parse_size(NULL, &(uint64_t) { 0 }), -EINVAL);
}

static void test_parse_percent(void **state) {
        unsigned v;
        assert_int_equal(vgpu_parse_percent("30", &v), 0);
        assert_int_equal(v, 30);
        assert_int_equal(vgpu_parse_percent("100", &v), 0);
        assert_int_equal(vgpu_parse_percent("101", &v), 0);
        assert_int_equal(v, 100);
        assert_int_equal(vgpu_parse_percent("3o", &v), 0);
        assert_int_equal(v, 3);
        assert_int_equal(vgpu_parse_percent("0x1e", &v), 0);
        assert_int_equal(v, 30);
        assert_int_equal(vgpu_parse_percent("", &v), -EINVAL);
        assert_int_equal(vgpu_parse_percent("x", &v), -EINVAL);
        /* atoi, as HAMi-core reads CUDA_TASK_PRIORITY. */
        assert_int_equal(vgpu_parse_int(" -3x"), -3);
        assert_int_equal(vgpu_parse_int("x"), 0);
        assert_int_equal(vgpu_parse_int("99999999999"), INT32_MAX);
        assert_int_equal(vgpu_parse_int("-99999999999"), INT32_MIN);
}

struct env {
        const char *kv[32];
};

static const char *env_lookup(const char *name, void *userdata) {
        struct env *e = userdata;
        size_t n = strlen(name);
        for (size_t i = 0; e->kv[i]; i++)
                if (strncmp(e->kv[i], name, n) == 0 && e->kv[i][n] == '=')
                        return e->kv[i] + n + 1;
        return NULL;
}

static int n_warnings;
static void count_warn(const char *msg, void *userdata) {
        n_warnings++;
}

static void test_config(void **state) {
        struct vgpu_config c;
        struct env e = { { "CUDA_DEVICE_MEMORY_LIMIT=2g", "CUDA_DEVICE_MEMORY_LIMIT_1=8000m",
                           "CUDA_DEVICE_SM_LIMIT=30", "CUDA_DEVICE_SM_LIMIT_2=0", "CUDA_DEVICE_SM_LIMIT_3=100",
                           "CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/x.cache", "GPU_CORE_UTILIZATION_POLICY=FORCE",
                           "LIBCUDA_LOG_LEVEL=4", "CUDA_TASK_PRIORITY=1", NULL } };
        n_warnings = 0;
        vgpu_config_load(&c, env_lookup, &e, count_warn);
        assert_int_equal(n_warnings, 0);
        assert_int_equal(c.mem_limit[0], 2ull << 30);
        assert_int_equal(c.mem_limit[1], 8000 * MIB);
        assert_int_equal(c.mem_limit[15], 2ull << 30);
        assert_int_equal(c.sm_limit[0], 30);
        assert_int_equal(c.sm_limit[2], 30);  /* 0: the all-devices value (HAMi-core) */
        assert_int_equal(c.sm_limit[3], 100);
        assert_string_equal(c.region_path, "/tmp/x.cache");
        assert_int_equal(c.policy, VGPU_POLICY_FORCE);
        assert_int_equal(c.log_level, 4);
        assert_int_equal(c.priority, 1);
        assert_false(c.disabled);

        /* Nothing set: unlimited, defaults. */
        struct env none = { { NULL } };
        vgpu_config_load(&c, env_lookup, &none, count_warn);
        assert_int_equal(n_warnings, 0);
        assert_true(c.mem_limit[0] == VGPU_UNLIMITED);
        assert_int_equal(c.sm_limit[0], 100);
        assert_string_equal(c.region_path, VGPU_DEFAULT_REGION);
        assert_int_equal(c.policy, VGPU_POLICY_DEFAULT);

        assert_int_equal(c.priority, 1);  /* HAMi-core's default */

        /* A memory limit with no digit fails closed; a bad SM limit or policy is
         * ignored; an SM limit over 100 is none; log levels past 4 are 4. */
        struct env bad = { { "CUDA_DEVICE_MEMORY_LIMIT_0=x8", "CUDA_DEVICE_SM_LIMIT_0=150", "CUDA_DEVICE_SM_LIMIT_1=z",
                             "GPU_CORE_UTILIZATION_POLICY=sometimes", "LIBCUDA_LOG_LEVEL=9",
                             "CUDA_DISABLE_CONTROL=true", NULL } };
        n_warnings = 0;
        vgpu_config_load(&c, env_lookup, &bad, count_warn);
        assert_int_equal(n_warnings, 3);
        assert_int_equal(c.mem_limit[0], 0);
        assert_true(c.mem_limit[1] == VGPU_UNLIMITED);
        assert_int_equal(c.sm_limit[0], 100);
        assert_int_equal(c.sm_limit[1], 100);
        assert_int_equal(c.policy, VGPU_POLICY_DEFAULT);
        assert_int_equal(c.log_level, 4);
        assert_true(c.disabled);

        /* HAMi-core's order: a per-device value read as 0 (or overflowing) falls
         * back to the all-devices value; the texts are kept for the log line. */
        struct env fallback = { { "CUDA_DEVICE_MEMORY_LIMIT=2g", "CUDA_DEVICE_MEMORY_LIMIT_0=0",
                                  "CUDA_DEVICE_MEMORY_LIMIT_1=0x40000000", "CUDA_DEVICE_MEMORY_LIMIT_2=1.5g",
                                  "CUDA_DEVICE_MEMORY_LIMIT_3=99999999999999g", "CUDA_DEVICE_SM_LIMIT=20",
                                  "CUDA_DEVICE_SM_LIMIT_0=0", "CUDA_TASK_PRIORITY=0", NULL } };
        n_warnings = 0;
        vgpu_config_load(&c, env_lookup, &fallback, count_warn);
        assert_int_equal(n_warnings, 1);  /* the overflow */
        assert_int_equal(c.mem_limit[0], 2ull << 30);
        assert_int_equal(c.mem_from[0], VGPU_FROM_ALL);
        assert_int_equal(c.mem_limit[1], 1ull << 30);
        assert_int_equal(c.mem_from[1], VGPU_FROM_DEVICE);
        assert_string_equal(c.mem_text[1], "0x40000000");
        assert_int_equal(c.mem_limit[2], 1ull << 30);
        assert_true(c.mem_limit[3] == VGPU_UNLIMITED);
        assert_int_equal(c.mem_limit[4], 2ull << 30);
        assert_string_equal(c.mem_text_all, "2g");
        assert_int_equal(c.sm_limit[0], 20);
        assert_int_equal(c.priority, 0);

        assert_string_equal(vgpu_policy_to_string(VGPU_POLICY_DISABLE), "disable");
        assert_int_equal(vgpu_policy_from_string("default"), VGPU_POLICY_DEFAULT);
        assert_int_equal(vgpu_policy_from_string("x"), _VGPU_POLICY_INVALID);
}

/* ---- region ---- */

static char tmpdir[256];

static int setup_tmp(void **state) {
        const char *base = getenv("MIGKIT_TEST_TMP");
        if (base)
                mkdir(base, 0755);
        snprintf(tmpdir, sizeof(tmpdir), "%s/vgpu-XXXXXX", base ? base : "/tmp");
        assert_non_null(mkdtemp(tmpdir));
        return 0;
}

static int teardown_tmp(void **state) {
        char cmd[300];
        snprintf(cmd, sizeof(cmd), "%s/region", tmpdir);
        unlink(cmd);
        rmdir(tmpdir);
        return 0;
}

static struct vgpu_config cfg_with(uint64_t cap0, uint64_t cap1) {
        struct vgpu_config c;
        struct env none = { { NULL } };
        vgpu_config_load(&c, env_lookup, &none, NULL);
        c.mem_limit[0] = cap0;
        c.mem_limit[1] = cap1;
        return c;
}

static void test_region_file(void **state) {
        char path[300], err[256];
        snprintf(path, sizeof(path), "%s/region", tmpdir);
        unlink(path);
        struct vgpu_config c = cfg_with(100 * MIB, VGPU_UNLIMITED);
        struct vgpu_region *r = NULL, *r2 = NULL;
        assert_int_equal(vgpu_region_open(path, &c, &r, err, sizeof(err)), 0);
        struct stat st;
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_size, sizeof(struct vgpu_region));
        assert_int_equal(r->mem_limit[0], 100 * MIB);
        int s = vgpu_region_claim(r, getpid(), vgpu_proc_start_time(getpid()), vgpu_pid_alive);
        assert_true(s >= 0);
        assert_int_equal(vgpu_region_charge(r, s, 0, 10 * MIB, vgpu_pid_alive), 0);
        vgpu_region_set_uuid(r, 0, "GPU-run-1");
        atomic_store(&r->ctx_size[0], 300 * MIB);
        atomic_store(&r->share[0].tokens, 5000000);
        atomic_store(&r->share[0].last_ns, 1);

        /* A second mapping sees the charge; its different limits do not apply
         * while a live process is in the region. */
        struct vgpu_config c2 = cfg_with(5 * MIB, VGPU_UNLIMITED);
        assert_int_equal(vgpu_region_open(path, &c2, &r2, err, sizeof(err)), 0);
        assert_int_equal(vgpu_region_used(r2, 0), 10 * MIB);
        assert_int_equal(r2->mem_limit[0], 100 * MIB);
        assert_int_equal(vgpu_region_find_uuid(r2, "GPU-run-1"), 0);
        vgpu_region_unmap(r2);
        vgpu_region_release(r, s);
        assert_int_equal(vgpu_region_used(r, 0), 0);
        /* Nobody left: the next process's limits replace the old ones. */
        assert_int_equal(vgpu_region_open(path, &c2, &r2, err, sizeof(err)), 0);
        assert_int_equal(r2->mem_limit[0], 5 * MIB);
        /* ... and what the previous run learnt is forgotten: its devices'
         * UUIDs (it may have seen other devices), context sizes, buckets. */
        assert_int_equal(vgpu_region_find_uuid(r2, "GPU-run-1"), -ENOENT);
        assert_int_equal(atomic_load(&r2->uuid_set[0]), 0);
        assert_int_equal(atomic_load(&r2->ctx_size[0]), 0);
        assert_int_equal(atomic_load(&r2->share[0].tokens), 0);
        assert_int_equal(atomic_load(&r2->share[0].last_ns), 0);
        vgpu_region_unmap(r2);
        vgpu_region_unmap(r);

        /* Another version, another size, HAMi-core's file: refused, saying why. */
        int fd = open(path, O_RDWR);
        assert_true(fd >= 0);
        uint32_t v = 1;  /* the layout before contexts were charged */
        assert_int_equal(pwrite(fd, &v, sizeof(v), offsetof(struct vgpu_region, version)), sizeof(v));
        assert_int_equal(vgpu_region_open(path, &c, &r, err, sizeof(err)), -EPROTO);
        assert_non_null(strstr(err, "version 1"));
        assert_int_equal(ftruncate(fd, 4096), 0);
        assert_int_equal(vgpu_region_open(path, &c, &r, err, sizeof(err)), -EPROTO);
        assert_non_null(strstr(err, "4096 bytes"));
        int32_t hami = VGPU_HAMI_MAGIC;
        assert_int_equal(pwrite(fd, &hami, sizeof(hami), 0), sizeof(hami));
        assert_int_equal(vgpu_region_open(path, &c, &r, err, sizeof(err)), -EPROTO);
        assert_non_null(strstr(err, "HAMi-core"));
        assert_int_equal(ftruncate(fd, sizeof(struct vgpu_region)), 0);
        uint64_t junk = 0x1234;
        assert_int_equal(pwrite(fd, &junk, sizeof(junk), 0), sizeof(junk));
        assert_int_equal(vgpu_region_open(path, &c, &r, err, sizeof(err)), -EPROTO);
        assert_non_null(strstr(err, "not a migkit"));
        /* Magic 0 (a creator died before finishing): initialised again. */
        junk = 0;
        assert_int_equal(pwrite(fd, &junk, sizeof(junk), 0), sizeof(junk));
        assert_int_equal(vgpu_region_open(path, &c, &r, err, sizeof(err)), 0);
        vgpu_region_unmap(r);
        close(fd);
        unlink(path);
}

static bool always_alive(pid_t pid, uint64_t st) {
        return true;
}

static pid_t dead_pid;
static bool alive_but(pid_t pid, uint64_t st) {
        return pid != dead_pid;
}

static void test_region_charge(void **state) {
        struct vgpu_config c = cfg_with(100, VGPU_UNLIMITED);
        struct vgpu_region *r;
        assert_int_equal(vgpu_region_new_private(&c, &r), 0);
        int a = vgpu_region_claim(r, 1001, 0, always_alive);
        int b = vgpu_region_claim(r, 1002, 0, always_alive);
        assert_int_equal(a, 0);
        assert_int_equal(b, 1);
        assert_int_equal(vgpu_region_charge(r, a, 0, 60, always_alive), 0);
        assert_int_equal(vgpu_region_charge(r, b, 0, 41, always_alive), -ENOMEM);
        assert_int_equal(vgpu_region_charge(r, b, 0, 40, always_alive), 0);
        assert_int_equal(vgpu_region_charge(r, b, 0, 1, always_alive), -ENOMEM);
        assert_int_equal(vgpu_region_charge(r, b, 0, 101, always_alive), -ENOMEM);
        assert_int_equal(vgpu_region_used(r, 0), 100);
        /* Device 1 is unlimited; device 16 does not exist. */
        assert_int_equal(vgpu_region_charge(r, b, 1, UINT64_MAX / 2, always_alive), 0);
        assert_int_equal(vgpu_region_charge(r, b, VGPU_MAX_DEVICES, 1, always_alive), -EINVAL);
        /* Uncharging more than charged saturates at 0 and says so. */
        assert_int_equal(vgpu_region_uncharge(r, b, 0, 30), 0);
        assert_int_equal(vgpu_region_uncharge(r, b, 0, 30), -ERANGE);
        assert_int_equal(vgpu_region_slot_used(r, b, 0), 0);
        assert_int_equal(vgpu_region_used(r, 0), 60);
        /* The owner of slot a dies: its 60 bytes come back when room is needed. */
        dead_pid = 1001;
        assert_int_equal(vgpu_region_charge(r, b, 0, 100, alive_but), 0);
        assert_int_equal(atomic_load(&r->slots[a].owner), 0);
        assert_int_equal(vgpu_region_used(r, 0), 100);
        /* A killed process's pending announcement is reclaimed too. */
        vgpu_region_release(r, b);
        int d = vgpu_region_claim(r, 1003, 0, always_alive);
        atomic_store(&r->slots[d].dev[0].pending, 90);
        dead_pid = 1003;
        int e = vgpu_region_claim(r, 1004, 0, alive_but);
        assert_int_equal(vgpu_region_charge(r, e, 0, 50, alive_but), 0);
        assert_int_equal(vgpu_region_used(r, 0), 50);
        vgpu_region_unmap(r);
}

static void test_region_slots(void **state) {
        struct vgpu_config c = cfg_with(100, VGPU_UNLIMITED);
        struct vgpu_region *r;
        assert_int_equal(vgpu_region_new_private(&c, &r), 0);
        for (int i = 0; i < VGPU_MAX_SLOTS; i++)
                assert_int_equal(vgpu_region_claim(r, 5000 + i, 0, always_alive), i);
        assert_int_equal(vgpu_region_claim(r, 9999, 0, always_alive), -ENOSPC);
        dead_pid = 5007;
        assert_int_equal(vgpu_region_claim(r, 9999, 0, alive_but), 7);
        assert_int_equal(vgpu_region_live(r, always_alive), VGPU_MAX_SLOTS);
        /* A reclaimer that died mid-way is taken over. */
        atomic_store(&r->slots[3].owner, VGPU_OWNER(VGPU_OWNER_RECLAIM, 5003));
        atomic_store(&r->slots[3].dev[0].used, 77);
        dead_pid = 5003;
        assert_int_equal(vgpu_region_reclaim(r, alive_but), 1);
        assert_int_equal(atomic_load(&r->slots[3].owner), 0);
        assert_int_equal(vgpu_region_used(r, 0), 0);
        vgpu_region_unmap(r);

        /* The real liveness check: this process lives, a reaped child does not,
         * and a different start time means the pid was reused. */
        uint64_t st = vgpu_proc_start_time(getpid());
        assert_true(st > 0);
        assert_true(vgpu_pid_alive(getpid(), st));
        assert_false(vgpu_pid_alive(getpid(), st + 1));
        pid_t p = fork();
        if (p == 0)
                _exit(0);
        waitpid(p, NULL, 0);
        assert_false(vgpu_pid_alive(p, 0));
        /* A zombie counts as dead. */
        p = fork();
        if (p == 0)
                _exit(0);
        siginfo_t si;
        assert_int_equal(waitid(P_PID, (id_t) p, &si, WEXITED | WNOWAIT), 0);  /* exited, not reaped */
        assert_false(vgpu_pid_alive(p, 0));
        waitpid(p, NULL, 0);
}

/* Processes race to the cap in chunks: the sum never exceeds it, and the
 * last refusal comes only when less than a chunk is left (no false OOM). */
static void test_region_race(void **state) {
        const int procs = 8;
        const uint64_t chunk = 3 * MIB + 17, cap = 1000 * MIB;
        struct vgpu_config c = cfg_with(cap, VGPU_UNLIMITED);
        struct vgpu_region *r;
        assert_int_equal(vgpu_region_new_private(&c, &r), 0);  /* MAP_SHARED: children share it */
        for (int round = 0; round < 5; round++) {
                pid_t kids[8];
                int done[2];
                assert_int_equal(pipe(done), 0);
                for (int i = 0; i < procs; i++) {
                        kids[i] = fork();
                        if (kids[i] == 0) {
                                int s = vgpu_region_claim(r, getpid(), vgpu_proc_start_time(getpid()), vgpu_pid_alive);
                                if (s < 0)
                                        _exit(2);
                                while (vgpu_region_charge(r, s, 0, chunk, vgpu_pid_alive) == 0)
                                        if (vgpu_region_used(r, 0) > cap)
                                                _exit(3);
                                /* Refused: say so, and hold the charge until the parent looked. */
                                if (write(done[1], "x", 1) != 1)
                                        _exit(4);
                                pause();
                                _exit(0);
                        }
                }
                /* Wait until every child got its refusal. */
                for (int i = 0; i < procs; i++) {
                        char byte;
                        assert_int_equal(read(done[0], &byte, 1), 1);
                }
                close(done[0]);
                close(done[1]);
                uint64_t last = vgpu_region_used(r, 0);
                assert_true(last <= cap);
                if (cap - last >= chunk)
                        fail_msg("false OOM: %llu bytes left, chunk %llu", (unsigned long long) (cap - last),
                                 (unsigned long long) chunk);
                for (int i = 0; i < procs; i++)
                        kill(kids[i], SIGKILL);
                for (int i = 0; i < procs; i++) {
                        int st;
                        waitpid(kids[i], &st, 0);
                        assert_true(WIFSIGNALED(st));
                }
                assert_int_equal(vgpu_region_reclaim(r, vgpu_pid_alive), procs);
                assert_int_equal(vgpu_region_used(r, 0), 0);
        }
        vgpu_region_unmap(r);
}

/* Children charge and uncharge as fast as they can; each is killed with
 * SIGKILL at a random moment. Once reclaimed, the region is empty. */
static void test_region_kill(void **state) {
        struct vgpu_config c = cfg_with(64 * MIB, VGPU_UNLIMITED);
        struct vgpu_region *r;
        assert_int_equal(vgpu_region_new_private(&c, &r), 0);
        srand(12345);
        for (int round = 0; round < 40; round++) {
                pid_t kids[4];
                for (int i = 0; i < 4; i++) {
                        kids[i] = fork();
                        if (kids[i] == 0) {
                                int s = vgpu_region_claim(r, getpid(), vgpu_proc_start_time(getpid()), vgpu_pid_alive);
                                uint64_t sz = (uint64_t) (i + 1) * MIB + (uint64_t) i;
                                for (;;) {
                                        if (vgpu_region_charge(r, s, 0, sz, vgpu_pid_alive) == 0)
                                                vgpu_region_uncharge(r, s, 0, sz / 2);
                                        if (vgpu_region_slot_used(r, s, 0) > 32 * MIB)
                                                vgpu_region_uncharge(r, s, 0, vgpu_region_slot_used(r, s, 0));
                                }
                        }
                }
                struct timespec ts = { 0, (long) (rand() % 20000) * 1000 };
                nanosleep(&ts, NULL);
                for (int i = 0; i < 4; i++)
                        kill(kids[i], SIGKILL);
                for (int i = 0; i < 4; i++)
                        waitpid(kids[i], NULL, 0);
                assert_true(vgpu_region_used(r, 0) <= 64 * MIB);
                vgpu_region_reclaim(r, vgpu_pid_alive);
                assert_int_equal(vgpu_region_used(r, 0), 0);
                assert_int_equal(vgpu_region_live(r, vgpu_pid_alive), 0);
                for (unsigned i = 0; i < atomic_load(&r->slot_hwm); i++) {
                        assert_int_equal(atomic_load(&r->slots[i].owner), 0);
                        assert_int_equal(atomic_load(&r->slots[i].dev[0].pending), 0);
                }
        }
        vgpu_region_unmap(r);
}

static void test_region_uuid(void **state) {
        struct vgpu_region *r;
        assert_int_equal(vgpu_region_new_private(NULL, &r), 0);
        assert_int_equal(vgpu_region_find_uuid(r, "GPU-a"), -ENOENT);
        vgpu_region_set_uuid(r, 1, "GPU-a");
        vgpu_region_set_uuid(r, 1, "GPU-b");  /* first writer wins */
        assert_int_equal(vgpu_region_find_uuid(r, "GPU-a"), 1);
        assert_int_equal(vgpu_region_find_uuid(r, "GPU-b"), -ENOENT);
        vgpu_region_unmap(r);
}

/* ---- allocation table ---- */

/* A VMM handle's references and mappings: the charge goes when both are 0,
 * in any order. */
static void test_track_handle(void **state) {
        uint64_t size = 0;
        unsigned dev = 0;
        const uint64_t h = 0x5a5a000ull;
        assert_int_equal(vgpu_track_handle_adjust(h, -1, 0, &size, &dev), -ENOENT);
        assert_int_equal(vgpu_track_put_aux(VGPU_TRACK_HANDLE, h, 64 * MIB, 2, 1), 0);
        assert_int_equal(vgpu_track_handle_adjust(h, 0, 1, &size, &dev), 0);   /* mapped */
        assert_int_equal(vgpu_track_handle_adjust(h, 1, 0, &size, &dev), 0);   /* retained */
        assert_int_equal(vgpu_track_handle_adjust(h, -1, 0, &size, &dev), 0);  /* released while mapped */
        assert_int_equal(vgpu_track_handle_adjust(h, 0, -1, &size, &dev), 0);  /* unmapped, retained still */
        assert_int_equal(vgpu_track_handle_adjust(h, -1, 0, &size, &dev), 1);  /* the last reference */
        assert_int_equal(size, 64 * MIB);
        assert_int_equal(dev, 2);
        assert_int_equal(vgpu_track_handle_adjust(h, -1, 0, &size, &dev), -ENOENT);
        /* Unmapped first, then released. */
        assert_int_equal(vgpu_track_put_aux(VGPU_TRACK_HANDLE, h, 2 * MIB, 0, 1), 0);
        assert_int_equal(vgpu_track_handle_adjust(h, 0, 1, &size, &dev), 0);
        assert_int_equal(vgpu_track_handle_adjust(h, 0, -1, &size, &dev), 0);
        assert_int_equal(vgpu_track_handle_adjust(h, -1, 0, &size, &dev), 1);
        /* Mappings remembered by address with their handle. */
        uint64_t aux = 0;
        assert_int_equal(vgpu_track_put_aux(VGPU_TRACK_MAP, 0x7f0000200000ull, 4 * MIB, 0, h), 0);
        assert_int_equal(vgpu_track_take_aux(VGPU_TRACK_MAP, 0x7f0000200000ull, &size, &dev, &aux), 0);
        assert_int_equal(aux, h);
        assert_int_equal(size, 4 * MIB);
        assert_int_equal(vgpu_track_count(VGPU_TRACK_HANDLE) + vgpu_track_count(VGPU_TRACK_MAP), 0);
}

static void test_track(void **state) {
        uint64_t size;
        unsigned dev;
        assert_int_equal(vgpu_track_take(VGPU_TRACK_PTR, 0x1000, &size, &dev), -ENOENT);
        for (uint64_t i = 0; i < 100000; i++)
                assert_int_equal(vgpu_track_put(VGPU_TRACK_PTR, 0x7f0000000000ull + i * 512, i + 1, (unsigned) (i % 3)), 0);
        assert_int_equal(vgpu_track_count(VGPU_TRACK_PTR), 100000);
        /* Same key in another kind is another entry. */
        assert_int_equal(vgpu_track_put(VGPU_TRACK_HANDLE, 0x7f0000000000ull, 5, 1), 0);
        for (uint64_t i = 0; i < 100000; i += 2) {
                assert_int_equal(vgpu_track_take(VGPU_TRACK_PTR, 0x7f0000000000ull + i * 512, &size, &dev), 0);
                assert_int_equal(size, i + 1);
                assert_int_equal(dev, i % 3);
        }
        assert_int_equal(vgpu_track_take(VGPU_TRACK_PTR, 0x7f0000000000ull, &size, &dev), -ENOENT);
        assert_int_equal(vgpu_track_count(VGPU_TRACK_PTR), 50000);
        /* Freed places are reused and the table keeps working. */
        for (uint64_t i = 0; i < 100000; i += 2)
                assert_int_equal(vgpu_track_put(VGPU_TRACK_PTR, 0x7f0000000000ull + i * 512, 7, 0), 0);
        assert_int_equal(vgpu_track_count(VGPU_TRACK_PTR), 100000);
        assert_int_equal(vgpu_track_put(VGPU_TRACK_PTR, 0, 7, 0), -EINVAL);
        assert_int_equal(vgpu_track_take(VGPU_TRACK_HANDLE, 0x7f0000000000ull, &size, &dev), 0);
        assert_int_equal(size, 5);

        /* Random puts and takes against a plain array: removals shift the
         * following entries back, nothing is lost or found twice. */
        static uint64_t ref[4096];
        srand(7);
        for (int op = 0; op < 200000; op++) {
                unsigned k = (unsigned) rand() % 4096;
                uint64_t key = 0x10000ull + (uint64_t) k * 64;
                if (rand() % 2) {
                        assert_int_equal(vgpu_track_put(VGPU_TRACK_HANDLE, key, k + 1, 0), 0);
                        ref[k] = k + 1;
                } else {
                        int r = vgpu_track_take(VGPU_TRACK_HANDLE, key, &size, &dev);
                        assert_int_equal(r, ref[k] ? 0 : -ENOENT);
                        if (r == 0)
                                assert_int_equal(size, ref[k]);
                        ref[k] = 0;
                }
        }
        for (unsigned k = 0; k < 4096; k++)
                if (ref[k]) {
                        assert_int_equal(vgpu_track_take(VGPU_TRACK_HANDLE, 0x10000ull + (uint64_t) k * 64, &size, &dev), 0);
                        assert_int_equal(size, ref[k]);
                }
        assert_int_equal(vgpu_track_count(VGPU_TRACK_HANDLE), 0);

        /* A forked child starts empty. */
        vgpu_track_atfork_prepare();
        pid_t p = fork();
        if (p == 0) {
                vgpu_track_atfork_child();
                _exit(vgpu_track_count(VGPU_TRACK_PTR) == 0 ? 0 : 1);
        }
        vgpu_track_atfork_parent();
        int st;
        waitpid(p, &st, 0);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        assert_int_equal(vgpu_track_count(VGPU_TRACK_PTR), 100000);
        for (uint64_t i = 0; i < 100000; i++)
                assert_int_equal(vgpu_track_take(VGPU_TRACK_PTR, 0x7f0000000000ull + i * 512, &size, &dev), 0);
        assert_int_equal(vgpu_track_count(VGPU_TRACK_PTR), 0);
}

/* ---- compute share ---- */

/* Simulated time: launches of `run` ns of real GPU time each, estimated at
 * `est` ns; sync: the next launch comes after the kernel ends. Returns the
 * share of GPU time achieved in percent. */
static double simulate(unsigned pct, uint64_t run, uint64_t est, bool sync, uint64_t horizon) {
        struct vgpu_share_dev s;
        memset(&s, 0, sizeof(s));
        uint64_t t = 1000000000ull, start = t, busy = 0, gpu_free_at = t;
        while (t - start < horizon) {
                uint64_t wait = vgpu_share_admit(&s, pct, est, t);
                t += wait;
                uint64_t begin = t > gpu_free_at ? t : gpu_free_at;
                gpu_free_at = begin + run;
                busy += run;
                t = sync ? gpu_free_at : t + 1000;  /* async: the next launch 1 us later */
        }
        uint64_t end = t > gpu_free_at ? t : gpu_free_at;
        return 100.0 * (double) busy / (double) (end - start);
}

static void test_share(void **state) {
        static const unsigned pcts[] = { 10, 30, 50, 70, 90 };
        static const uint64_t runs[] = { 20000, 1000000, 50000000 };  /* 20 us, 1 ms, 50 ms */
        for (size_t i = 0; i < sizeof(pcts) / sizeof(pcts[0]); i++)
                for (size_t j = 0; j < sizeof(runs) / sizeof(runs[0]); j++)
                        for (int sync = 0; sync < 2; sync++) {
                                double got = simulate(pcts[i], runs[j], runs[j], sync, 20000000000ull);
                                if (got < pcts[i] - 2.0 || got > pcts[i] + 2.0)
                                        fail_msg("%u%%, %llu ns kernels, %s: %.2f%%", pcts[i],
                                                 (unsigned long long) runs[j], sync ? "sync" : "async", got);
                        }
        /* No limit: no wait. */
        struct vgpu_share_dev s;
        memset(&s, 0, sizeof(s));
        assert_int_equal(vgpu_share_admit(&s, 100, 1000000, 5), 0);
        assert_int_equal(vgpu_share_admit(&s, 0, 1000000, 5), 0);

        /* The factor is measured over estimated, whatever it was before. */
        struct vgpu_share_est e = { .factor = 1.0 };
        vgpu_share_observe(&e, 100000000, 0, 0);
        assert_true(e.factor == 1.0);  /* nothing launched: unchanged */
        vgpu_share_observe(&e, 100000000, 1000000, 10000000000ull);
        assert_true(e.factor > 9999 && e.factor < 10001);
        /* Work admitted in one window and run in the next evens out. */
        e = (struct vgpu_share_est) { .factor = 1.0 };
        for (int k = 0; k < 40; k++)
                vgpu_share_observe(&e, 100000000, k % 2 ? 2000000 : 0, k % 2 ? 0 : 8000000);
        assert_true(e.factor > 3.5 && e.factor < 4.6);
        vgpu_share_observe(&e, 100000000, 1000000, 0);
        assert_true(e.factor >= VGPU_SHARE_FACTOR_MIN);
        assert_true(vgpu_share_kernel_cost(108, 2048, 108 * 2048) == 10000);
        assert_true(vgpu_share_kernel_cost(1, 1, 0) == 1000);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_parse_size),
                cmocka_unit_test(test_parse_percent),
                cmocka_unit_test(test_config),
                cmocka_unit_test_setup_teardown(test_region_file, setup_tmp, teardown_tmp),
                cmocka_unit_test(test_region_charge),
                cmocka_unit_test(test_region_slots),
                cmocka_unit_test(test_region_race),
                cmocka_unit_test(test_region_kill),
                cmocka_unit_test(test_region_uuid),
                cmocka_unit_test(test_track),
                cmocka_unit_test(test_track_handle),
                cmocka_unit_test(test_share),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}

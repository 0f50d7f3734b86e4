/* plugin/health: the DP_*_HEALTHCHECKS rules as a table, and the monitor
 * against the simulator (MIGKIT_NVML_LIB): Xids raised through the
 * simulator's control API turn exactly the affected device unhealthy,
 * ignored Xids do nothing, devices recover after a quiet period, lost GPUs
 * stay unhealthy. Assertions rely on the order of reports (events are
 * delivered in order, rechecks run in one loop), never on timing; the
 * timeouts only end a test that would otherwise hang. */
#include <dlfcn.h>
#include <ftw.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/macro.h"
#include "mig/gpu.h"
#include "nvml/nvml.h"
#include "plugin/health.h"

#define NONE UINT32_MAX
#define GENEROUS_MS 20000

/* ---- options ---- */

static void test_options_table(void **state) {
        static const struct {
                const char *disable, *enable;
                bool disabled;
                /* Xids that must count / must be ignored (0 ends a list). */
                unsigned long long counts[6], ignored[8];
        } t[] = {
                /* Defaults: 13, 31, 43, 45, 68, 109 ignored. */
                {NULL, NULL, false, {48, 79, 94, 63, 1}, {13, 31, 43, 45, 68, 109}},
                {"", "", false, {48, 79}, {13, 109}},
                /* Numbers add to the ignore list; blanks, case and junk as upstream. */
                {" 48 , 79,", NULL, false, {94, 63}, {48, 79, 13, 109}},
                {"48,abc,-1,0x4f,,79", NULL, false, {94}, {48, 79, 13}},
                {"007", NULL, false, {70}, {7}},
                /* all / xids: off, even with DP_ENABLE_HEALTHCHECKS listing Xids. */
                {"all", NULL, true, {0}, {48, 13}},
                {"XIDs", "48", true, {0}, {48}},
                {" ALL ", "13,31", true, {0}, {13}},
                /* Only DP_ENABLE_HEALTHCHECKS=all overrides: then every Xid counts. */
                {"all", "all", false, {13, 31, 43, 45, 68, 109}, {0}},
                {NULL, "all", false, {13, 109, 48}, {0}},
                {"48", "xids", false, {48, 13}, {0}},
                /* Enabled numbers count even when hard-coded or disabled. */
                {NULL, "13, 109", false, {13, 109, 48}, {31, 43, 45, 68}},
                {"48", "48", false, {48}, {13}},
        };
        for (size_t i = 0; i < ELEMENTSOF(t); i++) {
                struct mk_health_options o = {0};
                struct mk_error e = {0};
                if (mk_health_options_parse(t[i].disable, t[i].enable, NULL, &o, &e) < 0)
                        fail_msg("row %zu: %s", i, e.msg);
                if (o.disabled != t[i].disabled)
                        fail_msg("row %zu ('%s', '%s'): disabled %d, expected %d", i, t[i].disable ? t[i].disable : "",
                                 t[i].enable ? t[i].enable : "", o.disabled, t[i].disabled);
                assert_int_equal(o.recheck_ms, MK_HEALTH_DEFAULT_RECHECK_MS);
                for (size_t k = 0; k < ELEMENTSOF(t[i].counts) && t[i].counts[k]; k++)
                        if (!mk_health_xid_counts(&o, t[i].counts[k]))
                                fail_msg("row %zu: Xid %llu should count", i, t[i].counts[k]);
                for (size_t k = 0; k < ELEMENTSOF(t[i].ignored) && t[i].ignored[k]; k++)
                        if (mk_health_xid_counts(&o, t[i].ignored[k]))
                                fail_msg("row %zu: Xid %llu should be ignored", i, t[i].ignored[k]);
                mk_health_options_done(&o);
        }
}

static void test_options_errors(void **state) {
        struct mk_health_options o = {0};
        struct mk_error e = {0};
        assert_int_equal(mk_health_options_parse(NULL, NULL, "250", &o, &e), 0);
        assert_int_equal(o.recheck_ms, 250);
        mk_health_options_done(&o);
        static const char *const bad[] = {"0", "-5", "1s", "86400001", ""};
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                assert_int_equal(mk_health_options_parse(NULL, NULL, bad[i], &o, &e), -EINVAL);
                assert_non_null(strstr(e.msg, "MIGKIT_HEALTH_RECHECK_MS"));
        }
        /* Bounded input: over the cap is an error naming the variable. */
        char *big = malloc(MK_HEALTH_ENV_MAX + 2);
        assert_non_null(big);
        memset(big, '1', MK_HEALTH_ENV_MAX + 1);
        big[MK_HEALTH_ENV_MAX + 1] = 0;
        assert_int_equal(mk_health_options_parse(big, NULL, NULL, &o, &e), -E2BIG);
        assert_non_null(strstr(e.msg, "DP_DISABLE_HEALTHCHECKS"));
        /* More distinct Xids than MK_HEALTH_MAX_XIDS. */
        size_t off = 0;
        for (unsigned x = 1000; x < 1000 + MK_HEALTH_MAX_XIDS + 1; x++)
                off += (size_t) snprintf(big + off, MK_HEALTH_ENV_MAX + 2 - off, "%u,", x);
        assert_int_equal(mk_health_options_parse(NULL, big, NULL, &o, &e), -E2BIG);
        assert_non_null(strstr(e.msg, "DP_ENABLE_HEALTHCHECKS"));
        free(big);

        setenv("DP_DISABLE_HEALTHCHECKS", "48", 1);
        setenv("DP_ENABLE_HEALTHCHECKS", "13", 1);
        setenv("MIGKIT_HEALTH_RECHECK_MS", "1000", 1);
        assert_int_equal(mk_health_options_from_env(&o, &e), 0);
        assert_false(mk_health_xid_counts(&o, 48));
        assert_true(mk_health_xid_counts(&o, 13));
        assert_false(mk_health_xid_counts(&o, 31));
        assert_int_equal(o.recheck_ms, 1000);
        mk_health_options_done(&o);
        unsetenv("DP_DISABLE_HEALTHCHECKS");
        unsetenv("DP_ENABLE_HEALTHCHECKS");
        unsetenv("MIGKIT_HEALTH_RECHECK_MS");
}

/* ---- the monitor against the simulator ---- */

static char state_dir[] = "/tmp/migkit-test-health-XXXXXX";

static const char *sim_lib(void) {
        const char *p = getenv("MIGKIT_NVML_LIB");
        if (!p)
                skip();
        return p;
}

static void use_machine(const char *machine) {
        char path[256];
        static unsigned serial;
        snprintf(path, sizeof(path), "%s/state-%u.json", state_dir, serial++);
        setenv("MIGKIT_SIM_STATE", path, 1);
        setenv("MIGKIT_SIM_MACHINE", machine, 1);
}

static void *sim_fn(const char *name) {
        void *dl = dlopen(sim_lib(), RTLD_NOW | RTLD_LOCAL);
        assert_non_null(dl);
        void *f = dlsym(dl, name);
        assert_non_null(f);
        dlclose(dl); /* mk_nvml_open holds its own reference */
        return f;
}

/* What the callback saw, in order. */
struct recorder {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        struct mk_health_change c[64];
        long long at_ms[64];
        size_t n;
};

static long long now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (long long) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void record(void *userdata, const struct mk_health_change *c) {
        struct recorder *r = userdata;
        pthread_mutex_lock(&r->lock);
        if (r->n < ELEMENTSOF(r->c)) {
                r->c[r->n] = *c;
                r->at_ms[r->n] = now_ms();
                r->n++;
        }
        pthread_cond_broadcast(&r->cond);
        pthread_mutex_unlock(&r->lock);
}

/* Waits until the recorder holds more than `seen` changes; returns the next
 * one's index. Fails after GENEROUS_MS (a hang, not a timing check). */
static size_t next_change(struct recorder *r, size_t seen) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += GENEROUS_MS / 1000;
        pthread_mutex_lock(&r->lock);
        while (r->n <= seen)
                if (pthread_cond_timedwait(&r->cond, &r->lock, &ts) != 0)
                        break;
        size_t n = r->n;
        pthread_mutex_unlock(&r->lock);
        if (n <= seen)
                fail_msg("no health change #%zu within %d ms", seen + 1, GENEROUS_MS);
        return seen;
}

static void expect_change(struct recorder *r, size_t i, unsigned gpu, unsigned gi, unsigned ci, bool healthy,
                          unsigned long long xid) {
        const struct mk_health_change *c = &r->c[i];
        if (c->gpu != gpu || c->gi_id != gi || c->ci_id != ci || c->healthy != healthy || c->xid != xid)
                fail_msg("change #%zu: GPU %u GI %d CI %d %s Xid %llu ('%s'); expected GPU %u GI %d CI %d %s Xid %llu",
                         i, c->gpu, (int) c->gi_id, (int) c->ci_id, c->healthy ? "healthy" : "unhealthy", c->xid,
                         c->reason, gpu, (int) gi, (int) ci, healthy ? "healthy" : "unhealthy", xid);
}

/* The changes from index `from` on, up to `n` of them, hold `want` in any
 * order (an unhealthy report always precedes the same device's recovery). */
struct want {
        unsigned gpu, gi, ci;
        bool healthy;
        unsigned long long xid;
};

static size_t expect_set(struct recorder *r, size_t from, const struct want *want, size_t n) {
        bool seen[8] = {false};
        assert_true(n <= ELEMENTSOF(seen));
        for (size_t k = 0; k < n; k++) {
                size_t i = next_change(r, from + k);
                const struct mk_health_change *c = &r->c[i];
                bool matched = false;
                for (size_t w = 0; w < n && !matched; w++)
                        if (!seen[w] && c->gpu == want[w].gpu && c->gi_id == want[w].gi && c->ci_id == want[w].ci &&
                            c->healthy == want[w].healthy && c->xid == want[w].xid)
                                seen[w] = matched = true;
                if (!matched)
                        fail_msg("unexpected change #%zu: GPU %u GI %d CI %d %s Xid %llu ('%s')", i, c->gpu,
                                 (int) c->gi_id, (int) c->ci_id, c->healthy ? "healthy" : "unhealthy", c->xid,
                                 c->reason);
        }
        return from + n;
}

/* The time of the change matching (gpu, gi, ci, healthy) from `from` on. */
static long long change_at(struct recorder *r, size_t from, unsigned gpu, unsigned gi, unsigned ci, bool healthy) {
        for (size_t i = from; i < r->n; i++)
                if (r->c[i].gpu == gpu && r->c[i].gi_id == gi && r->c[i].ci_id == ci && r->c[i].healthy == healthy)
                        return r->at_ms[i];
        fail_msg("no change for GPU %u GI %d CI %d", gpu, (int) gi, (int) ci);
        return 0;
}

static void test_monitor(void **state) {
        const char *lib = sim_lib();
        use_machine("dgx-h100");
        int (*sim_xid)(unsigned, unsigned, unsigned, unsigned long long) = sim_fn("mksim_xid");
        int (*sim_lost)(unsigned, int) = sim_fn("mksim_gpu_set_lost");
        struct mk_error e = {0};
        _cleanup_nvml_ struct mk_nvml *n = NULL;
        assert_int_equal(mk_nvml_open(lib, &n, &e), 0);

        /* A MIG device on GPU 1. */
        bool pending;
        unsigned gi, ci;
        assert_int_equal(mk_nvml_set_mig_mode(n, 1, true, &pending, &e), 0);
        assert_int_equal(mk_nvml_create_gi(n, 1, 19, (struct mk_placement){0, 1}, &gi, &e), 0);
        assert_int_equal(mk_nvml_create_ci(n, 1, gi, 0, (struct mk_placement){0, 1}, &ci, &e), 0);
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = NULL;
        assert_int_equal(mk_nvml_snapshot(n, &s, &e), 0);

        struct mk_health_options o = {0};
        assert_int_equal(mk_health_options_parse(NULL, NULL, "500", &o, &e), 0);
        struct recorder rec = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
        struct mk_health *h = NULL;
        assert_int_equal(mk_health_start(n, s, &o, record, &rec, &h, &e), 0);
        mk_health_options_done(&o);
        assert_null(mk_health_disabled_reason(h));

        /* The monitor's thread and ours share the NVML handle. */
        for (int k = 0; k < 3; k++) {
                struct mk_snapshot *again = NULL;
                assert_int_equal(mk_nvml_snapshot(n, &again, &e), 0);
                assert_int_equal(again->n_gpus, 8);
                mk_snapshot_free(again);
        }

        /* An ignored Xid (13) on GPU 2, then a counted one on GPU 0: only
         * GPU 0 is reported, whole. */
        assert_int_equal(sim_xid(2, NONE, NONE, 13), 0);
        assert_int_equal(sim_xid(0, NONE, NONE, 79), 0);
        size_t i = next_change(&rec, 0);
        expect_change(&rec, i, 0, NONE, NONE, false, 79);

        /* On a MIG device: that device only. Then both recover once they
         * answer NVML and stayed quiet for 500 ms (GPU 0 may recover before
         * the MIG device's Xid arrives on a slow machine: any order). */
        assert_int_equal(sim_xid(1, gi, ci, 94), 0);
        const struct want w[] = {
                {1, gi, ci, false, 94},
                {0, NONE, NONE, true, 0},
                {1, gi, ci, true, 0},
        };
        i = expect_set(&rec, 1, w, ELEMENTSOF(w)) - 1;
        /* Never before the quiet period (a lower bound: 50 ms for reporting). */
        assert_true(change_at(&rec, 0, 0, NONE, NONE, true) - change_at(&rec, 0, 0, NONE, NONE, false) >= 450);
        assert_true(change_at(&rec, 0, 1, gi, ci, true) - change_at(&rec, 0, 1, gi, ci, false) >= 450);

        /* A lost GPU turns unhealthy and stays so, also once it answers
         * again: GPU 3 below is marked and recovers after it, so a recovery
         * of GPU 5 would have been reported before GPU 3's. */
        assert_int_equal(sim_lost(5, 1), 0);
        i = next_change(&rec, i + 1);
        expect_change(&rec, i, 5, NONE, NONE, false, 0);
        assert_non_null(strstr(rec.c[i].reason, "lost"));
        assert_int_equal(sim_lost(5, 0), 0);
        assert_int_equal(sim_xid(3, NONE, NONE, 48), 0);
        i = next_change(&rec, i + 1);
        expect_change(&rec, i, 3, NONE, NONE, false, 48);
        i = next_change(&rec, i + 1);
        expect_change(&rec, i, 3, NONE, NONE, true, 0);

        /* A whole-GPU Xid and a MIG Xid on one GPU: the GPU's recovery does
         * not carry the still unhealthy MIG device with it (it is reported
         * again right after), which recovers on its own. Same order when the
         * GPU recovers before the MIG Xid arrives. */
        assert_int_equal(sim_xid(1, NONE, NONE, 79), 0);
        i = next_change(&rec, i + 1);
        expect_change(&rec, i, 1, NONE, NONE, false, 79);
        assert_int_equal(sim_xid(1, gi, ci, 94), 0);
        i = next_change(&rec, i + 1);
        expect_change(&rec, i, 1, gi, ci, false, 94);
        i = next_change(&rec, i + 1);
        expect_change(&rec, i, 1, NONE, NONE, true, 0);
        i = next_change(&rec, i + 1);
        expect_change(&rec, i, 1, gi, ci, false, 94);
        i = next_change(&rec, i + 1);
        expect_change(&rec, i, 1, gi, ci, true, 0);

        assert_null(mk_health_stop(h));
        assert_int_equal(rec.n, i + 1); /* nothing else was reported */
}

static void test_wait_failure_marks_all(void **state) {
        const char *lib = sim_lib();
        use_machine("h100-80gb*2");
        int (*sim_fault)(const char *, unsigned, int) = sim_fn("mksim_fault_set");
        struct mk_error e = {0};
        _cleanup_nvml_ struct mk_nvml *n = NULL;
        assert_int_equal(mk_nvml_open(lib, &n, &e), 0);
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = NULL;
        assert_int_equal(mk_nvml_snapshot(n, &s, &e), 0);
        struct mk_health_options o = {.recheck_ms = 200};
        struct recorder rec = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
        struct mk_health *h = NULL;
        assert_int_equal(mk_health_start(n, s, &o, record, &rec, &h, &e), 0);
        /* A wait failing for no GPU in particular: upstream marks all. */
        assert_int_equal(sim_fault("nvmlEventSetWait_v2", 1, NVML_ERROR_UNKNOWN), 0);
        size_t i = next_change(&rec, 0);
        expect_change(&rec, i, 0, NONE, NONE, false, 0);
        i = next_change(&rec, 1);
        expect_change(&rec, i, 1, NONE, NONE, false, 0);
        /* Both answer NVML: they recover. */
        for (unsigned k = 0; k < 2; k++) {
                i = next_change(&rec, i + 1);
                assert_true(rec.c[i].healthy);
        }
        assert_null(mk_health_stop(h));
}

static void test_disabled(void **state) {
        const char *lib = sim_lib();
        use_machine("a100-40gb");
        struct mk_error e = {0};
        _cleanup_nvml_ struct mk_nvml *n = NULL;
        assert_int_equal(mk_nvml_open(lib, &n, &e), 0);
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = NULL;
        assert_int_equal(mk_nvml_snapshot(n, &s, &e), 0);
        struct mk_health_options o = {0};
        assert_int_equal(mk_health_options_parse("all", "48", NULL, &o, &e), 0);
        struct recorder rec = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
        struct mk_health *h = NULL;
        assert_int_equal(mk_health_start(n, s, &o, record, &rec, &h, &e), 0);
        mk_health_options_done(&o);
        assert_non_null(mk_health_disabled_reason(h));
        assert_non_null(strstr(mk_health_disabled_reason(h), "DP_DISABLE_HEALTHCHECKS"));
        assert_null(mk_health_stop(h));
        assert_int_equal(rec.n, 0);
        assert_null(mk_health_stop(NULL));
}

/* A library without the event API: health checks off, devices healthy. */
static void test_no_event_api(void **state) {
        const char *lib = sim_lib();
        use_machine("a100-40gb");
        setenv("MIGKIT_SIM_FAULTS", "nvmlEventSetCreate:1:NOT_SUPPORTED", 1);
        struct mk_error e = {0};
        struct mk_nvml *n = NULL;
        int r = mk_nvml_open(lib, &n, &e);
        unsetenv("MIGKIT_SIM_FAULTS");
        assert_int_equal(r, 0);
        _cleanup_(mk_snapshot_freep) struct mk_snapshot *s = NULL;
        assert_int_equal(mk_nvml_snapshot(n, &s, &e), 0);
        struct mk_health_options o = {.recheck_ms = 100};
        struct recorder rec = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
        struct mk_health *h = NULL;
        assert_int_equal(mk_health_start(n, s, &o, record, &rec, &h, &e), 0);
        const char *why = mk_health_disabled_reason(h);
        assert_non_null(why);
        assert_non_null(strstr(why, "NVML_ERROR_NOT_SUPPORTED"));
        assert_non_null(strstr(why, "continuing with health checks disabled"));
        assert_null(mk_health_stop(h));
        assert_int_equal(rec.n, 0);
        mk_nvml_close(n);
}

static int setup(void **state) {
        return mkdtemp(state_dir) ? 0 : -1;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        return remove(path);
}

static int teardown(void **state) {
        return nftw(state_dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_options_table),
                cmocka_unit_test(test_options_errors),
                cmocka_unit_test(test_monitor),
                cmocka_unit_test(test_wait_failure_marks_all),
                cmocka_unit_test(test_disabled),
                cmocka_unit_test(test_no_event_api),
        };
        return cmocka_run_group_tests_name("health", tests, setup, teardown);
}

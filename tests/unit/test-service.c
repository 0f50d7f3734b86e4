/* Unit tests for service/: service.yaml (valid, defaults, every error with
 * its position) and the selection file. The GPU clients, the reboot marker
 * and the reboot-once rule are host/'s (test-host.c). The boot flow end to
 * end is in tests/integration/test-service.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/fileio.h"
#include "base/macro.h"
#include "service/boot.h"
#include "service/settings.h"
#include "service/state.h"

#define FILE_NAME "service.yaml"

/* ---- helpers ---- */

static void dump_list(struct mk_buf *b, char *const *l) {
        for (size_t i = 0; l[i]; i++)
                assert_int_equal(mk_buf_printf(b, "%s%s", i ? "," : "", l[i]), 0);
}

/* "units=a,b images=x reboot=0 stop=120000 start=30000 apply=600000" */
static char *dump_settings(const struct mk_service_settings *s) {
        struct mk_buf b;
        mk_buf_init(&b, 1 << 20);
        assert_int_equal(mk_buf_puts(&b, "units="), 0);
        dump_list(&b, s->clients.systemd_services);
        assert_int_equal(mk_buf_puts(&b, " images="), 0);
        dump_list(&b, s->clients.container_images);
        assert_int_equal(mk_buf_printf(&b, " reboot=%d stop=%llu start=%llu apply=%llu", s->reboot,
                                       (unsigned long long) s->clients.stop_timeout_ms,
                                       (unsigned long long) s->clients.start_timeout_ms,
                                       (unsigned long long) s->apply_timeout_ms),
                         0);
        size_t n = 0;
        while (s->clients.systemd_services[n])
                n++;
        assert_int_equal(n, s->clients.n_systemd_services);
        n = 0;
        while (s->clients.container_images[n])
                n++;
        assert_int_equal(n, s->clients.n_container_images);
        char *r = mk_buf_take(&b);
        assert_non_null(r);
        return r;
}

#define DEFAULT_UNITS                                                                                            \
        "nvsm.service,nvsm-mqtt.service,nvsm-core.service,nvsm-api-gateway.service,nvsm-notifier.service,"        \
        "nv_peer_mem.service,nvidia-dcgm.service,dcgm.service,dcgm-exporter.service,kubelet.service"
#define DEFAULT_IMAGES "k8s-device-plugin,gpu-feature-discovery,dcgm-exporter"
#define DEFAULT_REST "reboot=0 stop=120000 start=30000 apply=600000"
#define DEFAULTS "units=" DEFAULT_UNITS " images=" DEFAULT_IMAGES " " DEFAULT_REST

static void check_error(const char *what, int r, const struct mk_error *e, int code, unsigned line, unsigned column,
                        const char *field, const char *msg) {
        if (r != code)
                fail_msg("%s: r = %d (%s), want %d; message '%s'", what, r, strerror(-r), code, e->msg);
        if (e->code != code)
                fail_msg("%s: e.code = %d, want %d", what, e->code, code);
        if (!streq(e->file, FILE_NAME))
                fail_msg("%s: e.file = '%s', want '%s'", what, e->file, FILE_NAME);
        if (e->line != line || e->column != column)
                fail_msg("%s: position %u:%u, want %u:%u (message '%s')", what, e->line, e->column, line, column,
                         e->msg);
        if (!streq(e->field, field))
                fail_msg("%s: e.field = '%s', want '%s'", what, e->field, field);
        /* A trailing '*' compares a prefix (libyaml's wording may change). */
        size_t n = strlen(msg);
        if (n > 0 && msg[n - 1] == '*' ? strncmp(e->msg, msg, n - 1) != 0 : !streq(e->msg, msg))
                fail_msg("%s: message\n  '%s'\nwant\n  '%s'", what, e->msg, msg);
}

/* ---- service.yaml ---- */

static void test_settings_valid(void **state) {
        static const struct {
                const char *name, *yaml, *want;
        } cases[] = {
                {"only version: the defaults", "version: v1\n", DEFAULTS},
                {"everything",
                 "version: v1\n"
                 "gpu-clients:\n"
                 "  systemd-services: [a.service, 'b@x.service', \"k8s:c.target\"]\n"
                 "  container-images:\n    - nvidia/k8s-device-plugin\n    - x\n"
                 "reboot: true\n"
                 "timeouts: {stop: 1m30s, start: 500ms, apply: 2h}\n",
                 "units=a.service,b@x.service,k8s:c.target images=nvidia/k8s-device-plugin,x reboot=1 stop=90000 "
                 "start=500 apply=7200000"},
                {"empty lists manage nothing", "version: v1\ngpu-clients:\n  systemd-services: []\n  container-images: ~\n",
                 "units= images= " DEFAULT_REST},
                {"one list given, the other default", "version: v1\ngpu-clients:\n  container-images: [a]\n",
                 "units=" DEFAULT_UNITS " images=a " DEFAULT_REST},
                {"YAML 1.1 booleans, one timeout", "version: v1\nreboot: yes\ntimeouts:\n  stop: 5s\n",
                 "units=" DEFAULT_UNITS " images=" DEFAULT_IMAGES " reboot=1 stop=5000 start=30000 apply=600000"},
                {"anchors and merge keys",
                 "version: v1\ntimeouts:\n  <<: {stop: 7s, start: 9s}\n  start: 1s\n",
                 "units=" DEFAULT_UNITS " images=" DEFAULT_IMAGES " reboot=0 stop=7000 start=1000 apply=600000"},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                struct mk_error e = {0};
                struct mk_service_settings *s = NULL;
                int r = mk_service_settings_parse(cases[i].yaml, strlen(cases[i].yaml), FILE_NAME, &s, &e);
                if (r < 0)
                        fail_msg("%s: r = %d: %s at %u:%u", cases[i].name, r, e.msg, e.line, e.column);
                char *got = dump_settings(s);
                if (!streq(got, cases[i].want))
                        fail_msg("%s:\n  got  '%s'\n  want '%s'", cases[i].name, got, cases[i].want);
                assert_string_equal(s->file, FILE_NAME);
                free(got);
                mk_service_settings_free(s);
        }
}

static void test_settings_defaults(void **state) {
        struct mk_service_settings *s = NULL;
        assert_int_equal(mk_service_settings_default(&s), 0);
        char *got = dump_settings(s);
        assert_string_equal(got, DEFAULTS);
        assert_string_equal(s->file, "(defaults)");
        free(got);
        mk_service_settings_free(s);
        assert_null(mk_service_settings_free(NULL));
}

/* The shipped deploy/etc/service.yaml says what the built-in defaults are. */
static void test_settings_shipped(void **state) {
        const char *src = secure_getenv("MIGKIT_SOURCE_DIR");
        if (!src || !*src) {
                print_message("SKIP: MIGKIT_SOURCE_DIR not set (run through ctest)\n");
                skip();
        }
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/deploy/etc/service.yaml", src);
        struct mk_error e = {0};
        struct mk_service_settings *s = NULL;
        int r = mk_service_settings_load(path, &s, &e);
        if (r < 0)
                fail_msg("%s: %s (%u:%u)", path, e.msg, e.line, e.column);
        char *got = dump_settings(s);
        assert_string_equal(got, DEFAULTS);
        free(got);
        mk_service_settings_free(s);

        e = (struct mk_error){0};
        r = mk_service_settings_load("/nonexistent/service.yaml", &s, &e);
        assert_int_equal(r, -ENOENT);
        assert_non_null(strstr(e.msg, "/nonexistent/service.yaml"));
}

static void test_settings_invalid(void **state) {
        static const struct {
                const char *name, *yaml;
                int code;
                unsigned line, column;
                const char *field, *msg;
        } cases[] = {
                {"empty document", "", -EINVAL, 0, 0, "", "empty file: want at least 'version: v1'"},
                {"comment only", "# nothing\n", -EINVAL, 0, 0, "", "empty file: want at least 'version: v1'"},
                {"not a mapping", "- a\n", -EINVAL, 1, 1, "", "the document must be a mapping, not array"},
                {"malformed YAML", "version: v1\ngpu-clients: [a\n", -EINVAL, 3, 1, "", "*"},
                {"missing version", "reboot: true\n", -EINVAL, 1, 1, "",
                 "missing required field 'version' (want 'version: v1')"},
                {"wrong version", "version: v2\n", -EINVAL, 1, 10, "version", "unsupported version 'v2' (want v1)"},
                {"numeric version", "version: 1\n", -EINVAL, 1, 10, "version", "version must be a string, not number"},
                {"unknown top-level key", "version: v1\nreboots: true\n", -EINVAL, 2, 1, "reboots",
                 "unknown field 'reboots' (did you mean 'reboot'? known: version, gpu-clients, reboot, timeouts)"},
                {"duplicate key", "version: v1\nreboot: true\nreboot: false\n", -EINVAL, 3, 1, "*", "duplicate key*"},
                {"reboot not a bool", "version: v1\nreboot: sometimes\n", -EINVAL, 2, 9, "reboot",
                 "must be true or false, not string 'sometimes'"},
                {"reboot misspelt", "version: v1\nreboot: flase\n", -EINVAL, 2, 9, "reboot",
                 "must be true or false, not string 'flase'"},
                {"reboot quoted", "version: v1\nreboot: \"true\"\n", -EINVAL, 2, 9, "reboot",
                 "must be true or false, not string 'true'"},
                {"gpu-clients a list", "version: v1\ngpu-clients: [a]\n", -EINVAL, 2, 14, "gpu-clients",
                 "gpu-clients must be a mapping, not array"},
                {"unknown client list", "version: v1\ngpu-clients:\n  services: [a.service]\n", -EINVAL, 3, 3,
                 "gpu-clients.services", "unknown field 'services' (known: systemd-services, container-images)"},
                {"units a string", "version: v1\ngpu-clients:\n  systemd-services: a.service\n", -EINVAL, 3, 21,
                 "gpu-clients.systemd-services", "must be a list of systemd unit names, not string"},
                {"unit a number", "version: v1\ngpu-clients:\n  systemd-services: [a.service, 12]\n", -EINVAL, 3, 33,
                 "gpu-clients.systemd-services[1]", "a unit name must be a string, not number"},
                {"unit a mapping", "version: v1\ngpu-clients:\n  systemd-services:\n    - {a: b}\n", -EINVAL, 4, 7,
                 "gpu-clients.systemd-services[0]", "a unit name must be a string, not object"},
                {"unit without type", "version: v1\ngpu-clients:\n  systemd-services: [kubelet]\n", -EINVAL, 3, 22,
                 "gpu-clients.systemd-services[0]",
                 "invalid systemd unit name 'kubelet' (want NAME.TYPE such as 'kubelet.service')"},
                {"unit like an option", "version: v1\ngpu-clients:\n  systemd-services: [\"--force.service\"]\n",
                 -EINVAL, 3, 22, "gpu-clients.systemd-services[0]",
                 "invalid systemd unit name '--force.service' (want NAME.TYPE such as 'kubelet.service')"},
                {"unit with a blank", "version: v1\ngpu-clients:\n  systemd-services: [\"a b.service\"]\n", -EINVAL,
                 3, 22, "gpu-clients.systemd-services[0]",
                 "invalid systemd unit name 'a b.service' (want NAME.TYPE such as 'kubelet.service')"},
                {"unit listed twice", "version: v1\ngpu-clients:\n  systemd-services:\n    - a.service\n    - a.service\n",
                 -EINVAL, 5, 7, "gpu-clients.systemd-services[1]", "'a.service' is listed twice"},
                {"image empty", "version: v1\ngpu-clients:\n  container-images: [\"\"]\n", -EINVAL, 3, 22,
                 "gpu-clients.container-images[0]", "invalid image name ''"},
                {"image with a blank", "version: v1\ngpu-clients:\n  container-images: [\"a b\"]\n", -EINVAL, 3, 22,
                 "gpu-clients.container-images[0]", "invalid image name 'a b'"},
                {"image like an option", "version: v1\ngpu-clients:\n  container-images: [-f]\n", -EINVAL, 3, 22,
                 "gpu-clients.container-images[0]", "invalid image name '-f'"},
                {"image with a NUL", "version: v1\ngpu-clients:\n  container-images: [\"a\\0b\"]\n", -EINVAL, 3, 22,
                 "gpu-clients.container-images[0]", "an image name contains a NUL byte"},
                {"timeouts a string", "version: v1\ntimeouts: 5s\n", -EINVAL, 2, 11, "timeouts",
                 "timeouts must be a mapping, not string"},
                {"unknown timeout", "version: v1\ntimeouts:\n  reset: 5s\n", -EINVAL, 3, 3, "timeouts.reset",
                 "unknown field 'reset' (known: stop, start, apply)"},
                {"timeout a number", "version: v1\ntimeouts:\n  stop: 120\n", -EINVAL, 3, 9, "timeouts.stop",
                 "must be a duration such as \"120s\" or \"2m\", not number"},
                {"timeout without unit", "version: v1\ntimeouts:\n  start: \"120\"\n", -EINVAL, 3, 10, "timeouts.start",
                 "invalid duration '120' (want a sequence of NUMBER UNIT, unit h, m, s or ms: \"120s\", \"1m30s\")"},
                {"timeout fraction", "version: v1\ntimeouts:\n  apply: 1.5s\n", -EINVAL, 3, 10, "timeouts.apply",
                 "invalid duration '1.5s' *"},
                {"timeout zero", "version: v1\ntimeouts:\n  apply: 0s\n", -EINVAL, 3, 10, "timeouts.apply",
                 "duration must not be zero"},
                {"timeout too long", "version: v1\ntimeouts:\n  apply: 25h\n", -EINVAL, 3, 10, "timeouts.apply",
                 "duration '25h' too long (at most 24h)"},
                {"timeout overflowing", "version: v1\ntimeouts:\n  apply: 99999999999999999999h\n", -EINVAL, 3, 10,
                 "timeouts.apply", "duration '99999999999999999999h' too long (at most 24h)"},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                struct mk_error e = {0};
                struct mk_service_settings *s = NULL;
                size_t len = strlen(cases[i].yaml);
                int r = mk_service_settings_parse(cases[i].yaml, len, FILE_NAME, &s, &e);
                if (r >= 0) {
                        mk_service_settings_free(s);
                        fail_msg("%s: parsed, want an error", cases[i].name);
                }
                if (streq(cases[i].field, "*")) /* field path irrelevant (duplicate key wording) */
                        check_error(cases[i].name, r, &e, cases[i].code, cases[i].line, cases[i].column, e.field,
                                    cases[i].msg);
                else
                        check_error(cases[i].name, r, &e, cases[i].code, cases[i].line, cases[i].column,
                                    cases[i].field, cases[i].msg);
        }
}

static void test_settings_caps(void **state) {
        struct mk_buf b;
        mk_buf_init(&b, 1 << 20);
        assert_int_equal(mk_buf_puts(&b, "version: v1\ngpu-clients:\n  systemd-services:\n"), 0);
        for (int i = 0; i <= MK_MAX_GPU_CLIENTS; i++)
                assert_int_equal(mk_buf_printf(&b, "    - u%d.service\n", i), 0);
        struct mk_error e = {0};
        struct mk_service_settings *s = NULL;
        int r = mk_service_settings_parse(mk_buf_str(&b), b.len, FILE_NAME, &s, &e);
        check_error("too many units", r, &e, -EINVAL, 4, 5, "gpu-clients.systemd-services", "too many entries (at most 256)");

        /* Exactly at the cap is fine. */
        mk_buf_reset(&b);
        assert_int_equal(mk_buf_puts(&b, "version: v1\ngpu-clients:\n  container-images:\n"), 0);
        for (int i = 0; i < MK_MAX_GPU_CLIENTS; i++)
                assert_int_equal(mk_buf_printf(&b, "    - image%d\n", i), 0);
        e = (struct mk_error){0};
        r = mk_service_settings_parse(mk_buf_str(&b), b.len, FILE_NAME, &s, &e);
        assert_int_equal(r, 0);
        assert_int_equal(s->clients.n_container_images, MK_MAX_GPU_CLIENTS);
        mk_service_settings_free(s);

        /* A name of MK_MAX_CLIENT_NAME bytes is fine, one more is not. */
        for (int extra = 0; extra <= 1; extra++) {
                mk_buf_reset(&b);
                assert_int_equal(mk_buf_puts(&b, "version: v1\ngpu-clients:\n  systemd-services: ["), 0);
                for (int i = 0; i < MK_MAX_CLIENT_NAME - 8 + extra; i++)
                        assert_int_equal(mk_buf_putc(&b, 'a'), 0);
                assert_int_equal(mk_buf_puts(&b, ".service]\n"), 0);
                e = (struct mk_error){0};
                s = NULL;
                r = mk_service_settings_parse(mk_buf_str(&b), b.len, FILE_NAME, &s, &e);
                if (extra == 0) {
                        assert_int_equal(r, 0);
                        assert_int_equal(strlen(s->clients.systemd_services[0]), MK_MAX_CLIENT_NAME);
                        mk_service_settings_free(s);
                } else
                        check_error("name too long", r, &e, -EINVAL, 3, 22, "gpu-clients.systemd-services[0]",
                                    "name too long (at most 255 bytes)");
        }

        /* The file size cap. */
        mk_buf_done(&b);
        mk_buf_init(&b, MK_MAX_SERVICE_YAML_BYTES + 16);
        assert_int_equal(mk_buf_puts(&b, "version: v1\n"), 0);
        while (b.len <= MK_MAX_SERVICE_YAML_BYTES)
                assert_int_equal(mk_buf_puts(&b, "# padding padding padding padding\n"), 0);
        e = (struct mk_error){0};
        r = mk_service_settings_parse(mk_buf_str(&b), b.len, FILE_NAME, &s, &e);
        check_error("too large", r, &e, -E2BIG, 0, 0, "", "'service.yaml' is larger than 262144 bytes");
        mk_buf_done(&b);
}

/* ---- state files ---- */

static char *make_tmpdir(void) {
        const char *base = secure_getenv("MIGKIT_TEST_TMP");
        char tmpl[PATH_MAX];
        if (base && *base) {
                (void) mkdir(base, 0755);
                snprintf(tmpl, sizeof(tmpl), "%s/test-service.XXXXXX", base);
        } else
                snprintf(tmpl, sizeof(tmpl), "/tmp/test-service.XXXXXX");
        assert_non_null(mkdtemp(tmpl));
        char *d = strdup(tmpl);
        assert_non_null(d);
        return d;
}

static void rm_rf(const char *path) {
        struct stat st;
        if (lstat(path, &st) < 0)
                return;
        if (S_ISDIR(st.st_mode)) {
                DIR *d = opendir(path);
                assert_non_null(d);
                struct dirent *de;
                while ((de = readdir(d)))
                        if (!streq(de->d_name, ".") && !streq(de->d_name, "..")) {
                                char p[PATH_MAX];
                                snprintf(p, sizeof(p), "%s/%s", path, de->d_name);
                                rm_rf(p);
                        }
                closedir(d);
                assert_int_equal(rmdir(path), 0);
        } else
                assert_int_equal(unlink(path), 0);
}

/* Names in dir, sorted, comma-separated (to see that no temp file is left). */
static void list_dir(const char *dir, char *buf, size_t size) {
        struct dirent **names = NULL;
        int n = scandir(dir, &names, NULL, alphasort);
        assert_true(n >= 0);
        size_t used = 0;
        buf[0] = 0;
        for (int i = 0; i < n; i++) {
                if (names[i]->d_name[0] != '.' || (!streq(names[i]->d_name, ".") && !streq(names[i]->d_name, "..")))
                        used += (size_t) snprintf(buf + used, size - used, "%s%s", used ? "," : "", names[i]->d_name);
                free(names[i]);
        }
        free(names);
}

static void write_text(const char *path, const char *text) {
        FILE *f = fopen(path, "we");
        assert_non_null(f);
        assert_int_equal(fputs(text, f) >= 0, 1);
        assert_int_equal(fclose(f), 0);
}

static char *read_text(const char *path) {
        char *data = NULL;
        struct mk_error e = {0};
        assert_int_equal(mk_read_file(path, 1 << 20, &data, NULL, &e), 0);
        return data;
}

static void test_paths(void **state) {
        struct mk_service_paths p = {0};
        assert_int_equal(mk_service_paths_init(NULL, NULL, &p), 0);
        assert_string_equal(p.config_file, "/etc/migkit/config.yaml");
        assert_string_equal(p.hooks_file, "/etc/migkit/hooks.yaml");
        assert_string_equal(p.settings_file, "/etc/migkit/service.yaml");
        assert_string_equal(p.selection_file, "/var/lib/migkit/selected-config");
        assert_string_equal(p.marker_file, "/var/lib/migkit/reboot-attempted");
        mk_service_paths_done(&p);

        assert_int_equal(mk_service_paths_init("/x/etc//", "/y/", &p), 0);
        assert_string_equal(p.config_file, "/x/etc/config.yaml");
        assert_string_equal(p.marker_file, "/y/reboot-attempted");
        mk_service_paths_done(&p);
        mk_service_paths_done(&p); /* twice is fine */

        assert_int_equal(mk_service_paths_init("etc", NULL, &p), -EINVAL);
        assert_int_equal(mk_service_paths_init(NULL, "", &p), -EINVAL);

        /* From the environment; empty means the default. */
        assert_int_equal(setenv("MIGKIT_ETC_DIR", "/e", 1), 0);
        assert_int_equal(setenv("MIGKIT_STATE_DIR", "", 1), 0);
        struct mk_error e = {0};
        assert_int_equal(mk_service_paths_from_env(&p, &e), 0);
        assert_string_equal(p.settings_file, "/e/service.yaml");
        assert_string_equal(p.selection_file, "/var/lib/migkit/selected-config");
        mk_service_paths_done(&p);
        assert_int_equal(setenv("MIGKIT_STATE_DIR", "relative", 1), 0);
        assert_int_equal(mk_service_paths_from_env(&p, &e), -EINVAL);
        assert_string_equal(e.msg, "MIGKIT_ETC_DIR ('/e') and MIGKIT_STATE_DIR ('relative') must be absolute paths");
        unsetenv("MIGKIT_ETC_DIR");
        unsetenv("MIGKIT_STATE_DIR");
}

static void test_selection(void **state) {
        char *tmp = make_tmpdir();
        char state_dir[PATH_MAX];
        snprintf(state_dir, sizeof(state_dir), "%s/var/lib/migkit", tmp); /* created on first write */
        struct mk_service_paths p = {0};
        assert_int_equal(mk_service_paths_init(tmp, state_dir, &p), 0);
        struct mk_error e = {0};
        char *name = NULL;
        assert_int_equal(mk_service_selection_read(&p, &name, &e), -ENOENT);
        assert_null(name);

        bool changed = false;
        assert_int_equal(mk_service_selection_write(&p, "all-balanced", &changed, &e), 0);
        assert_true(changed);
        char *text = read_text(p.selection_file);
        assert_string_equal(text, "all-balanced\n");
        free(text);
        struct stat st;
        assert_int_equal(stat(p.selection_file, &st), 0);
        assert_int_equal(st.st_mode & 07777, 0644);
        assert_int_equal(mk_service_selection_read(&p, &name, &e), 0);
        assert_string_equal(name, "all-balanced");
        free(name);

        /* The same again writes nothing (no change of inode). */
        ino_t ino = st.st_ino;
        assert_int_equal(mk_service_selection_write(&p, "all-balanced", &changed, &e), 0);
        assert_false(changed);
        assert_int_equal(stat(p.selection_file, &st), 0);
        assert_int_equal(st.st_ino, ino);

        /* A `select` killed between its temporary file and the rename left one:
         * the next select removes it, even when nothing changes. */
        char stale[PATH_MAX];
        snprintf(stale, sizeof(stale), "%s.tmp.999999.0badf00d", p.selection_file);
        write_text(stale, "half");
        assert_int_equal(mk_service_selection_write(&p, "all-balanced", &changed, &e), 0);
        assert_false(changed);
        assert_int_equal(access(stale, F_OK), -1);

        /* Another replaces it whole, by rename (a new inode), leaving no temp
         * file; the writers' lock file stays. */
        write_text(stale, "half");
        assert_int_equal(mk_service_selection_write(&p, "custom config", &changed, &e), 0);
        assert_true(changed);
        assert_int_equal(stat(p.selection_file, &st), 0);
        assert_int_not_equal(st.st_ino, ino);
        char names[1024];
        list_dir(state_dir, names, sizeof(names));
        assert_string_equal(names, "selected-config,selected-config.lock");
        assert_int_equal(mk_service_selection_read(&p, &name, &e), 0);
        assert_string_equal(name, "custom config");
        free(name);

        /* Names that cannot be stored on one line are refused, nothing written. */
        static const char *const bad[] = {"", "a\nb", " lead", "trail ", "tab\there", "del\x7f"};
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                e = (struct mk_error){0};
                assert_int_equal(mk_service_selection_write(&p, bad[i], NULL, &e), -EINVAL);
                assert_non_null(strstr(e.msg, "cannot be persisted"));
        }
        char longname[MK_MAX_CONFIG_NAME + 2];
        memset(longname, 'x', sizeof(longname) - 1);
        longname[sizeof(longname) - 1] = 0;
        assert_int_equal(mk_service_selection_write(&p, longname, NULL, &e), -EINVAL);
        longname[MK_MAX_CONFIG_NAME] = 0;
        assert_int_equal(mk_service_selection_write(&p, longname, NULL, &e), 0);
        text = read_text(p.selection_file);
        assert_int_equal(strlen(text), MK_MAX_CONFIG_NAME + 1);
        free(text);

        /* Hand-edited: trailing blank lines are fine; two names, binary or
         * oversized content are refused with the path. */
        write_text(p.selection_file, "edited\n\n  \n");
        assert_int_equal(mk_service_selection_read(&p, &name, &e), 0);
        assert_string_equal(name, "edited");
        free(name);
        static const char *const corrupt[] = {"a\nb\n", "", "\n", "\x01\n"};
        for (size_t i = 0; i < ELEMENTSOF(corrupt); i++) {
                write_text(p.selection_file, corrupt[i]);
                e = (struct mk_error){0};
                assert_int_equal(mk_service_selection_read(&p, &name, &e), -EINVAL);
                assert_non_null(strstr(e.msg, p.selection_file));
                assert_non_null(strstr(e.msg, "is corrupt"));
        }
        int fd = open(p.selection_file, O_WRONLY | O_TRUNC | O_CLOEXEC);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, "a\0b\n", 4), 4);
        close(fd);
        assert_int_equal(mk_service_selection_read(&p, &name, &e), -EINVAL);
        assert_string_equal(e.msg + strlen(e.msg) - strlen("contains a NUL byte"), "contains a NUL byte");
        char big[MK_MAX_STATE_FILE_BYTES + 2];
        memset(big, 'x', sizeof(big) - 1);
        big[sizeof(big) - 1] = 0;
        write_text(p.selection_file, big);
        assert_int_equal(mk_service_selection_read(&p, &name, &e), -E2BIG);

        mk_service_paths_done(&p);
        rm_rf(tmp);
        free(tmp);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_settings_valid),
                cmocka_unit_test(test_settings_defaults),
                cmocka_unit_test(test_settings_shipped),
                cmocka_unit_test(test_settings_invalid),
                cmocka_unit_test(test_settings_caps),
                cmocka_unit_test(test_paths),
                cmocka_unit_test(test_selection),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}

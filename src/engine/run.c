/* External commands of the engine: hooks and GPU resets. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/dynbuf.h"
#include "base/host.h"
#include "base/log.h"
#include "base/macro.h"
#include "base/spawn.h"
#include "engine/engine.h"

#define MK_HOOK_OUTPUT_CAP (64u * 1024)
#define MK_RESET_TIMEOUT_MS (5 * 60 * 1000)

static bool env_has_key(const char *const *env, const char *kv) {
        size_t k = strcspn(kv, "=");
        for (; env && *env; env++)
                if (strncmp(*env, kv, k) == 0 && (*env)[k] == '=')
                        return true;
        return false;
}

/* The hook's environment: its own envs, then the MIG_PARTED_* variables
 * (which win, as upstream), then PATH from ours unless the hook set one.
 * Upstream passes no PATH at all; we pass it so that hook scripts can run
 * the usual tools (docs/engine.md). */
static char **hook_env(const struct mk_hook_entry *x, const char *const *mig_env, char **ret_path_kv) {
        size_t n = 0;
        for (char **p = x->envs; p && *p; p++)
                n++;
        for (const char *const *p = mig_env; p && *p; p++)
                n++;
        char **env = calloc(n + 2, sizeof(char *));
        if (!env)
                return NULL;
        size_t k = 0;
        for (char **p = x->envs; p && *p; p++)
                if (!env_has_key(mig_env, *p))
                        env[k++] = *p;
        for (const char *const *p = mig_env; p && *p; p++)
                env[k++] = (char *) *p;
        const char *path = secure_getenv("PATH");
        *ret_path_kv = NULL;
        if (!env_has_key((const char *const *) env, "PATH=") && path &&
            asprintf(ret_path_kv, "PATH=%s", path) >= 0)
                env[k++] = *ret_path_kv;
        env[k] = NULL;
        return env;
}

int mk_engine_run_hook(const struct mk_hooks *h, enum mk_hook which, const char *const *mig_env,
                       const struct mk_engine_opts *o, struct mk_error *e) {
        if (!h || h->n_entries[which] == 0)
                return 0;
        const char *name = mk_hook_to_string(which);
        for (size_t i = 0; i < h->n_entries[which]; i++) {
                const struct mk_hook_entry *x = &h->entries[which][i];
                size_t n_args = 0;
                for (char **p = x->args; p && *p; p++)
                        n_args++;
                _cleanup_free_ const char **argv = calloc(n_args + 2, sizeof(char *));
                _cleanup_free_ char *path_kv = NULL;
                _cleanup_free_ char **env = hook_env(x, mig_env, &path_kv);
                if (!argv || !env)
                        return mk_error_set(e, -ENOMEM, "Out of memory");
                argv[0] = x->command;
                for (size_t k = 0; k < n_args; k++)
                        argv[k + 1] = x->args[k];
                log_info("Running %s hook: '%s'%s", name, x->command, n_args ? " ..." : "");
                struct mk_spawn_opts so = {
                        .argv = argv,
                        .envp = (const char *const *) env,
                        .cwd = x->workdir && *x->workdir ? x->workdir : NULL,
                        .timeout_ms = o ? o->hook_timeout_ms : 0,
                        .capture = !(o && o->hook_output),
                        .output_cap = MK_HOOK_OUTPUT_CAP,
                        .forward_output = o && o->hook_output,
                };
                struct mk_spawn_result res = {0};
                struct mk_error se = {0};
                int r = mk_spawn(&so, &res, &se);
                if (r < 0) {
                        char buf[MK_ERROR_MSG_MAX];
                        return mk_error_set(e, r, "%s hook: %s", name, mk_error_format(&se, buf, sizeof(buf)));
                }
                if (res.timed_out || res.exit_status != 0) {
                        if (res.output && res.output_len > 0)
                                log_error("Output of the failed %s hook '%s':\n%s", name, x->command, res.output);
                        int st = res.exit_status;
                        bool to = res.timed_out;
                        mk_spawn_result_done(&res);
                        if (to)
                                return mk_error_set(e, -ETIMEDOUT, "%s hook '%s' timed out after %d ms", name,
                                                    x->command, o->hook_timeout_ms);
                        return mk_error_set(e, -EIO, "%s hook '%s' failed with exit status %d", name, x->command, st);
                }
                mk_spawn_result_done(&res);
        }
        return 0;
}

/* "00000000:07:00.0" (NVML) -> "0000:07:00.0" (sysfs), lower case. */
static int sysfs_address(const char *bus_id, char *buf, size_t size) {
        const char *colon = strchr(bus_id, ':');
        if (!colon || colon - bus_id < 4 || strlen(colon) != 8 || size < 13)
                return -EINVAL;
        const char *dom = colon - 4;
        int n = snprintf(buf, size, "%.4s%s", dom, colon);
        if (n < 0 || (size_t) n >= size)
                return -EINVAL;
        for (char *p = buf; *p; p++) {
                if (*p >= 'A' && *p <= 'F')
                        *p = (char) (*p - 'A' + 'a');
                if (!strchr("0123456789abcdef:.", *p))
                        return -EINVAL;
        }
        return 0;
}

static bool nvidia_module_loaded(const struct mk_host *host) {
        _cleanup_free_ char *path = NULL, *data = NULL;
        size_t len = 0;
        if (mk_host_path(host, MK_HOST_PROC, "modules", &path) < 0 ||
            mk_read_file(path, 1u << 20, &data, &len, NULL) < 0)
                return false;
        /* "nvidia 12345 ..." at the start of a line */
        for (const char *p = data; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
                if (strncmp(p, "nvidia ", 7) == 0)
                        return true;
        return false;
}

int mk_engine_reset_gpus(const char *const *bus_ids, size_t n, struct mk_error *e) {
        if (n == 0)
                return 0;
        struct mk_host host = {0};
        int r = mk_host_init_from_env(&host);
        if (r < 0)
                return mk_error_set(e, r, "Cannot set up host paths");
        const char *smi = secure_getenv("MIGKIT_NVIDIA_SMI");
        if ((!smi || !*smi) && nvidia_module_loaded(&host))
                smi = "nvidia-smi";
        if (smi && *smi) {
                struct mk_buf ids;
                mk_buf_init(&ids, 64 * 1024);
                for (size_t i = 0; i < n && r >= 0; i++)
                        r = mk_buf_printf(&ids, "%s%s", i ? "," : "", bus_ids[i]);
                if (r < 0) {
                        mk_buf_done(&ids);
                        mk_host_done(&host);
                        return mk_error_set(e, r, "Too many GPUs to reset");
                }
                const char *argv[] = {smi, "-r", "-i", mk_buf_str(&ids), NULL};
                log_info("Resetting GPU(s) %s with '%s -r -i'", mk_buf_str(&ids), smi);
                struct mk_spawn_opts so = {.argv = argv, .timeout_ms = MK_RESET_TIMEOUT_MS, .capture = true,
                                           .output_cap = 64 * 1024};
                struct mk_spawn_result res = {0};
                struct mk_error se = {0};
                r = mk_spawn(&so, &res, &se);
                if (r < 0) {
                        char buf[MK_ERROR_MSG_MAX];
                        mk_error_set(e, r, "Cannot reset GPU(s) %s: %s", mk_buf_str(&ids),
                                     mk_error_format(&se, buf, sizeof(buf)));
                } else if (res.exit_status != 0 || res.timed_out) {
                        /* nvidia-smi explains itself on its output; keep its last line. */
                        char *out = res.output ? res.output : (char *) "";
                        size_t len = strlen(out);
                        while (len > 0 && out[len - 1] == '\n')
                                out[--len] = 0;
                        const char *last = strrchr(out, '\n');
                        r = mk_error_set(e, -EBUSY, "Failed to reset GPU(s) %s (%s exited with %d): %s",
                                         mk_buf_str(&ids), smi, res.exit_status, last ? last + 1 : out);
                }
                mk_spawn_result_done(&res);
                mk_buf_done(&ids);
                mk_host_done(&host);
                return r < 0 ? r : 0;
        }

        /* No driver: the PCI function's sysfs reset file. */
        for (size_t i = 0; i < n; i++) {
                char addr[32], rel[96];
                if (sysfs_address(bus_ids[i], addr, sizeof(addr)) < 0) {
                        mk_host_done(&host);
                        return mk_error_set(e, -EINVAL, "Invalid PCI bus id '%s'", bus_ids[i]);
                }
                snprintf(rel, sizeof(rel), "bus/pci/devices/%s/reset", addr);
                _cleanup_free_ char *path = NULL;
                r = mk_host_path(&host, MK_HOST_SYSFS, rel, &path);
                if (r < 0)
                        break;
                log_info("Resetting GPU %s through '%s'", bus_ids[i], path);
                _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
                if (fd < 0 || write(fd, "1", 1) != 1) {
                        r = negative_errno();
                        mk_error_set(e, r, "Failed to reset GPU %s through '%s': %s", bus_ids[i], path, strerror(-r));
                        break;
                }
        }
        mk_host_done(&host);
        return r < 0 ? r : 0;
}

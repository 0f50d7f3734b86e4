/* External commands of the engine: hooks and GPU resets. */
#include <errno.h>
#include <signal.h>
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
#include "pci/pci.h"

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
                mk_progress_emit(o ? o->progress : NULL,
                                 &(struct mk_progress_event){.kind = MK_PROGRESS_HOOK, .gpu = -1, .hook = name,
                                                             .command = x->command});
                struct mk_spawn_opts so = {
                        .argv = argv,
                        .envp = (const char *const *) env,
                        .cwd = x->workdir && *x->workdir ? x->workdir : NULL,
                        .timeout_ms = o ? o->hook_timeout_ms : 0,
                        .capture = !(o && o->hook_output),
                        .output_cap = MK_HOOK_OUTPUT_CAP,
                        .forward_output = o && o->hook_output,
                        .stop_on_signal = true,
                        /* A hook's background children end with it (docs/engine.md, "Hooks"). */
                        .kill_group_at_exit = true,
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
                                mk_progress_emit(o ? o->progress : NULL,
                                                 &(struct mk_progress_event){.kind = MK_PROGRESS_HOOK_OUTPUT,
                                                                             .gpu = -1, .hook = name,
                                                                             .command = x->command,
                                                                             .output = res.output});
                        int st = res.exit_status, sig = res.stopped_by;
                        bool to = res.timed_out;
                        mk_spawn_result_done(&res);
                        if (sig)
                                return mk_error_set(e, -EINTR,
                                                    "%s hook '%s' stopped by %s: its process group was killed, "
                                                    "apply stopped",
                                                    name, x->command, sig == SIGINT ? "SIGINT" : "SIGTERM");
                        if (to)
                                return mk_error_set(e, -ETIMEDOUT, "%s hook '%s' timed out after %d ms", name,
                                                    x->command, o->hook_timeout_ms);
                        return mk_error_set(e, -EIO, "%s hook '%s' failed with exit status %d", name, x->command, st);
                }
                mk_spawn_result_done(&res);
        }
        return 0;
}

static const struct mk_pci_gpu *find_function(const struct mk_pci_gpu *g, size_t n, const char *bus_id) {
        char addr[32];
        if (mk_pci_address_from_nvml(bus_id, addr, sizeof(addr)) < 0)
                return NULL;
        for (size_t i = 0; i < n; i++)
                if (streq(g[i].address, addr))
                        return &g[i];
        return NULL;
}

static int reset_with_smi(const char *smi, const char *const *bus_ids, size_t n, struct mk_error *e) {
        struct mk_buf ids;
        mk_buf_init(&ids, 64 * 1024);
        int r = 0;
        for (size_t i = 0; i < n && r >= 0; i++)
                r = mk_buf_printf(&ids, "%s%s", i ? "," : "", bus_ids[i]);
        if (r < 0) {
                mk_buf_done(&ids);
                return mk_error_set(e, r, "Too many GPUs to reset");
        }
        const char *argv[] = {smi, "-r", "-i", mk_buf_str(&ids), NULL};
        log_debug("Resetting GPU(s) %s with '%s -r -i'", mk_buf_str(&ids), smi);
        struct mk_spawn_opts so = {.argv = argv, .timeout_ms = MK_RESET_TIMEOUT_MS, .capture = true,
                                   .output_cap = 64 * 1024};
        struct mk_spawn_result res = {0};
        struct mk_error se = {0};
        r = mk_spawn(&so, &res, &se);
        if (r < 0) {
                char buf[MK_ERROR_MSG_MAX];
                mk_error_set(e, r, "Cannot reset GPU(s) %s: %s", mk_buf_str(&ids), mk_error_format(&se, buf, sizeof(buf)));
        } else if (res.exit_status != 0 || res.timed_out) {
                /* nvidia-smi explains itself on its output; keep its last line. */
                r = mk_error_set(e, -EBUSY, "Failed to reset GPU(s) %s (%s exited with %d): %s", mk_buf_str(&ids), smi,
                                 res.exit_status, mk_spawn_output_last_line(&res));
        }
        mk_spawn_result_done(&res);
        mk_buf_done(&ids);
        return r < 0 ? r : 0;
}

int mk_engine_reset_gpus(const char *const *bus_ids, size_t n, bool *ret_reboot_needed, struct mk_error *e) {
        *ret_reboot_needed = false;
        if (n == 0)
                return 0;
        struct mk_host host = {0};
        int r = mk_host_init_from_env(&host);
        if (r < 0)
                return mk_error_set(e, r, "Cannot set up host paths");
        struct mk_pci_gpu *fns = NULL;
        size_t n_fns = 0;
        struct mk_error pe = {0};
        if (mk_pci_enumerate(&host, &fns, &n_fns, &pe) < 0) {
                char buf[MK_ERROR_MSG_MAX];
                log_debug("Cannot enumerate PCI functions (%s), ignoring", mk_error_format(&pe, buf, sizeof(buf)));
                fns = NULL;
                n_fns = 0;
        }
        /* A function without a reset file cannot be reset: only a reboot applies the mode. */
        for (size_t i = 0; i < n; i++) {
                const struct mk_pci_gpu *f = find_function(fns, n_fns, bus_ids[i]);
                if (f && !f->has_reset) {
                        *ret_reboot_needed = true;
                        r = mk_error_set(e, -EAGAIN,
                                         "GPU %s has no sysfs reset (GPU passthrough?): its MIG mode change needs a "
                                         "reboot",
                                         bus_ids[i]);
                        goto out;
                }
        }
        const char *smi = secure_getenv("MIGKIT_NVIDIA_SMI");
        if ((!smi || !*smi) && mk_pci_driver_loaded(&host))
                smi = "nvidia-smi";
        if (smi && *smi) {
                r = reset_with_smi(smi, bus_ids, n, e);
                goto out;
        }
        /* No driver: the PCI function's sysfs reset file. */
        for (size_t i = 0; i < n; i++) {
                const struct mk_pci_gpu *f = find_function(fns, n_fns, bus_ids[i]);
                if (!f) {
                        r = mk_error_set(e, -ENODEV, "GPU %s is not on the PCI bus (%s)", bus_ids[i],
                                         host.sysfs_root);
                        goto out;
                }
                log_debug("Resetting GPU %s through sysfs", bus_ids[i]);
                r = mk_pci_reset(f, e);
                if (r < 0)
                        goto out;
        }
out:
        mk_pci_gpus_free(fns, n_fns);
        mk_host_done(&host);
        return r < 0 ? r : 0;
}

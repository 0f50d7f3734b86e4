/* apply, assert and plan: flags and variables as mig-parted's. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "base/dynbuf.h"
#include "base/hostlock.h"
#include "base/log.h"
#include "base/macro.h"
#include "base/prom.h"
#include "base/parse.h"
#include "cli/cli.h"
#include "cli/options.h"
#include "engine/engine.h"

/* assert's exit codes (docs/engine.md) */
#define MK_EXIT_NOT_APPLIED 1
#define MK_EXIT_CANNOT_CHECK 3

enum cmd { CMD_APPLY, CMD_ASSERT, CMD_PLAN };

struct args {
        const char *config_file, *selected, *hooks_file;
        bool skip_reset, mode_only, valid_config, debug, verbose, sequential;
        enum mk_output_format fmt;
        int hook_timeout_ms, lock_timeout_ms;
};

/* A hook of `apply` running longer is killed (its process group) and the
 * apply fails; upstream mig-parted waits for ever (docs/engine.md). */
#define MK_APPLY_HOOK_TIMEOUT_MS (5 * 60 * 1000)

static int parse_timeout(const char *what, const char *v, int *ret) {
        uint64_t ms = (uint64_t) *ret;
        if (cli_option_duration_ms(what, v, 1, 86400000, &ms) < 0)
                return -EINVAL;
        *ret = (int) ms;
        return 0;
}

static int parse_hook_timeout(const char *v, int *ret) {
        return parse_timeout("hook timeout", v, ret);
}

/* A MIG_PARTED_* boolean, as upstream's urfave/cli v2 BoolFlag reads its
 * EnvVars: unset or empty is false, a value that does not parse is an
 * error naming the variable (upstream: "could not parse ... as bool value
 * from env ..."). mk_parse_bool() also takes yes/no/on/off. */
static int env_bool(const char *name, bool *ret) {
        const char *v = secure_getenv(name);
        *ret = false;
        return cli_option_bool(name, v && *v ? v : NULL, ret);
}

static void help(enum cmd c) {
        static const char *const usage[] = {
                [CMD_APPLY] = "Usage: migkit apply -f CONFIG [-c NAME] [-k HOOKS] [--skip-reset] [--mode-only] [-v] [-o json]\n"
                              "\n"
                              "Apply the selected MIG configuration: plan every GPU first (nothing is touched if any\n"
                              "target cannot be built), run hooks, change MIG mode and reset only the GPUs that need\n"
                              "it, destroy and create only what differs, then verify. Prints the plan, one line per\n"
                              "GPU as it finishes and a total; -v adds every step, -o json one event per line.\n",
                [CMD_ASSERT] = "Usage: migkit assert -f CONFIG [-c NAME] [--mode-only] [--valid-config] [-o json]\n"
                               "\n"
                               "Check that the selected MIG configuration is applied. Exit status: 0 applied,\n"
                               "1 not applied, 2 usage error, 3 could not check (bad config, NVML error,\n"
                               "a target that cannot be built on this node).\n",
                [CMD_PLAN] = "Usage: migkit plan -f CONFIG [-c NAME] [--mode-only] [-o table|json]\n"
                             "\n"
                             "Print what 'apply' would do, per GPU: instances kept, destroyed (with their MIG\n"
                             "device UUIDs) and created, mode changes and resets. Changes nothing.\n",
        };
        fputs(usage[c], stdout);
        printf("\n"
               "  -f, --config-file FILE       mig-parted v1 config, '-' for stdin (MIG_PARTED_CONFIG_FILE)\n"
               "  -c, --selected-config NAME   config to use (MIG_PARTED_SELECTED_CONFIG)\n");
        if (c == CMD_APPLY)
                printf("  -k, --hooks-file FILE        hooks v1 file (MIG_PARTED_HOOKS_FILE)\n"
                       "  -s, --skip-reset             do not reset GPUs after a mode change (MIG_PARTED_SKIP_RESET)\n"
                       "      --hook-timeout DURATION  a hook running longer is killed, apply fails (5m;\n"
                       "                               MIGKIT_HOOK_TIMEOUT)\n"
                       "      --lock-timeout DURATION  wait this long for another command changing MIG state on\n"
                       "                               this host to finish (5m; MIGKIT_LOCK_TIMEOUT)\n"
                       "      --sequential             change the GPUs one after another, not all at once\n");
        printf("  -m, --mode-only              only the MIG mode (MIG_PARTED_MODE_CHANGE_ONLY)\n");
        if (c == CMD_ASSERT)
                printf("  -a, --valid-config           only check that the config parses and the name exists\n"
                       "                               (MIG_PARTED_VALID_CONFIG)\n");
        if (c == CMD_APPLY)
                printf("  -v, --verbose                every step (hooks, mode changes, resets, each instance)\n"
                       "  -o, --output-format FMT      table (default) or json: one JSON event per line\n");
        else
                printf("  -o, --output-format FMT      table (default) or json\n");
        printf("  -d, --debug                  debug logging, hook output shown (MIG_PARTED_DEBUG)\n");
}

enum { OPT_SEQUENTIAL = 0x100, OPT_LOCK_TIMEOUT }; /* long options without a letter */

/* The defaults, then the variables (each command reads those of its own
 * flags, as upstream): -EINVAL for a value that does not parse (said). */
static int args_from_env(enum cmd c, struct args *a) {
        *a = (struct args){
                .config_file = secure_getenv("MIG_PARTED_CONFIG_FILE"),
                .selected = secure_getenv("MIG_PARTED_SELECTED_CONFIG"),
                .hooks_file = secure_getenv("MIG_PARTED_HOOKS_FILE"),
                .fmt = MK_OUTPUT_TABLE,
                .hook_timeout_ms = MK_APPLY_HOOK_TIMEOUT_MS,
                .lock_timeout_ms = MK_HOST_LOCK_DEFAULT_TIMEOUT_MS,
        };
        if ((c == CMD_APPLY && env_bool("MIG_PARTED_SKIP_RESET", &a->skip_reset) < 0) ||
            env_bool("MIG_PARTED_MODE_CHANGE_ONLY", &a->mode_only) < 0 ||
            (c == CMD_ASSERT && env_bool("MIG_PARTED_VALID_CONFIG", &a->valid_config) < 0) ||
            env_bool("MIG_PARTED_DEBUG", &a->debug) < 0)
                return -EINVAL;
        const char *ht = secure_getenv("MIGKIT_HOOK_TIMEOUT");
        if (ht && *ht && parse_hook_timeout(ht, &a->hook_timeout_ms) < 0)
                return -EINVAL;
        const char *lt = c == CMD_APPLY ? secure_getenv("MIGKIT_LOCK_TIMEOUT") : NULL;
        if (lt && *lt && parse_timeout("lock timeout", lt, &a->lock_timeout_ms) < 0)
                return -EINVAL;
        return 0;
}

static int parse_args(enum cmd c, int argc, char **argv, struct args *a) {
        static const struct option options[] = {
                {"config-file", required_argument, NULL, 'f'},
                {"selected-config", required_argument, NULL, 'c'},
                {"hooks-file", required_argument, NULL, 'k'},
                {"skip-reset", no_argument, NULL, 's'},
                {"hook-timeout", required_argument, NULL, 'T'},
                {"mode-only", no_argument, NULL, 'm'},
                {"valid-config", no_argument, NULL, 'a'},
                {"output-format", required_argument, NULL, 'o'},
                {"output", required_argument, NULL, 'o'},
                {"debug", no_argument, NULL, 'd'},
                {"verbose", no_argument, NULL, 'v'},
                {"help", no_argument, NULL, 'h'},
                {"sequential", no_argument, NULL, OPT_SEQUENTIAL},
                {"lock-timeout", required_argument, NULL, OPT_LOCK_TIMEOUT},
                {},
        };
        if (args_from_env(c, a) < 0)
                return -EINVAL;
        int o;
        while ((o = getopt_long(argc, argv, "f:c:k:smao:dvhT:", options, NULL)) >= 0) {
                switch (o) {
                case 'f':
                        a->config_file = optarg;
                        break;
                case 'c':
                        a->selected = optarg;
                        break;
                case 'k':
                        if (c != CMD_APPLY)
                                goto bad;
                        a->hooks_file = optarg;
                        break;
                case 's':
                        if (c != CMD_APPLY)
                                goto bad;
                        a->skip_reset = true;
                        break;
                case 'T':
                        if (c != CMD_APPLY)
                                goto bad;
                        if (parse_hook_timeout(optarg, &a->hook_timeout_ms) < 0)
                                return -EINVAL;
                        break;
                case 'm':
                        a->mode_only = true;
                        break;
                case OPT_SEQUENTIAL:
                        if (c != CMD_APPLY)
                                goto bad;
                        a->sequential = true;
                        break;
                case OPT_LOCK_TIMEOUT:
                        if (c != CMD_APPLY)
                                goto bad;
                        if (parse_timeout("lock timeout", optarg, &a->lock_timeout_ms) < 0)
                                return -EINVAL;
                        break;
                case 'a':
                        if (c != CMD_ASSERT)
                                goto bad;
                        a->valid_config = true;
                        break;
                case 'o':
                        if (cli_parse_output(argv[0], optarg, CLI_OUTPUT(MK_OUTPUT_TABLE) | CLI_OUTPUT(MK_OUTPUT_JSON),
                                             MK_OUTPUT_TABLE, &a->fmt) < 0)
                                return -EINVAL;
                        break;
                case 'd':
                        a->debug = true;
                        break;
                case 'v':
                        if (c != CMD_APPLY)
                                goto bad;
                        a->verbose = true;
                        break;
                case 'h':
                        help(c);
                        return 1;
                default:
                        goto bad;
                }
        }
        if (cli_options_end(argc, argv) != CLI_CONTINUE)
                return -EINVAL;
        if (!a->config_file || !*a->config_file) {
                fprintf(stderr, "Error: missing required flags 'config-file' (-f, or MIG_PARTED_CONFIG_FILE)\n");
                return -EINVAL;
        }
        if (a->debug)
                mk_log_set_level(MK_LOG_DEBUG);
        else if (mk_log_get_level() >= MK_LOG_DEBUG) /* global -d */
                a->debug = true;
        return 0;
bad:
        fprintf(stderr, "Run 'migkit %s --help' for usage.\n", argv[0]);
        return -EINVAL;
}

static const char *ci_uuid_short(const char *uuid) {
        return uuid[0] ? uuid : "-";
}

/* "MIG disabled -> enabled (GPU reset needed)"; a mode an earlier apply set
 * without the reset (--skip-reset) says so: "(pending since an earlier apply,
 * GPU reset needed)". */
static void mode_words(const struct mk_gpu *g, const struct mk_gpu_plan *p, const char *reset, char *buf,
                       size_t size) {
        enum mk_mig_mode want = p->mig_enabled ? MK_MIG_ENABLED : MK_MIG_DISABLED;
        bool pending = g->mig_pending == want && g->mig_current != want;
        snprintf(buf, size, "MIG %s -> %s%s%s%s", cli_mig_mode_str(g->mig_current), p->mig_enabled ? "enabled" : "disabled",
                 pending ? " (pending since an earlier apply" : "", pending && p->reset_needed ? ", " : pending ? ")" : "",
                 p->reset_needed ? (pending ? reset + 2 : reset) : "");
}

/* One GPU's plan, without the GPU's name: a status line, and for a GPU that
 * changes, its instances kept, destroyed and created. Returns whether it
 * changes. */
static bool plan_gpu_text(FILE *f, const struct mk_gpu *g, const struct mk_gpu_plan *gp, bool mode_only) {
        if (!gp->mig_enabled && !gp->mode_change && !gp->layout_change && gp->n_target == 0 &&
            g->mig_current != MK_MIG_ENABLED) {
                fprintf(f, "%s\n", g->mig_capable ? "MIG disabled, as configured" : "not MIG-capable, left alone");
                return false;
        }
        bool changes = gp->mode_change || (!mode_only && gp->layout_change);
        char mode[128];
        mode_words(g, gp, " (GPU reset needed)", mode, sizeof(mode));
        if (gp->mode_change)
                fprintf(f, "%s\n", mode);
        else if (!changes)
                fprintf(f, "already as configured (%zu MIG device%s kept)\n", gp->n_kept_cis,
                        gp->n_kept_cis == 1 ? "" : "s");
        else
                fprintf(f, "layout changes\n");
        /* The instances of a GPU left as it is are no news: counted above. */
        if (mode_only || !changes)
                return changes;
        for (size_t k = 0; k < gp->n_destroy; k++) {
                const struct mk_plan_destroy *d = &gp->destroy[k];
                if (d->is_ci)
                        fprintf(f, "  destroy  CI %-14s GPU instance %u, compute instance %u  %s\n", d->name, d->gi_id,
                                d->ci_id, ci_uuid_short(d->uuid));
                else
                        fprintf(f, "  destroy  GI %-14s at %u:%u  GPU instance %u\n", d->name, d->placement.start,
                                d->placement.size, d->gi_id);
        }
        for (size_t k = 0; k < gp->n_target; k++) {
                const struct mk_plan_gi *t = &gp->target[k];
                if (t->kept)
                        fprintf(f, "  keep     GI %-14s at %u:%u  GPU instance %u\n", t->profile->name,
                                t->placement.start, t->placement.size, t->existing_id);
                else
                        fprintf(f, "  create   GI %-14s at %u:%u\n", t->profile->name, t->placement.start,
                                t->placement.size);
                for (size_t j = 0; j < t->n_cis; j++) {
                        const struct mk_plan_ci *c = &t->cis[j];
                        if (c->kept)
                                fprintf(f, "  keep     CI %-14s at %u:%u  compute instance %u  %s\n", c->profile->name,
                                        c->placement.start, c->placement.size, c->existing_id, ci_uuid_short(c->uuid));
                        else
                                fprintf(f, "  create   CI %-14s at %u:%u\n", c->profile->name, c->placement.start,
                                        c->placement.size);
                }
        }
        return changes;
}

/* The plan per GPU, runs of GPUs of one model with the same plan printed
 * once (as `profiles` groups them), then a one-line verdict. */
static int print_plan_table(const char *config, const struct mk_snapshot *s, const struct mk_gpu_plan *p,
                            bool mode_only) {
        size_t n = s->n_gpus;
        _cleanup_free_ char **text = calloc(n ? n : 1, sizeof(char *));
        if (!text)
                return -ENOMEM;
        size_t changing = 0, modes = 0, resets = 0, destroy = 0, create = 0;
        int r = 0;
        for (size_t i = 0; i < n && r >= 0; i++) {
                size_t len = 0;
                FILE *f = open_memstream(&text[i], &len);
                if (!f) {
                        r = -ENOMEM;
                        break;
                }
                bool changes = plan_gpu_text(f, &s->gpus[i], &p[i], mode_only);
                if (fclose(f) != 0)
                        r = -ENOMEM;
                changing += changes;
                modes += p[i].mode_change;
                resets += p[i].mode_change && p[i].reset_needed;
                if (!changes || mode_only)
                        continue;
                for (size_t k = 0; k < p[i].n_destroy; k++)
                        destroy += p[i].destroy[k].is_ci;
                create += p[i].n_new_cis;
        }
        for (size_t i = 0; i < n && r >= 0;) {
                const struct mk_gpu *g = &s->gpus[i];
                size_t j = i + 1;
                while (j < n && streq(s->gpus[j].name, g->name) && streq(text[j], text[i]) &&
                       s->gpus[j].index == s->gpus[j - 1].index + 1)
                        j++;
                if (j - i == 1)
                        printf("GPU %u (%s, %s): %s", g->index, g->name, g->bus_id, text[i]);
                else
                        printf("GPUs %u-%u (%zux %s): %s", g->index, s->gpus[j - 1].index, j - i, g->name, text[i]);
                i = j;
        }
        for (size_t i = 0; i < n; i++)
                free(text[i]);
        if (r < 0)
                return r;
        if (changing == 0)
                printf("Nothing to do: '%s' is applied%s on %s %zu GPU%s.\n", config, mode_only ? " (MIG mode)" : "",
                       n == 1 ? "the" : "all", n, n == 1 ? "" : "s");
        else {
                printf("apply would change %zu of %zu GPU%s:", changing, n, n == 1 ? "" : "s");
                const char *sep = " ";
                if (modes) {
                        printf("%sMIG mode of %zu (%zu reset%s)", sep, modes, resets, resets == 1 ? "" : "s");
                        sep = ", ";
                }
                if (destroy) {
                        printf("%sdestroy %zu MIG device%s", sep, destroy, destroy == 1 ? "" : "s");
                        sep = ", ";
                }
                if (create)
                        printf("%screate %zu MIG device%s", sep, create, create == 1 ? "" : "s");
                printf(".\n");
        }
        return 0;
}

static json_t *plan_json(const struct mk_snapshot *s, const struct mk_gpu_plan *p) {
        json_t *gpus = json_array();
        for (size_t i = 0; i < s->n_gpus; i++) {
                const struct mk_gpu_plan *gp = &p[i];
                json_t *destroy = json_array(), *target = json_array();
                for (size_t k = 0; k < gp->n_destroy; k++) {
                        const struct mk_plan_destroy *d = &gp->destroy[k];
                        json_t *o = json_pack("{s:s,s:s,s:I,s:{s:I,s:I}}", "kind", d->is_ci ? "compute-instance" : "gpu-instance",
                                              "profile", d->name, "gpu_instance_id", (json_int_t) d->gi_id, "placement",
                                              "start", (json_int_t) d->placement.start, "size",
                                              (json_int_t) d->placement.size);
                        if (d->is_ci) {
                                json_object_set_new(o, "compute_instance_id", json_integer(d->ci_id));
                                json_object_set_new(o, "uuid", json_string(d->uuid));
                        }
                        json_array_append_new(destroy, o);
                }
                for (size_t k = 0; k < gp->n_target; k++) {
                        const struct mk_plan_gi *t = &gp->target[k];
                        json_t *cis = json_array();
                        for (size_t j = 0; j < t->n_cis; j++) {
                                const struct mk_plan_ci *c = &t->cis[j];
                                json_t *co = json_pack("{s:s,s:b,s:{s:I,s:I}}", "profile", c->profile->name, "kept",
                                                       c->kept, "placement", "start", (json_int_t) c->placement.start,
                                                       "size", (json_int_t) c->placement.size);
                                if (c->kept) {
                                        json_object_set_new(co, "compute_instance_id", json_integer(c->existing_id));
                                        json_object_set_new(co, "uuid", json_string(c->uuid));
                                }
                                json_array_append_new(cis, co);
                        }
                        json_t *go = json_pack("{s:s,s:I,s:b,s:{s:I,s:I},s:o}", "profile", t->profile->name,
                                               "profile_id", (json_int_t) t->profile->id, "kept", t->kept, "placement",
                                               "start", (json_int_t) t->placement.start, "size",
                                               (json_int_t) t->placement.size, "compute_instances", cis);
                        if (t->kept)
                                json_object_set_new(go, "gpu_instance_id", json_integer(t->existing_id));
                        json_array_append_new(target, go);
                }
                json_array_append_new(
                        gpus, json_pack("{s:I,s:s,s:s,s:b,s:b,s:b,s:b,s:o,s:o}", "index", (json_int_t) gp->gpu_index,
                                        "uuid", s->gpus[i].uuid, "mig_mode", cli_mig_mode_str(s->gpus[i].mig_current),
                                        "mig_enabled", gp->mig_enabled, "mode_change", gp->mode_change, "reset_needed",
                                        gp->reset_needed, "layout_change", gp->layout_change, "destroy", destroy,
                                        "target", target));
        }
        return gpus;
}

/* What upstream accepts and we do too, said on stderr (apply says it as
 * an engine warning). */
static void warn_duplicate_device(const struct mk_config *c, const struct mk_named_config *nc) {
        struct mk_error w = {0};
        char buf[MK_ERROR_MSG_MAX + 2 * MK_ERROR_LOC_MAX];
        if (mk_config_duplicate_device(c, nc, &w) > 0)
                fprintf(stderr, "Warning: %s\n", mk_error_format(&w, buf, sizeof(buf)));
}

/* Loads the config (and hooks): 0, MK_EXIT_USAGE for a missing -c where the
 * file has several configs (as for a missing -f: a flag the user must add),
 * or another non-zero status with the error said. */
static int load(const struct args *a, struct mk_config **ret_c, struct mk_hooks **ret_h) {
        struct mk_error e = {0};
        if (mk_config_load(a->config_file, ret_c, &e) < 0)
                return cli_fail(&e);
        const struct mk_named_config *nc;
        if ((!a->selected || !*a->selected) && mk_config_select(*ret_c, NULL, &nc, &e) == -EINVAL) {
                (void) cli_fail(&e);
                return MK_EXIT_USAGE;
        }
        if (ret_h && a->hooks_file && *a->hooks_file && mk_hooks_load(a->hooks_file, ret_h, &e) < 0)
                return cli_fail(&e);
        return 0;
}

int cli_plan(int argc, char **argv) {
        struct args a;
        int r = parse_args(CMD_PLAN, argc, argv, &a);
        if (r != 0)
                return r > 0 ? MK_EXIT_OK : MK_EXIT_USAGE;
        _cleanup_(mk_config_freep) struct mk_config *c = NULL;
        if ((r = load(&a, &c, NULL)) != 0)
                return r == MK_EXIT_USAGE ? r : MK_EXIT_FAILURE;
        struct mk_error e = {0};
        struct mk_snapshot *s = NULL;
        struct mk_gpu_plan *p = NULL;
        if (mk_engine_plan_selected(c, a.selected, &s, &p, &e) < 0)
                return cli_fail(&e);
        const struct mk_named_config *nc = NULL;
        if (mk_config_select(c, a.selected, &nc, NULL) >= 0) {
                warn_duplicate_device(c, nc);
                if (mk_engine_check_selects(s, c, nc, &e) < 0)
                        fprintf(stderr, "Warning: %s\n", e.msg);
        }
        if (a.fmt == MK_OUTPUT_JSON) {
                json_t *root = json_pack("{s:o}", "gpus", plan_json(s, p));
                cli_print_json(stdout, root);
                json_decref(root);
        } else
                /* Planned, so a NULL selection named the file's only config. */
                r = print_plan_table(a.selected ? a.selected : c->configs[0].name, s, p, a.mode_only);
        mk_gpu_plans_free(p, s->n_gpus);
        mk_snapshot_free(s);
        if (r < 0) {
                fprintf(stderr, "Error: Cannot print the plan: %s\n", strerror(-r));
                return MK_EXIT_FAILURE;
        }
        return MK_EXIT_OK;
}

/* Whether an assert counts GPU plan `gp` as differing in its mode (mode) or,
 * the mode being right, in its layout. */
static bool plan_differs(const struct mk_gpu_plan *gp, bool mode, bool mode_only) {
        return mode ? gp->mode_change : !mode_only && !gp->mode_change && gp->layout_change;
}

/* Appends "<what>0-3, 5" for the GPUs that differ so to `buf` (after "; "
 * when it holds something); returns how many. */
static size_t gpu_ranges(const struct mk_gpu_plan *p, size_t n, bool mode, bool mode_only, const char *what, char *buf,
                         size_t size) {
        size_t count = 0;
        for (size_t i = 0; i < n; i++) {
                if (!plan_differs(&p[i], mode, mode_only))
                        continue;
                size_t j = i;
                while (j + 1 < n && plan_differs(&p[j + 1], mode, mode_only) && p[j + 1].gpu_index == p[j].gpu_index + 1)
                        j++;
                size_t used = strlen(buf);
                const char *lead = count ? ", " : used ? "; " : "";
                if (j > i)
                        snprintf(buf + used, size - used, "%s%s%u-%u", lead, count ? "" : what, p[i].gpu_index,
                                 p[j].gpu_index);
                else
                        snprintf(buf + used, size - used, "%s%s%u", lead, count ? "" : what, p[i].gpu_index);
                count += j - i + 1;
                i = j;
        }
        return count;
}

int cli_assert(int argc, char **argv) {
        struct args a;
        int r = parse_args(CMD_ASSERT, argc, argv, &a);
        if (r != 0)
                return r > 0 ? MK_EXIT_OK : MK_EXIT_USAGE;
        _cleanup_(mk_config_freep) struct mk_config *c = NULL;
        if ((r = load(&a, &c, NULL)) != 0)
                return r == MK_EXIT_USAGE ? r : MK_EXIT_CANNOT_CHECK;
        struct mk_error e = {0};
        if (a.valid_config) {
                const struct mk_named_config *nc;
                if (mk_config_select(c, a.selected, &nc, &e) < 0) {
                        cli_fail(&e);
                        return MK_EXIT_CANNOT_CHECK;
                }
                printf("Selected MIG configuration is valid\n");
                return MK_EXIT_OK;
        }
        struct mk_snapshot *s = NULL;
        struct mk_gpu_plan *p = NULL;
        if (mk_engine_plan_selected(c, a.selected, &s, &p, &e) < 0) {
                cli_fail(&e);
                return MK_EXIT_CANNOT_CHECK;
        }
        size_t differ = 0;
        char which[512] = "";
        differ += gpu_ranges(p, s->n_gpus, true, a.mode_only, "MIG mode of GPU ", which, sizeof(which));
        differ += gpu_ranges(p, s->n_gpus, false, a.mode_only, "MIG layout of GPU ", which, sizeof(which));
        /* A config that selects no GPU: upstream's full assert fails (it
         * matched none of the node's GPUs), its --mode-only one passes. */
        struct mk_error none = {0};
        const struct mk_named_config *nc = NULL;
        bool selects_none = mk_config_select(c, a.selected, &nc, NULL) >= 0 &&
                            mk_engine_check_selects(s, c, nc, &none) < 0;
        if (nc)
                warn_duplicate_device(c, nc);
        bool applied = differ == 0 && (!selects_none || a.mode_only);
        if (a.fmt == MK_OUTPUT_JSON) {
                json_t *root = json_pack("{s:b,s:o}", "applied", applied, "gpus", plan_json(s, p));
                if (selects_none)
                        json_object_set_new(root, "selects_no_gpu", json_string(none.msg));
                cli_print_json(stdout, root);
                json_decref(root);
        } else if (applied) {
                if (selects_none)
                        fprintf(stderr, "Warning: %s\n", none.msg);
                printf(a.mode_only ? "Selected MIG mode settings from configuration currently applied\n"
                                   : "Selected MIG configuration currently applied\n");
        } else if (differ == 0)
                printf("Assertion failure: selected configuration not currently applied (%s)\n", none.msg);
        else
                printf("Assertion failure: selected configuration not currently applied (%zu GPU%s differ%s: %s)\n",
                       differ, differ == 1 ? "" : "s", differ == 1 ? "s" : "", which);
        mk_gpu_plans_free(p, s->n_gpus);
        mk_snapshot_free(s);
        return applied ? MK_EXIT_OK : MK_EXIT_NOT_APPLIED;
}

/* ---- apply's output: the engine's progress events, rendered ---- */

struct render {
        enum mk_output_format fmt;
        bool verbose;
        FILE *out;
        size_t kept, destroyed, created;   /* MIG devices, over the GPUs finished */
};

/* One GPU's plan in a few words: "MIG disabled -> enabled (reset), create 2x 1g.5gb, 2g.10gb". */
static void plan_words(const struct mk_gpu *g, const struct mk_gpu_plan *p, bool mode_only, char *buf, size_t size) {
        size_t used = 0;
#define ADD(...)                                                                               \
        do {                                                                                   \
                int k_ = snprintf(buf + used, size - used, __VA_ARGS__);                       \
                used = k_ > 0 ? MIN(used + (size_t) k_, size - 1) : used;                      \
        } while (0)
        buf[0] = 0;
        if (p->mode_change) {
                char mode[128];
                mode_words(g, p, " (reset)", mode, sizeof(mode));
                ADD("%s", mode);
        }
        if (!mode_only) {
                size_t n_destroy = 0;
                for (size_t k = 0; k < p->n_destroy; k++)
                        n_destroy += p->destroy[k].is_ci;
                if (n_destroy)
                        ADD("%sdestroy %zu", used ? ", " : "", n_destroy);
                /* New MIG devices by profile, in name order (not placement order). */
                const char *names[64];
                size_t counts[64], n_names = 0;
                for (size_t k = 0; k < p->n_target; k++)
                        for (size_t j = 0; j < p->target[k].n_cis; j++) {
                                const struct mk_plan_ci *c = &p->target[k].cis[j];
                                if (c->kept)
                                        continue;
                                size_t m = 0;
                                while (m < n_names && !streq(names[m], c->profile->name))
                                        m++;
                                if (m == n_names) {
                                        if (n_names == ELEMENTSOF(names))
                                                continue;
                                        names[n_names] = c->profile->name;
                                        counts[n_names++] = 0;
                                }
                                counts[m]++;
                        }
                for (size_t m = 1; m < n_names; m++) /* insertion sort: a handful of names */
                        for (size_t k = m; k > 0 && strcmp(names[k - 1], names[k]) > 0; k--) {
                                const char *t = names[k];
                                names[k] = names[k - 1];
                                names[k - 1] = t;
                                size_t tc = counts[k];
                                counts[k] = counts[k - 1];
                                counts[k - 1] = tc;
                        }
                for (size_t m = 0; m < n_names; m++) {
                        const char *lead = m > 0 ? ", " : used ? ", create " : "create ";
                        if (counts[m] > 1)
                                ADD("%s%zux %s", lead, counts[m], names[m]);
                        else
                                ADD("%s%s", lead, names[m]);
                }
                if (p->layout_change && p->n_kept_cis)
                        ADD("%skeep %zu", used ? ", " : "", p->n_kept_cis);
        }
        if (!used)
                ADD("%s", p->mig_enabled || g->mig_current == MK_MIG_ENABLED ? "as configured"
                          : g->mig_capable                                ? "MIG disabled, as configured"
                                                                          : "not MIG-capable, left alone");
#undef ADD
}

/* "GPU 0-3, 6" for the GPUs whose words are `words`. */
static void print_group(FILE *f, char (*words)[256], const struct mk_snapshot *s, size_t i, bool *done) {
        fprintf(f, "  GPU");
        const char *sep = " ";
        for (size_t j = i; j < s->n_gpus; j++) {
                if (done[j] || !streq(words[j], words[i]))
                        continue;
                size_t end = j;
                while (end + 1 < s->n_gpus && !done[end + 1] && streq(words[end + 1], words[i]) &&
                       s->gpus[end + 1].index == s->gpus[end].index + 1)
                        end++;
                if (end > j)
                        fprintf(f, "%s%u-%u", sep, s->gpus[j].index, s->gpus[end].index);
                else
                        fprintf(f, "%s%u", sep, s->gpus[j].index);
                for (size_t k = j; k <= end; k++)
                        done[k] = true;
                sep = ", ";
                j = end;
        }
        fprintf(f, ": %s\n", words[i]);
}

static void render_plan(struct render *x, const struct mk_progress_event *ev) {
        const struct mk_snapshot *s = ev->snapshot;
        size_t changing = 0;
        for (size_t i = 0; i < s->n_gpus; i++)
                changing += ev->plans[i].mode_change || (!ev->mode_only && ev->plans[i].layout_change);
        if (changing == 0)
                return;
        _cleanup_free_ char(*words)[256] = calloc(s->n_gpus, sizeof(*words));
        _cleanup_free_ bool *done = calloc(s->n_gpus, sizeof(bool));
        if (!words || !done)
                return;
        fprintf(x->out, "Plan for '%s': %zu of %zu GPU%s change%s\n", ev->config, changing, s->n_gpus,
                s->n_gpus == 1 ? "" : "s", ev->mode_only ? " (MIG mode only)" : "");
        for (size_t i = 0; i < s->n_gpus; i++)
                plan_words(&s->gpus[i], &ev->plans[i], ev->mode_only, words[i], sizeof(words[i]));
        for (size_t i = 0; i < s->n_gpus; i++)
                if (!done[i])
                        print_group(x->out, words, s, i, done);
}

/* What a failed hook printed, as the logs escape it (mk_log_escape: no
 * terminal escape, no carriage return), each line behind "  | ", so that
 * nothing it prints can pass for a line of ours ("Error: ..."). */
static void print_hook_output(FILE *f, const char *output) {
        size_t size = 4 * strlen(output) + 1; /* \xHH: 4 bytes for 1 at most */
        _cleanup_free_ char *line = malloc(size), *esc = malloc(size);
        if (!line || !esc)
                return;
        for (const char *p = output; *p;) {
                size_t n = strcspn(p, "\n");
                memcpy(line, p, n);
                line[n] = 0;
                (void) mk_log_escape(line, esc, size);
                fprintf(f, "  | %s\n", esc);
                p += n;
                if (*p == '\n')
                        p++;
        }
}

static void render_text(struct render *x, const struct mk_progress_event *ev) {
        char buf[1024];
        switch (ev->kind) {
        case MK_PROGRESS_PLANNED:
                render_plan(x, ev);
                break;
        case MK_PROGRESS_BACKEND:
                if (streq(ev->backend, "pci"))
                        fprintf(x->out, "No NVIDIA driver: changing MIG mode through %s\n", ev->backend_description);
                break;
        case MK_PROGRESS_WAITING:
                (void) mk_progress_format(ev, buf, sizeof(buf));
                fprintf(x->out, "%s ...\n", buf);
                break;
        case MK_PROGRESS_HOOK:
        case MK_PROGRESS_STEP:
        case MK_PROGRESS_CLIENT_STOPPED:
                if (x->verbose) {
                        (void) mk_progress_format(ev, buf, sizeof(buf));
                        fprintf(x->out, "    %s\n", buf);
                }
                break;
        case MK_PROGRESS_WARNING:
                fflush(x->out);
                fprintf(stderr, "Warning: %s\n", ev->message);
                break;
        case MK_PROGRESS_HOOK_OUTPUT:
                fflush(x->out);
                (void) mk_progress_format(ev, buf, sizeof(buf));
                fprintf(stderr, "%s\n", buf);
                print_hook_output(stderr, ev->output);
                break;
        case MK_PROGRESS_GPU_FINISHED:
                if (ev->error < 0) {
                        fprintf(x->out, "GPU %d: FAILED after %zu destroyed, %zu created (%.1f s)\n", ev->gpu,
                                ev->destroyed, ev->created, (double) ev->duration_ms / 1000.0);
                        break;
                }
                x->kept += ev->kept;
                x->destroyed += ev->destroyed;
                x->created += ev->created;
                fprintf(x->out, "GPU %d: %s%zu destroyed, %zu created, kept %zu (%.1f s)\n", ev->gpu,
                        !ev->mode_changed ? "" : ev->enabled ? "MIG enabled, " : "MIG mode changed, ", ev->destroyed,
                        ev->created, ev->kept, (double) ev->duration_ms / 1000.0);
                break;
        case MK_PROGRESS_DONE: {
                const struct mk_apply_report *r = ev->report;
                if (ev->error < 0)
                        break; /* cli_fail says why */
                if (r->nothing_to_do) {
                        fprintf(x->out, "Selected MIG configuration already applied, nothing to do\n");
                        break;
                }
                fprintf(x->out,
                        "MIG configuration applied successfully in %.1f s: %u mode change%s, %u reset%s; MIG devices: "
                        "%zu destroyed, %zu created, %zu kept\n",
                        (double) ev->t_ms / 1000.0, r->mode_changes, r->mode_changes == 1 ? "" : "s", r->resets,
                        r->resets == 1 ? "" : "s", r->destroyed_cis, r->created_cis, x->kept);
                break;
        }
        default:
                break;
        }
        fflush(x->out);
}

static json_t *event_json(const struct mk_progress_event *ev) {
        json_t *o = json_pack("{s:s,s:f}", "event", mk_progress_kind_to_string(ev->kind), "t",
                              (double) ev->t_ms / 1000.0);
        if (ev->gpu >= 0)
                json_object_set_new(o, "gpu", json_integer(ev->gpu));
        switch (ev->kind) {
        case MK_PROGRESS_BACKEND:
                json_object_set_new(o, "backend", json_string(ev->backend));
                break;
        case MK_PROGRESS_PLANNED:
                json_object_set_new(o, "config", json_string(ev->config));
                json_object_set_new(o, "mode_only", json_boolean(ev->mode_only));
                json_object_set_new(o, "gpus", plan_json(ev->snapshot, ev->plans));
                break;
        case MK_PROGRESS_HOOK:
        case MK_PROGRESS_HOOK_OUTPUT:
                json_object_set_new(o, "hook", json_string(ev->hook));
                json_object_set_new(o, "command", json_string(ev->command));
                if (ev->output) {
                        /* JSON takes valid UTF-8 only; control characters it escapes itself. */
                        _cleanup_buf_done_ struct mk_buf v = {.cap = 4 * strlen(ev->output) + 16};
                        if (mk_utf8_append_valid(&v, ev->output) >= 0)
                                json_object_set_new(o, "output", json_string(mk_buf_str(&v)));
                }
                break;
        case MK_PROGRESS_CLIENT_STOPPED:
                json_object_set_new(o, "client", json_string(ev->client));
                break;
        case MK_PROGRESS_WAITING:
                json_object_set_new(o, "for", json_string(ev->what));
                break;
        case MK_PROGRESS_GPU_STARTED:
                json_object_set_new(o, "phase", json_string(mk_progress_phase_to_string(ev->phase)));
                break;
        case MK_PROGRESS_STEP:
                json_object_set_new(o, "step", json_string(mk_progress_step_to_string(ev->step)));
                if (ev->step == MK_STEP_SET_MODE)
                        json_object_set_new(o, "mig_enabled", json_boolean(ev->enabled));
                else if (ev->step == MK_STEP_RESET)
                        json_object_set_new(o, "bus_id", json_string(ev->bus_id ? ev->bus_id : ""));
                else {
                        json_object_set_new(o, "profile", json_string(ev->profile));
                        if (ev->step != MK_STEP_CREATE_GI)
                                json_object_set_new(o, "gpu_instance_id", json_integer(ev->gi_id));
                        if (ev->step == MK_STEP_DESTROY_CI) {
                                json_object_set_new(o, "compute_instance_id", json_integer(ev->ci_id));
                                json_object_set_new(o, "uuid", json_string(ev->uuid ? ev->uuid : ""));
                        }
                        json_object_set_new(o, "placement",
                                            json_pack("{s:I,s:I}", "start", (json_int_t) ev->placement.start, "size",
                                                      (json_int_t) ev->placement.size));
                }
                break;
        case MK_PROGRESS_GPU_FINISHED:
                json_object_set_new(o, "success", json_boolean(ev->error >= 0));
                json_object_set_new(o, "mode_changed", json_boolean(ev->mode_changed));
                json_object_set_new(o, "destroyed", json_integer((json_int_t) ev->destroyed));
                json_object_set_new(o, "created", json_integer((json_int_t) ev->created));
                json_object_set_new(o, "kept", json_integer((json_int_t) ev->kept));
                json_object_set_new(o, "destroyed_gpu_instances", json_integer((json_int_t) ev->destroyed_gis));
                json_object_set_new(o, "created_gpu_instances", json_integer((json_int_t) ev->created_gis));
                json_object_set_new(o, "seconds", json_real((double) ev->duration_ms / 1000.0));
                if (ev->message)
                        json_object_set_new(o, "error", json_string(ev->message));
                break;
        case MK_PROGRESS_WARNING:
                json_object_set_new(o, "message", json_string(ev->message));
                break;
        case MK_PROGRESS_DONE: {
                const struct mk_apply_report *r = ev->report;
                json_t *d = json_pack("{s:b,s:b,s:b,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "success", ev->error >= 0,
                                      "nothing_to_do", r->nothing_to_do, "driverless", r->driverless, "mode_changes",
                                      (json_int_t) r->mode_changes, "resets", (json_int_t) r->resets,
                                      "destroyed_gpu_instances", (json_int_t) r->destroyed_gis,
                                      "destroyed_compute_instances", (json_int_t) r->destroyed_cis,
                                      "created_gpu_instances", (json_int_t) r->created_gis,
                                      "created_compute_instances", (json_int_t) r->created_cis, "mutations",
                                      (json_int_t) r->mutations, "nvml_mutations",
                                      (json_int_t) (r->driverless ? 0 : r->mutations));
                json_object_update(o, d);
                json_decref(d);
                if (ev->message)
                        json_object_set_new(o, "error", json_string(ev->message));
                break;
        }
        default:
                break;
        }
        return o;
}

static void render(void *userdata, const struct mk_progress_event *ev) {
        struct render *x = userdata;
        if (x->fmt != MK_OUTPUT_JSON) {
                render_text(x, ev);
                return;
        }
        json_t *o = event_json(ev);
        char *line = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6)) : NULL;
        if (line) {
                fprintf(x->out, "%s\n", line);
                fflush(x->out);
                free(line);
        }
        json_decref(o);
}

int cli_apply(int argc, char **argv) {
        struct args a;
        int r = parse_args(CMD_APPLY, argc, argv, &a);
        if (r != 0)
                return r > 0 ? MK_EXIT_OK : MK_EXIT_USAGE;
        /* One thread per GPU: under a low `ulimit -v` (a container's) each
         * thread's try for a malloc arena of its own fails again and again
         * (an 8-GPU apply took 6-22 s instead of 0.6 s). */
        cli_daemon_malloc();
        _cleanup_(mk_config_freep) struct mk_config *c = NULL;
        _cleanup_(mk_hooks_freep) struct mk_hooks *h = NULL;
        if ((r = load(&a, &c, &h)) != 0)
                return r == MK_EXIT_USAGE ? r : MK_EXIT_FAILURE;
        struct render x = {.fmt = a.fmt, .verbose = a.verbose || a.debug, .out = stdout};
        const struct mk_progress progress = {.fn = render, .userdata = &x};
        struct mk_engine_opts o = {
                .config_file = a.config_file,
                .selected_config = a.selected,
                .hooks_file = a.hooks_file,
                .skip_reset = a.skip_reset,
                .mode_only = a.mode_only,
                .hook_output = a.debug,
                .hook_timeout_ms = a.hook_timeout_ms,
                .progress = &progress,
                .sequential = a.sequential,
                .lock_timeout_ms = a.lock_timeout_ms,
        };
        struct mk_error e = {0};
        struct mk_apply_report rep = {0};
        r = mk_engine_apply(c, h, &o, &rep, &e);
        mk_apply_report_done(&rep);
        if (r < 0)
                return cli_fail(&e);
        return MK_EXIT_OK;
}

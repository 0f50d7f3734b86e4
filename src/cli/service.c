/* migkit service: the node service (docs/service.md). `boot` is the
 * ExecStart of migkit.service; `select`, `status` and `clear-reboot-marker`
 * are for people (and for the apply-start hook that persists a selection). */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/macro.h"
#include "base/parse.h"
#include "cli/cli.h"
#include "cli/options.h"
#include "host/reboot.h"
#include "service/boot.h"
#include "service/state.h"

/* status exit codes, as assert's (docs/engine.md) */
#define MK_EXIT_NOT_APPLIED 1
#define MK_EXIT_CANNOT_CHECK 3

static void help(void) {
        printf("Usage: migkit service COMMAND [OPTIONS]\n"
               "\n"
               "The node service: the selected MIG config applied at every boot, GPU clients stopped\n"
               "around a change and started again, a reboot at most once when a MIG mode change needs one.\n"
               "\n"
               "Commands:\n"
               "  boot                  Apply the selected config (the ExecStart of migkit.service)\n"
               "  select [NAME]         Persist NAME (a config of config.yaml) as the boot-time layout;\n"
               "                        without NAME, MIG_PARTED_SELECTED_CONFIG (the apply-start hook)\n"
               "  status [-o json]      Selection, reboot marker, and whether the selection is applied\n"
               "                        (exit 0 applied, 1 not applied, 3 could not check)\n"
               "  clear-reboot-marker   Allow one more reboot for a MIG mode change\n"
               "\n"
               "Files: $MIGKIT_ETC_DIR (default " MK_SERVICE_ETC_DIR ") holds config.yaml, hooks.yaml and\n"
               "service.yaml; $MIGKIT_STATE_DIR (default " MK_SERVICE_STATE_DIR ") holds selected-config and\n"
               "reboot-attempted.\n");
}

static int paths(struct mk_service_paths *p) {
        struct mk_error e = {0};
        if (mk_service_paths_from_env(p, &e) < 0)
                return cli_fail(&e);
        return 0;
}

/* 0 when the command has at most `max` arguments, else a usage error. */
static int at_most_args(int argc, char **argv, int max) {
        if (argc > max + 1) {
                fprintf(stderr, "Error: unexpected argument '%s'\n", argv[max + 1]);
                return MK_EXIT_USAGE;
        }
        return 0;
}

static int cmd_boot(int argc, char **argv) {
        int r = at_most_args(argc, argv, 0);
        if (r != 0)
                return r;
        _cleanup_(mk_service_paths_done) struct mk_service_paths p = {0};
        if (paths(&p) != 0)
                return MK_EXIT_FAILURE;
        return mk_service_boot(&p);
}

static int cmd_select(int argc, char **argv) {
        int r = at_most_args(argc, argv, 1);
        if (r != 0)
                return r;
        const char *name = argc == 2 ? argv[1] : NULL, *apply_config = NULL;
        if (!name) {
                /* Run by the apply-start hook: the apply's selection and file. */
                name = secure_getenv("MIG_PARTED_SELECTED_CONFIG");
                apply_config = secure_getenv("MIG_PARTED_CONFIG_FILE");
                if (!name || !*name) {
                        fprintf(stderr, "Error: missing config name (argument, or MIG_PARTED_SELECTED_CONFIG)\n");
                        return MK_EXIT_USAGE;
                }
        }
        _cleanup_(mk_service_paths_done) struct mk_service_paths p = {0};
        if (paths(&p) != 0)
                return MK_EXIT_FAILURE;
        struct mk_error e = {0};
        bool changed = false;
        r = mk_service_validate_selection(&p, name, apply_config, &e);
        if (r >= 0)
                r = mk_service_selection_write(&p, name, &changed, &e);
        if (r < 0)
                return cli_fail(&e);
        if (changed)
                printf("Selected MIG config '%s' for every boot (saved in '%s')\n", name, p.selection_file);
        else
                printf("MIG config '%s' was already selected for every boot\n", name);
        return MK_EXIT_OK;
}

static int cmd_clear_marker(int argc, char **argv) {
        int r = at_most_args(argc, argv, 0);
        if (r != 0)
                return r;
        _cleanup_(mk_service_paths_done) struct mk_service_paths p = {0};
        if (paths(&p) != 0)
                return MK_EXIT_FAILURE;
        struct mk_error e = {0};
        bool removed = false;
        r = mk_reboot_marker_remove(p.marker_file, &removed, &e);
        if (r < 0)
                return cli_fail(&e);
        if (removed)
                printf("Removed the reboot marker '%s': the service may reboot once more for a MIG mode change\n",
                       p.marker_file);
        else
                printf("No reboot marker ('%s' does not exist)\n", p.marker_file);
        return MK_EXIT_OK;
}

static const char *first_line(char *s) {
        s[strcspn(s, "\n")] = 0;
        return s;
}

static int cmd_status(int argc, char **argv) {
        const char *format = NULL;
        const struct cli_option options[] = {
                {"output-format", 'o', required_argument, NULL, &format},
                {"output", 0, required_argument, NULL, &format},
                {},
        };
        int r = cli_options_parse(argc, argv, options, help);
        if (r != CLI_CONTINUE)
                return r;
        enum mk_output_format fmt;
        if (cli_parse_output("service status", format, CLI_OUTPUT(MK_OUTPUT_TABLE) | CLI_OUTPUT(MK_OUTPUT_JSON),
                             MK_OUTPUT_TABLE, &fmt) < 0)
                return MK_EXIT_USAGE;
        bool json = fmt == MK_OUTPUT_JSON;
        _cleanup_(mk_service_paths_done) struct mk_service_paths p = {0};
        if (paths(&p) != 0)
                return MK_EXIT_FAILURE;

        struct mk_error se = {0}, me = {0}, ce = {0};
        _cleanup_free_ char *selected = NULL, *marker = NULL;
        int rs = mk_service_selection_read(&p, &selected, &se);
        int rm = mk_reboot_marker_read(p.marker_file, &marker, &me);
        const char *effective = rs >= 0 ? selected : rs == -ENOENT ? "all-disabled" : NULL;

        /* Applied? Only with a config to check. */
        size_t differ = 0;
        int rc = -EINVAL;
        if (!effective)
                rc = mk_error_set(&ce, -EINVAL, "no valid selection");
        else {
                _cleanup_(mk_config_freep) struct mk_config *cfg = NULL;
                rc = mk_config_load(p.config_file, &cfg, &ce);
                if (rc >= 0)
                        rc = mk_service_check(cfg, effective, false, &differ, &ce);
        }
        char sbuf[MK_ERROR_MSG_MAX + 2 * MK_ERROR_LOC_MAX], mbuf[sizeof(sbuf)], cbuf[sizeof(sbuf)];
        if (json) {
                json_t *root = json_pack("{s:s,s:s,s:s}", "selection_file", p.selection_file, "marker_file",
                                         p.marker_file, "config_file", p.config_file);
                json_object_set_new(root, "selected", rs >= 0 ? json_string(selected) : json_null());
                if (rs < 0 && rs != -ENOENT)
                        json_object_set_new(root, "selection_error",
                                            json_string(mk_error_format(&se, sbuf, sizeof(sbuf))));
                json_object_set_new(root, "effective", effective ? json_string(effective) : json_null());
                json_object_set_new(root, "reboot_marker", rm >= 0 ? json_string(marker) : json_null());
                if (rm < 0 && rm != -ENOENT)
                        json_object_set_new(root, "reboot_marker_error",
                                            json_string(mk_error_format(&me, mbuf, sizeof(mbuf))));
                json_object_set_new(root, "applied", rc >= 0 ? json_boolean(differ == 0) : json_null());
                if (rc >= 0)
                        json_object_set_new(root, "gpus_differing", json_integer((json_int_t) differ));
                else
                        json_object_set_new(root, "check_error", json_string(mk_error_format(&ce, cbuf, sizeof(cbuf))));
                cli_print_json(stdout, root);
                json_decref(root);
        } else {
                if (rs >= 0)
                        printf("Selected config:  %s (%s)\n", selected, p.selection_file);
                else if (rs == -ENOENT)
                        printf("Selected config:  none (%s absent): the boot applies 'all-disabled'\n", p.selection_file);
                else
                        printf("Selected config:  invalid: %s\n", mk_error_format(&se, sbuf, sizeof(sbuf)));
                if (rm >= 0)
                        printf("Reboot marker:    present (%s): %s\n", p.marker_file, first_line(marker));
                else if (rm == -ENOENT)
                        printf("Reboot marker:    none\n");
                else
                        printf("Reboot marker:    unreadable: %s\n", mk_error_format(&me, mbuf, sizeof(mbuf)));
                if (rc < 0)
                        printf("Applied:          unknown: %s\n", mk_error_format(&ce, cbuf, sizeof(cbuf)));
                else if (differ == 0)
                        printf("Applied:          yes\n");
                else
                        printf("Applied:          no (%zu GPU%s differ%s)\n", differ, differ == 1 ? "" : "s",
                               differ == 1 ? "s" : "");
        }
        return rc < 0 ? MK_EXIT_CANNOT_CHECK : differ == 0 ? MK_EXIT_OK : MK_EXIT_NOT_APPLIED;
}

int cli_service(int argc, char **argv) {
        static const struct {
                const char *name;
                int (*run)(int argc, char **argv);
        } commands[] = {
                {"boot", cmd_boot},
                {"select", cmd_select},
                {"status", cmd_status},
                {"clear-reboot-marker", cmd_clear_marker},
        };
        if (argc < 2) {
                help();
                return MK_EXIT_USAGE;
        }
        const char *cmd = argv[1];
        if (streq(cmd, "help") || streq(cmd, "--help") || streq(cmd, "-h")) {
                help();
                return MK_EXIT_OK;
        }
        for (size_t i = 0; i < ELEMENTSOF(commands); i++)
                if (streq(cmd, commands[i].name)) {
                        optind = 0;
                        return commands[i].run(argc - 1, argv + 1);
                }
        const char *names[ELEMENTSOF(commands)];
        for (size_t i = 0; i < ELEMENTSOF(commands); i++)
                names[i] = commands[i].name;
        const char *near = mk_closest_word(cmd, names, ELEMENTSOF(names));
        fprintf(stderr, "Error: unknown service command '%s'%s%s%s. Run 'migkit service --help' for usage.\n", cmd,
                near ? " (did you mean '" : "", near ? near : "", near ? "'?)" : "");
        return MK_EXIT_USAGE;
}

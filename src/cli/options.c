/* Option parsing shared by the subcommands (options.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/macro.h"
#include "base/parse.h"
#include "cli/cli.h"
#include "cli/options.h"

#define CLI_MAX_OPTIONS 64
#define CLI_OPT_FIRST_LONG 0x100 /* getopt values of long-only options: 0x100 + index */

const char *cli_command_name;

/* After getopt's "unrecognized option" or "invalid option": a global option
 * put after the command is named as one, and every mistake gets the way to
 * the command's help. */
static void bad_option(int argc, char **argv) {
        char letter[3] = {'-', (char) optopt, 0};
        const char *arg = optopt > 0 && optopt < 0x80 ? letter : optind > 0 && optind <= argc ? argv[optind - 1] : "";
        size_t n = strcspn(arg, "=");
        static const char *const globals[] = {"-d", "--debug", "-q", "--quiet"};
        const char *cmd = cli_command_name ? cli_command_name : argv[0];
        for (size_t i = 0; i < ELEMENTSOF(globals); i++)
                if (strlen(globals[i]) == n && strncmp(arg, globals[i], n) == 0) {
                        fprintf(stderr, "'%.*s' is a global option: put it before the command (migkit %.*s %s ...)\n",
                                (int) n, arg, (int) n, arg, cmd);
                        break;
                }
        fprintf(stderr, "Run 'migkit %s --help' for usage.\n", cmd);
}

int cli_option_other(int c, void (*help)(void)) {
        if (c == 'h') {
                help();
                return MK_EXIT_OK;
        }
        return MK_EXIT_USAGE;
}

int cli_option_bool(const char *what, const char *v, bool *ret) {
        if (v && mk_parse_bool(v, ret) < 0) {
                fprintf(stderr, "Error: invalid %s '%s' (true or false)\n", what, v);
                return -EINVAL;
        }
        return 0;
}

int cli_option_duration_ms(const char *what, const char *v, uint64_t min_ms, uint64_t max_ms, uint64_t *ret_ms) {
        uint64_t ms;
        if (!v)
                return 0;
        if (mk_parse_duration_ms(v, &ms) < 0 || ms < min_ms || ms > max_ms) {
                char lo[48] = "", hi[32];
                if (min_ms > 1)
                        snprintf(lo, sizeof(lo), "at least %" PRIu64 "ms, ", min_ms);
                if (max_ms % 3600000 == 0)
                        snprintf(hi, sizeof(hi), "%" PRIu64 "h", max_ms / 3600000);
                else
                        snprintf(hi, sizeof(hi), "%" PRIu64 "ms", max_ms);
                fprintf(stderr, "Error: invalid %s '%s' (a duration such as 30s or 2m, %sat most %s)\n", what, v,
                        lo, hi);
                return -EINVAL;
        }
        *ret_ms = ms;
        return 0;
}

int cli_options_end(int argc, char **argv) {
        if (optind < argc) {
                fprintf(stderr, "Error: unexpected argument '%s'\n", argv[optind]);
                return MK_EXIT_USAGE;
        }
        return CLI_CONTINUE;
}


static const struct cli_option *find(const struct cli_option *opts, int c) {
        for (size_t i = 0; opts[i].name; i++)
                if (opts[i].short_name ? opts[i].short_name == c : (int) (CLI_OPT_FIRST_LONG + i) == c)
                        return &opts[i];
        return NULL;
}

int cli_options_parse(int argc, char **argv, const struct cli_option *opts, void (*help)(void)) {
        return cli_options_parse_args(argc, argv, opts, help, 0);
}

int cli_options_parse_args(int argc, char **argv, const struct cli_option *opts, void (*help)(void),
                           int max_args) {
        struct option longs[CLI_MAX_OPTIONS + 2];
        char shorts[3 * CLI_MAX_OPTIONS + 2];
        size_t n = 0, ns = 0;
        for (; opts[n].name; n++) {
                if (n >= CLI_MAX_OPTIONS) {
                        fprintf(stderr, "Error: more than %d options\n", CLI_MAX_OPTIONS);
                        return MK_EXIT_FAILURE;
                }
                const struct cli_option *o = &opts[n];
                longs[n] = (struct option){o->name, o->has_arg, NULL,
                                           o->short_name ? o->short_name : (int) (CLI_OPT_FIRST_LONG + n)};
                if (o->short_name) {
                        shorts[ns++] = (char) o->short_name;
                        if (o->has_arg != no_argument)
                                shorts[ns++] = ':';
                        if (o->has_arg == optional_argument)
                                shorts[ns++] = ':';
                }
                if (o->env) {
                        const char *v = secure_getenv(o->env);
                        if (v && *v)
                                *o->value = v;
                }
        }
        longs[n] = (struct option){"help", no_argument, NULL, 'h'};
        longs[n + 1] = (struct option){0};
        shorts[ns++] = 'h';
        shorts[ns] = 0;

        int c;
        while ((c = getopt_long(argc, argv, shorts, longs, NULL)) >= 0) {
                const struct cli_option *o = c == 'h' ? NULL : find(opts, c);
                if (!o) {
                        if (c != 'h')
                                bad_option(argc, argv);
                        return cli_option_other(c, help);
                }
                *o->value = optarg ? optarg : "true";
        }
        if (argc - optind > max_args) {
                fprintf(stderr, "Error: unexpected argument '%s'\n", argv[optind + max_args]);
                return MK_EXIT_USAGE;
        }
        return CLI_CONTINUE;
}

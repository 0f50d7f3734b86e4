/* The option parsing every subcommand shares: flags that also read an
 * environment variable (mig-parted's and the GPU Operator's convention: the
 * flag wins), -h/--help, and the usage errors at the end of the loop. Only
 * cli/ prints. */
#pragma once

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>

/* Returned when the command goes on; any other value is its exit code. */
#define CLI_CONTINUE (-1)

struct cli_option {
        const char *name;       /* long name; NULL ends the table */
        int short_name;         /* 0: none */
        int has_arg;            /* no_argument (the value becomes "true"), required_argument, optional_argument
                                 * (given without one: "true") */
        const char *env;        /* NULL: none; set and non-empty: the value unless a flag gives one */
        const char **value;
};

/* Fills the values of `opts` from the environment, then from argv by
 * getopt_long() from the current optind (a caller that consumed a word
 * sets optind past it first). Returns CLI_CONTINUE when nothing is left on
 * the command line; MK_EXIT_OK after printing help() for -h/--help;
 * MK_EXIT_USAGE for an unknown option or a missing argument (getopt printed
 * why) or a leftover argument. At most 64 options. */
/* The command being run ("profiles", "service"), for the "Run 'migkit
 * COMMAND --help'" line after a usage error; set by cli_main(). */
extern const char *cli_command_name;

int cli_options_parse(int argc, char **argv, const struct cli_option *opts, void (*help)(void));
/* As cli_options_parse(), leaving up to max_args arguments (from optind)
 * for the caller. */
int cli_options_parse_args(int argc, char **argv, const struct cli_option *opts, void (*help)(void),
                           int max_args);

/* A boolean option's value `v` (NULL: not given, *ret stays) into *ret;
 * otherwise "Error: invalid <what> 'v' (true or false)" and -EINVAL. */
int cli_option_bool(const char *what, const char *v, bool *ret);

/* A duration option's value `v` ("30s", "1m30s", "500ms"; NULL: not given,
 * *ret_ms stays) into *ret_ms, from min_ms to max_ms; otherwise "Error:
 * invalid <what> 'v' (...)" and -EINVAL. */
int cli_option_duration_ms(const char *what, const char *v, uint64_t min_ms, uint64_t max_ms, uint64_t *ret_ms);

/* For a command with its own getopt_long() loop: the default branch of its
 * switch. 'h' prints help() and gives MK_EXIT_OK; anything else ('?', ':')
 * is a usage error getopt already described: MK_EXIT_USAGE. */
int cli_option_other(int c, void (*help)(void));

/* After the loop: CLI_CONTINUE when no argument is left from optind, else
 * "Error: unexpected argument 'x'" and MK_EXIT_USAGE. */
int cli_options_end(int argc, char **argv);

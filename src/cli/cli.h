/* Shared pieces of the command-line front end. Only cli/ prints to the
 * terminal; subcommands return an exit code. */
#pragma once

#include <stdbool.h>
#include <stdio.h>

#include <jansson.h>

#include "base/error.h"
#include "mig/gpu.h"

enum mk_output_format {
        MK_OUTPUT_TABLE,
        MK_OUTPUT_JSON,
        MK_OUTPUT_YAML,
        _MK_OUTPUT_MAX,
        _MK_OUTPUT_INVALID = -EINVAL,
};

enum mk_output_format mk_output_format_from_string(const char *s);
const char *mk_output_format_to_string(enum mk_output_format f);

/* Exit codes: 0 success, 1 failure, 2 usage error. */
#define MK_EXIT_OK 0
#define MK_EXIT_FAILURE 1
#define MK_EXIT_USAGE 2

/* Loads NVML (honouring --simulate's environment) and snapshots every GPU;
 * on failure prints one clear error line and returns NULL. */
struct mk_snapshot *cli_snapshot(void);

/* Prints "Error: <formatted error>" on stderr and returns MK_EXIT_FAILURE. */
int cli_fail(const struct mk_error *e);

/* Process-wide allocator settings are made here, by the commands, never by
 * the library modules: this one, and mk_sched_server_malloc()
 * (sched/server.h) for `scheduler serve`.
 * For the daemons that apply MIG layouts (`scheduler node`, `manager`):
 * one malloc arena. apply changes GPUs on threads of their own, and with
 * glibc's default each may get an arena that keeps what it freed: the node
 * agent's RSS went from 13.6 MiB to 30-45 MiB after applies in the soak.
 * Those threads make NVML calls only: sharing the main arena costs them
 * nothing measurable. `apply` calls it too, for the same threads: under a
 * low `ulimit -v` their failed arena reservations made it 10-40x slower. */
void cli_daemon_malloc(void);

/* Writes `v` as YAML with mk_yaml_write() (spec/emit.h); keys of nested
 * objects sorted when sort_keys. Prints an error line on a write failure. */
void cli_print_yaml(FILE *f, const json_t *v, bool sort_keys);
/* Writes `v` as JSON with 2-space indent and a final newline. */
void cli_print_json(FILE *f, const json_t *v);
/* Prints `root` on stdout as JSON (fmt MK_OUTPUT_JSON) or YAML (sort_keys
 * as cli_print_yaml), then frees it; returns MK_EXIT_OK. */
int cli_print_document(enum mk_output_format fmt, json_t *root, bool sort_keys);

/* The -o values a command accepts: CLI_OUTPUT(MK_OUTPUT_TABLE) | ... */
#define CLI_OUTPUT(f) (1u << (unsigned) (f))

/* Parses command `cmd`'s `-o` value (one meaning everywhere: docs/cli.md);
 * NULL or empty: `def`. A format not in `accepted`: prints "unrecognized
 * 'output-format'" with the values `cmd` accepts, returns -EINVAL. */
int cli_parse_output(const char *cmd, const char *value, unsigned accepted, enum mk_output_format def,
                     enum mk_output_format *ret);

/* "enabled", "disabled" or "unsupported". */
const char *cli_mig_mode_str(enum mk_mig_mode m);

int cli_profiles(int argc, char **argv);
int cli_export(int argc, char **argv);
int cli_generate_config(int argc, char **argv);
int cli_apply(int argc, char **argv);
int cli_assert(int argc, char **argv);
int cli_plan(int argc, char **argv);
int cli_service(int argc, char **argv);
int cli_manager(int argc, char **argv);
int cli_labels(int argc, char **argv);
int cli_device_plugin(int argc, char **argv);
int cli_scheduler(int argc, char **argv);
int cli_config_manager(int argc, char **argv);

/* The GPU Operator's executable names (upstream.c, docs/gpu-operator.md).
 * main.c dispatches to them; upstream.c turns upstream's flags and
 * environment into a migkit command line and hands it to the `run` it is
 * given (main.c's whole command line), so it never calls back into main.c. */
#pragma once

#include <stdbool.h>

/* Runs a whole `migkit [GLOBAL OPTIONS] COMMAND [OPTIONS]` command line;
 * returns its exit code. */
typedef int (*cli_run_fn)(int argc, char **argv);

/* Whether argv[0]'s file name is one of the GPU Operator's names. */
bool cli_upstream_name(const char *argv0);

/* Runs the program argv[0] names with upstream's flags and environment:
 * its migkit command line (several times for gpu-feature-discovery's
 * labelling loop, and for --help the migkit command's help) goes to `run`.
 * Returns the exit code. */
int cli_upstream_main(int argc, char **argv, cli_run_fn run);

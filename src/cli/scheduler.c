/* `migkit scheduler`: placeholder until the command lands (being built now). */
#include <stdio.h>

#include "cli/cli.h"

int cli_scheduler(int argc, char **argv) {
        fprintf(stderr, "migkit scheduler: not built yet\n");
        return 1;
}

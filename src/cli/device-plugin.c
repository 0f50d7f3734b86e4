/* `migkit device-plugin`: placeholder until the command lands (being built now). */
#include <stdio.h>

#include "cli/cli.h"

int cli_device_plugin(int argc, char **argv) {
        fprintf(stderr, "migkit device-plugin: not built yet\n");
        return 1;
}

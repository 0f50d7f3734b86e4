/* YAML rendering of a JSON tree, in the shape mig-parted writes its configs
 * (go-yaml v2): block style, arrays of scalars in flow style (`[0, 1]`),
 * empty objects as `{}`, and double quotes around every string that a YAML 1.1
 * or 1.2 reader would take for another type ("0x20B010DE", "00000000:07:00.0",
 * "yes"). Shared by the CLI and by the Kubernetes manager, which publishes
 * generated configs as ConfigMaps. Pure: no I/O beyond the FILE given. */
#pragma once

#include <stdbool.h>
#include <stdio.h>

#include <jansson.h>

/* The top-level object keeps its insertion order (`version` first, as
 * mig-parted writes it); nested objects are sorted by key when sort_keys. */

/* Returns the YAML text as a malloc'd, NUL-terminated string owned by the
 * caller, or NULL when memory runs out. */
char *mk_yaml_dump(const json_t *v, bool sort_keys);

/* Writes the YAML text to `f`. Returns 0, -ENOMEM, or -EIO when `f` reports
 * a write error (what was written before stays written). */
int mk_yaml_write(FILE *f, const json_t *v, bool sort_keys);

/* libFuzzer target for the mig-parted config parser: arbitrary bytes must
 * never crash it or leak; a failure is -EINVAL (or -ENOMEM) with a message
 * and a position inside the input; whatever it accepts must hold together
 * (caps respected, names canonical, layouts buildable, selection sane). */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mig/layout.h"
#include "spec/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct mk_config *c = NULL;
        struct mk_error e = {0};

        int r = mk_config_parse((const char *) data, size, "fuzz.yaml", &c, &e);
        if (r < 0) {
                if ((r != -EINVAL && r != -ENOMEM) || e.code != r || e.msg[0] == 0 || c)
                        abort();
                /* Positions point into the input: never more lines than
                 * bytes (libyaml also breaks lines at NEL, LS and PS). */
                if (e.line > size + 2 || strcmp(e.file, "fuzz.yaml") != 0)
                        abort();
                return 0;
        }

        if (!c || c->n_configs > MK_MAX_CONFIGS || (c->n_configs > 0 && !c->version))
                abort();
        for (size_t i = 0; i < c->n_configs; i++) {
                const struct mk_named_config *nc = &c->configs[i], *sel = NULL;
                if (nc->n_entries == 0 || nc->n_entries > MK_MAX_ENTRIES || strlen(nc->name) > MK_MAX_CONFIG_NAME)
                        abort();
                if (mk_config_select(c, nc->name, &sel, NULL) < 0 || !sel || strcmp(sel->name, nc->name) != 0)
                        abort();
                for (size_t j = 0; j < nc->n_entries; j++) {
                        const struct mk_config_entry *x = &nc->entries[j];
                        if (x->n_devices > MK_MAX_DEVICES || x->n_filters > MK_MAX_DEVICE_FILTERS ||
                            x->n_mig_devices > MK_MAX_MIG_DEVICES || (x->all_devices && x->n_devices > 0))
                                abort();
                        if (!x->mig_enabled && x->n_mig_devices > 0)
                                abort();
                        for (size_t k = 0; k < x->n_devices; k++)
                                if (x->devices[k] > MK_MAX_DEVICE_INDEX)
                                        abort();
                        bool any = false;
                        for (size_t k = 0; k < x->n_mig_devices; k++) {
                                const struct mk_mig_device *d = &x->mig_devices[k];
                                struct mk_profile_name p;
                                if (d->count > MK_MAX_MIG_COUNT || mk_profile_name_parse(d->raw, &p, NULL) < 0 ||
                                    !mk_profile_name_equal(&p, &d->name))
                                        abort();
                                any = any || d->count > 0;
                        }
                        if (x->n_mig_devices > 0 && !any)
                                abort();

                        struct mk_layout l;
                        if (mk_config_entry_layout(x, &l) < 0)
                                abort();
                        for (size_t k = 0; k < l.n_items; k++)
                                if (l.items[k].count == 0)
                                        abort();
                        mk_layout_done(&l);

                        /* Exercised for crashes only. */
                        (void) mk_config_entry_matches(x, 0, 0x20B010DE, 0x134F10DE);
                        if (x->n_filters > 0 &&
                            !mk_config_entry_matches(x, x->all_devices || x->n_devices == 0 ? 0 : x->devices[0],
                                                     x->filters[0].device_vendor, x->filters[0].subsystem) &&
                            (x->all_devices || x->n_devices > 0))
                                abort();
                }
        }
        const struct mk_named_config *sel = NULL;
        r = mk_config_select(c, NULL, &sel, &e);
        if ((c->n_configs == 1) != (r == 0))
                abort();
        mk_config_free(c);
        return 0;
}

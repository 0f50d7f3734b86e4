/* The bind ledger on a Node (ledger.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/macro.h"
#include "kube/json.h"
#include "kube/object.h"
#include "sched/ledger.h"

int mk_sched_ledger_claim(const json_t *entry, struct mk_claim *ret, struct mk_error *e) {
        static const char *const known[] = {"uid", "namespace", "name", "reservation", NULL};
        struct mk_claim c = {0};
        int r = mk_json_check_keys(entry, "ledger entry", known, e);
        if (r < 0)
                return r;
        if ((r = mk_json_get_str(entry, "uid", "uid", c.uid, sizeof(c.uid), true, e)) < 0 ||
            (r = mk_json_get_str(entry, "namespace", "namespace", c.namespace, sizeof(c.namespace), true, e)) < 0 ||
            (r = mk_json_get_str(entry, "name", "name", c.name, sizeof(c.name), true, e)) < 0)
                return r;
        const char *res = json_string_value(json_object_get(entry, "reservation"));
        if (!res)
                return mk_error_set(e, -EINVAL, "ledger entry of %s: reservation: not a string", c.uid);
        if ((r = mk_claim_reservation_parse(res, &c, e)) < 0)
                return r;
        c.active = true;
        *ret = c;
        return 0;
}

int mk_sched_ledger_read(const json_t *node, int64_t now, json_t **ret, struct mk_error *e) {
        json_t *out = json_array();
        if (!out)
                return -ENOMEM;
        *ret = out;
        const char *name = mk_kube_meta(node, "name");
        const char *value = mk_kube_annotation(node, MK_ANN_BINDS);
        if (!value || !name)
                return 0;
        json_t *in = NULL;
        int r = mk_json_load(value, strlen(value), MK_SCHED_LEDGER_BYTES, MK_ANN_BINDS, &in, e);
        if (r < 0)
                return r;
        if (!json_is_array(in)) {
                json_decref(in);
                return mk_error_set(e, -EINVAL, "%s: not an array", MK_ANN_BINDS);
        }
        _cleanup_free_ struct mk_claim *c = malloc(sizeof(*c));
        if (!c) {
                json_decref(in);
                return -ENOMEM;
        }
        size_t i;
        json_t *entry;
        json_array_foreach(in, i, entry) {
                struct mk_error pe = {0};
                int q = mk_sched_ledger_claim(entry, c, &pe);
                if (q < 0) {
                        r = mk_error_set(e, q, "%s entry %zu: %s", MK_ANN_BINDS, i, pe.msg);
                        continue;
                }
                if (!streq(c->node, name) || now - c->time > MK_SCHED_LEDGER_TTL_S ||
                    json_array_size(out) >= MK_SCHED_LEDGER_MAX)
                        continue;
                if (json_array_append(out, entry) < 0) {
                        r = -ENOMEM;
                        break;
                }
        }
        json_decref(in);
        return r;
}

int mk_sched_ledger_put(json_t *ledger, const struct mk_claim *c) {
        size_t i;
        json_t *entry;
        json_array_foreach(ledger, i, entry) {
                const char *uid = json_string_value(json_object_get(entry, "uid"));
                if (uid && streq(uid, c->uid)) {
                        json_array_remove(ledger, i);
                        break;
                }
        }
        if (json_array_size(ledger) >= MK_SCHED_LEDGER_MAX)
                return -E2BIG;
        _cleanup_free_ char *res = NULL;
        int r = mk_claim_reservation_format(c, &res);
        if (r < 0)
                return r;
        json_t *n = json_pack("{s:s, s:s, s:s, s:s}", "uid", c->uid, "namespace", c->namespace, "name", c->name,
                              "reservation", res);
        if (!n || json_array_append_new(ledger, n) < 0)
                return -ENOMEM;
        return 0;
}

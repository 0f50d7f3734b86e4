/* Checked JSON readers (json.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/macro.h"
#include "kube/json.h"

static int load(const char *data, size_t len, size_t cap, size_t flags, const char *what, json_t **ret,
                struct mk_error *e) {
        if (len > cap)
                return mk_error_set_field(e, -E2BIG, what, "larger than %zu bytes", cap);
        json_error_t je;
        json_t *j = json_loadb(data ? data : "", len, JSON_REJECT_DUPLICATES | flags, &je);
        if (!j)
                return mk_error_set_field(e, -EINVAL, what, "not valid JSON: %s (at byte %d)", je.text, je.position);
        *ret = j;
        return 0;
}

int mk_json_load(const char *data, size_t len, size_t cap, const char *what, json_t **ret, struct mk_error *e) {
        return load(data, len, cap, 0, what, ret, e);
}

int mk_json_load_api(const char *data, size_t len, size_t cap, const char *what, json_t **ret, struct mk_error *e) {
        return load(data, len, cap, JSON_ALLOW_NUL, what, ret, e);
}

int mk_json_check_keys(const json_t *o, const char *field, const char *const *known, struct mk_error *e) {
        if (!json_is_object(o))
                return mk_error_set_field(e, -EINVAL, field, "must be an object");
        const char *k;
        json_t *v;
        json_object_foreach((json_t *) o, k, v) {
                bool ok = false;
                for (const char *const *p = known; *p && !ok; p++)
                        ok = streq(*p, k);
                if (!ok)
                        return mk_error_set_field(e, -EINVAL, field, "unknown field '%.64s'", k);
        }
        return 0;
}

int mk_json_get_u64(const json_t *o, const char *key, const char *field, uint64_t max, bool required, uint64_t *ret,
                    struct mk_error *e) {
        const json_t *v = json_object_get(o, key);
        if (!v) {
                if (required)
                        return mk_error_set_field(e, -EINVAL, field, "%s: missing", key);
                return 0;
        }
        if (!json_is_integer(v) || json_integer_value(v) < 0 || (uint64_t) json_integer_value(v) > max)
                return mk_error_set_field(e, -EINVAL, field, "%s: must be an integer from 0 to %" PRIu64, key, max);
        *ret = (uint64_t) json_integer_value(v);
        return 1;
}

bool mk_json_token_ok(const char *s) {
        for (; *s; s++)
                if (*s <= ' ' || *s > '~' || *s == '"' || *s == '\\')
                        return false;
        return true;
}

int mk_json_get_str(const json_t *o, const char *key, const char *field, char *buf, size_t size, bool required,
                    struct mk_error *e) {
        const json_t *v = json_object_get(o, key);
        buf[0] = 0;
        if (!v) {
                if (required)
                        return mk_error_set_field(e, -EINVAL, field, "%s: missing", key);
                return 0;
        }
        const char *s = json_string_value(v);
        if (!s)
                return mk_error_set_field(e, -EINVAL, field, "%s: must be a string", key);
        size_t n = json_string_length(v);
        if (n >= size)
                return mk_error_set_field(e, -E2BIG, field, "%s: longer than %zu bytes", key, size - 1);
        if (strlen(s) != n)
                return mk_error_set_field(e, -EINVAL, field, "%s: contains a NUL byte", key);
        for (const char *p = s; *p; p++)
                if (*p < ' ' || *p > '~')
                        return mk_error_set_field(e, -EINVAL, field, "%s: must be printable ASCII", key);
        memcpy(buf, s, n + 1);
        return 1;
}

json_t *mk_json_get_ci(const json_t *o, const char *key) {
        if (!json_is_object(o))
                return NULL;
        json_t *v = json_object_get(o, key);
        if (v)
                return v;
        const char *k;
        json_object_foreach((json_t *) o, k, v)
                if (strcasecmp(k, key) == 0)
                        return v;
        return NULL;
}

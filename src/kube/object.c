/* Kubernetes object accessors and quantities (object.h). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/macro.h"
#include "base/parse.h"
#include "kube/object.h"

/* A string value, NULL when it holds an embedded NUL (jansson keeps the
 * whole length; a C reader would see a shorter, different value). */
static const char *whole_string(const json_t *v) {
        const char *s = json_string_value(v);
        return s && strlen(s) == json_string_length(v) ? s : NULL;
}

const char *mk_kube_meta(const json_t *o, const char *key) {
        return whole_string(json_object_get(json_object_get(o, "metadata"), key));
}

const char *mk_kube_annotation(const json_t *o, const char *key) {
        return whole_string(json_object_get(json_object_get(json_object_get(o, "metadata"), "annotations"), key));
}

const char *mk_kube_label(const json_t *o, const char *key) {
        return whole_string(json_object_get(json_object_get(json_object_get(o, "metadata"), "labels"), key));
}

bool mk_kube_annotation_ours(const char *key) {
        static const char *const prefixes[] = {"migkit.io/", "nvidia.com/", "hami.io/"};
        for (size_t i = 0; i < ELEMENTSOF(prefixes); i++)
                if (strncmp(key, prefixes[i], strlen(prefixes[i])) == 0)
                        return true;
        return false;
}

/* Writes ".<key>" or "[i]" at buf[at] (cut at size). */
static void path_push(char *buf, size_t size, size_t at, const char *key, size_t index) {
        if (at + 1 >= size)
                return;
        if (key)
                snprintf(buf + at, size - at, "%s%.64s", at ? "." : "", key);
        else
                snprintf(buf + at, size - at, "[%zu]", index);
}

enum nul_scope { SCOPE_OBJECT, SCOPE_TOP, SCOPE_METADATA, SCOPE_ANNOTATIONS };

/* True when a string in v holds a NUL; its path is left in buf. The top
 * object's metadata.annotations skip the values of keys that are not ours. */
static bool find_nul(const json_t *v, unsigned depth, enum nul_scope scope, char *buf, size_t size) {
        size_t at = strnlen(buf, size);
        if (at >= size)
                at = size - 1;
        if (json_is_string(v))
                return memchr(json_string_value(v), 0, json_string_length(v)) != NULL;
        if (depth > 64)
                return false; /* no object we read nests deeper; below it we read nothing */
        if (json_is_array(v)) {
                size_t i;
                json_t *x;
                json_array_foreach((json_t *) v, i, x) {
                        path_push(buf, size, at, NULL, i);
                        if (find_nul(x, depth + 1, SCOPE_OBJECT, buf, size))
                                return true;
                        buf[at] = 0;
                }
        } else if (json_is_object(v)) {
                const char *k;
                json_t *x;
                json_object_foreach((json_t *) v, k, x) {
                        if (scope == SCOPE_ANNOTATIONS && !mk_kube_annotation_ours(k))
                                continue; /* never read by us: a NUL there changes nothing we do */
                        path_push(buf, size, at, k, 0);
                        enum nul_scope sub = scope == SCOPE_TOP && streq(k, "metadata")        ? SCOPE_METADATA
                                             : scope == SCOPE_METADATA && streq(k, "annotations") ? SCOPE_ANNOTATIONS
                                                                                                  : SCOPE_OBJECT;
                        if (find_nul(x, depth + 1, sub, buf, size))
                                return true;
                        buf[at] = 0;
                }
        }
        return false;
}

bool mk_kube_object_has_nul(const json_t *obj, char *where, size_t size) {
        char scratch[1];
        if (!where || size == 0) {
                where = scratch;
                size = sizeof(scratch);
        }
        where[0] = 0;
        return find_nul(obj, 0, SCOPE_TOP, where, size);
}

static bool dns_alnum(char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* Checks the labels of `s` (joined by '.' when `dots`), up to max chars. */
static int check_dns(const char *s, size_t max, bool dots, const char **ret_why) {
        const char *why = NULL;
        size_t n = s ? strlen(s) : 0;
        if (n == 0)
                why = "must not be empty";
        else if (n > max)
                why = dots ? "longer than 253 characters" : "longer than 63 characters";
        for (size_t i = 0; !why && i < n; i++) {
                char c = s[i];
                bool first = i == 0 || s[i - 1] == '.', last = i + 1 == n || s[i + 1] == '.';
                if (c == '.' && dots) {
                        if (first)
                                why = "has an empty part between dots";
                } else if (c == '-') {
                        if (first || last)
                                why = "must start and end with a lowercase letter or digit";
                } else if (!dns_alnum(c))
                        why = dots ? "may hold only lowercase letters, digits, '-' and '.'"
                                   : "may hold only lowercase letters, digits and '-'";
        }
        if (!why && dots && s[n - 1] == '.')
                why = "has an empty part between dots";
        if (ret_why)
                *ret_why = why;
        return why ? -EINVAL : 0;
}

int mk_kube_name_check_label(const char *s, const char **ret_why) {
        return check_dns(s, MK_K8S_LABEL_MAX - 1, false, ret_why);
}

int mk_kube_name_check_subdomain(const char *s, const char **ret_why) {
        return check_dns(s, MK_K8S_NAME_MAX - 1, true, ret_why);
}

int mk_kube_path_segment(const char *seg, char *buf, size_t size) {
        static const char hex[] = "0123456789ABCDEF";
        size_t o = 0;
        for (const unsigned char *p = (const unsigned char *) seg; *p; p++) {
                bool plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                             *p == '-' || *p == '.' || *p == '_' || *p == '~';
                if (o + (plain ? 1 : 3) >= size)
                        return -ENOBUFS;
                if (plain)
                        buf[o++] = (char) *p;
                else {
                        buf[o++] = '%';
                        buf[o++] = hex[*p >> 4];
                        buf[o++] = hex[*p & 15];
                }
        }
        if (o >= size)
                return -ENOBUFS;
        buf[o] = 0;
        return 0;
}

int mk_kube_core_path(const char *ns, const char *resource, const char *name, char *buf, size_t size) {
        /* "", "." and ".." would name another path, not an object. */
        const char *segs[] = {ns ? ns : "x", name};
        for (size_t i = 0; i < ELEMENTSOF(segs); i++)
                if (streq(segs[i], "") || streq(segs[i], ".") || streq(segs[i], ".."))
                        return -EINVAL;
        char ens[3 * MK_K8S_NAME_MAX] = "", ename[3 * MK_K8S_NAME_MAX];
        if ((ns && mk_kube_path_segment(ns, ens, sizeof(ens)) < 0) ||
            mk_kube_path_segment(name, ename, sizeof(ename)) < 0)
                return -ENOBUFS;
        int n = ns ? snprintf(buf, size, "/api/v1/namespaces/%s/%s/%s", ens, resource, ename)
                   : snprintf(buf, size, "/api/v1/%s/%s", resource, ename);
        return n < 0 || (size_t) n >= size ? -ENOBUFS : 0;
}

int mk_quantity_parse_milli(const char *s, uint64_t *ret) {
        /* apimachinery resource.Quantity: <sign><digits>[.<digits>]<suffix>, the suffix binary SI (Ki..Ei),
         * decimal SI (m, "", k..E) or an exponent (e or E, then a signed integer). */
        typedef unsigned __int128 u128;
        static const struct {
                const char *suffix;
                u128 mul; /* per unit, in milli */
        } suffixes[] = {
                {"Ki", (u128) 1000 << 10},
                {"Mi", (u128) 1000 << 20},
                {"Gi", (u128) 1000 << 30},
                {"Ti", (u128) 1000 << 40},
                {"Pi", (u128) 1000 << 50},
                {"Ei", (u128) 1000 << 60},
                {"m", 1},
                {"", 1000},
                {"k", 1000ull * 1000},
                {"M", 1000000ull * 1000},
                {"G", 1000000000ull * 1000},
                {"T", 1000000000000ull * 1000},
                {"P", 1000000000000000ull * 1000},
                {"E", (u128) 1000000000000000000ull * 1000},
        };
        size_t len = strlen(s);
        if (len == 0 || len > 64)
                return -EINVAL;
        size_t i = 0;
        u128 ip = 0, fp = 0, fscale = 1;
        if (s[0] == '+')
                i++;
        size_t start = i;
        for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
                ip = ip * 10 + (unsigned) (s[i] - '0');
                if (ip > UINT64_MAX)
                        return -ERANGE;
        }
        bool digits = i > start;
        if (i < len && s[i] == '.') {
                i++;
                for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
                        if (fscale < 1000000000000000000ull) {
                                fp = fp * 10 + (unsigned) (s[i] - '0');
                                fscale *= 10;
                        }
                        digits = true;
                }
        }
        if (!digits)
                return -EINVAL; /* also a negative quantity: no count is negative */
        const char *suf = s + i;
        u128 mul = 0, den = 1;
        if ((suf[0] == 'e' || (suf[0] == 'E' && suf[1] != 'i')) && suf[1]) {
                int ex;
                if (mk_parse_int(suf + 1 + (suf[1] == '+' && suf[2] != '-'), &ex) < 0)
                        return -EINVAL;
                if (ex > 18 || ex < -18)
                        return -ERANGE;
                mul = 1000;
                for (int k = 0; k < (ex < 0 ? -ex : ex); k++) {
                        if (ex > 0)
                                mul *= 10;
                        else
                                den *= 10;
                }
        } else {
                for (size_t k = 0; k < ELEMENTSOF(suffixes); k++)
                        if (streq(suf, suffixes[k].suffix)) {
                                mul = suffixes[k].mul;
                                break;
                        }
                if (!mul)
                        return -EINVAL;
        }
        /* ceil((ip + fp / fscale) * mul / den) without overflowing: mul is
         * at most 1e21 (E), den at most 1e18, fscale at most 1e18. */
        if (mul > UINT64_MAX && (ip > 0 || fp > (UINT64_MAX >> 6)))
                return -ERANGE;
        u128 hi = ip * mul;
        u128 v = hi / den;
        u128 frac = (hi % den) * fscale + fp * mul, frac_den = fscale * den;
        v += (frac + frac_den - 1) / frac_den;
        if (v > UINT64_MAX)
                return -ERANGE;
        *ret = (uint64_t) v;
        return 0;
}

uint64_t mk_kube_container_request(const json_t *ctr, const char *res) {
        const json_t *rs = json_object_get(ctr, "resources");
        const json_t *v = json_object_get(json_object_get(rs, "requests"), res);
        if (!v)
                v = json_object_get(json_object_get(rs, "limits"), res);
        uint64_t m = 0;
        if (json_is_string(v) && mk_quantity_parse_milli(json_string_value(v), &m) < 0)
                m = 0;
        return m;
}

void mk_pod_resource_requests(const json_t *pod, uint64_t *ret_cpu_milli, uint64_t *ret_memory_bytes) {
        const json_t *spec = json_object_get(pod, "spec"), *ctr;
        uint64_t cpu = 0, mem = 0, init_cpu = 0, init_mem = 0;
        size_t i;
        json_array_foreach(json_object_get(spec, "containers"), i, ctr) {
                cpu += mk_kube_container_request(ctr, "cpu");
                mem += mk_kube_container_request(ctr, "memory") / 1000;
        }
        json_array_foreach(json_object_get(spec, "initContainers"), i, ctr) {
                init_cpu = MAX(init_cpu, mk_kube_container_request(ctr, "cpu"));
                init_mem = MAX(init_mem, mk_kube_container_request(ctr, "memory") / 1000);
        }
        *ret_cpu_milli = MAX(cpu, init_cpu);
        *ret_memory_bytes = MAX(mem, init_mem);
}

json_t *mk_kube_event_new(const char *ns, const char *kind, const char *name, const char *uid, bool warning,
                          const char *reason, const char *message, const char *component, const char *host) {
        char ts[64], gen[MK_K8S_NAME_MAX + 2];
        time_t t = time(NULL);
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", &tm);
        snprintf(gen, sizeof(gen), "%.*s.", MK_K8S_NAME_MAX - 1, name);
        return json_pack("{s:s,s:s,s:{s:s,s:s},s:{s:s,s:s,s:s,s:o},s:s,s:s,s:s,s:{s:s,s:s},s:s,s:s,s:i,s:s,s:s}",
                         "apiVersion", "v1", "kind", "Event", "metadata", "generateName", gen, "namespace", ns,
                         "involvedObject", "apiVersion", "v1", "kind", kind, "name", name, "uid",
                         uid ? json_string(uid) : json_null(), "reason", reason, "message", message, "type",
                         warning ? "Warning" : "Normal", "source", "component", component, "host", host,
                         "firstTimestamp", ts, "lastTimestamp", ts, "count", 1, "reportingComponent", component,
                         "reportingInstance", host);
}

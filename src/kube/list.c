/* LIST: page by page (limit and continue), each page's items to a
 * callback or into one list object. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/dynbuf.h"
#include "base/error.h"
#include "base/macro.h"
#include "kube/internal.h"
#include "kube/kube.h"

typedef int (*page_fn)(json_t *page, void *userdata);

static int list_pages(struct mk_kube *k, const char *path, const struct mk_kube_list_opts *o, page_fn fn,
                      void *userdata, struct mk_error *e) {
        static const struct mk_kube_list_opts none = {};
        _cleanup_free_ char *cont = NULL;
        int r;

        if (!o)
                o = &none;
        r = kube_check_path(path, e);
        if (r < 0)
                return r;
        for (unsigned page = 0;; page++) {
                if (page >= MK_MAX_LIST_PAGES)
                        return mk_error_set(e, -E2BIG, "LIST %s: more than %u pages", path, MK_MAX_LIST_PAGES);
                _cleanup_buf_done_ struct mk_buf u;
                mk_buf_init(&u, MAX_URL_BYTES);
                r = mk_buf_puts(&u, path);
                if (r >= 0)
                        r = mk_buf_printf(&u, "%climit=%u", strchr(path, '?') ? '&' : '?',
                                          o->limit ? o->limit : MK_KUBE_LIST_PAGE);
                if (r >= 0)
                        r = kube_add_selectors(&u, o->label_selector, o->field_selector);
                if (r >= 0 && page == 0 && o->resource_version)
                        r = kube_add_param(&u, "resourceVersion", o->resource_version);
                if (r >= 0 && cont)
                        r = kube_add_param(&u, "continue", cont);
                if (r < 0)
                        return mk_error_set(e, r, "LIST %s: the request URL is too long", path);

                _cleanup_(json_decrefp) json_t *j = NULL;
                struct request rq = {.method = "GET", .path = mk_buf_str(&u), .timeout_ms = k->o.request_timeout_ms};
                r = kube_request(k, &rq, &j, e);
                if (r < 0)
                        return r;
                json_t *items = json_object_get(j, "items");
                if (!json_is_object(j) || !(json_is_array(items) || json_is_null(items) || !items))
                        return mk_error_set(e, -EBADMSG, "LIST %s: the answer is not a list", path);
                const char *next = json_string_value(json_object_get(json_object_get(j, "metadata"), "continue"));
                char *next_copy = next && *next ? strdup(next) : NULL;
                if (next && *next && !next_copy)
                        return -ENOMEM;
                free(cont);
                cont = next_copy;
                r = fn(j, userdata);
                if (r != 0)
                        return r;
                if (!cont)
                        return 0;
        }
}

struct each {
        mk_kube_item_fn fn;
        void *userdata;
        char *resource_version;
        bool fn_failed;
};

static int each_page(json_t *page, void *userdata) {
        struct each *x = userdata;
        if (!x->resource_version) {
                const char *rv = json_string_value(json_object_get(json_object_get(page, "metadata"), "resourceVersion"));
                x->resource_version = strdup(rv ? rv : "");
                if (!x->resource_version)
                        return -ENOMEM;
        }
        size_t i;
        json_t *item;
        json_array_foreach(json_object_get(page, "items"), i, item) {
                int r = x->fn(item, x->userdata);
                if (r < 0)
                        x->fn_failed = true;
                if (r != 0)
                        return r;
        }
        return 0;
}

int mk_kube_list_each(struct mk_kube *k, const char *path, const struct mk_kube_list_opts *o, mk_kube_item_fn fn,
                      void *userdata, char **ret_resource_version, struct mk_error *e) {
        struct each x = {.fn = fn, .userdata = userdata};
        _cleanup_free_ char *rv = NULL;
        int r = list_pages(k, path, o, each_page, &x, e);
        rv = x.resource_version;
        if (r < 0) {
                if (x.fn_failed)
                        mk_error_set(e, r, "LIST %s: an item was not handled: %s", path, strerror(-r));
                return r;
        }
        if (ret_resource_version)
                *ret_resource_version = TAKE_PTR(rv);
        return 0;
}

static int all_page(json_t *page, void *userdata) {
        json_t **list = userdata;
        json_t *items = json_object_get(page, "items");
        if (!*list) {
                *list = json_incref(page);
                if (!json_is_array(items)) {
                        json_t *a = json_array();
                        if (!a || json_object_set_new(*list, "items", a) < 0)
                                return -ENOMEM;
                }
                return 0;
        }
        if (json_is_array(items) && json_array_extend(json_object_get(*list, "items"), items) < 0)
                return -ENOMEM;
        return 0;
}

int mk_kube_list(struct mk_kube *k, const char *path, const struct mk_kube_list_opts *o, json_t **ret,
                 struct mk_error *e) {
        _cleanup_(json_decrefp) json_t *list = NULL;
        int r = list_pages(k, path, o, all_page, &list, e);
        if (r < 0)
                return r;
        json_t *md = json_object_get(list, "metadata");
        if (json_is_object(md))
                (void) json_object_del(md, "continue");
        *ret = TAKE_PTR(list);
        return 0;
}

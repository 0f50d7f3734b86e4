#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/host.h"

static const char *const default_roots[_MK_HOST_ROOT_MAX] = {
        [MK_HOST_SYSFS] = "/sys",
        [MK_HOST_PROC] = "/proc",
        [MK_HOST_DEV] = "/dev",
        [MK_HOST_RUN] = "/run",
};

static const char *const root_env[_MK_HOST_ROOT_MAX] = {
        [MK_HOST_SYSFS] = "MIGKIT_SYSFS_ROOT",
        [MK_HOST_PROC] = "MIGKIT_PROC_ROOT",
        [MK_HOST_DEV] = "MIGKIT_DEV_ROOT",
        [MK_HOST_RUN] = "MIGKIT_RUN_ROOT",
};

/* A copy of a root without trailing slashes ("/" stays "/"). */
static char *root_dup(const char *s) {
        size_t n = strlen(s);
        while (n > 1 && s[n - 1] == '/')
                n--;
        return strndup(s, n);
}

static char **root_slot(struct mk_host *h, enum mk_host_root root) {
        switch (root) {
        case MK_HOST_SYSFS: return &h->sysfs_root;
        case MK_HOST_PROC: return &h->proc_root;
        case MK_HOST_DEV: return &h->dev_root;
        case MK_HOST_RUN: return &h->run_root;
        default: return NULL;
        }
}

static int host_init(struct mk_host *h, bool from_env) {
        struct mk_host n = {};
        for (int i = 0; i < _MK_HOST_ROOT_MAX; i++) {
                const char *v = from_env ? secure_getenv(root_env[i]) : NULL;
                char *copy = root_dup(v && *v ? v : default_roots[i]);
                if (!copy) {
                        mk_host_done(&n);
                        return -ENOMEM;
                }
                *root_slot(&n, (enum mk_host_root) i) = copy;
        }
        *h = n;
        return 0;
}

int mk_host_init_default(struct mk_host *h) {
        return host_init(h, false);
}

int mk_host_init_from_env(struct mk_host *h) {
        return host_init(h, true);
}

void mk_host_done(struct mk_host *h) {
        if (!h)
                return;
        free(h->sysfs_root);
        free(h->proc_root);
        free(h->dev_root);
        free(h->run_root);
        *h = (struct mk_host) {};
}

const char *mk_host_root(const struct mk_host *h, enum mk_host_root root) {
        switch (root) {
        case MK_HOST_SYSFS: return h->sysfs_root;
        case MK_HOST_PROC: return h->proc_root;
        case MK_HOST_DEV: return h->dev_root;
        case MK_HOST_RUN: return h->run_root;
        default: return NULL;
        }
}

bool mk_path_has_dotdot(const char *path) {
        if (!path)
                return false;
        for (const char *p = path; *p;) {
                size_t n = strcspn(p, "/");
                if (n == 2 && p[0] == '.' && p[1] == '.')
                        return true;
                p += n;
                p += strspn(p, "/");
        }
        return false;
}

int mk_path_join(const char *a, const char *b, char **ret) {
        size_t na = strlen(a);
        while (na > 0 && a[na - 1] == '/')
                na--;
        bool a_is_root = na == 0 && a[0] == '/';
        const char *b_rel = b + strspn(b, "/");
        size_t nb = strlen(b_rel);

        char *p;
        if (na == 0 && !a_is_root)
                p = strdup(b);                         /* ("", b) */
        else if (nb == 0)
                p = a_is_root ? strdup("/") : strndup(a, na);
        else {
                p = malloc(na + 1 + nb + 1);
                if (p) {
                        memcpy(p, a, na);
                        p[na] = '/';
                        memcpy(p + na + 1, b_rel, nb + 1);
                }
        }
        if (!p)
                return -ENOMEM;
        *ret = p;
        return 0;
}

int mk_host_path(const struct mk_host *h, enum mk_host_root root, const char *relative, char **ret) {
        const char *r = mk_host_root(h, root);
        if (!r)
                return -EINVAL;
        if (mk_path_has_dotdot(relative))
                return -EINVAL;
        return mk_path_join(r, relative ? relative : "", ret);
}

/* libcurl, loaded with dlopen() (libcurl.so.4, or MIGKIT_CURL_LIB) into
 * the kube_curl table of the functions the client calls and
 * curl_global_init()'ed, once under pthread_once, by the first
 * mk_kube_new(). A daemon that never talks to the apiserver (the device
 * plugin without --labels node or --dynamic-mig) never maps libcurl and its
 * TLS stack (docs/decisions.md). */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include <curl/curl.h>

#include "base/dl.h"
#include "base/log.h"
#include "base/macro.h"
#include "kube/internal.h"

#define MK_CURL_DEFAULT_LIB "libcurl.so.4"

struct kube_curl_functions kube_curl;

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static char curl_init_error[256] = "not loaded"; /* empty once libcurl is loaded and initialised */

/* Loads libcurl and resolves every function before any call. On failure the
 * library stays loaded (dlclose of a TLS stack is not worth the risk) and
 * curl_init_error says why. */
static void curl_init_once(void) {
        const char *path = secure_getenv("MIGKIT_CURL_LIB");
        if (!path || !*path)
                path = MK_CURL_DEFAULT_LIB;
        (void) dlerror();
        void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!dl) {
                const char *why = dlerror();
                snprintf(curl_init_error, sizeof(curl_init_error),
                         "%s (libcurl 7.77 or later is needed; MIGKIT_CURL_LIB selects another library)",
                         why ? why : path);
                return;
        }
        static const struct mk_dl_sym table[] = {
#define X(name) {"curl_" #name, offsetof(struct kube_curl_functions, name)},
                MK_CURL_FUNCTIONS(X)
#undef X
        };
        struct kube_curl_functions fn;
        const char *missing = mk_dl_resolve(dl, table, ELEMENTSOF(table), &fn, NULL);
        if (missing) {
                snprintf(curl_init_error, sizeof(curl_init_error), "%s lacks %s: not a libcurl", path, missing);
                return;
        }
        const curl_version_info_data *v = fn.version_info(CURLVERSION_NOW);
        if (!v || v->version_num < 0x074d00) {
                snprintf(curl_init_error, sizeof(curl_init_error),
                         "%s is libcurl %s: 7.77 or later is needed (CURLOPT_CAINFO_BLOB)", path,
                         v && v->version ? v->version : "?");
                return;
        }
        CURLcode cc = fn.global_init(CURL_GLOBAL_DEFAULT);
        if (cc != CURLE_OK) {
                snprintf(curl_init_error, sizeof(curl_init_error), "curl_global_init: %s", fn.easy_strerror(cc));
                return;
        }
        kube_curl = fn;
        curl_init_error[0] = 0;
        log_debug_area("k8s", "Loaded %s (libcurl %s, %s)", path, v->version,
                       v->ssl_version ? v->ssl_version : "no TLS");
}

const char *kube_curl_load(void) {
        (void) pthread_once(&curl_once, curl_init_once);
        return curl_init_error[0] ? curl_init_error : NULL;
}

/* The apiserver client of the daemon commands (kube-connect.h). */
#include <string.h>

#include "cli/kube-connect.h"
#include "kube/kubeconfig.h"

int cli_kube_connect(const char *kubeconfig, const struct mk_kube_options *ko, struct mk_kube **ret,
                     struct mk_error *e) {
        _cleanup_(mk_kube_config_done) struct mk_kube_config kc = {0};
        int r = kubeconfig ? mk_kube_config_from_kubeconfig(kubeconfig, NULL, &kc, e) : mk_kube_config_load(NULL, &kc, e);
        if (r < 0) {
                /* A file error alone does not say which file it was for. */
                if (kubeconfig && !strstr(e->msg, "kubeconfig"))
                        mk_error_prefix(e, "Cannot load the kubeconfig (--kubeconfig or KUBECONFIG)");
                return r;
        }
        return mk_kube_new(&kc, ko, ret, e);
}

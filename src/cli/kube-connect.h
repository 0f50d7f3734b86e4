/* The apiserver client every daemon command builds the same way: from the
 * kubeconfig file named by --kubeconfig/KUBECONFIG, else in-cluster. Linked
 * into the daemon executables only (the node commands never load libcurl). */
#pragma once

#include "base/error.h"
#include "kube/kube.h"

/* A client in *ret (free with mk_kube_free); `ko` NULL: the defaults.
 * Errors in `e`, naming the file or what in-cluster lacked. */
int cli_kube_connect(const char *kubeconfig, const struct mk_kube_options *ko, struct mk_kube **ret,
                     struct mk_error *e);

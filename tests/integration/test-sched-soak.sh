#!/usr/bin/env bash
# The soak's CI version (issue 17): bench/soak for 2 minutes (the extender,
# the node agent and the dynamic device plugin on the real kube-apiserver
# and kube-scheduler of scripts/k8s-testenv, pods created, allocated and
# deleted in cycles). Fails when a daemon's RSS grows more than 8 MiB over
# its baseline (after one cycle), when its open fds grow at all, or when a
# reservation is left (bench/soak's verdict). MIGKIT_SOAK_SECONDS changes
# the duration.
#
# Runs only when MIGKIT_K8S_TESTENV names scripts/k8s-testenv (CI sets it).
set -euo pipefail
if [ -z "${MIGKIT_K8S_TESTENV:-}" ]; then
  echo "SKIP: MIGKIT_K8S_TESTENV is unset (no test kube-apiserver)"
  exit 0
fi
exec "${MIGKIT_SOURCE_DIR:?}/bench/soak" --duration "${MIGKIT_SOAK_SECONDS:-120}" --batch 8 \
  --rss-growth-kib 8192 --fd-growth 0

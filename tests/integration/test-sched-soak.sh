#!/usr/bin/env bash
# The soak's CI version (issue 17): bench/soak for 2 minutes (the extender,
# the node agent and the dynamic device plugin on the real kube-apiserver
# and kube-scheduler of scripts/k8s-testenv, pods created, allocated and
# deleted in cycles). Fails when a daemon's RSS or open fds stay above its
# baseline (after one cycle) over the second half of the samples, RSS by
# more than 8 MiB, fds other than apiserver connections by any (those by
# more than a kube client's 8 idle ones), or when a reservation is left
# (bench/soak's verdict). The floor, not the last sample: the node agent's RSS was
# 13.6 MiB idle and 29.8 MiB in the middle of an apply (its threads' malloc
# arenas), back to 13.6 MiB after. MIGKIT_SOAK_SECONDS changes
# the duration: 120 s, 45 s in an AddressSanitizer build (below).
#
# Runs only when MIGKIT_K8S_TESTENV names scripts/k8s-testenv (CI sets it).
set -euo pipefail
if [ -z "${MIGKIT_K8S_TESTENV:-}" ]; then
  echo "SKIP: MIGKIT_K8S_TESTENV is unset (no test kube-apiserver)"
  exit 0
fi
# Under AddressSanitizer RSS says nothing about leaks: its quarantine keeps
# freed memory (256 MiB by default), and the daemons grew 55-210 MiB in
# 2 minutes there. That build checks fds and reservations, and
# LeakSanitizer checks leaks when each daemon exits.
# What only that build finds (a memory error, a leak LeakSanitizer reports at
# a daemon's exit) needs each path of a cycle run once, not two minutes of
# cycles: it runs 45 s there (2-4 cycles in CI). The checks that need many
# cycles (RSS, fds, the apiserver connections' pool) are the strict build's,
# at the full 120 s (scripts/test runs both builds' tests).
rss_bound=8192 seconds=${MIGKIT_SOAK_SECONDS:-120}
if nm "${MIGKIT_BIN:?}" 2>/dev/null | grep -c '__asan_init' >/dev/null; then # -c reads it all: no SIGPIPE under pipefail
  rss_bound=$((1 << 30)) seconds=${MIGKIT_SOAK_SECONDS:-45}
  echo "AddressSanitizer build: the RSS bound is not applied; $seconds s of cycles"
fi
exec "${MIGKIT_SOURCE_DIR:?}/bench/soak" --duration "$seconds" --batch 8 \
  --rss-growth-kib "$rss_bound" --fd-growth 0

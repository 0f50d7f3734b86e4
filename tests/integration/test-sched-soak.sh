#!/usr/bin/env bash
# The soak's CI version (issue 17): bench/soak for 6 cycles of 8 pods (the
# extender, the node agent and the dynamic device plugin on the real
# kube-apiserver and kube-scheduler of scripts/k8s-testenv, pods created,
# allocated and deleted in cycles), 3 in an AddressSanitizer build. Fails
# when a daemon's RSS or open fds stay above its baseline (after one cycle)
# over the second half of the samples, RSS by more than 4 MiB, fds other
# than connections by any (connections to the apiserver by more than a kube
# client's 8 idle ones), when a connection it serves (kube-scheduler's to the
# extender) stays open after the run, or when a reservation is left
# (bench/soak's verdict). Each sample is the least of 5 reads over 2 s and
# leaves out the connections it serves: the CI run that failed on the
# extender's fds going 23 -> 24 sampled kube-scheduler's keep-alive
# connection, open for 10 s after its last request, at every sample of the
# second half (the baseline's came later in its cycle). The floor, not the
# last sample: the node agent's RSS was 13.6 MiB idle and 29.8 MiB in the
# middle of an apply (its threads' malloc arenas), back to 13.6 MiB after.
#
# 6 cycles see a leak of an fd a cycle (+3 at the floor), of 2 apiserver
# connections a cycle (+10), or of 1.4 MiB of RSS a cycle (the 120 s run:
# ~7 cycles, 2 connections, 2.7 MiB); the daemons grew 0.3-0.5 MiB over 6
# cycles here. MIGKIT_SOAK_CYCLES changes the count; MIGKIT_SOAK_SECONDS
# runs for that long instead, with bench/soak's own 8 MiB bound (a longer
# soak: bench/soak alone runs 30 minutes).
#
# Runs only when MIGKIT_K8S_TESTENV names scripts/k8s-testenv (CI sets it).
set -euo pipefail
if [ -z "${MIGKIT_K8S_TESTENV:-}" ]; then
  echo "SKIP: MIGKIT_K8S_TESTENV is unset (no test kube-apiserver)"
  exit 0
fi
# Under AddressSanitizer RSS says nothing about leaks: its quarantine keeps
# freed memory (256 MiB by default), and the daemons grew 55-210 MiB in
# 2 minutes there. That build checks fds, served connections and
# reservations, and LeakSanitizer checks leaks when each daemon exits.
# What only that build finds (a memory error, a leak LeakSanitizer reports at
# a daemon's exit) needs each path of a cycle run once, not many cycles: 3
# there (each path after the warm-up cycle twice). The checks that need
# more cycles (RSS, the apiserver connections' pool) are the strict build's
# (scripts/test runs both builds' tests).
rss_bound=4096 cycles=${MIGKIT_SOAK_CYCLES:-6}
if nm "${MIGKIT_BIN:?}" 2>/dev/null | grep -c '__asan_init' >/dev/null; then # -c reads it all: no SIGPIPE under pipefail
  rss_bound=$((1 << 30)) cycles=${MIGKIT_SOAK_CYCLES:-3}
  echo "AddressSanitizer build: the RSS bound is not applied"
fi
length=(--cycles "$cycles")
if [ -n "${MIGKIT_SOAK_SECONDS:-}" ]; then
  length=(--duration "$MIGKIT_SOAK_SECONDS")
  [ "$rss_bound" != 4096 ] || rss_bound=8192
fi
echo "soak: ${length[*]}"
exec "${MIGKIT_SOURCE_DIR:?}/bench/soak" "${length[@]}" --batch 8 --rss-growth-kib "$rss_bound" --fd-growth 0

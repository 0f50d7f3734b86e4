#!/usr/bin/env bash
# The host lock (docs/engine.md, "One change at a time"): two applies at once
# on one simulated machine run one after the other, the second says what it
# waits for and plans against what the first left, and the node ends in the
# second's layout; --lock-timeout bounds the wait. Deterministic: the first
# apply's apply-start hook holds it inside the lock until the test lets go.
set -euo pipefail
: "${MIGKIT_BIN:?}" "${MIGKIT_SIM_BIN:?}"
tmp=$(mktemp -d "${MIGKIT_TEST_TMP:-/tmp}/test-apply-lock.XXXXXX" 2>/dev/null || mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; for f in "$tmp"/*.out "$tmp"/*.err; do [[ -f $f ]] && sed "s|^|$(basename "$f"): |" "$f" >&2; done; exit 1; }
unset MIG_PARTED_CONFIG_FILE MIG_PARTED_SELECTED_CONFIG MIG_PARTED_HOOKS_FILE MIG_PARTED_DEBUG \
      MIG_PARTED_SKIP_RESET MIG_PARTED_MODE_CHANGE_ONLY MIGKIT_RUN_ROOT MIGKIT_LOCK_TIMEOUT
export MIGKIT_SIM_STATE=$tmp/state.json
mk() { "$MIGKIT_BIN" -q --simulate dgx-a100 "$@"; }
# Waits up to 20 s for a file to exist.
wait_file() { for _ in $(seq 200); do [[ -e $1 ]] && return 0; sleep 0.1; done; return 1; }

cat >"$tmp/config.yaml" <<'YAML'
version: v1
mig-configs:
  all-1g:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.5gb": 7
  all-3g:
    - devices: all
      mig-enabled: true
      mig-devices:
        "3g.20gb": 2
YAML
# The first apply's apply-start hook says it runs, then waits for "go".
cat >"$tmp/hooks.yaml" <<YAML
version: v1
hooks:
  apply-start:
    - workdir: "$tmp"
      command: /bin/sh
      args: ["-c", "touch '$tmp/in-hook'; i=0; while [ ! -e '$tmp/go' ] && [ \$i -lt 300 ]; do sleep 0.1; i=\$((i+1)); done"]
YAML

# 1. Two applies with different configs at once: both succeed, in order.
"$MIGKIT_BIN" -q --simulate dgx-a100 apply -f "$tmp/config.yaml" -c all-1g -k "$tmp/hooks.yaml" >"$tmp/first.out" 2>"$tmp/first.err" &
first=$!
pids+=("$first")
wait_file "$tmp/in-hook" || fail "the first apply's hook never ran"
"$MIGKIT_BIN" -q --simulate dgx-a100 apply -f "$tmp/config.yaml" -c all-3g >"$tmp/second.out" 2>"$tmp/second.err" &
second=$!
pids+=("$second")
# The second says what it waits for, and who holds it, while the first holds the lock.
for _ in $(seq 200); do grep -q "Waiting for the host's MIG lock" "$tmp/second.out" && break; sleep 0.1; done
grep -q "Waiting for the host's MIG lock '.*/run/migkit/mig.lock', held by pid $first (migkit apply of 'all-1g')" \
  "$tmp/second.out" || fail "the second apply does not say what it waits for"
kill -0 "$second" 2>/dev/null || fail "the second apply did not wait"
touch "$tmp/go"
wait "$first" || fail "the first apply failed"
wait "$second" || fail "the second apply failed"
pids=()
grep -q "applied successfully" "$tmp/first.out" || fail "first: no success line"
grep -q "applied successfully" "$tmp/second.out" || fail "second: no success line"
# The second planned against the first's result: 1g instances destroyed, 3g created.
grep -q "Plan for 'all-3g': 8 of 8 GPUs change" "$tmp/second.out" || fail "the second did not plan from the first's state"
grep -q "MIG devices: 56 destroyed, 16 created" "$tmp/second.out" || fail "the second did not undo the first's layout"
mk assert -f "$tmp/config.yaml" -c all-3g || fail "the node is not in the second's layout"

# 2. --lock-timeout: a holder that does not let go makes the waiter fail,
# naming the holder, and changes nothing.
rm -f "$tmp/go" "$tmp/in-hook"
"$MIGKIT_BIN" -q --simulate dgx-a100 apply -f "$tmp/config.yaml" -c all-1g -k "$tmp/hooks.yaml" >"$tmp/holder.out" 2>"$tmp/holder.err" &
holder=$!
pids+=("$holder")
wait_file "$tmp/in-hook" || fail "the holder's hook never ran"
mk export >"$tmp/before.yaml"
if mk apply -f "$tmp/config.yaml" -c all-3g --lock-timeout 300ms >"$tmp/late.out" 2>"$tmp/late.err"; then
  fail "an apply succeeded while another held the lock"
fi
grep -q "Timed out after 0\.[0-9] s waiting for the host's MIG lock .*held by pid $holder" "$tmp/late.err" ||
  fail "the timeout does not say who holds the lock"
touch "$tmp/go"
wait "$holder" || fail "the holder failed"
pids=()
mk assert -f "$tmp/config.yaml" -c all-1g || fail "the timed-out apply changed something"

# 3. A bad --lock-timeout is a usage error; a FIFO or a link in place of the
# lock file is refused, never waited on.
set +e
mk apply -f "$tmp/config.yaml" -c all-3g --lock-timeout soon >/dev/null 2>"$tmp/bad.err"
rc=$?
set -e
[[ $rc == 2 ]] || fail "--lock-timeout soon: exit $rc"
grep -q "invalid lock timeout 'soon'" "$tmp/bad.err" || fail "bad --lock-timeout message"
lock=$(dirname "$MIGKIT_SIM_STATE")/$(basename "$MIGKIT_SIM_STATE").host/run/migkit/mig.lock
[[ -f $lock ]] || fail "no lock file at $lock"
rm -f "$lock"
mkfifo "$lock"
set +e
timeout 20 "$MIGKIT_BIN" -q --simulate dgx-a100 apply -f "$tmp/config.yaml" -c all-3g >/dev/null 2>"$tmp/fifo.err"
rc=$?
set -e
[[ $rc == 1 ]] || fail "a FIFO as the lock file: exit $rc"
grep -q "is not a regular file\|Cannot open the host's MIG lock" "$tmp/fifo.err" || fail "FIFO lock: $(cat "$tmp/fifo.err")"
rm -f "$lock"
echo "PASS"

#!/usr/bin/env bash
# A hook that hangs cannot hang `migkit apply` (issue 17): --hook-timeout and
# MIGKIT_HOOK_TIMEOUT kill it (its process group, grandchildren included)
# and the apply fails naming the hook; SIGTERM/SIGINT of apply during a hook
# kills the hook's group and exits 1 saying so; a bad duration is a usage error.
set -euo pipefail
: "${MIGKIT_BIN:?}" "${MIGKIT_SOURCE_DIR:?}"
tmp=$(mktemp -d "${MIGKIT_TEST_TMP:-/tmp}/test-hook-timeout.XXXXXX" 2>/dev/null || mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
unset MIG_PARTED_CONFIG_FILE MIG_PARTED_SELECTED_CONFIG MIG_PARTED_HOOKS_FILE MIG_PARTED_DEBUG MIGKIT_HOOK_TIMEOUT
mk() { "$MIGKIT_BIN" -q --simulate dgx-a100 "$@"; }
cfg=$MIGKIT_SOURCE_DIR/examples/config.yaml  # all-enabled: MIG on, no instances
# The hook starts a grandchild that would outlive it, then hangs.
cat >"$tmp/hang.sh" <<EOF
#!/bin/sh
sleep 300 &
echo \$! >"$tmp/grandchild.pid"
sleep 300
EOF
chmod +x "$tmp/hang.sh"
cat >"$tmp/hooks.yaml" <<YAML
version: v1
hooks:
  apply-start:
    - command: $tmp/hang.sh
YAML
for how in flag env; do
  rm -f "$tmp/grandchild.pid"
  start=$(date +%s)
  set +e
  if [ "$how" = flag ]; then
    mk apply -f "$cfg" -c all-enabled -k "$tmp/hooks.yaml" --hook-timeout 1s >"$tmp/out" 2>&1
  else
    MIGKIT_HOOK_TIMEOUT=1s mk apply -f "$cfg" -c all-enabled -k "$tmp/hooks.yaml" >"$tmp/out" 2>&1
  fi
  rc=$?
  set -e
  took=$(($(date +%s) - start))
  [ "$rc" -eq 1 ] || fail "$how: a hanging hook: exit $rc: $(cat "$tmp/out")"
  [ "$took" -lt 30 ] || fail "$how: apply took ${took}s with a 1s hook timeout"
  grep -q "apply-start hook '$tmp/hang.sh' timed out after 1000 ms" "$tmp/out" || fail "$how: message: $(cat "$tmp/out")"
  pid=$(cat "$tmp/grandchild.pid")
  for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  ! kill -0 "$pid" 2>/dev/null || { kill "$pid"; fail "$how: the hook's child $pid outlived the timeout"; }
done
# SIGTERM and SIGINT of apply during a hook: the hook's group is killed and
# reaped, apply exits 1 saying so, nothing of the hook is left.
for sig in TERM INT; do
  rm -f "$tmp/grandchild.pid"
  "$MIGKIT_BIN" -q --simulate dgx-a100 apply -f "$cfg" -c all-enabled -k "$tmp/hooks.yaml" >"$tmp/out" 2>&1 &
  apply_pid=$!
  for ((i = 0; i < 200; i++)); do [ -s "$tmp/grandchild.pid" ] && break; sleep 0.05; done
  [ -s "$tmp/grandchild.pid" ] || { kill "$apply_pid"; fail "SIG$sig: the hook did not start"; }
  kill -s "$sig" "$apply_pid"
  set +e
  wait "$apply_pid"; rc=$?
  set -e
  [ "$rc" -eq 1 ] || fail "SIG$sig during a hook: exit $rc: $(cat "$tmp/out")"
  grep -q "apply-start hook '$tmp/hang.sh' stopped by SIG$sig: its process group was killed" "$tmp/out" ||
    fail "SIG$sig: message: $(cat "$tmp/out")"
  pid=$(cat "$tmp/grandchild.pid")
  for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done # a zombie until reaped
  ! kill -0 "$pid" 2>/dev/null || { kill "$pid"; fail "SIG$sig: the hook's child $pid outlived apply"; }
  ! pgrep -f "$tmp/hang.sh" >/dev/null || fail "SIG$sig: the hook itself outlived apply"
done
set +e
mk apply -f "$cfg" -c all-enabled --hook-timeout soon >/dev/null 2>"$tmp/err"; rc=$?
set -e
[ "$rc" -eq 2 ] || fail "--hook-timeout soon: exit $rc"
grep -q "invalid hook timeout 'soon'" "$tmp/err" || fail "--hook-timeout soon: $(cat "$tmp/err")"
echo ok

#!/usr/bin/env bash
# The integration-test wrapper (run-with-cores.sh, issue 27) leaves evidence
# of a crash: a program that dies of SIGSEGV inside a test leaves a core,
# and the wrapper prints a gdb backtrace of it after the test's output and
# keeps the core, with the test's own exit status.
set -euo pipefail
pattern=$(cat /proc/sys/kernel/core_pattern 2>/dev/null || echo core)
if [ "${pattern#|}" != "$pattern" ]; then
  echo "SKIP: core_pattern pipes to ${pattern%% *}: cores do not reach files here"
  exit 0
fi
command -v gdb >/dev/null || { echo "SKIP: no gdb"; exit 0; }
[ "$(ulimit -Hc)" != 0 ] || { echo "SKIP: the hard core size limit is 0"; exit 0; }
tmp=$(mktemp -d "${MIGKIT_TEST_TMP:-/tmp}/test-harness-cores.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/crashing-test.sh" <<'EOF'
cd "$MIGKIT_TEST_TMP"
sleep 30 &
p=$!
sleep 0.3
kill -SEGV "$p"
wait "$p" || true
exit 3
EOF
rc=0
(cd "$tmp" && MIGKIT_TEST_TMP=$tmp bash "$(dirname "$0")/run-with-cores.sh" "$tmp/crashing-test.sh") \
  >"$tmp/out" 2>&1 || rc=$?
cat "$tmp/out"
[ "$rc" = 3 ] || { echo "FAIL: the wrapper changed the test's exit status 3 to $rc"; exit 1; }
grep -q '^=== core: .* (from .*sleep) ===$' "$tmp/out" || { echo "FAIL: no core reported"; exit 1; }
grep -q '^#0 ' "$tmp/out" || { echo "FAIL: no backtrace printed"; exit 1; }
ls "$tmp"/cores/crashing-test-* >/dev/null 2>&1 || { echo "FAIL: the core was not kept"; exit 1; }
echo "ok"

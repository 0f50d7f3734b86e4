#!/usr/bin/env bash
# Output a person reads (issue 18): one meaning for -o, its errors listing
# the values each command accepts; `scheduler inventory` one line unless
# --indent; `scheduler node --once` says what it published and the agent
# says once what it waits for; migkit-sim commands say what changed.
set -euo pipefail
: "${MIGKIT_BIN:?}" "${MIGKIT_SIM_BIN:?}" "${MIGKIT_SOURCE_DIR:?}"
tmp=$(mktemp -d "${MIGKIT_TEST_TMP:-/tmp}/test-output.XXXXXX" 2>/dev/null || mktemp -d)
api_pid= agent_pid=
cleanup() {
  for p in $agent_pid $api_pid; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
unset MIG_PARTED_OUTPUT_FORMAT MIG_PARTED_CONFIG_FILE MIG_PARTED_SELECTED_CONFIG NODE_NAME KUBECONFIG
export MIGKIT_SIM_STATE=$tmp/sim.json
mk() { "$MIGKIT_BIN" --simulate dgx-a100 "$@"; }
cp "$MIGKIT_SOURCE_DIR/examples/config.yaml" "$tmp/config.yaml"

# -o: each command, a value it refuses, and the accepted values it names.
check_o() {  # WANT COMMAND...
  local want=$1; shift
  set +e; "$@" -o xml >/dev/null 2>"$tmp/err"; local rc=$?; set -e
  [ "$rc" = 2 ] || fail "$* -o xml: exit $rc"
  grep -qx "Error: unrecognized 'output-format': xml ($want; docs/cli.md)" "$tmp/err" ||
    fail "$* -o xml: $(cat "$tmp/err")"
}
check_o "migkit profiles accepts table, json or yaml" mk profiles
check_o "migkit export accepts json or yaml" mk export
check_o "migkit generate-config accepts json or yaml" mk generate-config
check_o "migkit plan accepts table or json" mk plan -f "$tmp/config.yaml"
check_o "migkit assert accepts table or json" mk assert -f "$tmp/config.yaml"
check_o "migkit apply accepts table or json" mk apply -f "$tmp/config.yaml"
check_o "migkit labels accepts table or json" mk labels
check_o "migkit service status accepts table or json" mk service status
check_o "migkit scheduler accepts json" mk scheduler inventory --no-kube
# Every format a command documents works, under both long names.
for f in table json yaml; do mk profiles -o "$f" >/dev/null || fail "profiles -o $f"; done
mk export --output json >/dev/null || fail "export --output json"
mk generate-config --output json >/dev/null || fail "generate-config --output json"
mk labels --output-format json >/dev/null || fail "labels --output-format json"
mk labels -o text >/dev/null || fail "labels -o text (the old name of table)"
mk plan -f "$tmp/config.yaml" -c all-disabled --output-format json >/dev/null || fail "plan --output-format json"

# scheduler inventory: the annotation's bytes, one line; --indent to read.
mk scheduler inventory --no-kube >"$tmp/inv"
[ "$(wc -l <"$tmp/inv")" = 1 ] || fail "inventory is $(wc -l <"$tmp/inv") lines, want 1"
mk scheduler inventory --no-kube -o json --indent >"$tmp/inv2"
[ "$(wc -l <"$tmp/inv2")" -gt 100 ] || fail "inventory --indent is not indented"
python3 -c 'import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); assert a == b and len(a["gpus"]) == 8' \
  "$tmp/inv" "$tmp/inv2" || fail "inventory and inventory --indent differ"

# migkit-sim: every command that changes the machine says what changed.
sim() { "$MIGKIT_SIM_BIN" "$@"; }
[ "$(sim fault set nvmlDeviceSetMigMode 2 IN_USE)" = "Call 2 of nvmlDeviceSetMigMode from now fails with IN_USE" ] ||
  fail "fault set says: $(sim fault set nvmlDeviceSetMigMode 2 IN_USE)"
[ "$(sim fault crash-after 3)" = "The process making the mutating NVML call 3 from now exits with 137" ] || fail "fault crash-after"
[ "$(sim fault clear)" = "All faults cleared" ] || fail "fault clear"
[ "$(sim xid --gpu 1 79)" = "Xid 79 raised on GPU 1" ] || fail "xid"
pid=$(sim process add --gpu 0)
[ "$(sim process remove "$pid")" = "Process $pid ended" ] || fail "process remove"
sim reboot | grep -q '^Machine rebooted' || fail "reboot says nothing"

# The node agent against a stub apiserver.
# shellcheck source=tests/integration/stub-apiserver.sh
. "$MIGKIT_SOURCE_DIR/tests/integration/stub-apiserver.sh"
stub_apiserver_start "$tmp"
api_pid=$stub_api_pid
mk scheduler node -n n1 --kubeconfig "$tmp/kubeconfig" --once >"$tmp/once.out" 2>&1 ||
  fail "node --once: $(cat "$tmp/once.out")"
grep -q "Published the inventory of node 'n1' (annotation migkit.io/mig-inventory, [0-9]* bytes): 8 MIG-capable GPUs, 0 instances; 0 instances created, 0 destroyed, 0 pods annotated$" \
  "$tmp/once.out" || fail "node --once says: $(cat "$tmp/once.out")"
# Not through mk(): $! must be the agent itself, not a subshell whose kill
# left the agent running after the test.
"$MIGKIT_BIN" --simulate dgx-a100 scheduler node -n n1 --kubeconfig "$tmp/kubeconfig" >"$tmp/agent.out" 2>&1 &
agent_pid=$!
for _ in $(seq 100); do grep -q 'Waiting for pod changes' "$tmp/agent.out" && break; sleep 0.1; done
sleep 1.5
kill "$agent_pid"; wait "$agent_pid" || true
[ "$(grep -c "Waiting for pod changes on node 'n1' (a full pass every 30 s)" "$tmp/agent.out")" = 1 ] ||
  fail "the agent's wait, said once: $(cat "$tmp/agent.out")"
echo "PASS"

#!/usr/bin/env bash
# Hooks and what they leave (docs/engine.md, "Hooks"): a failed hook's output
# is printed escaped as the logs escape it, each line marked as the hook's,
# so it cannot drive the terminal nor forge a line of ours; a hook's
# background child is killed when the hook returns, unless it left the
# hook's process group (setsid).
set -euo pipefail
: "${MIGKIT_BIN:?}" "${MIGKIT_SIM_BIN:?}"
tmp=$(mktemp -d "${MIGKIT_TEST_TMP:-/tmp}/test-apply-hooks.XXXXXX" 2>/dev/null || mktemp -d)
cleanup() {
  for f in "$tmp"/*.pid; do [[ -s $f ]] && { kill -KILL "$(cat "$f")" 2>/dev/null || true; }; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
unset MIG_PARTED_CONFIG_FILE MIG_PARTED_SELECTED_CONFIG MIG_PARTED_HOOKS_FILE MIG_PARTED_DEBUG \
      MIG_PARTED_SKIP_RESET MIG_PARTED_MODE_CHANGE_ONLY MIGKIT_RUN_ROOT
export MIGKIT_SIM_STATE=$tmp/state.json
mk() { "$MIGKIT_BIN" -q --simulate a100-40gb "$@"; }
# Running, not a zombie nor gone.
running() { [[ -r /proc/$1/stat ]] && ! awk '{ s = $0; sub(/.*\) /, "", s); exit (substr(s, 1, 1) == "Z" ? 0 : 1) }' "/proc/$1/stat"; }

cat >"$tmp/config.yaml" <<'YAML'
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-1g:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.5gb": 7
YAML

# 1. A hook's background child ends with the hook; one started with setsid
# (out of the hook's process group) is left alone.
cat >"$tmp/hooks.yaml" <<YAML
version: v1
hooks:
  apply-start:
    - workdir: "$tmp"
      command: /bin/sh
      args: ["-c", "sleep 300 >/dev/null 2>&1 & echo \$! >'$tmp/child.pid'"]
    - workdir: "$tmp"
      command: /bin/sh
      args: ["-c", "setsid sh -c 'echo \$\$ >$tmp/kept.tmp && mv $tmp/kept.tmp $tmp/kept.pid && exec sleep 300' >/dev/null 2>&1 & while [ ! -s '$tmp/kept.pid' ]; do sleep 0.05; done"]
YAML
mk apply -f "$tmp/config.yaml" -c all-1g -k "$tmp/hooks.yaml" >"$tmp/apply.out" 2>&1 || fail "apply: $(cat "$tmp/apply.out")"
child=$(cat "$tmp/child.pid")
kept=$(cat "$tmp/kept.pid")
for _ in $(seq 50); do running "$child" || break; sleep 0.1; done
running "$child" && fail "the hook's background child $child outlived the apply"
running "$kept" || fail "the child that left the hook's group ($kept) was killed"
kill -KILL "$kept"

# 2. A failed hook's output: escapes shown, not sent; no line of it passes for ours.
printf '#!/bin/sh\nprintf "plain line\\n\\033[2J\\033]0;owned\\007\\rError: forged by the hook\\nlast\\302\\233[31m"\nexit 3\n' \
  >"$tmp/bad-hook.sh"
chmod +x "$tmp/bad-hook.sh"
cat >"$tmp/bad-hooks.yaml" <<YAML
version: v1
hooks:
  apply-start:
    - workdir: "$tmp"
      command: "$tmp/bad-hook.sh"
YAML
if mk apply -f "$tmp/config.yaml" -c all-disabled -k "$tmp/bad-hooks.yaml" >"$tmp/bad.out" 2>"$tmp/bad.err"; then
  fail "a failed hook did not fail the apply"
fi
grep -q "Output of the failed apply-start hook" "$tmp/bad.err" || fail "no hook output header: $(cat "$tmp/bad.err")"
grep -qF '  | plain line' "$tmp/bad.err" || fail "plain output line missing: $(cat "$tmp/bad.err")"
grep -qF '  | \x1b[2J\x1b]0;owned\x07\rError: forged by the hook' "$tmp/bad.err" || fail "escaped line missing: $(cat -v "$tmp/bad.err")"
grep -qF '  | last\u009b[31m' "$tmp/bad.err" || fail "C1 control not escaped: $(cat -v "$tmp/bad.err")"
LC_ALL=C grep -q $'[\x01-\x08\x0b-\x1f\x7f]' "$tmp/bad.err" && fail "raw control characters in the output: $(cat -v "$tmp/bad.err")"
LC_ALL=C grep -q $'\xc2\x9b' "$tmp/bad.err" && fail "raw C1 control in the output"
grep -q '^Error: forged' "$tmp/bad.err" && fail "a forged line passes for ours"
grep -q "^Error: apply-start hook '$tmp/bad-hook.sh' failed with exit status 3" "$tmp/bad.err" || fail "no error line: $(cat "$tmp/bad.err")"
# -o json: one valid JSON event with the output as it was (JSON escapes it).
if mk apply -f "$tmp/config.yaml" -c all-disabled -k "$tmp/bad-hooks.yaml" -o json >"$tmp/bad.json" 2>/dev/null; then
  fail "a failed hook did not fail the apply (json)"
fi
python3 - "$tmp/bad.json" <<'EOF' || fail "json hook output"
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1])]
out = [e for e in evs if e["event"] == "hook-output"]
assert len(out) == 1 and "Error: forged" in out[0]["output"] and "\x1b[2J" in out[0]["output"], out
EOF
echo "PASS"

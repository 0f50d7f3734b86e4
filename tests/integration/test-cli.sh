#!/usr/bin/env bash
# The first user-visible commands, driven as a user would: --version, the
# errors for a missing or broken NVML, `profiles` and `export` on simulated
# machines (table, JSON, YAML), export grouping after creating instances.
set -euo pipefail
: "${MIGKIT_BIN:?}" "${MIGKIT_SIM_BIN:?}" "${MIGKIT_TEST_PROG_RAW_NVML:?}"
tmp=$(mktemp -d "${MIGKIT_TEST_TMP:-/tmp}/test-cli.XXXXXX" 2>/dev/null || mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
raw() { "$MIGKIT_TEST_PROG_RAW_NVML" "$@"; }
mkgi() { raw create "$@" | sed -n 's/^gi id=\([0-9]*\) .*/\1/p'; }
unset MIG_PARTED_OUTPUT_FORMAT MIG_PARTED_CONFIG_LABEL MIG_PARTED_DEBUG

# --version
out=$("$MIGKIT_BIN" --version)
grep -q '^migkit [0-9]' <<<"$out" || fail "--version: $out"
grep -q '^git revision: ' <<<"$out" || fail "--version lacks the git revision: $out"
grep -q '^build: ' <<<"$out" || fail "--version lacks the build type: $out"

# A missing NVML library: one clear line, exit 1, no crash.
set +e
err=$(MIGKIT_NVML_LIB=/nonexistent/libnvidia-ml.so.1 "$MIGKIT_BIN" profiles 2>&1 >/dev/null); rc=$?
set -e
[ "$rc" -eq 1 ] || fail "missing NVML: exit $rc"
[ "$(wc -l <<<"$err")" -eq 1 ] || fail "missing NVML: more than one line: $err"
grep -q "^Error: Cannot load the NVML library '/nonexistent/libnvidia-ml.so.1'" <<<"$err" || fail "missing NVML: $err"

# A library lacking a required symbol: named, one line.
if [ -n "${MIGKIT_TEST_BROKEN_NVML:-}" ]; then
  set +e
  err=$(MIGKIT_NVML_LIB=$MIGKIT_TEST_BROKEN_NVML "$MIGKIT_BIN" export 2>&1 >/dev/null); rc=$?
  set -e
  [ "$rc" -eq 1 ] || fail "broken NVML: exit $rc"
  [ "$(wc -l <<<"$err")" -eq 1 ] || fail "broken NVML: more than one line: $err"
  grep -q "lacks the required symbol 'nvmlSystemGetDriverVersion'" <<<"$err" || fail "broken NVML: $err"
fi

# Usage errors exit 2.
set +e
"$MIGKIT_BIN" frobnicate >/dev/null 2>&1; rc=$?
set -e
[ "$rc" -eq 2 ] || fail "unknown command: exit $rc"
set +e
MIGKIT_SIM_STATE=$tmp/x.json "$MIGKIT_BIN" --simulate dgx-a100 export -o xml >/dev/null 2>"$tmp/err"; rc=$?
set -e
[ "$rc" -eq 2 ] || fail "bad -o: exit $rc"
grep -q "unrecognized 'output-format': xml" "$tmp/err" || fail "bad -o message: $(cat "$tmp/err")"

# The option tail every subcommand shares (src/cli/options.c): --help exits 0
# with the usage, an unknown option, a missing argument and a leftover
# argument exit 2; a flag wins over its environment variable.
for cmd in profiles export generate-config labels device-plugin manager "service status" "scheduler serve"; do
  # shellcheck disable=SC2086
  "$MIGKIT_BIN" $cmd --help >"$tmp/help" 2>&1 || fail "$cmd --help: exit $?"
  grep -qi 'usage\|options' "$tmp/help" || fail "$cmd --help prints no usage: $(head -3 "$tmp/help")"
  set +e
  # shellcheck disable=SC2086
  "$MIGKIT_BIN" $cmd --no-such-option >/dev/null 2>"$tmp/err"; rc=$?
  set -e
  [ "$rc" -eq 2 ] || fail "$cmd --no-such-option: exit $rc"
  grep -q "no-such-option" "$tmp/err" || fail "$cmd --no-such-option message: $(cat "$tmp/err")"
done
# The extender listens on loopback unless told otherwise (issue 17): the
# help says so, and the socket it binds on port 0 is 127.0.0.1's
# (/proc/net/tcp: local address 0100007F:<port in hex>, state 0A LISTEN).
"$MIGKIT_BIN" scheduler serve --help >"$tmp/help" 2>&1
grep -q 'listen on (127.0.0.1' "$tmp/help" || fail "scheduler serve's default address is not 127.0.0.1"
# The extender lists nodes and pods before it listens: a stub apiserver.
# shellcheck source=tests/integration/stub-apiserver.sh
. "$MIGKIT_SOURCE_DIR/tests/integration/stub-apiserver.sh"
stub_apiserver_start "$tmp"
api_pid=$stub_api_pid
: >"$tmp/serve.out"
"$MIGKIT_BIN" scheduler serve --kubeconfig "$tmp/kubeconfig" --port 0 >>"$tmp/serve.out" 2>"$tmp/serve.err" &
serve_pid=$!
port=
for ((i = 0; i < 300; i++)); do
  port=$(sed -n 's/^listening on port \([0-9]*\)$/\1/p' "$tmp/serve.out")
  [ -z "$port" ] && kill -0 "$serve_pid" 2>/dev/null || break
  sleep 0.1
done
[ -n "$port" ] || { kill "$serve_pid" "$api_pid" 2>/dev/null || true; fail "scheduler serve --port 0 printed no port: $(cat "$tmp/serve.err")"; }
hexport=$(printf '%04X' "$port")
listen=$(awk -v p="$hexport" '$4 == "0A" && $2 ~ (":" p "$") {print $2}' /proc/net/tcp)
kill "$serve_pid" "$api_pid" 2>/dev/null || true
wait "$serve_pid" "$api_pid" || true
[ "$listen" = "0100007F:$hexport" ] ||
  fail "scheduler serve's default socket on port $port is '${listen:-none}', not 127.0.0.1"
for cmd in profiles export generate-config labels device-plugin manager "service status"; do
  set +e
  # shellcheck disable=SC2086
  "$MIGKIT_BIN" $cmd stray >/dev/null 2>"$tmp/err"; rc=$?
  set -e
  [ "$rc" -eq 2 ] || fail "$cmd stray: exit $rc"
  grep -q "^Error: unexpected argument 'stray'$" "$tmp/err" || fail "$cmd stray message: $(cat "$tmp/err")"
done
set +e
"$MIGKIT_BIN" export -o >/dev/null 2>"$tmp/err"; rc=$?
set -e
[ "$rc" -eq 2 ] || fail "export -o without a value: exit $rc"
grep -q "requires an argument" "$tmp/err" || fail "missing argument message: $(cat "$tmp/err")"
set +e
MIG_PARTED_OUTPUT_FORMAT=xml "$MIGKIT_BIN" export -o json >/dev/null 2>"$tmp/err"; rc=$?
MIG_PARTED_OUTPUT_FORMAT=xml "$MIGKIT_BIN" export >/dev/null 2>"$tmp/err2"; rc2=$?
set -e
! grep -q "unrecognized" "$tmp/err" || fail "the flag does not win over MIG_PARTED_OUTPUT_FORMAT: $(cat "$tmp/err")"
[ "$rc2" -eq 2 ] && grep -q "unrecognized 'output-format': xml" "$tmp/err2" \
  || fail "MIG_PARTED_OUTPUT_FORMAT is not read: exit $rc2, $(cat "$tmp/err2")"

# profiles on a simulated DGX A100 (fresh state: MIG disabled, as shipped).
export MIGKIT_SIM_STATE=$tmp/dgx-a100.json
"$MIGKIT_BIN" --simulate dgx-a100 profiles >"$tmp/profiles.txt"
grep -q '^GPUs 0-7: NVIDIA A100-SXM4-40GB (8 GPUs, MIG disabled)$' "$tmp/profiles.txt" \
  || fail "profiles header: $(head -5 "$tmp/profiles.txt")"
for row in '1g.5gb +19 +1 +4864 MiB +14 +7 +\{0,1,2,3,4,5,6\}:1' \
           '1g.10gb +15 +1 +9856 MiB .* +4 +\{0,2,4,6\}:2' \
           '2g.10gb +14 +2 +9856 MiB +28 +3 +\{0,2,4\}:2 +1c.2g.10gb, 2g.10gb' \
           '3g.20gb +9 +3 +19968 MiB +42 +2 +\{0,4\}:4 +1c.3g.20gb, 2c.3g.20gb, 3g.20gb' \
           '4g.20gb +5 +4 +19968 MiB +56 +1 +\{0\}:4 +1c.4g.20gb, 2c.4g.20gb, 4g.20gb' \
           '7g.40gb +0 +7 +40192 MiB +98 +1 +\{0\}:8 +1c.7g.40gb, 2c.7g.40gb, 3c.7g.40gb, 4c.7g.40gb, 7g.40gb'; do
  grep -Eq "^  $row" "$tmp/profiles.txt" || fail "profiles lacks row /$row/: $(cat "$tmp/profiles.txt")"
done

"$MIGKIT_BIN" --simulate dgx-a100 profiles -o json >"$tmp/profiles.json"
"$MIGKIT_BIN" --simulate dgx-a100 profiles -o yaml >"$tmp/profiles.yaml"
python3 - "$tmp/profiles.json" "$tmp/profiles.yaml" <<'PY'
import json, sys, yaml
j = json.load(open(sys.argv[1]))
y = yaml.safe_load(open(sys.argv[2]))
assert j == y, "YAML and JSON outputs differ"
assert len(j["gpus"]) == 8, len(j["gpus"])
g = j["gpus"][0]
assert g["pci_device_id"] == "0x20B010DE", g["pci_device_id"]
assert g["mig_mode"] == {"current": "disabled", "pending": "disabled"}, g["mig_mode"]
got = {p["name"]: (p["id"], p["slices"], p["memory_mib"], p["max_count"],
                   [(x["start"], x["size"]) for x in p["placements"]]) for p in g["gpu_instance_profiles"]}
want = {
  "1g.5gb": (19, 1, 4864, 7, [(i, 1) for i in range(7)]),
  "1g.5gb+me": (20, 1, 4864, 1, [(i, 1) for i in range(7)]),
  "1g.10gb": (15, 1, 9856, 4, [(0, 2), (2, 2), (4, 2), (6, 2)]),
  "2g.10gb": (14, 2, 9856, 3, [(0, 2), (2, 2), (4, 2)]),
  "3g.20gb": (9, 3, 19968, 2, [(0, 4), (4, 4)]),
  "4g.20gb": (5, 4, 19968, 1, [(0, 4)]),
  "7g.40gb": (0, 7, 40192, 1, [(0, 8)]),
}
assert got == want, (got, want)
assert len({x["uuid"] for x in j["gpus"]}) == 8
PY

# -i selects GPUs; an unknown index is an error.
"$MIGKIT_BIN" --simulate dgx-a100 profiles -i 3 -o json | python3 -c '
import json, sys; j = json.load(sys.stdin); assert [g["index"] for g in j["gpus"]] == [3]'
set +e
"$MIGKIT_BIN" --simulate dgx-a100 profiles -i 9 >/dev/null 2>&1; rc=$?
set -e
[ "$rc" -eq 1 ] || fail "profiles -i 9: exit $rc"

# export of the fresh machine: one entry, all GPUs, MIG disabled.
"$MIGKIT_BIN" --simulate dgx-a100 export >"$tmp/export.yaml"
diff -u - "$tmp/export.yaml" <<'EOF2' || fail "export of a fresh dgx-a100"
version: v1
mig-configs:
  current:
  - devices: all
    mig-devices: {}
    mig-enabled: false
EOF2

# Make a layout with the raw NVML client: MIG on everywhere (A100: reset
# applies it), GPUs 0-5 as 3g.20gb + 2g.10gb + 1g.5gb x2, GPU 6 as 7g.40gb, GPU 7 empty.
for i in 0 1 2 3 4 5 6 7; do raw set-mig "$i" 1 >/dev/null; done
"$MIGKIT_SIM_BIN" reset --gpu 0,1,2,3,4,5,6,7 >/dev/null
for i in 0 1 2 3 4 5; do
  gi=$(mkgi "$i" 9 4); raw create-ci "$i" "$gi" 2 >/dev/null
  gi=$(mkgi "$i" 14 0); raw create-ci "$i" "$gi" 1 >/dev/null
  gi=$(mkgi "$i" 19 2); raw create-ci "$i" "$gi" 0 >/dev/null
  gi=$(mkgi "$i" 19 3); raw create-ci "$i" "$gi" 0 >/dev/null
done
gi=$(mkgi 6 0 0); raw create-ci 6 "$gi" 4 >/dev/null

"$MIGKIT_BIN" --simulate dgx-a100 export -l mine >"$tmp/export2.yaml"
diff -u - "$tmp/export2.yaml" <<'EOF2' || fail "export after creating instances"
version: v1
mig-configs:
  mine:
  - devices: [0, 1, 2, 3, 4, 5]
    mig-devices:
      1g.5gb: 2
      2g.10gb: 1
      3g.20gb: 1
    mig-enabled: true
  - devices: [6]
    mig-devices:
      7g.40gb: 1
    mig-enabled: true
  - devices: [7]
    mig-devices: {}
    mig-enabled: true
EOF2
"$MIGKIT_BIN" --simulate dgx-a100 export -o json >"$tmp/export2.json"
python3 - "$tmp/export2.json" "$tmp/export2.yaml" <<'PY'
import json, sys, yaml
j = json.load(open(sys.argv[1])); y = yaml.safe_load(open(sys.argv[2]))
assert j["version"] == "v1"
assert j["mig-configs"]["current"] == y["mig-configs"]["mine"], (j, y)
PY

# A mixed node keeps device filters.
export MIGKIT_SIM_STATE=$tmp/mixed.json
"$MIGKIT_BIN" --simulate mixed-a100 export >"$tmp/export3.yaml"
diff -u - "$tmp/export3.yaml" <<'EOF2' || fail "export of a fresh mixed node"
version: v1
mig-configs:
  current:
  - devices: all
    mig-devices: {}
    mig-enabled: false
EOF2
raw set-mig 4 1 >/dev/null
"$MIGKIT_SIM_BIN" reset --gpu 4 >/dev/null
"$MIGKIT_BIN" --simulate mixed-a100 export >"$tmp/export4.yaml"
diff -u - "$tmp/export4.yaml" <<'EOF2' || fail "export of a mixed node"
version: v1
mig-configs:
  current:
  - device-filter: ["0x20B010DE", "0x20B210DE"]
    devices: [0, 1, 2, 3, 5, 6, 7]
    mig-devices: {}
    mig-enabled: false
  - device-filter: "0x20B210DE"
    devices: [4]
    mig-devices: {}
    mig-enabled: true
EOF2

#!/usr/bin/env bash
# migkit generate-config through the real binary on the simulator
# (mig-parted v0.15.0 generate-config): the whole config of a DGX A100 as data, YAML and JSON
# equal, device filters on a mixed node, the A30 list, output files written
# atomically, and the generated file accepted by apply and assert.
set -euo pipefail
: "${MIGKIT_BIN:?}"
tmp=$(mktemp -d "${MIGKIT_TEST_TMP:-/tmp}/test-generate.XXXXXX" 2>/dev/null || mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
unset MIG_PARTED_OUTPUT_FILE MIG_PARTED_OUTPUT_FORMAT MIG_PARTED_CONFIG_FILE MIG_PARTED_SELECTED_CONFIG \
      MIG_PARTED_HOOKS_FILE MIG_PARTED_DEBUG MIG_PARTED_SKIP_RESET MIG_PARTED_MODE_CHANGE_ONLY
# mk MACHINE ARGS...: each machine with a state file of its own.
mk() { local m=$1; shift; MIGKIT_SIM_STATE=$tmp/$m.state "$MIGKIT_BIN" -q --simulate "$m" "$@"; }

# --- DGX A100: the whole config, as data ---
mk dgx-a100 generate-config >"$tmp/a100.yaml"
mk dgx-a100 generate-config -o json >"$tmp/a100.json"
MIG_PARTED_OUTPUT_FORMAT=json mk dgx-a100 generate-config >"$tmp/a100-env.json"
cmp -s "$tmp/a100.json" "$tmp/a100-env.json" || fail "MIG_PARTED_OUTPUT_FORMAT=json differs from -o json"
python3 - "$tmp/a100.yaml" "$tmp/a100.json" <<'PY'
import json, sys, yaml
text = open(sys.argv[1]).read()
y = yaml.safe_load(text)
j = json.load(open(sys.argv[2]))

def one(devices):
    return [{"devices": "all", "mig-enabled": True, "mig-devices": devices}]

want = {
    "version": "v1",
    "mig-configs": {
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
        "all-enabled": one({}),
        "all-1g.5gb": one({"1g.5gb": 7}),
        "all-1g.5gb.me": one({"1g.5gb+me": 1}),
        "all-1g.10gb": one({"1g.10gb": 4}),
        "all-2g.10gb": one({"2g.10gb": 3}),
        "all-3g.20gb": one({"3g.20gb": 2}),
        "all-4g.20gb": one({"4g.20gb": 1}),
        "all-7g.40gb": one({"7g.40gb": 1}),
        "all-balanced": one({"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}),
    },
}
assert y == want, "YAML:\n%s" % text
assert j == y, "JSON and YAML differ:\n%s\n%s" % (j, y)
assert text.startswith("version: v1\nmig-configs:\n"), text[:40]
names = list(j["mig-configs"])
assert names == sorted(names), names
PY

# --- -f: the same bytes, written atomically; MIG_PARTED_OUTPUT_FILE too ---
mk dgx-a100 generate-config -f "$tmp/out.yaml"
cmp -s "$tmp/a100.yaml" "$tmp/out.yaml" || fail "-f output differs from stdout"
echo stale >"$tmp/env.json"
MIG_PARTED_OUTPUT_FILE=$tmp/env.json mk dgx-a100 generate-config -o json >"$tmp/stdout"
[ ! -s "$tmp/stdout" ] || fail "-f also wrote to stdout: $(cat "$tmp/stdout")"
cmp -s "$tmp/a100.json" "$tmp/env.json" || fail "MIG_PARTED_OUTPUT_FILE output differs"
[ "$(stat -c %a "$tmp/env.json")" = 644 ] || fail "output file mode $(stat -c %a "$tmp/env.json")"
leftover=$(find "$tmp" -name '*.tmp.*')
[ -z "$leftover" ] || fail "temporary files left: $leftover"
set +e
mk dgx-a100 generate-config -f "$tmp/no/such/dir/out.yaml" 2>"$tmp/err"; rc=$?
set -e
[ "$rc" -eq 1 ] || fail "unwritable -f: exit $rc"
grep -q "^Error: .*$tmp/no/such/dir/out.yaml" "$tmp/err" || fail "unwritable -f message: $(cat "$tmp/err")"

# --- usage and no-MIG errors ---
set +e
mk dgx-a100 generate-config -o xml >/dev/null 2>"$tmp/err"; rc=$?
set -e
[ "$rc" -eq 2 ] || fail "bad -o: exit $rc"
grep -q "unrecognized 'output-format': xml" "$tmp/err" || fail "bad -o message: $(cat "$tmp/err")"
set +e
mk t4 generate-config >"$tmp/out" 2>"$tmp/err"; rc=$?
set -e
[ "$rc" -eq 1 ] || fail "no MIG GPU: exit $rc"
[ ! -s "$tmp/out" ] || fail "no MIG GPU: wrote $(cat "$tmp/out")"
grep -q '^Error: No MIG-capable GPU found' "$tmp/err" || fail "no MIG GPU message: $(cat "$tmp/err")"
# Help read whole, then matched (grep -q's early exit is a SIGPIPE under pipefail).
out=$("$MIGKIT_BIN" generate-config --help) || true
grep -q '^Usage: migkit generate-config' <<<"$out" || fail "generate-config --help"
out=$("$MIGKIT_BIN" --help) || true
grep -q '^  generate-config ' <<<"$out" || fail "--help lacks generate-config"

# --- mixed node: filters everywhere but all-disabled/all-enabled ---
mk mixed-a100 generate-config >"$tmp/mixed.yaml"
mk mixed-a100 generate-config -o json >"$tmp/mixed.json"
grep -q '^  - device-filter: \["0x20B010DE"\]$' "$tmp/mixed.yaml" || fail "filters not quoted in flow style: $(cat "$tmp/mixed.yaml")"
python3 - "$tmp/mixed.yaml" "$tmp/mixed.json" <<'PY'
import json, sys, yaml
y = yaml.safe_load(open(sys.argv[1]))
j = json.load(open(sys.argv[2]))
assert j == y, "JSON and YAML differ"
c = y["mig-configs"]
A40, A80 = "0x20B010DE", "0x20B210DE"
for name, entries in c.items():
    for e in entries:
        if name in ("all-disabled", "all-enabled"):
            assert "device-filter" not in e, (name, e)
        else:
            assert isinstance(e["device-filter"], list) and e["devices"] == "all", (name, e)
def entry(f, devices):
    return {"device-filter": f, "devices": "all", "mig-enabled": True, "mig-devices": devices}
assert c["all-1g.10gb"] == [entry([A40], {"1g.10gb": 4}), entry([A80], {"1g.10gb": 7})], c["all-1g.10gb"]
assert c["all-7g.40gb"] == [entry([A40], {"7g.40gb": 1})], c["all-7g.40gb"]
assert c["all-7g.80gb"] == [entry([A80], {"7g.80gb": 1})], c["all-7g.80gb"]
assert c["all-balanced"] == [entry([A40], {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}),
                             entry([A80], {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1})], c["all-balanced"]
assert len(c) == 2 + 7 + 7 - 1 + 1, sorted(c)  # 1g.10gb is on both models
PY

# --- A30: upstream's hard-coded profile list; B200: attribute names ---
mk a30-24gb generate-config -o json >"$tmp/a30.json"
python3 - "$tmp/a30.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))["mig-configs"]
got = {k: v[0].get("mig-devices") for k, v in c.items()}
assert all(len(v) == 1 for v in c.values()), c
assert got == {"all-disabled": None, "all-enabled": {}, "all-1g.6gb": {"1g.6gb": 4},
               "all-1g.6gb.me": {"1g.6gb+me": 1}, "all-2g.12gb": {"2g.12gb": 2},
               "all-2g.12gb.me": {"2g.12gb+me": 1}, "all-4g.24gb": {"4g.24gb": 1},
               "all-balanced": {"1g.6gb": 2, "2g.12gb": 1}}, got
PY
mk b200 generate-config -o json >"$tmp/b200.json"
python3 - "$tmp/b200.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))["mig-configs"]
for name, c_entries in c.items():
    if name in ("all-disabled", "all-enabled", "all-balanced"):
        continue
    (profile,) = c_entries[0]["mig-devices"]
    assert name == "all-" + profile.replace("+", "."), (name, profile)
assert c["all-balanced"][0]["mig-devices"] == {"1g.23gb": 2, "2g.45gb": 1, "3g.90gb": 1}, c["all-balanced"]
PY

# --- the generated file drives apply and assert ---
mk dgx-a100 generate-config -f "$tmp/gen.yaml"
mk dgx-a100 apply -f "$tmp/gen.yaml" -c all-balanced >"$tmp/apply.out" || fail "apply all-balanced: $(cat "$tmp/apply.out")"
mk dgx-a100 assert -f "$tmp/gen.yaml" -c all-balanced >/dev/null || fail "assert all-balanced after apply"
MIGKIT_SIM_STATE=$tmp/dgx-a100.state "$MIGKIT_BIN" --simulate dgx-a100 export -o json >"$tmp/export.json"
python3 - "$tmp/export.json" <<'PY'
import json, sys
e = json.load(open(sys.argv[1]))["mig-configs"]["current"]
assert e == [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}}], e
PY
# Every generated config applies and then asserts on the DGX A100.
for c in $(python3 -c 'import json,sys; print(" ".join(json.load(open(sys.argv[1]))["mig-configs"]))' "$tmp/a100.json"); do
  mk dgx-a100 apply -f "$tmp/gen.yaml" -c "$c" >"$tmp/apply.out" 2>&1 || fail "apply $c: $(cat "$tmp/apply.out")"
  mk dgx-a100 assert -f "$tmp/gen.yaml" -c "$c" >/dev/null 2>&1 || fail "assert $c after apply"
done
# On the mixed node, all-balanced reaches both models through the filters.
mk mixed-a100 generate-config -f "$tmp/mixed-gen.yaml"
mk mixed-a100 apply -f "$tmp/mixed-gen.yaml" -c all-balanced >"$tmp/apply.out" 2>&1 \
  || fail "mixed apply all-balanced: $(cat "$tmp/apply.out")"
mk mixed-a100 assert -f "$tmp/mixed-gen.yaml" -c all-balanced >/dev/null || fail "mixed assert all-balanced"

echo "test-generate: OK"

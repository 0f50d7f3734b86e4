#!/usr/bin/env bash
# `migkit device-plugin --dynamic-mig`: reservations follow what kubelet
# really handed out (plugin/dynamic/follow.h, docs/device-plugin.md "Dynamic MIG
# mode"). No kubelet runs here: the kubelet's device manager is the
# stand-in kubelet_standin.py (Register, Allocate), its PodResources API
# and the apiserver's pods are podres_standin.py (List answers what this
# test says kubelet assigned; merge PATCH with uid/resourceVersion
# preconditions). A simulated dgx-h100 with GPU 0 cut into 1g instances.
#
# Out of order: pods P (reserved instance A, earlier) and Q (instance B),
# same shape; kubelet admits Q first: Allocate answers A (assuming P); then
# P: answers B (assuming Q); List says Q holds Q's ids, P holds P's -> P's
# reservation and migkit.io/mig-devices name B, Q's name A, both allocated,
# migkit.io/mig-handed written before any reservation moved.
# Sequential: R admitted out of order and seen in List before S's Allocate:
# R takes S's instance, S (not admitted) R's, unallocated; S's own Allocate
# then gets it.
# In order: T alone: nothing patched but its allocated mark.
set -euo pipefail
: "${MIGKIT_BIN:?}" "${MIGKIT_SIM_BIN:?}" "${MIGKIT_SOURCE_DIR:?}"
WAIT=${MIGKIT_DP_TEST_WAIT:-30}
here=$MIGKIT_SOURCE_DIR/tests/integration
standin=$here/kubelet_standin.py
fail() {
  echo "FAIL: $*" >&2
  [ -f "${tmp:-}/dp.log" ] && tail -n 30 "$tmp/dp.log" >&2
  [ -f "${tmp:-}/patches.jsonl" ] && cat "$tmp/patches.jsonl" >&2
  exit 1
}
unset MIGKIT_POD_RESOURCES MIGKIT_POD_RESOURCES_SOCKET NODE_NAME DEVICE_PLUGIN_PATH KUBECONFIG

# shellcheck source=plugin-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/plugin-lib.sh"
# shellcheck source=stub-apiserver.sh
. "$(dirname "${BASH_SOURCE[0]}")/stub-apiserver.sh" # write_kubeconfig
grpc_python || missing "python3-grpcio, python3-protobuf or protoc" scripts/install-deps

plugin_tmp mk-fol
dir=$tmp/dp
mkdir -p "$dir"
out=$tmp/events.jsonl
: >"$out"
state=$tmp/h100.json
MIGKIT_SIM_STATE=$state "$MIGKIT_BIN" -q --simulate dgx-h100 apply -f "$mig_configs" -c all-1g >/dev/null ||
  fail "apply all-1g"

# Pods P, Q, R, S, T on node n1, each reserving one 1g instance of GPU 0
# (placements 0..4 in that order, reservation times 100..104), instances
# recorded in migkit.io/mig-devices as the node agent does.
MIGKIT_SIM_STATE=$state "$MIGKIT_SIM_BIN" show --json >"$tmp/show.json" || fail "migkit-sim show"
"$PY" - "$tmp/show.json" "$tmp/store.json" "$tmp/uuids" <<'EOF' || fail "cannot build the pods"
import json, sys
g = json.load(open(sys.argv[1]))["gpus"][0]
insts = []
for gi in g["gpu_instances"]:
    for ci in gi["compute_instances"]:
        insts.append((gi["start"], gi, ci))
insts.sort(key=lambda x: x[0])
assert len(insts) == 7, insts
items, uuids = [], []
for k, name in enumerate("pqrst"):
    start, gi, ci = insts[k]
    res = {"version": 1, "node": "n1", "time": 100 + k, "devices": [{
        "container": 0, "gpu": g["uuid"], "profile": gi["profile_name"], "profileID": gi["profile_id"],
        "slices": gi["size"], "placement": {"start": start, "size": gi["size"]}}]}
    items.append({"metadata": {"namespace": "ns", "name": name, "uid": "uid-" + name, "resourceVersion": "1",
                               "annotations": {"migkit.io/mig-reservation": json.dumps(res),
                                               "migkit.io/mig-devices": json.dumps([ci["uuid"]])}},
                  "spec": {"nodeName": "n1"}, "status": {"phase": "Pending"}})
    uuids.append(ci["uuid"])
json.dump({"kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": items}, open(sys.argv[2], "w"))
open(sys.argv[3], "w").write(" ".join(uuids) + "\n")
EOF
read -r A B C D E <"$tmp/uuids"

echo '{"pods": []}' >"$tmp/held.json"
: >"$tmp/patches.jsonl"
"$PY" "$here/podres_standin.py" --socket "$tmp/podres.sock" --proto "$MIGKIT_SOURCE_DIR/proto/podresources.proto" \
  --held "$tmp/held.json" --store "$tmp/store.json" --patches "$tmp/patches.jsonl" --port-file "$tmp/api.port" \
  2>"$tmp/podres.log" &
pids+=($!)
for _ in $(seq 100); do [ -s "$tmp/api.port" ] && break; sleep 0.1; done
[ -s "$tmp/api.port" ] || fail "the PodResources / apiserver stand-in did not start: $(cat "$tmp/podres.log")"
write_kubeconfig "$tmp/kubeconfig" "http://127.0.0.1:$(cat "$tmp/api.port")"

mkfifo "$tmp/cmd"
"$PY" "$standin" serve --dir "$dir" --out "$out" --proto "$MIGKIT_SOURCE_DIR/proto/deviceplugin.proto" \
  <"$tmp/cmd" 2>"$tmp/standin.log" &
pids+=($!)
exec 7>"$tmp/cmd"
wait_ev() { "$PY" "$standin" wait --out "$out" --expr "$1" --timeout "$WAIT" 2>/dev/null; }
wait_ev "e['event'] == 'listening'" >/dev/null || fail "the stand-in kubelet did not start"

MIGKIT_SIM_STATE=$state "$MIGKIT_BIN" --simulate dgx-h100 device-plugin --dynamic-mig --node-name n1 \
  --device-plugin-path "$dir" --kubeconfig "$tmp/kubeconfig" --pod-resources-socket "$tmp/podres.sock" \
  >"$tmp/dp.log" 2>&1 &
dp_pid=$!
pids+=("$dp_pid")
devs=$(wait_ev "e['event'] == 'devices' and e['resource'] == 'nvidia.com/gpu'") || fail "no device list"
ids=$("$PY" -c 'import json,sys; print(" ".join(d["id"] for d in json.loads(sys.argv[1])["devices"][:6]))' "$devs")
read -r i1 i2 i3 i4 i5 _ <<<"$ids"

# allocate ID WANT: one container with ID is answered WANT.
allocate() {
  local r
  r=$(standin_cmd allocate nvidia.com/gpu "$1")
  "$PY" -c 'import json,sys; e=json.loads(sys.argv[1]); assert e["ok"] and e["responses"][0]["envs"] == {"NVIDIA_VISIBLE_DEVICES": sys.argv[2]}, e' \
    "$r" "$2" || fail "Allocate $1: want $2: $r"
}
# held NAME=ID...: what kubelet's List says from now on.
held() {
  "$PY" - "$@" >"$tmp/held.json.tmp" <<'EOF'
import json, sys
pods = []
for a in sys.argv[1:]:
    n, i = a.split("=")
    pods.append({"namespace": "ns", "name": n, "containers": [{"name": "c", "resource": "nvidia.com/gpu", "ids": [i]}]})
print(json.dumps({"pods": pods}))
EOF
  mv "$tmp/held.json.tmp" "$tmp/held.json"
}
# pod NAME: "<devices> <placement start> <allocated 0/1> <handed or ->" from the store.
pod() {
  "$PY" - "$tmp/store.json" "$1" <<'EOF'
import json, sys
for p in json.load(open(sys.argv[1]))["items"]:
    if p["metadata"]["name"] == sys.argv[2]:
        a = p["metadata"]["annotations"]
        r = json.loads(a["migkit.io/mig-reservation"])
        print(json.loads(a["migkit.io/mig-devices"])[0], r["devices"][0]["placement"]["start"],
              int("migkit.io/mig-allocated" in a), a.get("migkit.io/mig-handed", "-"))
EOF
}
# until_pod NAME WANT: waits until pod NAME reads WANT.
until_pod() {
  local got=
  for _ in $(seq $((WAIT * 10))); do
    got=$(pod "$1")
    [ "$got" = "$2" ] && return 0
    sleep 0.1
  done
  fail "pod $1: '$got', want '$2'"
}

echo "--- out of order: Q admitted before P, both Allocates before kubelet's List shows them"
allocate "$i1" "$A"        # kubelet admits Q: the plugin assumes P (earliest)
allocate "$i2" "$B"        # then P: the plugin assumes Q
[ "$(pod p)" = "$A 0 1 -" ] && [ "$(pod q)" = "$B 1 1 -" ] || fail "before List: p '$(pod p)', q '$(pod q)'"
held q="$i1" p="$i2"
until_pod p "$B 1 1 [\"$B\"]"
until_pod q "$A 0 1 [\"$A\"]"
# Every instance in use stayed named: each pod's mig-handed was written
# before any reservation moved.
"$PY" - "$tmp/patches.jsonl" <<'EOF' || fail "patch order"
import json, sys
ps = [json.loads(l) for l in open(sys.argv[1])]
anns = [p["body"]["metadata"]["annotations"] for p in ps if p["status"] == 200]
first_move = min(i for i, a in enumerate(anns) if "migkit.io/mig-reservation" in a)
handed = [i for i, a in enumerate(anns) if "migkit.io/mig-handed" in a]
assert len(handed) == 2 and max(handed) < first_move, anns
assert all("resourceVersion" in p["body"]["metadata"] and "uid" in p["body"]["metadata"] for p in ps), ps
EOF
grep -q "Pod ns/p: reservation follows what kubelet handed out: \[\"$A\"\] -> \[\"$B\"\]" "$tmp/dp.log" ||
  fail "no log line for p's correction"
grep -q "Pod ns/q: reservation follows what kubelet handed out: \[\"$B\"\] -> \[\"$A\"\]" "$tmp/dp.log" ||
  fail "no log line for q's correction"
[ -s "$dir/migkit-dynamic-handouts.json" ] || fail "no handouts file in the plugin directory"

echo "--- sequential: R admitted before S and seen in List before S's Allocate"
allocate "$i3" "$C"        # kubelet admits S: the plugin assumes R
held q="$i1" p="$i2" s="$i3"
until_pod s "$C 2 1 [\"$C\"]"
until_pod r "$D 3 0 -"     # R takes S's instance, not allocated: its own Allocate finds it
allocate "$i4" "$D"        # then R: in order now
held q="$i1" p="$i2" s="$i3" r="$i4"
until_pod r "$D 3 1 -"

echo "--- in order: T alone, nothing but its allocated mark patched"
before=$(wc -l <"$tmp/patches.jsonl")
allocate "$i5" "$E"
held q="$i1" p="$i2" s="$i3" r="$i4" t="$i5"
# Two List rounds (2 s apart) at least, then nothing more than the mark.
sleep 5
until_pod t "$E 4 1 -"
[ "$(($(wc -l <"$tmp/patches.jsonl") - before))" = 1 ] || fail "in order: more than the allocated mark patched"

echo "--- the node agent keeps an instance a pod was handed while no reservation names it"
# The moment between two moves: P's reservation back on A (as Q's), B
# reserved by nobody but named in P's migkit.io/mig-handed. The agent's
# pass (grace 0) destroys the instances nobody reserves (placements 5, 6),
# never B.
"$PY" - "$(cat "$tmp/api.port")" "$tmp/store.json" <<'EOF' || fail "cannot patch p back"
import json, sys, urllib.request
q = next(p for p in json.load(open(sys.argv[2]))["items"] if p["metadata"]["name"] == "q")
res = q["metadata"]["annotations"]["migkit.io/mig-reservation"]
body = {"metadata": {"annotations": {"migkit.io/mig-reservation": res}}}
req = urllib.request.Request("http://127.0.0.1:%s/api/v1/namespaces/ns/pods/p" % sys.argv[1], method="PATCH",
                             data=json.dumps(body).encode(), headers={"Content-Type": "application/merge-patch+json"})
urllib.request.urlopen(req).read()
EOF
[ "$(pod p)" = "$B 0 1 [\"$B\"]" ] || fail "p: $(pod p)"
MIGKIT_SIM_STATE=$state "$MIGKIT_BIN" --simulate dgx-h100 scheduler node -n n1 --kubeconfig "$tmp/kubeconfig" \
  --once --grace 0 >"$tmp/agent.log" 2>&1 || fail "the node agent's pass failed: $(cat "$tmp/agent.log")"
MIGKIT_SIM_STATE=$state "$MIGKIT_SIM_BIN" show --json >"$tmp/show.json" || fail "migkit-sim show"
starts=$("$PY" -c 'import json,sys; print(" ".join(str(g["start"]) for g in sorted(json.load(open(sys.argv[1]))["gpus"][0]["gpu_instances"], key=lambda g: g["start"])))' "$tmp/show.json")
[ "$starts" = "0 1 2 3 4" ] ||
  fail "GPU 0 instances at '$starts', want '0 1 2 3 4' (B at 1 kept, 5 and 6 destroyed): $(cat "$tmp/agent.log")"

echo "--- the handouts survive a restart; a kubelet without the PodResources API: warned once, Allocate as before"
kill -TERM "$dp_pid"; wait "$dp_pid" || fail "the plugin exited $? on SIGTERM"
"$PY" -c 'import json,sys; h=json.load(open(sys.argv[1])); assert h["version"] == 1 and len(h["handouts"]) == 5, h' \
  "$dir/migkit-dynamic-handouts.json" || fail "handouts file"
MIGKIT_SIM_STATE=$state "$MIGKIT_BIN" --simulate dgx-h100 device-plugin --dynamic-mig --node-name n1 \
  --device-plugin-path "$dir" --kubeconfig "$tmp/kubeconfig" --pod-resources-socket "$tmp/none.sock" \
  >"$tmp/dp.log" 2>&1 &
dp_pid=$!
pids+=("$dp_pid")
for _ in $(seq $((WAIT * 10))); do grep -q "PodResources" "$tmp/dp.log" && break; sleep 0.1; done
[ "$(grep -c "Cannot list kubelet's PodResources" "$tmp/dp.log")" = 1 ] || fail "want one warning"
kill -TERM "$dp_pid"; wait "$dp_pid" || fail "the plugin exited $? on SIGTERM"

echo "--- a FIFO in place of the handouts file: refused with a message, the plugin registers and heeds SIGTERM"
rm -f "$dir/migkit-dynamic-handouts.json"
mkfifo "$dir/migkit-dynamic-handouts.json"
regs=$(grep -c '"event": "register"' "$out" || true)
MIGKIT_SIM_STATE=$state "$MIGKIT_BIN" --simulate dgx-h100 device-plugin --dynamic-mig --node-name n1 \
  --device-plugin-path "$dir" --kubeconfig "$tmp/kubeconfig" --pod-resources-socket "$tmp/podres.sock" \
  >"$tmp/dp.log" 2>&1 &
dp_pid=$!
pids+=("$dp_pid")
for _ in $(seq $((WAIT * 10))); do
  [ "$(grep -c '"event": "register"' "$out" || true)" -gt "$regs" ] && break
  sleep 0.1
done
# Before this was fixed the plugin hung in open() and ignored SIGTERM: SIGKILL it before failing.
[ "$(grep -c '"event": "register"' "$out" || true)" -gt "$regs" ] ||
  { kill -KILL "$dp_pid"; fail "the plugin did not register with a FIFO as its handouts file"; }
grep -q "Cannot read what the device plugin handed out before: .*migkit-dynamic-handouts.json.*a FIFO, not a regular file" \
  "$tmp/dp.log" || { kill -KILL "$dp_pid"; fail "no message about the FIFO"; }
kill -TERM "$dp_pid"
for _ in $(seq 100); do kill -0 "$dp_pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$dp_pid" 2>/dev/null; then kill -KILL "$dp_pid"; fail "the plugin ignored SIGTERM"; fi
wait "$dp_pid" || fail "the plugin exited $? on SIGTERM"
[ -p "$dir/migkit-dynamic-handouts.json" ] || fail "the FIFO was replaced"
echo "0 quit" >&7
echo "PASS"

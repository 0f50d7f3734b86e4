#!/usr/bin/env bash
# The executables' split (CMakeLists.txt, src/cli/main.c): `migkit` needs none
# of the daemons' heavy libraries (gRPC and the C++ runtime, libcurl and its
# TLS stack, libmicrohttpd), neither linked nor loaded for --version and
# apply; the daemon commands run in migkit-<command>, found next to migkit or
# through MIGKIT_LIBEXEC_DIR; and apply on a simulated DGX A100 works under a
# small address-space limit (issue 15 step 6: it aborted under 32-35 MB).
set -euo pipefail
: "${MIGKIT_BIN:?}" "${MIGKIT_NVML_LIB:?}" "${MIGKIT_SOURCE_DIR:?}"
tmp=$(mktemp -d "${MIGKIT_TEST_TMP:-/tmp}/test-exec.XXXXXX" 2>/dev/null || mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
unset MIG_PARTED_DEBUG MIGKIT_LIBEXEC_DIR
heavy='lib(grpc|gpr|curl|microhttpd|stdc\+\+|protobuf|ssl|gnutls|nghttp)'
bindir=$(dirname "$MIGKIT_BIN")
config=$MIGKIT_SOURCE_DIR/examples/config.yaml
export MIGKIT_SIM_STATE=$tmp/dgx-a100.json

# Linked: readelf -d lists what the loader maps.
command -v readelf >/dev/null || { echo "SKIP: readelf (binutils) is not installed"; exit 0; }
needed=$(readelf -d "$MIGKIT_BIN" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
[ -n "$needed" ] || fail "readelf found no NEEDED entries in $MIGKIT_BIN"
asan=
if grep -q 'libasan\|libclang_rt.asan' <<<"$needed" || nm "$MIGKIT_BIN" 2>/dev/null | grep -q '__asan_init'; then
  asan=1
  heavy='lib(grpc|gpr|curl|microhttpd|protobuf|ssl|gnutls|nghttp)' # the sanitizer runtime loads libstdc++
fi
if grep -Eq "$heavy" <<<"$needed"; then fail "migkit links a daemon library: $(tr '\n' ' ' <<<"$needed")"; fi
for d in manager device-plugin scheduler; do
  [ -x "$bindir/migkit-$d" ] || fail "migkit-$d is not next to migkit in $bindir"
done
readelf -d "$bindir/migkit-device-plugin" | grep -q 'libgrpc' || fail "migkit-device-plugin does not link gRPC?"
readelf -d "$bindir/migkit-manager" | grep -Eq 'libgrpc|libmicrohttpd' && fail "migkit-manager links gRPC or libmicrohttpd"
# libcurl is dlopen()ed by kube/ at the first apiserver client (docs/decisions.md):
# no daemon links it, and one that needs it but cannot load it says so.
for d in manager device-plugin scheduler config-manager; do
  readelf -d "$bindir/migkit-$d" | grep -q 'libcurl' && fail "migkit-$d links libcurl (kube/ dlopen()s it)"
done
printf '%s\n' 'apiVersion: v1' 'kind: Config' 'clusters: [{name: c, cluster: {server: "http://127.0.0.1:9"}}]' \
  'users: [{name: u, user: {token: t}}]' 'contexts: [{name: x, context: {cluster: c, user: u}}]' \
  'current-context: x' >"$tmp/kubeconfig"
set +e
err=$(MIGKIT_CURL_LIB=$tmp/none/libcurl.so.4 NODE_NAME=n1 timeout 60 "$MIGKIT_BIN" --simulate dgx-a100 manager \
  --kubeconfig "$tmp/kubeconfig" 2>&1 >/dev/null); rc=$?
set -e
[ "$rc" -eq 1 ] || fail "manager without libcurl: exit $rc: $err"
grep -q 'needs libcurl: .*none/libcurl.so.4' <<<"$err" || fail "manager without libcurl: $err"

# Loaded: the loader's own list (LD_DEBUG=libs), for --version and apply.
loaded() { LD_DEBUG=libs "$@" 2>&1 >/dev/null | sed -n 's/.*calling init: //p'; }
libs=$(loaded "$MIGKIT_BIN" --version)
grep -Eq "$heavy" <<<"$libs" && fail "--version loads a daemon library: $(tr '\n' ' ' <<<"$libs")"
"$MIGKIT_BIN" --simulate dgx-a100 -q apply -f "$config" -c all-disabled
libs=$(loaded "$MIGKIT_BIN" --simulate dgx-a100 -q apply -f "$config" -c all-balanced)
grep -Eq "$heavy" <<<"$libs" && fail "apply loads a daemon library: $(tr '\n' ' ' <<<"$libs")"
echo "migkit --version loads $(loaded "$MIGKIT_BIN" --version | wc -l) shared objects, apply $(wc -l <<<"$libs")"

# The daemon commands run in their executables: help through migkit.
for d in manager device-plugin scheduler; do
  out=$("$MIGKIT_BIN" "$d" --help) || fail "migkit $d --help failed"
  grep -q "^Usage: migkit $d" <<<"$out" || fail "migkit $d --help: $(head -2 <<<"$out")"
done
# A migkit without its daemon executables says what is missing.
cp "$MIGKIT_BIN" "$tmp/migkit"
set +e
err=$("$tmp/migkit" manager --help 2>&1 >/dev/null); rc=$?
set -e
[ "$rc" -eq 1 ] || fail "missing migkit-manager: exit $rc"
grep -q "runs in the executable migkit-manager" <<<"$err" || fail "missing migkit-manager: $err"
grep -q "MIGKIT_LIBEXEC_DIR" <<<"$err" || fail "missing migkit-manager does not name MIGKIT_LIBEXEC_DIR: $err"
# (Help read whole, then matched: grep -q exits at its match and a help over
# one stdio buffer would end in SIGPIPE under pipefail.)
out=$(MIGKIT_LIBEXEC_DIR=$bindir "$tmp/migkit" scheduler --help) || true
grep -q '^Usage: migkit scheduler' <<<"$out" || fail "MIGKIT_LIBEXEC_DIR not honoured"
# The installed layout: <prefix>/bin/migkit finds <prefix>/lib/migkit/migkit-<command>.
mkdir -p "$tmp/prefix/bin" "$tmp/prefix/lib/migkit"
cp "$MIGKIT_BIN" "$tmp/prefix/bin/migkit"
ln -s "$bindir/migkit-device-plugin" "$tmp/prefix/lib/migkit/migkit-device-plugin"
out=$("$tmp/prefix/bin/migkit" device-plugin --help) || true
grep -q '^Usage: migkit device-plugin' <<<"$out" \
  || fail "installed layout: bin/migkit does not find lib/migkit/migkit-device-plugin"
# A small address space: apply and assert of all-balanced on 8 simulated
# A100s under ulimit -v 16000 (KiB); 4 MB is enough today, the limit leaves
# room. Not under AddressSanitizer, which reserves terabytes of shadow.
if [ -n "$asan" ]; then
  echo "SKIP (ASan build): apply under ulimit -v"
  exit 0
fi
"$MIGKIT_BIN" --simulate dgx-a100 -q apply -f "$config" -c all-disabled
for i in 1 2 3; do
  (ulimit -v 16000; "$MIGKIT_BIN" --version >/dev/null) || fail "--version under ulimit -v 16000 (run $i)"
  "$MIGKIT_BIN" --simulate dgx-a100 -q apply -f "$config" -c all-disabled
  set +e
  (ulimit -v 16000; "$MIGKIT_BIN" --simulate dgx-a100 -q apply -f "$config" -c all-balanced) >"$tmp/out" 2>&1; rc=$?
  set -e
  [ "$rc" -eq 0 ] || fail "apply under ulimit -v 16000 (run $i): exit $rc: $(tail -3 "$tmp/out")"
  (ulimit -v 16000; "$MIGKIT_BIN" --simulate dgx-a100 -q assert -f "$config" -c all-balanced) \
    || fail "assert under ulimit -v 16000 (run $i)"
done
echo "PASS"

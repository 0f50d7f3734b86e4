#!/usr/bin/env bash
# Makes the two Debian packages from a build tree in one `cpack -G DEB` run
# and checks them on this machine:
#   migkit      lintian (errors and warnings fail; the explained ones are
#               overridden in the package), `apt-get install
#               ./migkit_<version>_<arch>.deb`, `systemd-analyze verify` of the
#               installed unit, `migkit --version` from /usr/bin,
#               /etc/migkit/* are conffiles and a reinstall keeps an edited
#               /etc/migkit/service.yaml; without migkit-sim, `migkit --simulate`
#               fails naming the package to install;
#   migkit-sim  the simulators (NVML, CUDA driver where built, migkit-sim, the
#               nvidia-smi stand-in), Depends on migkit of the same version,
#               lintian; installed, `migkit --simulate dgx-a100 profiles` and
#               `export`, `migkit-sim`, the nvidia-smi stand-in work as typed;
# then `apt-get purge` of both removes every file they installed and the
# service's state: nothing is left.
# CHANGES THE SYSTEM (installs and purges the packages): needs root, and
# refuses to run where a migkit package is already installed. Not run by
# ctest: scripts/test runs it (usage: test-deb.sh BUILD_DIR [OUT_DIR]).
set -euo pipefail
build=$(cd "${1:?usage: test-deb.sh BUILD_DIR [OUT_DIR]}" && pwd)
out=${2:-$build/deb}
[ "$(id -u)" -eq 0 ] || { echo "test-deb: needs root (apt-get install)" >&2; exit 1; }
for p in migkit migkit-sim; do
  if dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'installed\|config-files'; then
    echo "test-deb: the package $p is installed here already: not touching it" >&2
    exit 1
  fi
done
fail() { echo "FAIL: $*" >&2; exit 1; }
passed=0
ok() { echo "ok: $*"; passed=$((passed + 1)); }
version=$(cat "$build/VERSION")
arch=$(dpkg --print-architecture)

rm -rf "$out" && mkdir -p "$out"
out=$(cd "$out" && pwd) # apt-get takes a path only when it starts with / or ./
t0=$SECONDS
cpack --config "$build/CPackConfig.cmake" -G DEB -B "$out" >"$out/cpack.log" 2>&1 ||
  { cat "$out/cpack.log"; fail "cpack -G DEB failed"; }
deb=$out/migkit_${version}_${arch}.deb
simdeb=$out/migkit-sim_${version}_${arch}.deb
for f in "$deb" "$simdeb"; do
  [ -f "$f" ] || { ls "$out"; fail "cpack made no $(basename "$f")"; }
done
ok "one cpack -G DEB run made $(basename "$deb") ($(du -h "$deb" | cut -f1)) and $(basename "$simdeb") ($(du -h "$simdeb" | cut -f1)), $((SECONDS - t0)) s"
dpkg-deb -c "$deb" | awk '{print $6}' | grep -E 'sim|nvidia-smi|libnvidia-ml|libcuda' && fail "the migkit .deb holds the simulator"
dpkg-deb -f "$deb" Depends | grep -q 'libgrpc29' || fail "Depends lacks the computed shared library packages"
dpkg-deb -f "$deb" Depends | grep -q 'libcurl4 (>= 7.77' || fail "Depends lacks libcurl4 (dlopen()ed, not computed)"
dpkg-deb -c "$deb" | awk '{print $6}' | grep -x './usr/bin/config-manager' && fail "the .deb puts config-manager on the host's PATH"
for f in ./usr/share/man/man1/migkit.1.gz ./usr/share/bash-completion/completions/migkit; do
  dpkg-deb -c "$deb" | awk '{print $6}' | grep -qx "$f" || fail "the .deb lacks $f"
done
ok "the .deb holds migkit(1) and the bash completion"
ok "no simulator in the migkit .deb; Depends: $(dpkg-deb -f "$deb" Depends)"
simfiles=$(dpkg-deb -c "$simdeb" | awk '{print $6}')
for f in ./usr/lib/migkit/sim/libnvidia-ml.so.1 ./usr/bin/migkit-sim ./usr/lib/migkit/bin/nvidia-smi \
         ./usr/share/doc/migkit-sim/copyright; do
  grep -qx "$f" <<<"$simfiles" || fail "migkit-sim lacks $f: $simfiles"
done
if [ -e "$build/sim/cuda/libcuda.so.1" ] || ls "$build"/sim/cuda/libcuda.so* >/dev/null 2>&1; then
  grep -qx './usr/lib/migkit/sim/libcuda.so.1' <<<"$simfiles" || fail "migkit-sim lacks the CUDA driver simulator"
fi
grep -E '^\./(etc|usr/bin/migkit$|usr/lib/migkit/libmigkit)' <<<"$simfiles" && fail "migkit-sim holds migkit's own files"
dpkg-deb -f "$simdeb" Depends | grep -q "^migkit (= $version)" ||
  fail "migkit-sim does not depend on migkit (= $version): $(dpkg-deb -f "$simdeb" Depends)"
ok "migkit-sim holds the simulators ($(grep -c . <<<"$simfiles") entries); Depends: $(dpkg-deb -f "$simdeb" Depends)"

if command -v lintian >/dev/null; then
  for f in "$deb" "$simdeb"; do
    lintian --pedantic --fail-on error,warning,pedantic "$f" 2>&1 | grep -v 'running with root privileges' ||
      [ "${PIPESTATUS[0]}" -eq 0 ] || fail "lintian $(basename "$f")"
  done
  ok "lintian --pedantic: no error, warning or pedantic tag in either package"
else
  fail "lintian not installed (scripts/install-deps)"
fi

trap 'apt-get purge -y -qq migkit-sim migkit >/dev/null 2>&1 || true' EXIT
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq --no-install-recommends "$deb" >"$out/install.log" 2>&1 ||
  { cat "$out/install.log"; fail "apt-get install ./$(basename "$deb")"; }
dpkg-query -W -f '${Status}' migkit | grep -q 'install ok installed' || fail "not installed after apt-get install"
ok "apt-get install ./$(basename "$deb")"
dpkg-query -L migkit | sort >"$out/files"

unit=/lib/systemd/system/migkit.service
[ -f "$unit" ] || fail "no $unit"
grep -q '^ExecStart=/usr/bin/migkit service boot$' "$unit" || fail "unit's ExecStart: $(grep ExecStart "$unit")"
systemd-analyze verify "$unit" >"$out/verify.log" 2>&1 || { cat "$out/verify.log"; fail "systemd-analyze verify $unit"; }
ok "systemd-analyze verify $unit"
v=$(/usr/bin/migkit --version) || fail "/usr/bin/migkit --version"
grep -q "^migkit $version" <<<"$v" || fail "/usr/bin/migkit --version says: $v"
ok "/usr/bin/migkit --version: $(head -1 <<<"$v")"

conffiles=$(dpkg-query -W -f '${Conffiles}\n' migkit | awk 'NF {print $1}' | sort | tr '\n' ' ')
[ "$conffiles" = "/etc/migkit/config.yaml /etc/migkit/hooks.yaml /etc/migkit/service.yaml " ] ||
  fail "conffiles: '$conffiles'"
ok "conffiles: $conffiles"
echo "# edited by test-deb.sh" >>/etc/migkit/service.yaml
apt-get install -y -qq --reinstall "$deb" >"$out/reinstall.log" 2>&1 ||
  { cat "$out/reinstall.log"; fail "reinstall"; }
grep -q '^# edited by test-deb.sh$' /etc/migkit/service.yaml || fail "the reinstall lost the edit of /etc/migkit/service.yaml"
ok "a reinstall keeps the edited /etc/migkit/service.yaml"

# The simulator as a person who installed migkit alone meets it: the error
# names the package to install; then with migkit-sim, as typed.
home=$(mktemp -d /tmp/test-deb-home.XXXXXX)
as_user() { env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME="$home" "$@"; }
rc=0
as_user migkit --simulate dgx-a100 profiles >"$out/nosim.log" 2>&1 || rc=$?
[ "$rc" != 0 ] || fail "migkit --simulate without migkit-sim succeeded: $(cat "$out/nosim.log")"
grep -q 'install the package migkit-sim' "$out/nosim.log" ||
  fail "migkit --simulate without migkit-sim does not name the package: $(cat "$out/nosim.log")"
ok "without migkit-sim, --simulate says: $(grep -o 'install the package migkit-sim[^,]*' "$out/nosim.log")"
apt-get install -y -qq --no-install-recommends "$simdeb" >"$out/install-sim.log" 2>&1 ||
  { cat "$out/install-sim.log"; fail "apt-get install ./$(basename "$simdeb")"; }
dpkg-query -L migkit-sim | sort >"$out/files-sim"
as_user migkit --simulate dgx-a100 profiles >"$out/sim.log" 2>&1 ||
  fail "migkit --simulate dgx-a100 profiles with migkit-sim: $(cat "$out/sim.log")"
grep -q '1g.5gb' "$out/sim.log" || fail "migkit --simulate dgx-a100 profiles: $(head -5 "$out/sim.log")"
as_user migkit --simulate dgx-a100 export >"$out/sim-export.log" 2>&1 ||
  fail "migkit --simulate dgx-a100 export with migkit-sim: $(cat "$out/sim-export.log")"
as_user migkit-sim --help >"$out/sim-tool.log" 2>&1 || fail "migkit-sim --help: $(cat "$out/sim-tool.log")"
state=$(find "$home" -name 'dgx-a100*.json' | head -1)
[ -n "$state" ] || fail "no simulator state under $home: $(find "$home")"
as_user MIGKIT_SIM_STATE="$state" /usr/lib/migkit/bin/nvidia-smi -L >"$out/smi.log" 2>&1 ||
  fail "the nvidia-smi stand-in: $(cat "$out/smi.log")"
grep -q '^GPU 0: ' "$out/smi.log" || fail "nvidia-smi -L: $(head -3 "$out/smi.log")"
ok "with migkit-sim: migkit --simulate dgx-a100 profiles ($(grep -c . "$out/sim.log") lines) and export, migkit-sim --help, nvidia-smi -L ($(grep -c '^GPU' "$out/smi.log") GPUs)"
rm -rf "$home"

# State the service writes (docs/service.md), which the purge removes too.
mkdir -p /var/lib/migkit && echo all-balanced >/var/lib/migkit/selected-config
# migkit-sim depends on migkit: purging migkit takes it along.
apt-get purge -y -qq migkit >"$out/purge.log" 2>&1 || { cat "$out/purge.log"; fail "apt-get purge migkit"; }
trap - EXIT
for p in migkit migkit-sim; do
  if dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'installed\|config-files'; then
    fail "$p still known to dpkg after the purge of migkit"
  fi
done
left=$(cat "$out/files" "$out/files-sim" | while read -r f; do
  if [ ! -d "$f" ] && { [ -e "$f" ] || [ -L "$f" ]; }; then echo "$f"; fi
done)
for d in /usr/lib/migkit /usr/share/doc/migkit-sim; do [ ! -e "$d" ] || left="$left $d"; done
[ -z "$left" ] || fail "left after purge: $left"
for d in /etc/migkit /var/lib/migkit; do [ ! -e "$d" ] || fail "left after purge: $d"; done
ok "apt-get purge migkit removes both packages, every file they installed, /etc/migkit and /var/lib/migkit"
echo "$passed passed, 0 failed"

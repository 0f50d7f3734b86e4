#!/usr/bin/env bash
# Makes the Debian package from a build tree (`cpack -G DEB`) and checks it on
# this machine: lintian (errors and warnings fail; the explained ones are
# overridden in the package), `apt-get install ./migkit_<version>_<arch>.deb`,
# `systemd-analyze verify` of the installed unit, `migkit --version` from
# /usr/bin, /etc/migkit/* are conffiles and a reinstall keeps an edited
# /etc/migkit/service.yaml, and `apt-get purge` removes every file it
# installed and the service's state.
# CHANGES THE SYSTEM (installs and purges the package): needs root, and refuses
# to run where a migkit package is already installed. Not run by ctest:
# scripts/test runs it (usage: test-deb.sh BUILD_DIR [OUT_DIR]).
set -euo pipefail
build=$(cd "${1:?usage: test-deb.sh BUILD_DIR [OUT_DIR]}" && pwd)
out=${2:-$build/deb}
[ "$(id -u)" -eq 0 ] || { echo "test-deb: needs root (apt-get install)" >&2; exit 1; }
if dpkg-query -W -f '${Status}' migkit 2>/dev/null | grep -q 'installed\|config-files'; then
  echo "test-deb: a migkit package is installed here already: not touching it" >&2
  exit 1
fi
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
[ -f "$deb" ] || { ls "$out"; fail "cpack made no $(basename "$deb")"; }
ok "cpack -G DEB made $(basename "$deb") ($(du -h "$deb" | cut -f1), $((SECONDS - t0)) s)"
dpkg-deb -c "$deb" | awk '{print $6}' | grep -E 'sim|nvidia-smi|libnvidia-ml' && fail "the .deb holds the simulator"
dpkg-deb -f "$deb" Depends | grep -q 'libgrpc29' || fail "Depends lacks the computed shared library packages"
dpkg-deb -f "$deb" Depends | grep -q 'libcurl4 (>= 7.77' || fail "Depends lacks libcurl4 (dlopen()ed, not computed)"
dpkg-deb -c "$deb" | awk '{print $6}' | grep -x './usr/bin/config-manager' && fail "the .deb puts config-manager on the host's PATH"
for f in ./usr/share/man/man1/migkit.1.gz ./usr/share/bash-completion/completions/migkit; do
  dpkg-deb -c "$deb" | awk '{print $6}' | grep -qx "$f" || fail "the .deb lacks $f"
done
ok "the .deb holds migkit(1) and the bash completion"
ok "no simulator in the .deb; Depends: $(dpkg-deb -f "$deb" Depends)"

if command -v lintian >/dev/null; then
  lintian --pedantic --fail-on error,warning,pedantic "$deb" 2>&1 | grep -v 'running with root privileges' ||
    [ "${PIPESTATUS[0]}" -eq 0 ] || fail "lintian"
  ok "lintian --pedantic: no error, warning or pedantic tag"
else
  fail "lintian not installed (scripts/install-deps)"
fi

trap 'apt-get purge -y -qq migkit >/dev/null 2>&1 || true' EXIT
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

# State the service writes (docs/service.md), which the purge removes too.
mkdir -p /var/lib/migkit && echo all-balanced >/var/lib/migkit/selected-config
apt-get purge -y -qq migkit >"$out/purge.log" 2>&1 || { cat "$out/purge.log"; fail "apt-get purge migkit"; }
trap - EXIT
if dpkg-query -W -f '${Status}' migkit 2>/dev/null | grep -q 'installed\|config-files'; then
  fail "migkit still known to dpkg after purge"
fi
left=$(while read -r f; do
  if [ ! -d "$f" ] && { [ -e "$f" ] || [ -L "$f" ]; }; then echo "$f"; fi
done <"$out/files")
[ -z "$left" ] || fail "left after purge: $left"
for d in /etc/migkit /var/lib/migkit; do [ ! -e "$d" ] || fail "left after purge: $d"; done
ok "apt-get purge removes every file it installed, /etc/migkit and /var/lib/migkit"
echo "$passed passed, 0 failed"

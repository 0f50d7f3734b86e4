#!/usr/bin/env bash
# Makes the two Debian packages from a build tree in one `cpack -G DEB` run
# and checks them in a clean root: a minimal Debian of this machine's suite
# made by mmdebstrap (essential packages and apt, nothing of ours, none of our
# dependencies), where apt resolves the packages' Depends from the mirror as
# on a fresh machine:
#   migkit      lintian (errors and warnings fail; the explained ones are
#               overridden in the package), `apt-get install
#               ./migkit_<version>_<arch>.deb` (its dependencies come from the
#               mirror: a Depends that is missing shows here, not on a build
#               machine that has every -dev package), `systemd-analyze verify`
#               of the installed unit, `migkit --version` from /usr/bin, every
#               installed executable finds its shared libraries,
#               /etc/migkit/* are conffiles and a reinstall keeps an edited
#               /etc/migkit/service.yaml; without migkit-sim, `migkit --simulate`
#               fails naming the package to install;
#   migkit-sim  the simulators (NVML, CUDA driver where built, migkit-sim, the
#               nvidia-smi stand-in), Depends on migkit of the same version,
#               lintian; installed, `migkit --simulate dgx-a100 profiles` and
#               `export`, `migkit-sim`, the nvidia-smi stand-in work as typed;
# then `apt-get purge migkit` removes both packages and the service's state,
# and `apt-get autoremove --purge` the dependencies they pulled in: the root's
# file list is then the one it had before the install (apt's and dpkg's own
# records and logs aside): nothing is left.
# Needs root (mmdebstrap --mode=root, chroot) and the mirror of
# /etc/apt/sources.list.d/debian.sources (MIGKIT_DEB_ROOT_SOURCES overrides).
# The host is not changed: the root is a temporary directory, each chroot runs
# in a mount namespace of its own. The downloaded packages are kept in
# MIGKIT_DEB_ROOT_CACHE (default /var/cache/migkit-deb-root) for the next run.
# Not run by ctest: scripts/test runs it (usage: test-deb.sh BUILD_DIR [OUT_DIR]).
set -euo pipefail
build=$(cd "${1:?usage: test-deb.sh BUILD_DIR [OUT_DIR]}" && pwd)
out=${2:-$build/deb}
[ "$(id -u)" -eq 0 ] || { echo "test-deb: needs root (mmdebstrap --mode=root, chroot)" >&2; exit 1; }
for tool in mmdebstrap unshare cpack dpkg-deb; do
  command -v "$tool" >/dev/null || { echo "test-deb: $tool not found (scripts/install-deps)" >&2; exit 1; }
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

# The clean root.
. /etc/os-release
suite=${VERSION_CODENAME:?test-deb: no VERSION_CODENAME in /etc/os-release}
sources=()
if [ -n "${MIGKIT_DEB_ROOT_SOURCES:-}" ]; then
  sources=("$MIGKIT_DEB_ROOT_SOURCES")
elif grep -qs "^Suites:.*\b$suite\b" /etc/apt/sources.list.d/debian.sources; then
  sources=(/etc/apt/sources.list.d/debian.sources)
fi
cache=${MIGKIT_DEB_ROOT_CACHE:-/var/cache/migkit-deb-root}
mkdir -p "$cache"
root=$(mktemp -d /var/tmp/test-deb-root.XXXXXX)
trap 'rm -rf --one-file-system "$root"' EXIT
t0=$SECONDS
# The root is made once a week (MIGKIT_DEB_ROOT_DAYS) and kept as a tar
# archive; each run unpacks a fresh copy and updates apt's lists in it. The
# dependencies downloaded by an earlier run go into its apt cache first.
tarball=$cache/$suite-apt.tar
if [ -z "$(find "$tarball" -mtime -"${MIGKIT_DEB_ROOT_DAYS:-7}" 2>/dev/null)" ]; then
  mmdebstrap --quiet --mode=root --variant=apt --format=tar "$suite" "$tarball.new" ${sources[@]+"${sources[@]}"} \
    >"$out/mmdebstrap.log" 2>&1 || { cat "$out/mmdebstrap.log"; fail "mmdebstrap of Debian $suite"; }
  mv "$tarball.new" "$tarball"
  made="made"
else
  made="from $tarball of $(date -r "$tarball" +%F)"
fi
tar -xf "$tarball" -C "$root" || fail "unpacking $tarball"
# in_root CMD...: CMD in the root, /proc and /dev mounted in a mount
# namespace of its own (gone when it ends), the environment a person's login
# shell has (HOME=/root, a plain PATH), nothing of this machine's.
in_root() {
  unshare --mount --fork -- sh -c 'mount -t proc proc "$0/proc" && mount --rbind /dev "$0/dev" &&
    exec chroot "$0" "$@"' "$root" \
    env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive "$@"
}
# The root's file list, apt's and dpkg's own records, caches and logs aside.
listing() {
  (cd "$root" && find . -xdev \( -path ./var/cache/apt -o -path ./var/lib/apt -o -path ./var/lib/dpkg \
    -o -path ./var/log -o -path ./var/cache/debconf -o -path ./var/cache/ldconfig -o -path ./tmp \
    -o -path ./proc -o -path ./dev -o -path ./run -o -path ./debs \) -prune -o -print | sort)
}
in_root apt-get update -q >"$out/update.log" 2>&1 || { cat "$out/update.log"; fail "apt-get update in the clean root"; }
find "$cache" -maxdepth 1 -name '*.deb' -exec cp -t "$root/var/cache/apt/archives" {} +
ok "a clean root: Debian $suite, essential packages and apt ($made), $((SECONDS - t0)) s"
listing >"$out/root-before"
mkdir "$root/debs"
cp "$deb" "$simdeb" "$root/debs/"
in_root apt-get install -y -q --no-install-recommends "./debs/$(basename "$deb")" >"$out/install.log" 2>&1 ||
  { cat "$out/install.log"; fail "apt-get install ./$(basename "$deb") in the clean root"; }
find "$root/var/cache/apt/archives" -maxdepth 1 -name '*.deb' -exec cp -ut "$cache" {} +
find "$cache" -maxdepth 1 -name '*.deb' -mtime +30 -delete # versions the mirror replaced
in_root dpkg-query -W -f '${Status}' migkit | grep -q 'install ok installed' || fail "not installed after apt-get install"
pulled=$(grep -c '^Setting up ' "$out/install.log" || true)
ok "apt-get install ./$(basename "$deb") in the clean root: $pulled packages set up, the dependencies from the mirror"
in_root dpkg-query -L migkit | sort >"$out/files"

unit=/lib/systemd/system/migkit.service
[ -f "$root$unit" ] || fail "no $unit"
grep -q '^ExecStart=/usr/bin/migkit service boot$' "$root$unit" || fail "unit's ExecStart: $(grep ExecStart "$root$unit")"
systemd-analyze verify --root="$root" "$unit" >"$out/verify.log" 2>&1 || { cat "$out/verify.log"; fail "systemd-analyze verify $unit"; }
ok "systemd-analyze verify $unit"
v=$(in_root /usr/bin/migkit --version) || fail "/usr/bin/migkit --version"
grep -q "^migkit $version" <<<"$v" || fail "/usr/bin/migkit --version says: $v"
ok "/usr/bin/migkit --version: $(head -1 <<<"$v")"
# Every ELF file the package installed finds its libraries in the clean root.
elves=0
while read -r f; do
  [ -f "$root$f" ] && [ ! -L "$root$f" ] && head -c 4 "$root$f" | grep -q 'ELF' || continue
  missing=$(in_root ldd "$f" 2>&1 | grep 'not found' || true)
  [ -z "$missing" ] || fail "$f in the clean root: $missing"
  elves=$((elves + 1))
done <"$out/files"
[ "$elves" -ge 5 ] || fail "only $elves ELF files in the package"
ok "the package's $elves executables and libraries find every shared library they need (ldd)"

conffiles=$(in_root dpkg-query -W -f '${Conffiles}\n' migkit | awk 'NF {print $1}' | sort | tr '\n' ' ')
[ "$conffiles" = "/etc/migkit/config.yaml /etc/migkit/hooks.yaml /etc/migkit/service.yaml " ] ||
  fail "conffiles: '$conffiles'"
ok "conffiles: $conffiles"
echo "# edited by test-deb.sh" >>"$root/etc/migkit/service.yaml"
in_root apt-get install -y -q --reinstall "./debs/$(basename "$deb")" >"$out/reinstall.log" 2>&1 ||
  { cat "$out/reinstall.log"; fail "reinstall"; }
grep -q '^# edited by test-deb.sh$' "$root/etc/migkit/service.yaml" || fail "the reinstall lost the edit of /etc/migkit/service.yaml"
ok "a reinstall keeps the edited /etc/migkit/service.yaml"

# The simulator as a person who installed migkit alone meets it: the error
# names the package to install; then with migkit-sim, as typed.
rc=0
in_root migkit --simulate dgx-a100 profiles >"$out/nosim.log" 2>&1 || rc=$?
[ "$rc" != 0 ] || fail "migkit --simulate without migkit-sim succeeded: $(cat "$out/nosim.log")"
grep -q 'install the package migkit-sim' "$out/nosim.log" ||
  fail "migkit --simulate without migkit-sim does not name the package: $(cat "$out/nosim.log")"
ok "without migkit-sim, --simulate says: $(grep -o 'install the package migkit-sim[^,]*' "$out/nosim.log")"
in_root apt-get install -y -q --no-install-recommends "./debs/$(basename "$simdeb")" >"$out/install-sim.log" 2>&1 ||
  { cat "$out/install-sim.log"; fail "apt-get install ./$(basename "$simdeb")"; }
in_root dpkg-query -L migkit-sim | sort >"$out/files-sim"
in_root migkit --simulate dgx-a100 profiles >"$out/sim.log" 2>&1 ||
  fail "migkit --simulate dgx-a100 profiles with migkit-sim: $(cat "$out/sim.log")"
grep -q '1g.5gb' "$out/sim.log" || fail "migkit --simulate dgx-a100 profiles: $(head -5 "$out/sim.log")"
in_root migkit --simulate dgx-a100 export >"$out/sim-export.log" 2>&1 ||
  fail "migkit --simulate dgx-a100 export with migkit-sim: $(cat "$out/sim-export.log")"
in_root migkit-sim --help >"$out/sim-tool.log" 2>&1 || fail "migkit-sim --help: $(cat "$out/sim-tool.log")"
state=$(cd "$root" && find root -name 'dgx-a100*.json' | head -1)
[ -n "$state" ] || fail "no simulator state under /root in the clean root: $(cd "$root" && find root)"
in_root env MIGKIT_SIM_STATE="/$state" /usr/lib/migkit/bin/nvidia-smi -L >"$out/smi.log" 2>&1 ||
  fail "the nvidia-smi stand-in: $(cat "$out/smi.log")"
grep -q '^GPU 0: ' "$out/smi.log" || fail "nvidia-smi -L: $(head -3 "$out/smi.log")"
ok "with migkit-sim: migkit --simulate dgx-a100 profiles ($(grep -c . "$out/sim.log") lines) and export, migkit-sim --help, nvidia-smi -L ($(grep -c '^GPU' "$out/smi.log") GPUs)"
# What the commands wrote in the user's home is the user's (a purge never
# touches a home directory).
rm -rf "${root:?}/root/.local" "${root:?}/root/.cache"

# State the service writes (docs/service.md), which the purge removes too.
mkdir -p "$root/var/lib/migkit" && echo all-balanced >"$root/var/lib/migkit/selected-config"
# migkit-sim depends on migkit: purging migkit takes it along.
in_root apt-get purge -y -q migkit >"$out/purge.log" 2>&1 || { cat "$out/purge.log"; fail "apt-get purge migkit"; }
for p in migkit migkit-sim; do
  if in_root dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'installed\|config-files'; then
    fail "$p still known to dpkg after the purge of migkit"
  fi
done
in_root apt-get autoremove --purge -y -q >"$out/autoremove.log" 2>&1 || { cat "$out/autoremove.log"; fail "apt-get autoremove --purge"; }
listing >"$out/root-after"
diff "$out/root-before" "$out/root-after" >"$out/root-diff" || true
left=$(sed -n 's/^> //p' "$out/root-diff" | tr '\n' ' ')
gone=$(sed -n 's/^< //p' "$out/root-diff" | tr '\n' ' ')
[ -z "$left" ] || fail "left in the root after the purge: $left"
[ -z "$gone" ] || fail "gone from the root after the purge (not ours to remove): $gone"
ok "apt-get purge migkit removes both packages, /etc/migkit and /var/lib/migkit; with autoremove the root's $(grep -c . "$out/root-after") paths are those it had before the install"
echo "$passed passed, 0 failed"

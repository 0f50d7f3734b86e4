#!/usr/bin/env bash
# Checks the images scripts/build-image made, from the outside: unpacks each
# from the OCI layout with umoci and runs its binaries inside the root
# filesystem (unshare + chroot, with the environment and user of the image's
# config), against the simulator in the demo image:
#   - every ELF file of the image finds its libraries (ld.so --list);
#   - `migkit --version`, as root and as the non-root user 65532; the image
#     config (command nvidia-mig-manager, root); the GPU Operator's names;
#   - the production image holds no simulator (no libnvidia-ml, migkit-sim,
#     nvidia-smi);
#   - demo image: apply and assert of a layout of examples/config.yaml (the
#     image's /etc/migkit/config.yaml) on the simulated DGX A100, through the
#     upstream name nvidia-mig-parted where the image has it, and the layout
#     seen through the nvidia-smi stand-in;
#   - the docker archives carry the tags migkit:<version>, migkit-demo:<version>;
#   - Dockerfile stays equivalent: same version, package list and scripts; it
#     is named what `docker build .` reads, and every `docker build` or
#     `podman build` command of README.md and docs/*.md finds its file.
# Prints each image's size and its Debian packages.
# Needs root (umoci unpack, chroot, unshare). Not run by ctest: scripts/test
# runs it after scripts/build-image (usage: test-image.sh [IMAGE_OUT_DIR]).
set -euo pipefail
out=${1:-build-image}
out=$(cd "$out" && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || fail "test-image: needs root (umoci unpack, chroot)"
version=$(cat "$out/VERSION") || fail "no $out/VERSION: run scripts/build-image first"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-image.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
passed=0
ok() { echo "ok: $*"; passed=$((passed + 1)); }

# run BUNDLE [--user UID:GID] CMD...: runs CMD in the bundle's rootfs with the
# image config's environment (config.json's process.env), in a private mount
# and PID namespace with /proc and /dev.
run() {
  local bundle=$1; shift
  local user=0:0
  if [ "$1" = --user ]; then user=$2; shift 2; fi
  local -a env
  mapfile -t env < <(python3 -c 'import json,sys; print("\n".join(json.load(open(sys.argv[1]))["process"]["env"]))' \
    "$bundle/config.json")
  unshare --mount --pid --fork --mount-proc="$bundle/rootfs/proc" \
    sh -c 'mount --rbind /dev "$0/dev" && exec "$@"' "$bundle/rootfs" \
    chroot --userspec="$user" "$bundle/rootfs" /usr/bin/env -i "${env[@]}" "$@"
}

for tag in "$version" "$version-demo"; do
  b=$tmp/$tag
  umoci unpack --image "$out/oci:$tag" "$b" >/dev/null
  mkdir -p "$b/rootfs/proc" "$b/rootfs/dev"
  # Every ELF file finds its libraries inside the image.
  missing=$(cd "$b/rootfs" && { find usr/bin usr/sbin usr/lib/migkit bin sbin -type f -perm -u+x 2>/dev/null || true; } |
    while read -r f; do
      head -c 4 "$f" | grep -q ELF || continue
      chroot . /lib64/ld-linux-x86-64.so.2 --list "/$f" 2>&1 | grep 'not found' | sed "s|^|/$f: |" || true
    done)
  [ -z "$missing" ] || fail "$tag: libraries missing in the image:"$'\n'"$missing"
  ok "$tag: every executable finds its libraries"
  v=$(run "$b" migkit --version) || fail "$tag: migkit --version failed"
  grep -q "^migkit $version" <<<"$v" || fail "$tag: migkit --version says: $v"
  v=$(run "$b" --user 65532:65532 migkit --version) || fail "$tag: migkit --version as uid 65532 failed"
  ok "$tag: migkit --version (root and uid 65532): $(head -1 <<<"$v")"
  grep -q '^migkit:x:65532:65532:' "$b/rootfs/etc/passwd" || fail "$tag: no user migkit (65532)"
done

prod=$tmp/$version demo=$tmp/$version-demo
# The config: no entrypoint, the MIG manager as command (the GPU Operator's
# DaemonSet sets none), root.
python3 - "$prod/config.json" <<'PY' || fail "production image config (config.json) is not as docs/deploy.md says"
import json, sys
p = json.load(open(sys.argv[1]))["process"]
assert p["args"] == ["nvidia-mig-manager"], p["args"]
assert p["user"]["uid"] == 0 and p["user"]["gid"] == 0, p["user"]
PY
ok "production image config: command nvidia-mig-manager, user root"
# The GPU Operator's names, as its DaemonSets start them (docs/gpu-operator.md):
# the device plugin through `/bin/sh -c` with an entrypoint script (sleep, cat,
# then exec); the others directly. Each reaches its migkit executable.
[ "$(readlink "$prod/rootfs/usr/bin/config-manager")" = migkit ] || fail "the image lacks /usr/bin/config-manager"
names=()
for n in nvidia-mig-parted nvidia-mig-manager nvidia-device-plugin gpu-feature-discovery; do
  [ -e "$prod/rootfs/usr/bin/$n" ] && names+=("$n")
done
if [ ${#names[@]} -gt 0 ]; then
  for n in "${names[@]}"; do
    run "$prod" "$n" --version >"$tmp/v.out" 2>&1 || { cat "$tmp/v.out"; fail "$n --version in the image"; }
  done
  if [ -e "$prod/rootfs/usr/bin/nvidia-device-plugin" ]; then
    run "$prod" /bin/sh -c 'sleep 0; cat /etc/group >/dev/null; exec nvidia-device-plugin --version' >"$tmp/v.out" 2>&1 ||
      { cat "$tmp/v.out"; fail "/bin/sh -c '... exec nvidia-device-plugin' in the image"; }
  fi
  ok "the GPU Operator's names run in the image: ${names[*]} (--version), and /bin/sh -c ... exec nvidia-device-plugin"
else
  echo "note: the image has none of the GPU Operator's names yet"
fi
for f in usr/lib/migkit/sim usr/bin/migkit-sim usr/bin/nvidia-smi usr/lib/migkit/bin/nvidia-smi; do
  [ ! -e "$prod/rootfs/$f" ] || fail "production image holds the simulator: /$f"
done
[ -z "$(find "$prod/rootfs" -name 'libnvidia-ml.so*' -print -quit)" ] || fail "production image holds a libnvidia-ml"
ok "production image holds no simulator"

# The demo image against its simulator: apply and assert through the upstream name.
parted=(migkit)
if [ -e "$demo/rootfs/usr/bin/nvidia-mig-parted" ]; then
  parted=(nvidia-mig-parted)
else
  echo "note: the image has no nvidia-mig-parted (upstream name) yet: using 'migkit'"
fi
run "$demo" "${parted[@]}" apply -f /etc/migkit/config.yaml -c all-balanced >"$tmp/apply.out" 2>&1 ||
  { cat "$tmp/apply.out"; fail "demo: ${parted[*]} apply -c all-balanced failed"; }
run "$demo" "${parted[@]}" assert -f /etc/migkit/config.yaml -c all-balanced >"$tmp/assert.out" 2>&1 ||
  { cat "$tmp/assert.out"; fail "demo: ${parted[*]} assert -c all-balanced failed"; }
if run "$demo" "${parted[@]}" assert -f /etc/migkit/config.yaml -c all-disabled >/dev/null 2>&1; then
  fail "demo: assert of all-disabled passed after applying all-balanced"
fi
ok "demo: ${parted[*]} apply and assert of all-balanced on the simulated DGX A100"
run "$demo" nvidia-smi -L >"$tmp/smi.out" 2>&1 || { cat "$tmp/smi.out"; fail "demo: nvidia-smi -L failed"; }
grep -q 'MIG ' "$tmp/smi.out" || { cat "$tmp/smi.out"; fail "demo: nvidia-smi -L shows no MIG device"; }
ok "demo: nvidia-smi stand-in lists $(grep -c 'MIG ' "$tmp/smi.out") MIG devices"
# The production image has no NVML at all: a clear error, not a crash.
if run "$prod" migkit export >"$tmp/export.out" 2>&1; then fail "production: export without NVML succeeded"; fi
grep -qi 'nvml\|libnvidia-ml' "$tmp/export.out" || { cat "$tmp/export.out"; fail "production: export error does not name NVML"; }
ok "production image without a driver: migkit export fails naming NVML"

for image in migkit migkit-demo; do
  # What `docker load` reads: manifest.json's RepoTags, config and layers.
  tags=$(tar -xOf "$out/$image-$version.docker.tar" manifest.json |
    python3 -c 'import json,sys; m=json.load(sys.stdin); assert len(m) == 1 and m[0]["Layers"]; print(" ".join(m[0]["RepoTags"]))') ||
    fail "$image archive: no readable manifest.json"
  case " $tags " in *" $image:$version "* | *" docker.io/library/$image:$version "*) ;;
    *) fail "$image archive tags: '$tags'" ;; esac
done
ok "docker archives readable, tagged migkit:$version and migkit-demo:$version"

# Dockerfile (for Docker and Podman users) builds the same image.
src=$(cd "$(dirname "$0")/../.." && pwd)
cf=$src/Dockerfile
[ -f "$cf" ] || fail "no Dockerfile: \`docker build .\` reads ./Dockerfile (podman: Containerfile or Dockerfile)"
[ ! -e "$src/Containerfile" ] || fail "both Containerfile and Dockerfile: podman reads the first, docker the second"
grep -q "^ARG MIGKIT_VERSION=$version\$" "$cf" || fail "Dockerfile: ARG MIGKIT_VERSION is not $version"
for used in deploy/image/packages.txt /image/packages.txt /image/hooks/extract-dpkg-status /image/finish-rootfs \
            'MIGKIT_NVML_LIB=/usr/lib/migkit/sim/libnvidia-ml.so.1' 'USER 0:0' 'CMD \["nvidia-mig-manager"\]' \
            'ARG BASE_IMAGE=debian:bookworm' 'FROM ${BASE_IMAGE} AS build'; do
  grep -qF -- "${used//\\/}" "$cf" || fail "Dockerfile does not use '$used' as scripts/build-image does"
done
# Every documented build command, as a person types it, finds its file.
cmds=$(grep -ohE '(docker|podman) build [^`]*' "$src/README.md" "$src"/docs/*.md "$cf" || true)
[ -n "$cmds" ] || fail "no docker build command in README.md, docs/*.md or the Dockerfile"
while read -r cmd; do
  file=$(sed -nE 's/.*(-f|--file)[ =]([^ ]+).*/\2/p' <<<"$cmd")
  [ -f "$src/${file:-Dockerfile}" ] || fail "'$cmd' reads ${file:-Dockerfile}, which is not there"
  grep -qE ' \.$| \. ' <<<"$cmd" || fail "'$cmd': not the source tree as the context"
done <<<"$cmds"
ok "Dockerfile: version $version, the same package list, hooks and config; $(wc -l <<<"$cmds") build commands find it"

echo
echo "Image sizes (unpacked root filesystem; OCI layers compressed; docker archive):"
for tag in "$version" "$version-demo"; do
  layers=$(skopeo --insecure-policy inspect --raw "oci:$out/oci:$tag" |
    python3 -c 'import json,sys; print(sum(l["size"] for l in json.load(sys.stdin)["layers"]))')
  image=migkit; [ "$tag" = "$version" ] || image=migkit-demo
  printf '  %-20s %6s  %6.1f MiB  %s\n' "$image:$version" "$(du -sh --exclude=proc --exclude=dev "$tmp/$tag/rootfs" | cut -f1)" \
    "$(awk -v b="$layers" 'BEGIN { print b / 1048576 }')" "$(du -h "$out/$image-$version.docker.tar" | cut -f1)"
done
echo "Debian packages in migkit:$version:"
dpkg-query --admindir="$prod/rootfs/var/lib/dpkg" -W -f '  ${Package} ${Version}\n'
echo "$passed passed, 0 failed"

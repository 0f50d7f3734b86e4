#!/usr/bin/env bash
# The bash completion (deploy/completion/migkit.bash) driven as bash drives
# it (COMP_WORDS, COMP_CWORD, then COMPREPLY): commands, options of a
# command, -o values, config names from -f's file, machine names.
set -euo pipefail
: "${MIGKIT_BIN:?}" "${MIGKIT_SIM_BIN:?}" "${MIGKIT_SOURCE_DIR:?}"
tmp=$(mktemp -d "${MIGKIT_TEST_TMP:-/tmp}/test-completion.XXXXXX" 2>/dev/null || mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# shellcheck source=deploy/completion/migkit.bash
. "$MIGKIT_SOURCE_DIR/deploy/completion/migkit.bash"
complete -p migkit | grep -q -- '-F _migkit' || fail "no 'complete -F _migkit migkit'"
# comp WORD... : completes the last word of `migkit WORD...`; prints COMPREPLY sorted, one line.
comp() {
  COMP_WORDS=("${BIN:-$MIGKIT_BIN}" "$@")
  COMP_CWORD=$#
  COMPREPLY=()
  _migkit
  printf '%s\n' "${COMPREPLY[@]}" | sort | tr '\n' ' ' | sed 's/ $//'
}
expect() {  # WANT WORD...
  local want=$1; shift
  local got; got=$(comp "$@")
  [ "$got" = "$want" ] || fail "migkit $*<TAB>: '$got', want '$want'"
}
expect "apply assert" a
expect "device-plugin" dev
expect "profiles" --simulate dgx-a100 pro
expect "--debug --debug-areas" --deb
expect "--mode-only" plan --mo
expect "--selected-config --sequential --skip-reset" apply --s
expect "boot clear-reboot-marker select status" service ""
expect "check" scheduler ch
expect "--indent" scheduler inventory --ind
expect "json table yaml" profiles -o ""
expect "json yaml" export -o ""
expect "json table" plan -o ""
# Config names from the file -f names (quoted keys too), whatever the order.
cat >"$tmp/c.yaml" <<'YAML'
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  "all-balanced":
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.5gb": 7}
  custom-1:
    - devices: [0]
      mig-enabled: false
YAML
expect "all-balanced all-disabled" plan -f "$tmp/c.yaml" -c all-
expect "all-balanced all-disabled custom-1" apply -f "$tmp/c.yaml" -c ""
expect "custom-1" assert --config-file "$tmp/c.yaml" --selected-config c
# Machine names from migkit-sim (on PATH), else from migkit's help.
want=$("$MIGKIT_SIM_BIN" machines | awk '{print $1}' | grep '^dgx-' | sort | tr '\n' ' ' | sed 's/ $//')
[ "$(wc -w <<<"$want")" -ge 3 ] || fail "migkit-sim lists few dgx machines: '$want'"
PATH=$(dirname "$MIGKIT_SIM_BIN"):$PATH expect "$want" --simulate dgx-
ln -s "$MIGKIT_BIN" "$tmp/migkit"   # no sim/bin/migkit-sim beside it, none on PATH
command -v migkit-sim >/dev/null || BIN=$tmp/migkit expect "dgx-a100 dgx-b200 dgx-h100" --simulate dgx
# ... and only machine names: not the daemon executables the help names elsewhere
got=$(PATH=/usr/bin:/bin BIN=$tmp/migkit comp --simulate "")
grep -q 'dgx-a100' <<<"$got" || fail "--simulate <TAB> without migkit-sim: '$got'"
! grep -q 'migkit-' <<<"$got" || fail "--simulate <TAB> offers executables as machines: '$got'"
echo PASS

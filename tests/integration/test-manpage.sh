#!/usr/bin/env bash
# migkit(1), generated at build time from the help text (scripts/gen-manpage):
# it renders without a groff warning, has the usual sections, and holds
# every command's help, so it cannot drift from `migkit COMMAND --help`.
set -euo pipefail
: "${MIGKIT_BIN:?}" "${MIGKIT_SOURCE_DIR:?}"
tmp=$(mktemp -d "${MIGKIT_TEST_TMP:-/tmp}/test-manpage.XXXXXX" 2>/dev/null || mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
built=$(dirname "$MIGKIT_BIN")/man/migkit.1.gz
[ -s "$built" ] || fail "the build made no $built"
gzip -dc "$built" >"$tmp/migkit.1"
# The build's page is what the generator makes from this binary now.
"$MIGKIT_SOURCE_DIR/scripts/gen-manpage" "$MIGKIT_BIN" "$(sed -n 's/^\.TH MIGKIT 1 "" "migkit \([^"]*\)".*/\1/p' "$tmp/migkit.1")" "$tmp/again.1"
cmp -s "$tmp/migkit.1" "$tmp/again.1" || fail "the built man page is stale: $(diff "$tmp/migkit.1" "$tmp/again.1" | head)"
for s in NAME SYNOPSIS DESCRIPTION COMMANDS "OUTPUT FORMATS" "EXIT STATUS" "SEE ALSO"; do
  grep -qx "\.SH $s" "$tmp/migkit.1" || fail "no section $s"
done
# Rendered as a reader sees it: no warning, and every command's usage line.
if command -v man >/dev/null; then
  MANWIDTH=100 LC_ALL=C.UTF-8 man --warnings -E UTF-8 -l "$tmp/migkit.1" >"$tmp/page.txt" 2>"$tmp/warn" ||
    fail "man -l failed: $(cat "$tmp/warn")"
elif command -v groff >/dev/null; then
  groff -man -Tutf8 -ww "$tmp/migkit.1" 2>"$tmp/warn" | sed 's/.\x08//g' >"$tmp/page.txt"
else
  echo "SKIP: neither man nor groff: checked the structure only"
  exit 77
fi
[ ! -s "$tmp/warn" ] || fail "warnings rendering the page: $(cat "$tmp/warn")"
commands=$("$MIGKIT_BIN" --help | sed -n '/^Commands:/,/^$/s/^  \([a-z][a-z-]*\) .*/\1/p')
[ "$(wc -w <<<"$commands")" -ge 10 ] || fail "few commands in migkit --help: $commands"
for c in $commands; do
  usage=$("$MIGKIT_BIN" "$c" --help 2>&1 | sed -n 1p)  # sed reads it all: no SIGPIPE
  grep -qF -- "$usage" "$tmp/page.txt" || fail "the page lacks '$usage'"
done
grep -q 'migkit - partition NVIDIA GPUs' "$tmp/page.txt" || fail "NAME line: $(head -5 "$tmp/page.txt")"
echo PASS

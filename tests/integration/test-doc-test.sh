#!/usr/bin/env bash
# scripts/doc-test, the runner of the docs' shell examples: on small markdown
# files it runs fenced and indented shell blocks in order (exported variables
# carry over), skips marked ones, keeps a daemon running for its seconds, and
# names FILE:LINE of a failing command; bad markers are errors.
set -euo pipefail
: "${MIGKIT_SOURCE_DIR:?}" "${MIGKIT_BUILD_DIR:?}"
mkdir -p "${MIGKIT_TEST_TMP:-/tmp}"
tmp=$(mktemp -d "${MIGKIT_TEST_TMP:-/tmp}/test-doc-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export TMPDIR=$tmp  # the scratch directories of failed runs, kept, go with it
fail() { echo "FAIL: $*" >&2; exit 1; }
dt() { "$MIGKIT_SOURCE_DIR/scripts/doc-test" --build "$MIGKIT_BUILD_DIR" "$@"; }

cat >"$tmp/good.md" <<'MD'
# good

```sh
export GREETING=hello
migkit --simulate dgx-a100 profiles -i 0 >/dev/null
echo "$GREETING" > /tmp/greeting
```

Indented, after the first: the variable and /tmp/ carry over.

    test "$GREETING" = hello && grep -q hello /tmp/greeting

<!-- doc-test: skip needs a cluster -->
    kubectl get nodes

<!-- doc-test: daemon 1 -->
```sh
sleep 30
```

```yaml
not: [run
```

    C(F, S) = a formula, not a command
MD
out=$(dt "$tmp/good.md" 2>&1) || fail "good.md failed: $out"
grep -q '2 examples run\|3 examples run' <<<"$out" || fail "counts: $out"
grep -q '1 marked skip' <<<"$out" || fail "skip count: $out"
[ ! -e /tmp/greeting ] || [ /tmp/greeting -ot "$tmp/good.md" ] || fail "/tmp/ was not the scratch tmp/"

cat >"$tmp/bad.md" <<'MD'
# bad

```sh
true
migkit --simulate no-such-machine profiles
echo never
```

```sh
echo not reached
```
MD
if out=$(dt "$tmp/bad.md" 2>&1); then fail "bad.md passed: $out"; fi
grep -q "$tmp/bad.md:5: exit status" <<<"$out" || fail "no FILE:LINE of the failing command: $out"
grep -q 'no-such-machine' <<<"$out" || fail "no output of the failing command: $out"
! grep -q 'not reached' <<<"$out" || fail "ran the blocks after a failure: $out"

cat >"$tmp/daemon-dies.md" <<'MD'
<!-- doc-test: daemon 5 -->
```sh
false
```
MD
if out=$(dt "$tmp/daemon-dies.md" 2>&1); then fail "a daemon that exits 1 passed: $out"; fi
grep -q 'daemon-dies.md:3' <<<"$out" || fail "daemon failure without FILE:LINE: $out"

printf '<!-- doc-test: skip -->\n    migkit profiles\n' >"$tmp/noreason.md"
if out=$(dt "$tmp/noreason.md" 2>&1); then fail "skip without a reason passed"; fi
grep -q 'noreason.md:1:.*needs a reason' <<<"$out" || fail "skip without reason: $out"
printf '<!-- doc-test: skipp x -->\n    migkit profiles\n' >"$tmp/typo.md"
if out=$(dt "$tmp/typo.md" 2>&1); then fail "an unknown marker passed"; fi
grep -q "typo.md:1: unknown doc-test marker 'skipp x'" <<<"$out" || fail "unknown marker: $out"
printf '<!-- doc-test: skip x -->\n\nA paragraph.\n' >"$tmp/orphan.md"
if out=$(dt "$tmp/orphan.md" 2>&1); then fail "a marker without a block passed"; fi
grep -q 'orphan.md:1: doc-test marker not followed by a code block' <<<"$out" || fail "orphan: $out"
echo "--- a reader's shell: the runner puts no build on PATH; the README's set-up blocks do, first"
cat >"$tmp/nosetup.md" <<'MD'
```sh
command -v migkit-sim && exit 1
migkit --version
```
MD
printf '# readme\n\nNo set-up here.\n' >"$tmp/readme-none.md"
if out=$(PATH=$MIGKIT_BUILD_DIR:$MIGKIT_BUILD_DIR/sim/bin:$PATH dt --readme "$tmp/readme-none.md" "$tmp/nosetup.md" 2>&1); then
  fail "migkit ran without a set-up putting it on PATH: $out"
fi
grep -q 'nosetup.md:3: exit status 127' <<<"$out" || fail "no 'command not found' at nosetup.md:3: $out"
cat >"$tmp/readme-setup.md" <<'MD'
# readme

<!-- doc-test: setup -->
    export PATH=$PWD/build:$PATH
MD
out=$(dt --readme "$tmp/readme-setup.md" "$tmp/nosetup.md" 2>&1) || fail "with the README's set-up: $out"
if out=$(dt --readme "$tmp/readme-setup.md" "$tmp/bad.md" 2>&1); then fail "bad.md passed after the set-up"; fi
grep -q "$tmp/bad.md:5: exit status" <<<"$out" || fail "FILE:LINE after a set-up block: $out"

echo "--- the quick start's demo leaves nothing under TMPDIR and says how to put migkit on PATH"
grep -q -- '--demo-only' "$MIGKIT_SOURCE_DIR/scripts/quickstart" || fail "scripts/quickstart has no --demo-only"
mkdir "$tmp/qs"
out=$(cd "$tmp" && env -u MIGKIT_SIM_STATE TMPDIR="$tmp/qs" "$MIGKIT_SOURCE_DIR/scripts/quickstart" --demo-only "$MIGKIT_BUILD_DIR" 2>&1) \
  || fail "quickstart --demo-only: $out"
[ -z "$(ls -A "$tmp/qs")" ] || fail "the quick start left $(ls -A "$tmp/qs") under TMPDIR"
grep -qF "export PATH=$(cd "$MIGKIT_BUILD_DIR" && pwd):\$PATH" <<<"$out" || fail "no PATH line: $(tail -5 <<<"$out")"
echo "PASS"

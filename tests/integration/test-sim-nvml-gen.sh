#!/usr/bin/env bash
# The NVML simulator's generated files are what sim/gen-nvml.py makes of the
# committed name table and the simulator's sources: a function modelled in
# sim/lib/nvml-*.c without a regeneration (still a stub in nvml-stubs.c, or
# STUB in nvml-names.inc), or a hand edit of either file, fails here.
set -euo pipefail
: "${MIGKIT_SOURCE_DIR:?}"
mkdir -p "${MIGKIT_TEST_TMP:-/tmp}"
tmp=$(mktemp -d "${MIGKIT_TEST_TMP:-/tmp}/test-sim-nvml-gen.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

python3 "$MIGKIT_SOURCE_DIR/sim/gen-nvml.py" --out "$tmp"
for f in nvml-names.inc nvml-stubs.c; do
        if ! diff -u "$MIGKIT_SOURCE_DIR/sim/lib/$f" "$tmp/$f"; then
                echo "FAIL: sim/lib/$f is stale: run sim/gen-nvml.py" >&2
                exit 1
        fi
done
echo "ok: sim/lib/nvml-names.inc and nvml-stubs.c are fresh"

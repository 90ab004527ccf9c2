#!/bin/sh
# The worker's size per feature set (`make sizes`): builds each variant with
# scripts/build.sh and prints the wasm's bytes and gzipped bytes (gzip -9, as
# the benchmark reports it), then rebuilds the default.
set -eu
cd "$(dirname "$0")/.."
printf '%-48s %10s %10s\n' "features" "wasm" "gzipped"
for features in "" "stripe,github,admin" "stripe,github" "stripe"; do
    FEATURES=$features sh scripts/build.sh > target/sizes-build.log 2>&1 ||
        { cat target/sizes-build.log; exit 1; }
    printf '%-48s %10s %10s\n' "${features:-default (all)}" \
        "$(wc -c < build/index_bg.wasm)" "$(gzip -9 -c build/index_bg.wasm | wc -c)"
done
sh scripts/build.sh > target/sizes-build.log 2>&1

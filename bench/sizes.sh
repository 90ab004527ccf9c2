#!/bin/sh
# The worker's size per feature set (`make sizes`): builds each variant with
# scripts/build.sh and prints the wasm's bytes and gzipped bytes (gzip -9;
# the benchmark's zlib at level 9 agrees within a few bytes) and the upload
# as `wrangler deploy --dry-run` reports it, then the same for the reference
# KV-dedupe gateway in bench/reference/ (bench/gateway.mjs), keeps each in
# target/variants/, times the cold start of the default and the Stripe +
# GitHub builds (bench/coldstart.mjs), then rebuilds the default.
set -eu
cd "$(dirname "$0")/.."
mkdir -p target
WRANGLER=node_modules/.bin/wrangler
export WRANGLER_SEND_METRICS=false
# "Total Upload: 834.21 KiB / gzip: 327.50 KiB", as wrangler prints it.
upload() {
    "$WRANGLER" deploy --dry-run --outdir "$PWD/target/dry-run" "$@" 2>&1 | sed -n 's/^Total Upload: //p'
}
printf '%-48s %10s %10s   %s\n' "features" "wasm" "gzipped" "upload (wrangler)"
ALL_PROVIDERS=stripe,github,standard-webhooks,shopify,slack,linear,paddle,twilio,generic-hmac
for features in "" "$ALL_PROVIDERS,admin" "stripe,github,admin" "stripe,github" "stripe"; do
    WORKER_FEATURES=$features sh scripts/build.sh > target/sizes-build.log 2>&1 ||
        { cat target/sizes-build.log; exit 1; }
    label=$(printf '%s' "${features:-default (all)}" | sed "s/$ALL_PROVIDERS/all providers/")
    printf '%-48s %10s %10s   %s\n' "$label" \
        "$(wc -c < build/index_bg.wasm)" "$(gzip -9 -c build/index_bg.wasm | wc -c)" \
        "$(WORKER_FEATURES=$features BUILD_IF_CHANGED=1 upload)"
    variant="target/variants/${features:-default}"
    rm -rf "$variant" && mkdir -p target/variants && cp -r build "$variant"
done
printf '%-48s %10s %10s   %s\n' "reference gateway (bench/reference)" "-" "-" \
    "$(upload -c bench/reference/wrangler.toml)"
node bench/coldstart.mjs target/variants/default target/variants/stripe,github
WORKER_FEATURES='' sh scripts/build.sh > target/sizes-build.log 2>&1

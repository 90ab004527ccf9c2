#!/bin/sh
# Builds the wasm worker into build/ (wrangler runs this; see [build] in
# wrangler.toml). worker-build would download wasm-bindgen, wasm-opt and
# esbuild from GitHub; these variables point it at the copies setup.sh
# installed from crates.io and npm instead.
set -eu
cd "$(dirname "$0")/.."
#
# WORKER_FEATURES: the cargo features to build in, when not all (the
# default): a worker with two providers and no dashboard builds with
# WORKER_FEATURES=<provider>,<provider>,admin (see Cargo.toml's [features]). Set it in the environment of `make deploy` (or
# of the deploy workflow), not in wrangler.toml: the tests need every
# feature.
#
# Under `make dev`, wrangler runs this on every start (scripts/dev.mjs sets
# BUILD_IF_CHANGED): skip the 13 s of wasm-bindgen and wasm-opt when no input
# changed since the last successful build began, with the same features.
# `make build` always builds.
STAMP=target/worker-build.stamp
if [ "${BUILD_IF_CHANGED:-}" = 1 ] && [ -f build/index.js ] && [ -f "$STAMP" ] &&
  [ "$(cat "$STAMP")" = "${WORKER_FEATURES:-}" ] &&
  [ -z "$(find src crates Cargo.toml Cargo.lock package-lock.json scripts/build.sh scripts/setup.sh -newer "$STAMP" | head -n 1)" ]; then
  echo "build/ is up to date"
  exit 0
fi
mkdir -p target
started=$(mktemp target/worker-build.XXXXXX)
printf '%s' "${WORKER_FEATURES:-}" > "$started"
export PATH="$HOME/.cargo/bin:$PATH"
export WASM_BINDGEN_BIN="$HOME/.cargo/bin/wasm-bindgen"
export WASM_OPT_BIN="$PWD/node_modules/binaryen/bin/wasm-opt"
ESBUILD_BIN=$(ls "$PWD"/node_modules/@esbuild/*/bin/esbuild | head -n 1)
export ESBUILD_BIN
if [ -n "${WORKER_FEATURES:-}" ]; then
  worker-build --release -- --no-default-features --features "$WORKER_FEATURES"
else
  worker-build --release
fi
mv "$started" "$STAMP"

#!/bin/sh
# Builds the wasm worker into build/ (wrangler runs this; see [build] in
# wrangler.toml). worker-build would download wasm-bindgen, wasm-opt and
# esbuild from GitHub; these variables point it at the copies setup.sh
# installed from crates.io and npm instead.
set -eu
cd "$(dirname "$0")/.."
# wrangler runs this on every `wrangler dev` start: skip the 13 s of
# wasm-bindgen and wasm-opt when nothing the worker is built from changed.
if [ -f build/worker/shim.mjs ] && [ -z "$(find src Cargo.toml Cargo.lock scripts/build.sh -newer build/worker/shim.mjs | head -n 1)" ]; then
  echo "build/ is up to date"
  exit 0
fi
export PATH="$HOME/.cargo/bin:$PATH"
export WASM_BINDGEN_BIN="$HOME/.cargo/bin/wasm-bindgen"
export WASM_OPT_BIN="$PWD/node_modules/binaryen/bin/wasm-opt"
ESBUILD_BIN=$(ls "$PWD"/node_modules/@esbuild/*/bin/esbuild | head -n 1)
export ESBUILD_BIN
exec worker-build --release

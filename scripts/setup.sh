#!/bin/sh
# Installs what building, running and testing the worker needs, skipping
# whatever is already there: the wasm target, worker-build, wasm-bindgen-cli
# (at the exact version Cargo.lock pins), Debian's Chromium, and the npm
# packages (wrangler, miniflare, binaryen's wasm-opt, esbuild,
# playwright-core). Everything comes from crates.io, Debian and npm; nothing
# is downloaded from anywhere else.
set -eu
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

WORKER_BUILD_VERSION=0.8.7
WASM_BINDGEN_VERSION=$(sed -n '/^name = "wasm-bindgen"$/{n;s/^version = "\(.*\)"$/\1/p;}' Cargo.lock)

if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
    rustup target add wasm32-unknown-unknown
fi

if ! worker-build --version 2>/dev/null | grep -qx "$WORKER_BUILD_VERSION"; then
    cargo install worker-build --version "$WORKER_BUILD_VERSION" --locked
fi

# Without --locked: the CLI's own lockfile wants a crate version this
# registry mirror may not serve (see TOOLCHAIN notes in README).
if ! wasm-bindgen --version 2>/dev/null | grep -qx "wasm-bindgen $WASM_BINDGEN_VERSION"; then
    cargo install wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION"
fi

# The dashboard test drives Debian's Chromium (no browser is downloaded).
if ! command -v chromium >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update
    $SUDO apt-get install -y chromium
fi

# npm ci only when node_modules is missing or older than the lockfile.
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
    npm ci --no-audit --no-fund
fi

#!/bin/sh
# Installs what building, running and testing the worker needs, skipping
# whatever is already there: the pinned Rust toolchain and its wasm target,
# worker-build, wasm-bindgen-cli (at the exact version Cargo.lock pins), the
# npm packages (wrangler, miniflare, binaryen's wasm-opt, esbuild,
# playwright-core, yaml). Everything comes from crates.io, Debian and npm;
# nothing is downloaded from anywhere else.
set -eu
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

WORKER_BUILD_VERSION=0.8.7
WASM_BINDGEN_VERSION=$(sed -n '/^name = "wasm-bindgen"$/{n;s/^version = "\(.*\)"$/\1/p;}' Cargo.lock)

# The toolchain rust-toolchain.toml pins, with its wasm target, rustfmt and
# clippy, installed by rustup. Where rustup cannot download it (a machine
# that reaches crates.io but not rustup's servers) and the machine's stable
# toolchain is that very version, stable stands in under the pinned name.
# Asked from / so that the pin itself does not trigger an install first.
TOOLCHAIN=$(sed -n 's/^channel = "\(.*\)"$/\1/p' rust-toolchain.toml)
if ! (cd / && rustup toolchain list) | grep -q "^$TOOLCHAIN-"; then
    if ! (cd / && rustup toolchain install "$TOOLCHAIN" --profile minimal \
        --component rustfmt,clippy --target wasm32-unknown-unknown); then
        HOST=$(cd / && rustc -vV | sed -n 's/^host: //p')
        TOOLCHAINS="${RUSTUP_HOME:-$HOME/.rustup}/toolchains"
        if [ -d "$TOOLCHAINS/stable-$HOST" ] &&
            [ "$("$TOOLCHAINS/stable-$HOST/bin/rustc" --version | cut -d' ' -f2)" = "$TOOLCHAIN" ]; then
            ln -s "$TOOLCHAINS/stable-$HOST" "$TOOLCHAINS/$TOOLCHAIN-$HOST"
        else
            echo "setup: Rust $TOOLCHAIN could not be installed" >&2
            exit 1
        fi
    fi
fi
if [ ! -d "$(rustc --print sysroot)/lib/rustlib/wasm32-unknown-unknown" ]; then
    rustup target add wasm32-unknown-unknown
fi

# Both tools built unoptimized: they install in about 2 minutes instead of
# 6 on 2 cores, and their work (spawning cargo, rewriting the wasm's glue,
# 0.6 s instead of 0.2 s a build) gives byte-identical output.
unoptimized() {
    CARGO_PROFILE_RELEASE_OPT_LEVEL=0 CARGO_PROFILE_RELEASE_CODEGEN_UNITS=256 CARGO_PROFILE_RELEASE_LTO=off "$@"
}
if ! worker-build --version 2>/dev/null | grep -qx "$WORKER_BUILD_VERSION"; then
    unoptimized cargo install worker-build --version "$WORKER_BUILD_VERSION" --locked
fi

# Without --locked: the CLI's own lockfile wants a crate version this
# registry mirror may not serve (a webpki-roots version, when this was set up).
if ! wasm-bindgen --version 2>/dev/null | grep -qx "wasm-bindgen $WASM_BINDGEN_VERSION"; then
    unoptimized cargo install wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION"
fi

# needs: dashboard
BROWSER=false
# needs: postgres
POSTGRES=false
# needs: template
SHELLCHECK=false
for arg in "$@"; do
    case "$arg" in
    # needs: dashboard
    --with-browser) BROWSER=true ;;
    # needs: postgres
    --with-postgres) POSTGRES=true ;;
    # needs: template
    --with-shellcheck) SHELLCHECK=true ;;
    esac
done
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
# Debian's packages, the package lists fetched once per run.
UPDATED=false
apt_install() {
    if [ "$UPDATED" = false ]; then
        $SUDO apt-get update
        UPDATED=true
    fi
    $SUDO apt-get install -y "$@"
}

# needs: dashboard
# With --with-browser (`make test`, not `make dev`): Debian's Chromium, which
# the dashboard test drives, unless CHROMIUM names another browser.
if [ "$BROWSER" = true ] && [ -z "${CHROMIUM:-}" ] && ! command -v chromium >/dev/null 2>&1; then
    apt_install chromium
fi

# needs: postgres
# With --with-postgres, or when wrangler.toml's store is Postgres: Debian's
# PostgreSQL server and psql, for the local cluster of scripts/postgres.sh
# (make dev, make test) and make deploy's psql, and PgBouncer, the pooler
# the worker reaches it through (as it reaches a deployment's through
# Hyperdrive).
if { [ "$POSTGRES" = true ] || grep -q '^STORE = "postgres"' wrangler.toml; }; then
    if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
        apt_install postgresql
    fi
    if [ ! -x /usr/sbin/pgbouncer ]; then
        apt_install pgbouncer
    fi
fi

# needs: template
# With --with-shellcheck (the template's make test): Debian's shellcheck,
# for the generated copies' scripts (tests/copies.test.mjs).
if [ "$SHELLCHECK" = true ] && ! command -v shellcheck >/dev/null 2>&1; then
    apt_install shellcheck
fi

# npm ci only when node_modules is missing or older than the lockfile.
if [ ! -f node_modules/.package-lock.json ] || [ -n "$(find package-lock.json -newer node_modules/.package-lock.json)" ]; then
    npm ci --no-audit --no-fund
fi

# wrangler appends every line it logs, at any level, to a debug log file,
# and has no setting that stops it. The Makefile points it into this
# project's ignored state (WRANGLER_LOG_PATH=.wrangler/logs, one file per
# process); here it is pruned to the newest 20 files and 200 MB.
if [ -d .wrangler/logs ]; then
    kept=0
    bytes=0
    # Newest first; the names are wrangler's own (no spaces, no newlines).
    ls -1t .wrangler/logs/wrangler-*.log 2>/dev/null | while IFS= read -r file; do
        size=$(wc -c <"$file")
        if [ "$kept" -ge 20 ] || [ $((bytes + size)) -gt 209715200 ]; then
            rm -f "$file"
        else
            kept=$((kept + 1))
            bytes=$((bytes + size))
        fi
    done
fi

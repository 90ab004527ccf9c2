#!/bin/sh
# `make test-copies` (and .ci/run, after make test): what a user gets,
# proven at every landing. It generates the Stripe-only copies, on D1 and
# on Postgres (`-d providers=stripe -d demos=false -d dashboard=false`,
# then `-d store=postgres`), with cargo-generate as the README's "Make it
# yours" line does, and in each, as its owner would from a fresh state:
# - `make test`, its whole suite, its own setup included (its npm
#   packages; the tools it finds installed);
# - `make dev`, until it serves `GET /`.
# Shared so that CI's time holds: the copies' compiled dependencies, one
# cargo target directory (target/copies, a symlink in each copy), and what
# the template's make test installed before (the cargo tools, the wasm
# target, Debian's packages): each copy's setup finds them there. The copies
# live in a directory closed to others (mktemp -d), as a clone under /root
# is: the Postgres copy's clusters must find a place of their own.
set -eu
cd "$(dirname "$0")/../.."
export PATH="$HOME/.cargo/bin:$PATH"
# The copies' clusters are their own: none named from outside.
unset PG_DIR PG_PORT PG_DB PG_CLUSTER
ROOT=$PWD
. scripts/template/generate.sh

WORK=$(mktemp -d)
SHARED=$ROOT/target/copies
mkdir -p "$SHARED"
DEV=""
cleanup() {
    [ -z "$DEV" ] || kill -- "-$DEV" 2>/dev/null || true
    stop_clusters "$WORK"/hooks-*
    rm -rf "$WORK"
}
trap cleanup EXIT
snapshot "$WORK"
fail() { echo "test-copies: $NAME: $*" >&2; exit 1; }

free_port() {
    node -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); })'
}

# serves <port>: make dev answers GET / within three minutes.
serves() {
    for _ in $(seq 180); do
        kill -0 "$DEV" 2>/dev/null || return 1
        node -e 'fetch(process.argv[1]).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))' "http://127.0.0.1:$1/" && return 0
        sleep 1
    done
    return 1
}

# copy <name> <store>
copy() {
    NAME=$1
    started=$(date +%s)
    generate "$WORK" "$NAME" stripe false false "$2"
    cd "$WORK/$NAME"
    ln -s "$SHARED" target
    make test || fail "its make test failed"
    tested=$(date +%s)
    port=$(free_port)
    pg_port=$(free_port)
    PG_PORT=$pg_port setsid make dev PORT="$port" >"$WORK/$NAME-dev.log" 2>&1 &
    DEV=$!
    serves "$port" || { tail -n 40 "$WORK/$NAME-dev.log" >&2; fail "make dev does not serve"; }
    kill -- "-$DEV" && wait "$DEV" 2>/dev/null || true
    DEV=""
    echo "test-copies: $NAME (store $2) passed: make test in $((tested - started)) s, make dev served in $(($(date +%s) - tested)) s"
    cd "$ROOT"
}

copy hooks-stripe-d1 d1
copy hooks-stripe-postgres postgres
echo "test-copies: both Stripe-only copies pass their make test and serve under make dev"

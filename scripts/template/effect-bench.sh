#!/bin/sh
# How long an owner waits for `cargo test` to prove an effect (issue #46):
# a Stripe-only copy of each store, generated from this checkout with
# recipe (a) applied, then in each:
#   - the first `cargo test` (a target/ of its own: every dependency built);
#   - `cargo test` after an edit of src/effects/invoices.rs;
#   - the same with a column misspelled: it must fail, naming the statement
#     and the column, as the copy's docs show.
# Prints the figures; exits 1 if a run does not do what it should. The
# Postgres copy's test cluster is stopped at the end.
set -eu
cd "$(dirname "$0")/../.."
ROOT=$PWD
. scripts/template/generate.sh

WORK=$(mktemp -d /tmp/effect-tests.XXXXXX)
trap 'stop_clusters "$WORK"/copy-*; rm -rf "$WORK"' EXIT
snapshot "$WORK"

fail() {
    echo "effect-tests: $*" >&2
    exit 1
}

# timed <command…>: runs it quietly into $WORK/out; $took is how long it
# took (s, one decimal), $status its exit status.
timed() {
    start=$(date +%s%N)
    status=0
    "$@" >"$WORK/out" 2>&1 || status=$?
    took=$(echo "$(($(date +%s%N) - start))" | awk '{ printf "%.1f", $1 / 1e9 }')
}

for store in d1 postgres; do
    generate "$WORK" "copy-$store" stripe true false "$store" >/dev/null
    cd "$WORK/copy-$store"
    node "$ROOT/scripts/template/apply-recipe.mjs" a >/dev/null
    export CARGO_TARGET_DIR="$WORK/target-$store"
    timed cargo test --offline
    [ "$status" = 0 ] || { cat "$WORK/out" >&2; fail "$store: the first cargo test failed"; }
    cold=$took
    touch src/effects/invoices.rs
    timed cargo test --offline
    [ "$status" = 0 ] || fail "$store: cargo test after an edit failed"
    warm=$took
    sed -i 's/amount_paid, currency, updated_at) /amount_paid, curency, updated_at) /' src/effects/invoices.rs
    timed cargo test --offline
    [ "$status" != 0 ] || fail "$store: a misspelled column passed"
    grep -q "statement: INSERT INTO invoices (id, status, amount_paid, curency" "$WORK/out" || fail "$store: the failure does not name the statement"
    grep -q 'said: .*curency' "$WORK/out" || fail "$store: the failure does not name the column"
    said=$(grep 'said: ' "$WORK/out" | head -n 1 | sed 's/^ *//')
    echo "$store: first cargo test ${cold} s; after an edit ${warm} s; a misspelled column fails in ${took} s: $said"
    unset CARGO_TARGET_DIR
    cd "$ROOT"
done

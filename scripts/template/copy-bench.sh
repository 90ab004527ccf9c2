#!/bin/sh
# Issue #47's measure, as a user meets it: a Stripe copy with the demos,
# generated from this checkout, under its own `make dev`, first on D1, then
# on Postgres (scripts/template/copy-rate.mjs in each). Prints each run and
# Postgres's rate as a share of D1's. The Postgres copy's cluster is
# stopped at the end.
set -eu
cd "$(dirname "$0")/../.."
ROOT=$PWD
. scripts/template/generate.sh

WORK=$(mktemp -d /tmp/copy-bench.XXXXXX)
trap 'stop_clusters "$WORK"/copy-*; rm -rf "$WORK"' EXIT
snapshot "$WORK"
free_port() {
    node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}
# Ports of its own: another make dev or cluster here cannot answer
# instead. The cluster's pooler listens 10000 above its port.
PORT=$(free_port)
export PG_PORT
PG_PORT=$(free_port)
while [ "$PG_PORT" -gt 55000 ]; do PG_PORT=$(free_port); done

for store in d1 postgres; do
    generate "$WORK" "copy-$store" stripe true true "$store" >/dev/null
    (cd "$WORK/copy-$store" && make setup >/dev/null &&
        RATE_PORT=$PORT node "$ROOT/scripts/template/copy-rate.mjs" "$store" >"$WORK/$store.json")
    cat "$WORK/$store.json"
done
node -e '
const [d1, pg] = process.argv.slice(1).map((f) => JSON.parse(require("fs").readFileSync(f, "utf8")));
const share = pg["acknowledged/s"] / d1["acknowledged/s"];
console.log(`Postgres acknowledged ${share.toFixed(2)}x D1'"'"'s rate; ${pg["commits/event"]} commits per new event`);
' "$WORK/d1.json" "$WORK/postgres.json"

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

# Whatever the caller's shell points a copy at (its own cluster, database
# or Hyperdrive string) is not the copies' to use, or to stop.
unset PG_DIR PG_DB PG_CLUSTER PG_POOLER PG_REMOTE CLOUDFLARE_HYPERDRIVE_LOCAL_CONNECTION_STRING_HYPERDRIVE

WORK=$(mktemp -d /tmp/copy-bench.XXXXXX)
trap 'stop_clusters "$WORK"/copy-*; rm -rf "$WORK"' EXIT
# sh runs no EXIT trap when a signal ends it: exiting runs it.
trap 'exit 130' INT
trap 'exit 143' TERM HUP
snapshot "$WORK"
# Ports of its own, free now: make dev's, and the cluster's (at most
# 55000: its pooler listens 10000 above it).
ports=$(node -e '
const net = require("net");
const free = (port) => new Promise((ok) => { const s = net.createServer().once("error", () => ok(0)).listen(port, "127.0.0.1", () => { const p = s.address().port; s.close(() => ok(p)); }); });
(async () => {
  const dev = await free(0);
  for (let tries = 0; tries < 200; tries++) {
    const pg = 20000 + Math.floor(Math.random() * 35000);
    if (pg !== dev && pg + 10000 !== dev && (await free(pg)) && (await free(pg + 10000))) return console.log(dev, pg);
  }
  process.exit(1);
})();')
PORT=${ports% *}
export PG_PORT="${ports#* }"

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

// Benchmark: D1 and Postgres as the store, one after the other in one run,
// with the same build (the postgres variant, which has both) in workerd
// (Miniflare), real Durable Objects, D1 and Queues, and a real local
// Postgres behind the local Hyperdrive binding.
//
//   make store-bench      (builds the postgres variant first)
//
// Per store: `distinct` new checkouts at 32 in flight (acknowledged/s, and
// fully processed/s: until their receipts' outbox rows are performed, and,
// with Postgres, handed off), then storms of 50 copies of one event
// (copies/s). With Postgres, Postgres's own counters per event:
// transactions committed and rolled back, rows inserted and updated.
import { existsSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";
import { gzipSync } from "node:zlib";

import { agent, checkoutBody, drive, signed, STORM_SIZE } from "./harness.mjs";
import { freshDatabase, POSTGRES_BUILD, startPostgresWorker } from "../tests/support/postgres.mjs";
import { startWorker } from "../tests/support/worker.mjs";

const DISTINCT = Number(process.env.BENCH_DISTINCT ?? 1000);
const STORMS = Number(process.env.BENCH_STORMS ?? 20);
const CONCURRENCY = 32;
const STATE_DIR = join(existsSync("/dev/shm") ? "/dev/shm" : os.tmpdir(), `webhooks-stores-${process.pid}`);
const quiet = { handleRuntimeStdio: (out, err) => (out.resume(), err.resume()), unsafeDirectSockets: [{ host: "127.0.0.1", port: 0 }] };
// The log lines at `warn`: printing them would measure this process.
const VARS = { LOG_LEVEL: "warn", EMAIL_API_URL: "http://email.test", EMAIL_API_KEY: "bench-key", EMAIL_FROM: "shop@example.com" };

async function run(store) {
  const pg = store === "postgres" ? freshDatabase() : undefined;
  const persist = { durableObjectsPersist: join(STATE_DIR, store, "do"), d1Persist: join(STATE_DIR, store, "d1") };
  const w = pg
    ? await startPostgresWorker(pg, VARS, { ...quiet, ...persist })
    : await startWorker(VARS, { ...quiet, ...persist, main: POSTGRES_BUILD });
  const url = new URL("/webhooks/stripe", await w.mf.unsafeGetDirectURL("webhooks")).href;
  const tag = `${store}_${process.pid}`;
  await drive(url, Array.from({ length: 100 }, (_, i) => signed(checkoutBody(`${tag}_warm${i}`))), CONCURRENCY);
  while ((await w.scalar("SELECT count(*) FROM outbox WHERE status IN ('pending', 'sending')")) > 0) await sleep(100);
  const before = pg && counters(pg);

  const started = Date.now();
  const distinct = await drive(url, Array.from({ length: DISTINCT }, (_, i) => signed(checkoutBody(`${tag}_${i}`))), CONCURRENCY);
  const acked = distinct.results.filter((r) => r.status === 200).length;
  // This process's own reads of Postgres, each one transaction: taken
  // out of Postgres's counts below.
  let probes = 0;
  for (;;) {
    const open = await w.scalar("SELECT count(*) FROM outbox WHERE status IN ('pending', 'sending')");
    const waiting = pg ? Number(pg.scalar("SELECT count(*) FROM webhook_outbox WHERE handed_off_at IS NULL")) : 0;
    if (pg) probes++;
    if (open === 0 && waiting === 0 && w.target.calls.length >= DISTINCT + 100) break;
    await sleep(50);
  }
  const processedSeconds = (Date.now() - started) / 1000;
  const after = pg && counters(pg);

  const storms = { results: [], seconds: 0 };
  for (let s = 0; s < STORMS; s++) {
    const one = signed(checkoutBody(`${tag}_storm${s}`));
    const burst = await drive(url, Array(STORM_SIZE).fill(one), STORM_SIZE);
    storms.results.push(...burst.results);
    storms.seconds += burst.seconds;
  }
  const ms = distinct.results.map((r) => r.ms).sort((a, b) => a - b);
  const at = (q) => +ms[Math.min(ms.length - 1, Math.floor(q * ms.length))].toFixed(1);
  const ledger = pg
    ? Number(pg.scalar(`SELECT count(*) FROM processed_events WHERE event_id LIKE 'evt_bench_${process.pid}_${tag}%'`))
    : await w.scalar("SELECT count(*) FROM processed_events WHERE event_id LIKE ?", `evt_bench_${process.pid}_${tag}%`);
  // The probes, and the counters' own read.
  const own = { xact_commit: probes + 1 };
  const perEvent = (name) => (pg ? +((after[name] - before[name] - (own[name] ?? 0)) / DISTINCT).toFixed(2) : "");
  await w.dispose();
  return {
    store,
    "acknowledged/s": Math.round(acked / distinct.seconds),
    "fully processed/s": Math.round(DISTINCT / processedSeconds),
    "copies/s (storms)": Math.round(storms.results.length / storms.seconds),
    "p50 ms": at(0.5),
    "p99 ms": at(0.99),
    "ledger rows": ledger,
    "commits/event": perEvent("xact_commit"),
    "rollbacks/event": perEvent("xact_rollback"),
    "rows inserted/event": perEvent("tup_inserted"),
    "rows updated/event": perEvent("tup_updated"),
  };
}

/** Postgres's own counters for the database (pg_stat_database). */
function counters(pg) {
  pg.query("SELECT pg_stat_clear_snapshot()");
  const [row] = pg.query(`SELECT xact_commit, xact_rollback, tup_inserted, tup_updated FROM pg_stat_database WHERE datname = '${pg.db}'`);
  const [xact_commit, xact_rollback, tup_inserted, tup_updated] = row.map(Number);
  return { xact_commit, xact_rollback, tup_inserted, tup_updated };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

rmSync(STATE_DIR, { recursive: true, force: true });
const rows = [await run("d1"), await run("postgres")];
agent.destroy();
rmSync(STATE_DIR, { recursive: true, force: true });
console.table(rows);
const wasm = readFileSync(POSTGRES_BUILD.replace("index.js", "index_bg.wasm"));
console.log(`postgres build: ${gzipSync(wasm, { level: 9 }).length} bytes of wasm gzipped`);
console.log(`machine: ${os.cpus().length} x ${os.cpus()[0].model}, node ${process.version}; ${DISTINCT} events, ${STORMS} storms of ${STORM_SIZE}`);
const sent = 100 + DISTINCT + STORMS;
const short = rows.find((r) => r["ledger rows"] !== sent);
if (short) {
  console.error(`MISMATCH: ${short.store} holds ${short["ledger rows"]} ledger rows for ${sent} events`);
  process.exit(1);
}

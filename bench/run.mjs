// Benchmark: throughput and latency of the built worker running locally in
// workerd (Miniflare, the runtime `wrangler dev` uses), with real Durable
// Objects and D1, driven over loopback HTTP by this process.
//
//   make bench            (builds first)   or   node bench/run.mjs
//
// Scenarios:
//   distinct  every request a new Stripe checkout event (verify, claim, D1 batch)
//   storm     bursts of 50 concurrent copies of one event, one burst at a time
//             (one effect per burst)
//   replay    every request a copy of an event already processed (answered by
//             the inbox without touching D1)
//   receipt   500 new checkouts arriving at 50/s, with the email target set:
//             the time from sending the webhook to the consumer calling the
//             (fake) email API with the receipt
// Prints events/s and p50/p99 latency per scenario, and the wasm size.
import { existsSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";
import { gzipSync } from "node:zlib";

import { agent, checkoutBody, drive, post, signed, STORM_SIZE, workerdCpuMs } from "./harness.mjs";
import { startWorker } from "../tests/support/worker.mjs";

// Every distinct event is a live Durable Object with its own SQLite database
// open in the one local workerd process until it is evicted; past about
// 2,700 of them alive at once, local SQLite runs out of memory here
// (SQLITE_NOMEM when a statement is prepared, with 8,900 of 20,000 file
// descriptors in use): D1 fails, the worker answers 503 and the events are
// retried, but the figures no longer measure the path. 2,000 + 40 + warm-up
// stays clear of that.
const DISTINCT = Number(process.env.BENCH_DISTINCT ?? 2000);
const STORMS = Number(process.env.BENCH_STORMS ?? 40);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 32);

function summarize(name, { results, seconds, cpuMs }) {
  if (results.length === 0) return { scenario: name, requests: 0 };
  const ms = results.map((r) => r.ms).sort((a, b) => a - b);
  const at = (q) => ms[Math.min(ms.length - 1, Math.floor(q * ms.length))];
  const outcomes = {};
  for (const r of results) outcomes[`${r.status} ${r.outcome}`] = (outcomes[`${r.status} ${r.outcome}`] ?? 0) + 1;
  const row = {
    scenario: name,
    requests: results.length,
    "events/s": Math.round(results.length / seconds),
    "p50 ms": +at(0.5).toFixed(1),
    "p90 ms": +at(0.9).toFixed(1),
    "p99 ms": +at(0.99).toFixed(1),
    "max ms": +at(1).toFixed(1),
    "workerd CPU ms/req": cpuMs === null ? "n/a" : +(cpuMs / results.length).toFixed(2),
    outcomes: JSON.stringify(outcomes),
  };
  return row;
}

// Local state lives on tmpfs when there is one: workerd fsyncs every Durable
// Object commit, and on this machine's disk that alone cut throughput by
// two thirds, a cost of the local emulation, not of Cloudflare's storage.
// BENCH_STATE_DIR=/some/disk/dir measures with it.
const STATE_DIR =
  process.env.BENCH_STATE_DIR ?? join(existsSync("/dev/shm") ? "/dev/shm" : os.tmpdir(), `webhooks-bench-${process.pid}`);
rmSync(STATE_DIR, { recursive: true, force: true });
// The worker's log lines are drained, not printed: printing 10,000 lines
// would measure this terminal, not the worker (BENCH_LOGS=1 prints them).
const drain = (out, err) =>
  process.env.BENCH_LOGS ? (out.pipe(process.stdout), err.pipe(process.stderr)) : (out.resume(), err.resume());
// Requests go straight to the worker's own socket, not through Miniflare's
// entry worker (a hop that exists only locally, not on Cloudflare).
// BENCH_LOG_LEVEL: the worker's LOG_LEVEL (info, the default, or warn).
const LOG_VARS = process.env.BENCH_LOG_LEVEL ? { LOG_LEVEL: process.env.BENCH_LOG_LEVEL } : {};
const w = await startWorker(
  LOG_VARS,
  {
    unsafeDirectSockets: [{ host: "127.0.0.1", port: 0 }],
    handleRuntimeStdio: drain,
    durableObjectsPersist: join(STATE_DIR, "do"),
    d1Persist: join(STATE_DIR, "d1"),
  },
);
const url = new URL("/webhooks/stripe", await w.mf.unsafeGetDirectURL("webhooks")).href;

// Warm-up: instantiate the wasm and JIT both paths.
await drive(url, Array.from({ length: 200 }, (_, i) => signed(checkoutBody(`warm${i}`))), CONCURRENCY);

const rows = [];
const distinct = Array.from({ length: DISTINCT }, (_, i) => signed(checkoutBody(i)));
rows.push(summarize(`distinct (c=${CONCURRENCY})`, await drive(url, distinct, CONCURRENCY)));
rows.push(await drainOutbox(w));

// A storm is a burst: all copies of one event at once, then the next event.
const storms = { results: [], seconds: 0, cpuMs: 0 };
for (let s = 0; s < STORMS; s++) {
  const one = signed(checkoutBody(`storm${s}`));
  const burst = await drive(url, Array(STORM_SIZE).fill(one), STORM_SIZE);
  storms.results.push(...burst.results);
  storms.seconds += burst.seconds;
  storms.cpuMs = burst.cpuMs === null ? null : (storms.cpuMs ?? 0) + burst.cpuMs;
}
rows.push(summarize(`storm (${STORMS} bursts of ${STORM_SIZE})`, storms));

rows.push(summarize(`replay (c=${CONCURRENCY})`, await drive(url, distinct, CONCURRENCY)));

/**
 * Waits for the queue consumer to finish the outbox rows the distinct events
 * wrote (their targets are not configured here: each is claimed, logged as
 * skipped and marked sent), so the next scenario is measured alone.
 */
async function drainOutbox(worker) {
  const cpuBefore = workerdCpuMs();
  const started = Date.now();
  const open = () => worker.scalar("SELECT count(*) FROM outbox WHERE status IN ('pending', 'sending')");
  const rows = await open();
  while ((await open()) > 0) await new Promise((r) => setTimeout(r, 100));
  const cpuAfter = workerdCpuMs();
  const seconds = (Date.now() - started) / 1000;
  return {
    scenario: "outbox rows still open after distinct",
    requests: rows,
    "events/s": "",
    "p50 ms": "",
    "p90 ms": "",
    "p99 ms": "",
    "max ms": "",
    "workerd CPU ms/req": cpuBefore === null || rows === 0 ? "n/a" : +((cpuAfter - cpuBefore) / rows).toFixed(2),
    outcomes: `drained in ${seconds.toFixed(1)} s`,
  };
}

// Side effects: each new checkout's receipt, from the request leaving here to
// the email API (a fake one, in this process) being called by the consumer.
// Its own worker, so that the figures above are not mixed with these.
async function sideEffectLatency(count, perSecond) {
  const fx = await startWorker(
    { EMAIL_API_URL: "http://email.test", ...LOG_VARS },
    {
      unsafeDirectSockets: [{ host: "127.0.0.1", port: 0 }],
      handleRuntimeStdio: drain,
      durableObjectsPersist: join(STATE_DIR, "fx-do"),
      d1Persist: join(STATE_DIR, "fx-d1"),
    },
  );
  const fxUrl = new URL("/webhooks/stripe", await fx.mf.unsafeGetDirectURL("webhooks")).href;
  const sentAt = new Map();
  const requests = Array.from({ length: count }, (_, i) => signed(checkoutBody(`fx${i}`)));
  // Open loop: a steady arrival rate, whatever the replies do.
  const started = Date.now();
  const replies = [];
  for (let i = 0; i < count; i++) {
    const due = started + (i * 1000) / perSecond;
    if (due > Date.now()) await new Promise((r) => setTimeout(r, due - Date.now()));
    sentAt.set(`cs_bench_${process.pid}_fx${i}`, Date.now());
    replies.push(post(fxUrl, requests[i]));
  }
  await Promise.all(replies);
  const deadline = Date.now() + 60_000;
  while (fx.target.calls.length < count && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  const seconds = (Date.now() - started) / 1000;
  const ms = fx.target.calls
    .map((call) => call.at - sentAt.get(/order (\S+)\)/.exec(JSON.parse(call.body).text)[1]))
    .sort((a, b) => a - b);
  const keys = new Set(fx.target.calls.map((c) => c.idempotencyKey));
  await fx.dispose();
  const at = (q) => ms[Math.min(ms.length - 1, Math.floor(q * ms.length))];
  return {
    scenario: `receipt -> email API call (${perSecond}/s)`,
    requests: count,
    "events/s": Math.round(count / seconds),
    "p50 ms": at(0.5),
    "p90 ms": at(0.9),
    "p99 ms": at(0.99),
    "max ms": at(1),
    "workerd CPU ms/req": "n/a",
    outcomes: JSON.stringify({ calls: fx.target.calls.length, "distinct keys": keys.size }),
  };
}

const ledger = await w.scalar("SELECT count(*) FROM processed_events WHERE event_id LIKE ?", `evt_bench_${process.pid}_%`);
const orders = await w.scalar("SELECT count(*) FROM orders WHERE checkout_session_id LIKE ?", `cs_bench_${process.pid}_%`);
await w.dispose();
const FX_EVENTS = Number(process.env.BENCH_SIDE_EFFECTS ?? 500);
rows.push(await sideEffectLatency(FX_EVENTS, 50));
agent.destroy();
rmSync(STATE_DIR, { recursive: true, force: true });

const wasm = readFileSync("build/index_bg.wasm");
const js = readFileSync("build/index.js");
console.table(rows);
console.log(`ledger rows: ${ledger}, orders: ${orders} (expected ${200 + DISTINCT + STORMS} each)`);
console.log(`wasm: ${wasm.length} bytes, ${gzipSync(wasm, { level: 9 }).length} gzipped; js glue: ${js.length} bytes, ${gzipSync(js, { level: 9 }).length} gzipped`);
console.log(`machine: ${os.cpus().length} x ${os.cpus()[0].model}, node ${process.version}; state in ${STATE_DIR}`);
if (ledger !== 200 + DISTINCT + STORMS || orders !== ledger) {
  console.error("MISMATCH: the ledger or the orders do not match the events sent");
  process.exit(1);
}

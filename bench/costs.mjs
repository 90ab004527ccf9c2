// What an event costs: the operations Cloudflare bills, counted per distinct
// event, per duplicate copy, per side effect and per retention wake-up, as
// the built worker makes them in workerd (bench/meter.mjs wraps it and
// counts), then priced by Workers Paid's published prices into a cost per
// million events, beside a KV gateway's by the same prices.
//
//   make costs            (builds first)   or   node bench/costs.mjs
//
// Phases, each measured alone (the meter is read and reset between them):
//   distinct      N new checkouts with no email: verify, inbox, D1 batch
//   duplicate     one more copy of each of them, after it was processed
//   side effect   N new checkouts with an email (one receipt each), until the
//                 queue consumer has sent every receipt; minus "distinct"
//   forwarded     N new events with no effect (checkout.session.expired) to
//                 a source that forwards to one destination (a local sink
//                 answering 200), until every one is delivered: the whole
//                 gateway path, not a difference
//   retention     the alarm that forgets each event once RETENTION is over
//   relay         one tick of the outbox relay cron (a fixed cost a minute)
// The per-source counters go to D1 once per STATS_FLUSH_MS per isolate: the
// run is made twice, with every delivery flushing (the quiet-traffic worst
// case: a lone event in its isolate) and with no flush (busy traffic, where
// one flush is shared by many events).
import { existsSync, rmSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";

import { agent, checkoutBody, drive, signed, workerdCpuMs } from "./harness.mjs";
import { SOURCES, gateway, price } from "./prices.mjs";
import { eventually, startWorker } from "../tests/support/worker.mjs";
import { unstable_readConfig } from "wrangler";

const TOML_SOURCES = unstable_readConfig({ config: "wrangler.toml" }).vars.SOURCES;

const N = Number(process.env.COSTS_EVENTS ?? 500);
const CONCURRENCY = 16;
// Long enough for the three phases to finish before the first alarm.
const RETENTION_SECS = Number(process.env.COSTS_RETENTION_SECS ?? 75);
const STATE_DIR = join(existsSync("/dev/shm") ? "/dev/shm" : os.tmpdir(), `webhooks-costs-${process.pid}`);

async function run(label, statsFlushMs) {
  rmSync(STATE_DIR, { recursive: true, force: true });
  const w = await startWorker(
    {
      EMAIL_API_URL: "http://email.test",
      RETENTION: `${RETENTION_SECS}s`,
      STATS_FLUSH_MS: String(statsFlushMs),
      // A Stripe source that forwards every event to one destination.
      SOURCES: { ...TOML_SOURCES, gateway: { provider: "stripe", secret: "STRIPE_WEBHOOK_SECRET", forward: ["sink"] } },
      DESTINATIONS: { sink: { url: "http://sink.test/", secret: "SINK_SIGNING_SECRET", max_age: `${RETENTION_SECS}s` } },
      SINK_SIGNING_SECRET: `whsec_${Buffer.alloc(32, 7).toString("base64")}`,
    },
    {
      main: "bench/meter.mjs",
      unsafeDirectSockets: [{ host: "127.0.0.1", port: 0 }],
      handleRuntimeStdio: (out, err) => (out.resume(), err.resume()),
      durableObjectsPersist: join(STATE_DIR, "do"),
      d1Persist: join(STATE_DIR, "d1"),
    },
  );
  const base = await w.mf.unsafeGetDirectURL("webhooks");
  const url = new URL("/webhooks/stripe", base).href;
  const meter = async () => (await fetch(new URL("/__meter", base))).json();
  const open = async () =>
    (await w.scalar("SELECT count(*) FROM outbox WHERE status IN ('pending', 'sending')")) +
    (await w.scalar("SELECT count(*) FROM forwards WHERE status != 'delivered'"));
  const tag = `${label.replace(/\W/g, "")}`;
  const phase = async (requests, expect, to = url) => {
    const cpuBefore = workerdCpuMs();
    const { results } = await drive(to, requests, CONCURRENCY);
    const wrong = results.filter((r) => r.outcome !== expect);
    if (wrong.length) throw new Error(`${wrong.length} replies were not ${expect}: ${JSON.stringify(wrong[0])}`);
    await eventually(async () => (await open()) === 0, 60_000, "the outbox to drain");
    return { ...(await meter()), cpuMs: workerdCpuMs() - cpuBefore };
  };

  // Warm-up: instantiate the wasm, create the tables, then start counting.
  await phase(Array.from({ length: 20 }, (_, i) => signed(checkoutBody(`${tag}w${i}`))), "processed");
  const started = Date.now();
  const plain = Array.from({ length: N }, (_, i) => signed(checkoutBody(`${tag}p${i}`, { email: null })));
  const distinct = await phase(plain, "processed");
  const duplicate = await phase(plain, "duplicate");
  const withEffect = await phase(
    Array.from({ length: N }, (_, i) => signed(checkoutBody(`${tag}s${i}`))),
    "processed",
  );
  if (w.target.calls.length < N) throw new Error(`only ${w.target.calls.length} of ${N} receipts were sent`);
  const gatewayUrl = new URL("/webhooks/gateway", base).href;
  const forwarded = await phase(
    Array.from({ length: N }, (_, i) => signed(checkoutBody(`${tag}f${i}`, { type: "checkout.session.expired" }))),
    "processed",
    gatewayUrl,
  );
  const delivered = await w.scalar("SELECT count(*) FROM forwards WHERE status = 'delivered'");
  if (delivered !== N) throw new Error(`${delivered} of ${N} forwarded events were delivered`);
  if (Date.now() - started > RETENTION_SECS * 1000) throw new Error("the phases outlasted RETENTION: raise COSTS_RETENTION_SECS");
  // Every event's inbox wakes once at the end of RETENTION and forgets it.
  const events = 3 * N + 20;
  let retention = { doAlarms: 0 };
  const deadline = Date.now() + (RETENTION_SECS + 60) * 1000;
  while (retention.doAlarms < events && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 2000));
    const more = await meter();
    retention = Object.fromEntries(Object.keys(more).map((k) => [k, (retention[k] ?? 0) + more[k]]));
  }
  if (retention.doAlarms < events) throw new Error(`only ${retention.doAlarms} of ${events} retention alarms fired`);
  await w.mf.getWorker("webhooks").then((worker) => worker.scheduled({ cron: "* * * * *" }));
  const relay = await meter();
  await w.dispose();
  rmSync(STATE_DIR, { recursive: true, force: true });

  const per = (m, n) => Object.fromEntries(Object.entries(m).map(([k, v]) => [k, v / n]));
  const perDistinct = per(distinct, N);
  const marginal = (m) => Object.fromEntries(Object.entries(per(m, N)).map(([k, v]) => [k, v - perDistinct[k]]));
  return {
    label,
    distinct: perDistinct,
    duplicate: per(duplicate, N),
    sideEffect: marginal(withEffect),
    forwarded: per(forwarded, N),
    retention: per(retention, events),
    relay,
  };
}

const COLUMNS = [
  ["workerRequests", "Worker req", (m) => m.workerFetch + m.workerQueue + m.workerScheduled],
  ["doRequests", "DO req", (m) => m.doRequests + m.doAlarms],
  ["doGbS", "DO GB-s", (m) => (m.doActiveMs / 1000) * 0.128],
  ["doSqlRowsRead", "DO rows read", (m) => m.doSqlRowsRead],
  ["doSqlRowsWritten", "DO rows written", (m) => m.doSqlRowsWritten + m.doSetAlarms + m.doDeletedRows],
  ["d1Statements", "D1 statements", (m) => m.d1Statements],
  ["d1Ms", "D1 ms", (m) => m.d1Ms],
  ["d1RowsRead", "D1 rows read", (m) => m.d1RowsRead],
  ["d1RowsWritten", "D1 rows written", (m) => m.d1RowsWritten],
  ["queueOps", "Queue ops", (m) => m.queueWrites + m.queueReads + m.queueDeletes],
  ["cpuMs", "workerd CPU ms", (m) => m.cpuMs ?? 0],
];

const ops = (m) => Object.fromEntries(COLUMNS.map(([key, , f]) => [key, f(m)]));
const round = (n) => (n === 0 ? 0 : Math.abs(n) >= 10 ? +n.toFixed(1) : +n.toPrecision(3));

function table(result) {
  const rows = {};
  for (const [name, m] of [
    ["distinct event", result.distinct],
    ["duplicate copy", result.duplicate],
    ["side effect", result.sideEffect],
    ["forwarded event, no effect", result.forwarded],
    ["retention wake-up", result.retention],
  ]) {
    rows[name] = Object.fromEntries(COLUMNS.map(([key, title]) => [title, round(ops(m)[key])]));
  }
  return rows;
}

const DUPLICATES = 0.3;
// The relay cron ticks once a minute: 43,200 times in 30 days.
const CRON_TICKS_PER_MONTH = 43_200;
/**
 * A million distinct events, 30 % arriving twice: each with one side effect,
 * or (`forwarded`) each forwarded to one destination with no effect.
 */
function million(result, forwarded = false) {
  const d = ops(forwarded ? result.forwarded : result.distinct);
  const dup = ops(result.duplicate);
  const fx = forwarded ? Object.fromEntries(Object.keys(d).map((k) => [k, 0])) : ops(result.sideEffect);
  const rt = ops(result.retention);
  const perEvent = Object.fromEntries(
    Object.keys(d).map((k) => [k, d[k] + DUPLICATES * dup[k] + fx[k] + rt[k]]),
  );
  return Object.fromEntries(Object.entries(perEvent).map(([k, v]) => [k, v * 1e6]));
}

const results = [];
for (const [label, flush] of [
  ["quiet traffic: every delivery flushes its counters", 0],
  ["busy traffic: counters flushed rarely", 3_600_000],
]) {
  results.push(await run(label, flush));
}
agent.destroy();

for (const result of results) {
  console.log(`\nOperations per unit (${N} events a phase; ${result.label}):`);
  console.table(table(result));
}
const relay = ops(results[0].relay);
console.log(
  `relay tick (a fixed ${CRON_TICKS_PER_MONTH} a month): ${relay.workerRequests} Worker request, ` +
    `${relay.d1RowsRead} D1 rows read, ${relay.d1RowsWritten} written`,
);

for (const result of results) {
  const usage = million(result);
  const bill = price(usage);
  console.log(`\nA million distinct events, 30 % duplicated, one side effect each (${result.label}):`);
  console.table(bill.lines);
  console.log(
    `total: $${bill.total.toFixed(2)} per million at the marginal prices; ` +
      `a month of one million such events alone on the plan: $${bill.month.toFixed(2)} (the $5 minimum included)`,
  );
}
for (const result of results) {
  const { d1Statements: d1, d1Ms } = ops(result.forwarded);
  console.log(
    `\nD1 statements per forwarded event, amortized (${result.label}): ${round(d1)} ` +
      "(the effect batch's ledger row and delivery row, the consumer's claim and completion per queue batch, the counters' flushes); " +
      `D1 time: ${round(d1Ms)} ms, so one database, which runs one query at a time, carries about ${Math.round(1000 / d1Ms)} forwarded events/s here`,
  );
  const bill = price(million(result, true));
  console.log(`A million distinct events forwarded to one destination, no effect, 30 % duplicated (${result.label}):`);
  console.table(bill.lines);
  console.log(`total: $${bill.total.toFixed(2)} per million; a month of one million alone: $${bill.month.toFixed(2)}`);
}
const kv = gateway(1e6, DUPLICATES);
console.log("\nA KV gateway by the same prices (a KV read, a KV write and a Queue message per event, no effect):");
console.table(kv.lines);
console.log(`total: $${kv.total.toFixed(2)} per million; a month of one million alone: $${kv.month.toFixed(2)}`);
console.log(`\nprices: Workers Paid, ${SOURCES.date}:\n  ${SOURCES.pages.join("\n  ")}`);

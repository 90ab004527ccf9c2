// `make gateway-bench`: this worker beside a yardstick, the minimal
// KV-dedupe gateway in bench/reference/ (WebCrypto Stripe verify, KV get and
// put, a queue send), both in wrangler's local runtime on loopback with
// state on tmpfs, driven by the same load: 2,000 signed Stripe checkouts (~930 bytes,
// each with one side effect here) at 32 in flight, then the same 2,000 again
// (copies). Both are served the same way: `make dev`'s runner for this
// worker, bench/reference/serve.mjs (wrangler's API the same way) for the
// reference. Runs alternate — reference, REPLY_AFTER = "effect", "record",
// then both again at LOG_LEVEL = "warn" — for ROUNDS rounds (default 3),
// each from a fresh start. Prints every run, then the medians and the
// ratios to the reference.
//
//   node bench/gateway.mjs [rounds] [events]     (uses build/ as it is)
//
// GATEWAY_RUNS=reference,effect runs only those (no ratios then; the others
// are record, effect-warn, record-warn); GATEWAY_VARS=NAME=value,… sets
// this worker's variables (the -warn runs keep LOG_LEVEL = "warn").
//
// Acknowledged/s: distinct events answered 200 per second. Processed/s: the
// same events with their effect and side effect done (ours: ledger rows and
// `sent` outbox rows, from the admin API; the reference: messages its queue
// consumer received), from the first send to the last one done. CPU ms per
// event: every process of the run's group (node with wrangler, both
// workerd), from the first send until every event is processed; then the
// same for the workerd processes alone, and for node alone (wrangler,
// which prints the worker's log lines).
import { agent, checkoutBody, driveAll, quantile, signed, startBenchDev } from "./harness.mjs";
import { groupCpuMs } from "./group.mjs";
import { sleep } from "../tests/support/dev.mjs";

const ROUNDS = Number(process.argv[2] ?? 3);
const EVENTS = Number(process.argv[3] ?? 2000);
const IN_FLIGHT = 32;
const WARM_UP = 100;
const TOKEN = "gateway-bench-token-0123456789abcdef";

/** The reference, served as this worker is (bench/reference/serve.mjs). */
async function startReference() {
  const dev = await startBenchDev("gateway-bench", { script: "bench/reference/serve.mjs" });
  return {
    ...dev,
    processed: async () => (await (await fetch(`${dev.url}/`, { signal: AbortSignal.timeout(10_000) })).json()).consumed,
  };
}

/** This worker under `make dev`'s runner, answering after `mode`. */
async function startOurs(mode, vars = {}) {
  const dev = await startBenchDev("gateway-bench", {
    vars: {
      ADMIN_TOKEN: TOKEN,
      REPLY_AFTER: mode,
      ...Object.fromEntries((process.env.GATEWAY_VARS ?? "").split(",").filter(Boolean).map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)])),
      ...vars,
    },
  });
  const headers = { authorization: `Bearer ${TOKEN}` };
  return {
    ...dev,
    processed: async () => {
      const res = await fetch(`${dev.url}/admin/api/stats`, { headers, signal: AbortSignal.timeout(10_000) });
      const { stats } = await res.json();
      const ledger = stats.processed.find((c) => c.source === "stripe")?.events ?? 0;
      const sent = stats.outbox.find((c) => c.source === "stripe" && c.status === "sent")?.rows ?? 0;
      return Math.min(ledger, sent);
    },
  };
}

const total = (byName) => Object.values(byName).reduce((a, b) => a + b, 0);

async function run(name, start, round) {
  const server = await start();
  try {
    const url = `${server.url}/webhooks/stripe`;
    const warm = Array.from({ length: WARM_UP }, (_, i) => signed(checkoutBody(`gw${round}w${i}`)));
    await driveAll(url, warm, IN_FLIGHT);
    const events = Array.from({ length: EVENTS }, (_, i) => signed(checkoutBody(`gw${round}${name}${i}`)));
    const cpuBefore = groupCpuMs(server.pid);
    const began = Date.now();
    const distinct = await driveAll(url, events, IN_FLIGHT);
    let processedAt = null;
    while (processedAt === null && Date.now() - began < 300_000) {
      if ((await server.processed()) >= WARM_UP + EVENTS) processedAt = Date.now();
      else await sleep(200);
    }
    // Once every event is processed: the effects that follow the replies
    // (the consumer's, `record`'s) count too.
    const cpuAfter = groupCpuMs(server.pid);
    const perEvent = (name) => +(((cpuAfter[name] ?? 0) - (cpuBefore[name] ?? 0)) / EVENTS).toFixed(2);
    if (processedAt === null) throw new Error(`${name}: not every event was processed in 300 s`);
    const copies = await driveAll(url, events, IN_FLIGHT);
    const ms = distinct.results.map((r) => r.ms).sort((a, b) => a - b);
    const copyMs = copies.results.map((r) => r.ms).sort((a, b) => a - b);
    const firsts = distinct.results.filter((r) => r.status === 200 && ["processed", "accepted"].includes(r.outcome));
    const dups = copies.results.filter((r) => r.status === 200 && r.outcome === "duplicate");
    return {
      run: name,
      "acks/s": Math.round(firsts.length / distinct.seconds),
      "p50 ms": Math.round(quantile(ms, 0.5)),
      "p99 ms": Math.round(quantile(ms, 0.99)),
      "max ms": Math.round(ms.at(-1)),
      errors: EVENTS - firsts.length + (EVENTS - dups.length),
      "processed/s": Math.round(EVENTS / ((processedAt - began) / 1000)),
      "CPU ms/event": +((total(cpuAfter) - total(cpuBefore)) / EVENTS).toFixed(2),
      "copies/s": Math.round(dups.length / copies.seconds),
      "copies p99 ms": Math.round(quantile(copyMs, 0.99)),
      "workerd CPU ms": perEvent("workerd"),
      "node CPU ms": perEvent("node"),
    };
  } finally {
    await server.stop();
  }
}

const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
const kinds = {
  reference: () => startReference(),
  effect: () => startOurs("effect"),
  record: () => startOurs("record"),
  // The reference writes no log line; at `warn`, neither does this worker
  // for a delivery that went well.
  "effect-warn": () => startOurs("effect", { LOG_LEVEL: "warn" }),
  "record-warn": () => startOurs("record", { LOG_LEVEL: "warn" }),
};
const only = process.env.GATEWAY_RUNS?.split(",");
for (const name of only ?? []) if (!kinds[name]) throw new Error(`GATEWAY_RUNS: no run ${name} (${Object.keys(kinds).join(", ")})`);
if (only) for (const name of Object.keys(kinds)) if (!only.includes(name)) delete kinds[name];
const rows = [];
try {
  for (let round = 0; round < ROUNDS; round++) {
    for (const [name, start] of Object.entries(kinds)) {
      const row = await run(name, start, round);
      console.log(JSON.stringify(row));
      rows.push(row);
    }
  }
} finally {
  agent.destroy();
}
const medians = Object.keys(kinds).map((name) => {
  const mine = rows.filter((r) => r.run === name);
  return Object.fromEntries(Object.keys(mine[0]).map((k) => [k, k === "run" ? `${name} (median of ${mine.length})` : median(mine.map((r) => r[k]))]));
});
console.table(medians);
const [ref, effect, record, effectWarn, recordWarn] = medians;
const ratio = (a, b) => +(a / b).toFixed(2);
const targets = (effect, record) => ({
  "record acks/s ≥ 0.9×": ratio(record["acks/s"], ref["acks/s"]),
  "record p99 ≤ 1×": ratio(record["p99 ms"], ref["p99 ms"]),
  "effect acks/s ≥ 0.7×": ratio(effect["acks/s"], ref["acks/s"]),
  "copies/s ≥ 0.8×": ratio(effect["copies/s"], ref["copies/s"]),
});
if (!only) {
  console.log("Ratios to the reference, against the issue's targets:");
  console.table({ "LOG_LEVEL = info (default)": targets(effect, record), "LOG_LEVEL = warn": targets(effectWarn, recordWarn) });
}

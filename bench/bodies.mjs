// Runtime CPU per event by body size: signed Stripe checkouts of about
// 1 KiB, 64 KiB, 256 KiB and 1 MiB (line items pad them, so that the JSON has
// the shape of a large order, not one long string), each sent
//
//   badsig    with a wrong signature: the body read and its MAC computed
//   distinct  as new events: everything
//   replay    again, once processed: verified, identified, handed to the
//             inbox, answered "duplicate"
//
// and the workerd CPU time per request (as bench/run.mjs measures it).
// Differences between the rows say where the time goes.
//
//   make bodies           (builds first)   or   node bench/bodies.mjs
import { existsSync, rmSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";

import { agent, drive, signed, workerdCpuMs } from "./harness.mjs";
import { startWorker } from "../tests/support/worker.mjs";

const SIZES = [
  ["1 KiB", 1024, 400],
  ["64 KiB", 64 * 1024, 200],
  ["256 KiB", 256 * 1024, 80],
  ["1 MiB", 1024 * 1024, 30],
];
const CONCURRENCY = 4;
const STATE_DIR = join(existsSync("/dev/shm") ? "/dev/shm" : os.tmpdir(), `webhooks-bodies-${process.pid}`);

/** A checkout.session.completed of exactly `bytes` bytes. */
function checkoutOfSize(n, bytes) {
  const event = {
    id: `evt_body_${process.pid}_${bytes}_${n}`,
    object: "event",
    type: "checkout.session.completed",
    created: Math.floor(Date.now() / 1000),
    data: {
      object: {
        id: `cs_body_${process.pid}_${bytes}_${n}`,
        object: "checkout.session",
        amount_total: 2000,
        currency: "eur",
        customer_details: { email: null },
        payment_intent: `pi_body_${process.pid}_${bytes}_${n}`,
        payment_status: "paid",
        line_items: [],
        padding: "",
      },
    },
  };
  const items = event.data.object.line_items;
  let length = JSON.stringify(event).length;
  for (let i = 0; length < bytes - 200; i++) {
    const item = { id: `li_${i}`, description: `Item ${i} "deluxe"`, quantity: 1 + (i % 3), amount: 1999, tax_rates: [] };
    items.push(item);
    length += JSON.stringify(item).length + 1;
  }
  event.data.object.padding = "x".repeat(bytes - JSON.stringify(event).length);
  return JSON.stringify(event);
}

rmSync(STATE_DIR, { recursive: true, force: true });
const w = await startWorker(
  // Room for a body of exactly 1 MiB (the default cap is 1 MiB).
  { MAX_BODY_BYTES: String(2 * 1024 * 1024) },
  {
    unsafeDirectSockets: [{ host: "127.0.0.1", port: 0 }],
    handleRuntimeStdio: (out, err) =>
      process.env.BENCH_LOGS ? (out.pipe(process.stdout), err.pipe(process.stderr)) : (out.resume(), err.resume()),
    durableObjectsPersist: join(STATE_DIR, "do"),
    d1Persist: join(STATE_DIR, "d1"),
  },
);
const url = new URL("/webhooks/stripe", await w.mf.unsafeGetDirectURL("webhooks")).href;

async function measure(requests, expect) {
  const cpuBefore = workerdCpuMs();
  const { results } = await drive(url, requests, CONCURRENCY);
  const cpu = workerdCpuMs() - cpuBefore;
  const wrong = results.filter((r) => r.outcome !== expect);
  if (wrong.length) throw new Error(`${wrong.length} replies were not ${expect}: ${JSON.stringify(wrong[0])}`);
  return +(cpu / requests.length).toFixed(2);
}

// Warm-up: the wasm instantiated and both paths compiled.
await measure(Array.from({ length: 50 }, (_, i) => signed(checkoutOfSize(`w${i}`, 4096))), "processed");

const rows = [];
for (const [label, bytes, count] of SIZES) {
  const events = Array.from({ length: count }, (_, i) => signed(checkoutOfSize(i, bytes)));
  // Let the loop see any keep-alive socket the runtime closed meanwhile.
  await new Promise((r) => setTimeout(r, 200));
  // The same requests with the signature's last digit changed.
  const forged = events.map(({ body, headers }) => {
    const signature = headers["stripe-signature"];
    const last = signature.endsWith("0") ? "1" : "0";
    return { body, headers: { ...headers, "stripe-signature": signature.slice(0, -1) + last } };
  });
  if (process.env.BENCH_LOGS) console.error(`${label}…`);
  const badsig = await measure(forged, "bad_signature");
  const distinct = await measure(events, "processed");
  const replay = await measure(events, "duplicate");
  rows.push({ body: label, bytes, events: count, "badsig ms": badsig, "distinct ms": distinct, "replay ms": replay });
}
await w.dispose();
agent.destroy();
rmSync(STATE_DIR, { recursive: true, force: true });
console.log("workerd CPU ms per request, by body size:");
console.table(rows);
console.log(`machine: ${os.cpus().length} x ${os.cpus()[0].model}, node ${process.version}`);

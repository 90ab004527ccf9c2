// Benchmark: forwarding, end to end, in workerd (Miniflare, the runtime
// `wrangler dev` uses) with real Durable Objects, D1 and queues. A Stripe
// source forwards every event to DESTS destinations (default 1), each a
// local sink in this process answering 200 (the worker's outbound fetches
// never leave it). Driven over loopback HTTP.
//
//   make forward-bench    (builds first)   or   node bench/forward.mjs
//
// Prints: events acknowledged per second and p50/p99 time to acknowledge;
// events fully delivered (to every destination) per second, from the first
// request to the last delivery; and the sink's count of calls per delivery
// id (1.00: each delivered once).
import { existsSync, rmSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";
import { unstable_readConfig } from "wrangler";

import { agent, checkoutBody, drive, signed } from "./harness.mjs";
import { eventually, startWorker } from "../tests/support/worker.mjs";

// Under the local runtime's limit on live objects (see bench/run.mjs).
const EVENTS = Number(process.env.FORWARD_EVENTS ?? 2000);
const CONCURRENCY = Number(process.env.FORWARD_CONCURRENCY ?? 32);
const DESTS = Number(process.env.DESTS ?? 1);
// A gateway's event: forwarded, with no effect of its own.
const NO_EFFECT = { type: "checkout.session.expired" };

const STATE_DIR = join(existsSync("/dev/shm") ? "/dev/shm" : os.tmpdir(), `webhooks-forward-${process.pid}`);
rmSync(STATE_DIR, { recursive: true, force: true });
const names = Array.from({ length: DESTS }, (_, i) => `sink${i + 1}`);
const w = await startWorker(
  {
    SOURCES: {
      ...unstable_readConfig({ config: "wrangler.toml" }).vars.SOURCES,
      gateway: { provider: "stripe", secret: "STRIPE_WEBHOOK_SECRET", forward: names },
    },
    DESTINATIONS: Object.fromEntries(names.map((name) => [name, { url: `http://${name}.test/`, secret: "SINK_SIGNING_SECRET" }])),
    SINK_SIGNING_SECRET: `whsec_${Buffer.alloc(32, 7).toString("base64")}`,
    LOG_LEVEL: "warn",
  },
  {
    unsafeDirectSockets: [{ host: "127.0.0.1", port: 0 }],
    handleRuntimeStdio: (out, err) => (out.resume(), err.resume()),
    durableObjectsPersist: join(STATE_DIR, "do"),
    d1Persist: join(STATE_DIR, "d1"),
  },
);
const url = new URL("/webhooks/gateway", await w.mf.unsafeGetDirectURL("webhooks")).href;
const delivered = () => w.scalar("SELECT count(*) FROM forwards WHERE status = 'delivered'");

// Warm-up: the wasm instantiated, the tables made.
await drive(url, Array.from({ length: 20 }, (_, i) => signed(checkoutBody(`fw${i}`, NO_EFFECT))), 8);
await eventually(async () => (await delivered()) === 20 * DESTS, 30_000, "the warm-up's deliveries");
w.target.calls.length = 0;

const started = Date.now();
const requests = Array.from({ length: EVENTS }, (_, i) => signed(checkoutBody(`f${process.pid}x${i}`, NO_EFFECT)));
const { results, seconds, cpuMs } = await drive(url, requests, CONCURRENCY);
const want = (EVENTS + 20) * DESTS;
await eventually(async () => (await delivered()) === want, 300_000, "every delivery");
const allDelivered = (Date.now() - started) / 1000;

const ms = results.map((r) => r.ms).sort((a, b) => a - b);
const at = (q) => +ms[Math.min(ms.length - 1, Math.floor(q * ms.length))].toFixed(1);
const outcomes = {};
for (const r of results) outcomes[`${r.status} ${r.outcome}`] = (outcomes[`${r.status} ${r.outcome}`] ?? 0) + 1;
const ids = new Set(w.target.calls.map((c) => c.headers["webhook-id"]));
console.table([
  {
    events: EVENTS,
    destinations: DESTS,
    "acknowledged/s": Math.round(EVENTS / seconds),
    "ack p50 ms": at(0.5),
    "ack p99 ms": at(0.99),
    "fully delivered/s": Math.round(EVENTS / allDelivered),
    "sink calls per delivery": +(w.target.calls.length / ids.size).toFixed(2),
    "workerd CPU ms/event (ack)": cpuMs === null ? "n/a" : +(cpuMs / EVENTS).toFixed(2),
    outcomes: JSON.stringify(outcomes),
  },
]);
agent.destroy();
await w.dispose();
rmSync(STATE_DIR, { recursive: true, force: true });

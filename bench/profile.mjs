// `make profile`: where the local runtime's CPU goes for this worker's
// events. Starts `make dev`'s runner (state on tmpfs), warms it up, then
// records the runtime with Linux `perf` (call graphs, 999 Hz) twice: while
// EVENTS new signed Stripe checkouts (one side effect each) are sent at 32
// in flight and processed, then while the same events are sent again as
// copies. Prints, for each phase, the share of the busiest thread (the
// runtime's event loop, which bounds the rate) spent under each kind of
// work, and that time per event. The admin API is polled (every 200 ms)
// during the first recording, to know when every side effect was sent.
// Then counts how often the worker parsed its vars and secrets (once per
// isolate: none is parsed per request).
//
//   node bench/profile.mjs [events=2000]     (uses build/ as it is; needs perf)
//
// Shares are inclusive and overlap (a D1 call is a subrequest and SQL).
// Compiled JavaScript and wasm are not symbolized (no JIT map): a frame V8
// names as wasm is counted, the rest is counted only as unnamed own time.
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";

import { agent, checkoutBody, driveAll, signed, startBenchDev } from "./harness.mjs";
import { sleep } from "../tests/support/dev.mjs";

const EVENTS = Number(process.argv[2] ?? 2000);
const HZ = 999;
const TOKEN = "profile-bench-token-0123456789abcdef";
if (spawnSync("perf", ["--version"]).status !== 0) {
  console.error("profile: needs Linux perf (e.g. apt-get install linux-perf)");
  process.exit(1);
}

/** What each row counts: a sample whose stack holds a frame matching it. */
const KINDS = [
  ["an inbox object started (actor, SQLite file)", /workerd::Worker::Actor::Impl::Impl/],
  ["SQL run (the inbox's, and local D1's)", /workerd::api::SqlStorage::exec/],
  ["subrequests (to the inbox, D1)", /workerd::api::fetchImpl/],
  ["queue sends", /workerd::api::WorkerQueue::send/],
  ["alarms set or read", /DurableObjectStorageOperations::(set|get)Alarm/],
  ["log lines", /workerd::Worker::handleLog/],
  ["requests received (dispatch)", /ServiceWorkerGlobalScope::request/],
  ["queue batches received", /workerd::api::QueueCustomEvent::run/],
  ["wasm frames V8 names (a lower bound: see below)", /Wasm|wasm-function/],
  ["garbage collection", /v8::internal::Heap::CollectGarbage|Scavenge/],
];

/** Samples of the busiest thread of `data`, as stacks of symbols. */
function stacks(data) {
  const script = spawnSync("perf", ["script", "-i", data, "-F", "tid,ip,sym"], { maxBuffer: 1 << 30 });
  if (script.status !== 0) throw new Error(`perf script: ${script.error?.message ?? script.stderr}`);
  const out = script.stdout.toString();
  const byThread = new Map();
  for (const block of out.split("\n\n")) {
    const [head, ...frames] = block.split("\n");
    if (!head?.trim()) continue;
    const tid = head.trim();
    if (!byThread.has(tid)) byThread.set(tid, []);
    byThread.get(tid).push(frames.join("\n"));
  }
  return [...byThread.values()].sort((a, b) => b.length - a.length)[0] ?? [];
}

function report(title, data, events) {
  const samples = stacks(data);
  const busyMs = (samples.length / HZ) * 1000;
  console.log(`\n${title}: busiest thread ${(busyMs / events).toFixed(2)} ms per event (${samples.length} samples)`);
  const row = (kind, n) => ({ kind, share: `${((100 * n) / samples.length).toFixed(1)} %`, "ms/event": +((n / HZ) * 1000 / events).toFixed(3) });
  // Compiled JavaScript and wasm have no symbols here: the samples that end
  // in such a frame, whichever worker's (this one's, local D1's, the
  // queue's), are their own time.
  const unnamed = samples.filter((stack) => /^\s*\S+\s+\[unknown\]/.test(stack)).length;
  console.table([...KINDS.map(([kind, pattern]) => row(kind, samples.filter((stack) => pattern.test(stack)).length)), row("compiled code, unnamed (own time)", unnamed)]);
}

async function recording(pids, data, work) {
  const perf = spawn("perf", ["record", "-q", "-F", String(HZ), "-g", "-o", data, "-p", pids.join(",")], { stdio: ["ignore", "ignore", "inherit"] });
  const exited = new Promise((resolve) => perf.on("exit", resolve));
  await sleep(500);
  if (perf.exitCode !== null) throw new Error(`perf record ended at once (exit ${perf.exitCode}); is perf allowed here?`);
  try {
    await work();
  } finally {
    perf.kill("SIGINT");
    await exited;
  }
}

/** Sends `requests`, and fails unless each was answered 200. */
async function sendAll(url, requests) {
  const { results } = await driveAll(url, requests, 32);
  const refused = results.filter((r) => r.status !== 200).length;
  if (refused > 0) throw new Error(`${refused} of ${results.length} requests were not answered 200`);
}

const dev = await startBenchDev("profile", { vars: { ADMIN_TOKEN: TOKEN } });
// The recordings.
const dir = mkdtempSync(join(os.tmpdir(), "profile-"));
try {
  const url = `${dev.url}/webhooks/stripe`;
  await sendAll(url, Array.from({ length: 100 }, (_, i) => signed(checkoutBody(`pw${i}`))));
  const pids = spawnSync("pgrep", ["-g", String(dev.pid), "-x", "workerd"]).stdout.toString().trim().split("\n").filter(Boolean);
  if (pids.length === 0) throw new Error("no workerd process in make dev's group");
  const events = Array.from({ length: EVENTS }, (_, i) => signed(checkoutBody(`pe${i}`)));
  const sent = async () => {
    const headers = { authorization: `Bearer ${TOKEN}` };
    const res = await fetch(`${dev.url}/admin/api/stats`, { headers, signal: AbortSignal.timeout(10_000) });
    const { stats } = await res.json();
    return stats.outbox.find((c) => c.source === "stripe" && c.status === "sent")?.rows ?? 0;
  };
  await recording(pids, join(dir, "new.data"), async () => {
    await sendAll(url, events);
    for (let i = 0; (await sent()) < 100 + EVENTS; i++) {
      if (i === 600) throw new Error("not every side effect was sent in 120 s");
      await sleep(200);
    }
  });
  await recording(pids, join(dir, "copies.data"), () => sendAll(url, events));
  report(`New events (${EVENTS}), until each one's side effect was sent`, join(dir, "new.data"), EVENTS);
  report(`The same events again, as copies`, join(dir, "copies.data"), EVENTS);
  // Vars and secrets are parsed once per isolate, never per request: each
  // parse logs one `settings_parsed` line.
  const parses = dev.output.join("").split("\n").filter((line) => line.includes('"msg":"settings_parsed"')).length;
  console.log(`Settings (vars and secrets) parsed ${parses} time(s) for ${100 + 2 * EVENTS} deliveries, their inboxes, queue batches and admin calls: once per isolate, none per request`);
} finally {
  agent.destroy();
  await dev.stop();
  rmSync(dir, { recursive: true, force: true });
}

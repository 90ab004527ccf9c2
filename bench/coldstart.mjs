// Cold start: from a runtime started with a built worker to its first
// answered webhook, five times per build. `make sizes` runs it on the
// default build and on Stripe + GitHub only; by hand:
//
//   node bench/coldstart.mjs build target/variants/stripe,github
//
// Each run starts workerd afresh through Miniflare (a fresh isolate: the
// script loaded, the wasm compiled and instantiated), with empty local D1
// and Durable Object state, then times one signed Stripe delivery: a new
// inbox object, the D1 batch, the reply.
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { agent, checkoutBody, post, signed } from "./harness.mjs";
import { startWorker } from "../tests/support/worker.mjs";

const RUNS = 5;
const dirs = process.argv.slice(2);
if (dirs.length === 0) dirs.push("build");

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const ms = (since) => Number(process.hrtime.bigint() - since) / 1e6;

const rows = [];
for (const dir of dirs) {
  const wasm = readFileSync(join(dir, "index_bg.wasm"));
  const start = [];
  const first = [];
  for (let i = 0; i < RUNS; i++) {
    const started = process.hrtime.bigint();
    const w = await startWorker(
      {},
      {
        main: join(dir, "index.js"),
        unsafeDirectSockets: [{ host: "127.0.0.1", port: 0 }],
        handleRuntimeStdio: (out, err) => (out.resume(), err.resume()),
      },
    );
    const url = new URL("/webhooks/stripe", await w.mf.unsafeGetDirectURL("webhooks")).href;
    start.push(ms(started));
    const sent = process.hrtime.bigint();
    const reply = await post(url, signed(checkoutBody(`cold${i}_${rows.length}`)));
    first.push(ms(sent));
    await w.dispose();
    if (reply.outcome !== "processed") throw new Error(`the first webhook was not processed: ${JSON.stringify(reply)}`);
  }
  rows.push({
    build: dir,
    "wasm bytes": wasm.length,
    "runtime start ms (median)": Math.round(median(start)),
    "first webhook ms (median)": +median(first).toFixed(1),
    "first webhook ms (each)": first.map((x) => x.toFixed(1)).join(" "),
    "start + first, ms (median)": Math.round(median(start.map((s, i) => s + first[i]))),
  });
}
agent.destroy();
console.log(`cold start, ${RUNS} runs per build (runtime start includes D1 migrations):`);
console.table(rows);

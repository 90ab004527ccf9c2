// The benchmark the way users run the worker: under `make dev`'s runner
// (`wrangler dev`, its proxy and workerd), driven over loopback. Prints, per
// scenario, events/s, p50/p99 and the CPU time of every process of the
// runner's group (node runner, wrangler, workerd), and of workerd alone.
//
//   node bench/dev.mjs            (uses build/ as it is; make build first)
//
// DEV_EVENTS sets the events per scenario (default 1000); DEV_LOG_LEVEL the
// worker's LOG_LEVEL (info, the default, or warn).
import { agent, checkoutBody, drive, signed, startBenchDev } from "./harness.mjs";
import { groupCpuMs } from "./group.mjs";

const EVENTS = Number(process.env.DEV_EVENTS ?? 1000);
const CONCURRENCY = 16;

// State on tmpfs, as in bench/run.mjs.
const vars = process.env.DEV_LOG_LEVEL ? { LOG_LEVEL: process.env.DEV_LOG_LEVEL } : {};
const dev = await startBenchDev("webhooks-dev-bench", { vars });
const pgid = dev.pid;
const url = `${dev.url}/webhooks/stripe`;

async function scenario(name, requests, concurrency, expect) {
  const before = groupCpuMs(pgid);
  const { results, seconds } = await drive(url, requests, concurrency);
  const after = groupCpuMs(pgid);
  const wrong = results.filter((r) => !expect.includes(r.outcome));
  if (wrong.length) throw new Error(`${name}: ${wrong.length} unexpected replies, e.g. ${JSON.stringify(wrong[0])}`);
  const ms = results.map((r) => r.ms).sort((a, b) => a - b);
  const total = Object.keys(after).reduce((sum, k) => sum + after[k] - (before[k] ?? 0), 0);
  const workerd = (after.workerd ?? 0) - (before.workerd ?? 0);
  return {
    scenario: name,
    requests: results.length,
    "events/s": Math.round(results.length / seconds),
    "p50 ms": +ms[Math.floor(ms.length / 2)].toFixed(1),
    "p99 ms": +ms[Math.floor(ms.length * 0.99)].toFixed(1),
    "all CPU ms/req": +(total / results.length).toFixed(2),
    "workerd CPU ms/req": +(workerd / results.length).toFixed(2),
  };
}

try {
  await scenario("warm-up", Array.from({ length: 200 }, (_, i) => signed(checkoutBody(`devwarm${i}`))), CONCURRENCY, ["processed"]);
  const distinct = Array.from({ length: EVENTS }, (_, i) => signed(checkoutBody(`dev${i}`)));
  const rows = [];
  rows.push(await scenario(`distinct (c=${CONCURRENCY})`, distinct, CONCURRENCY, ["processed"]));
  rows.push(await scenario(`replay (c=${CONCURRENCY})`, distinct, CONCURRENCY, ["duplicate"]));
  console.table(rows);
} finally {
  agent.destroy();
  await dev.stop();
}

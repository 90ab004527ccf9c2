// One copy's rate under its own `make dev` (make copy-bench runs it in a
// generated Stripe copy with the demos, once per store): 50 signed
// checkouts to warm up, then RATE_EVENTS distinct ones at 16 in flight,
// each answered 200. Prints one JSON line: acknowledged/s, p50/p99, CPU
// per event by process of make dev's group, and on Postgres the
// transactions committed per new event (pg_stat_database, read after the
// server processes have reported).
import { execFileSync, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

import { groupCpuMs } from "../../bench/group.mjs";
import { driveAll, quantile } from "../../bench/harness.mjs";
import { sleep } from "../../tests/support/dev.mjs";
import { ready } from "./ready.mjs";

const { checkoutCompleted, stripeHeaders } = await import(pathToFileURL(`${process.cwd()}/tests/support/sign.mjs`).href);

const EVENTS = Number(process.env.RATE_EVENTS ?? 600);
const IN_FLIGHT = 16;
const PORT = process.env.RATE_PORT;
const store = process.argv[2];
if (!PORT || !["d1", "postgres"].includes(store)) throw new Error("usage: RATE_PORT=<port> node copy-rate.mjs d1|postgres");
// make dev writes .dev.vars from .dev.vars.example when there is none: the
// first of its Stripe secrets.
const secret = () => {
  const line = readFileSync(".dev.vars", "utf8").match(/^STRIPE_WEBHOOK_SECRET=(.*)$/m);
  if (!line) throw new Error(".dev.vars holds no STRIPE_WEBHOOK_SECRET");
  return line[1].split(",")[0].trim();
};
const psql = (sql) => execFileSync("sh", ["scripts/postgres.sh", "psql", "-tA", "-F", " ", "-c", sql], { encoding: "utf8" }).trim();
// Transactions committed, and sessions started: each server process the
// pooler opens commits one while it starts, which the figure includes.
const counters = () => psql("SELECT xact_commit, sessions FROM pg_stat_database WHERE datname = current_database()").split(" ").map(Number);

// make dev's runner in a process group of its own (runner, wrangler,
// workerd), killed whatever ends this script: its CPU is read by then.
const runner = spawn("make", ["dev", `PORT=${PORT}`], { detached: true, stdio: ["ignore", "pipe", "pipe"] });
const stop = () => {
  try {
    process.kill(-runner.pid, "SIGKILL");
  } catch {
    // gone already
  }
};
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) {
  process.on(signal, () => {
    stop();
    process.exit(1);
  });
}
const started = ready(runner, 5);

/** Posts each body, IN_FLIGHT at a time; each must be answered 200. */
async function drive(bodies) {
  const key = secret();
  const requests = bodies.map((body) => ({ body, headers: stripeHeaders(body, key) }));
  const { results, seconds } = await driveAll(`http://127.0.0.1:${PORT}/webhooks/stripe`, requests, IN_FLIGHT);
  const refused = results.find((r) => r.status !== 200);
  if (refused) throw new Error(`a reply of ${refused.status}: ${refused.outcome}`);
  return { seconds, ms: results.map((r) => r.ms).sort((a, b) => a - b) };
}

const tag = `${store}${Date.now().toString(36)}`;
const bodies = (name, n) => Array.from({ length: n }, (_, i) => checkoutCompleted({ id: `evt_${tag}_${name}${i}`, session: `cs_${tag}_${name}${i}` }));
try {
  await started;
  await drive(bodies("warm", 50));
  // An idle server process reports its transactions within 10 s.
  if (store === "postgres") await sleep(12_000);
  const before = store === "postgres" ? counters() : [0, 0];
  const cpuBefore = groupCpuMs(runner.pid);
  const { seconds, ms } = await drive(bodies("e", EVENTS));
  const cpuAfter = groupCpuMs(runner.pid);
  if (store === "postgres") await sleep(12_000);
  const after = store === "postgres" ? counters() : [0, 0];
  const cpu = Object.fromEntries(Object.keys(cpuAfter).map((name) => [name, +((cpuAfter[name] - (cpuBefore[name] ?? 0)) / EVENTS).toFixed(2)]));
  const at = (q) => +quantile(ms, q).toFixed(1);
  console.log(
    JSON.stringify({
      store,
      events: EVENTS,
      "acknowledged/s": Math.round(EVENTS / seconds),
      "p50 ms": at(0.5),
      "p99 ms": at(0.99),
      "CPU ms/event by process": cpu,
      // The first read's session is counted (its start and its read);
      // the second's reports only when it ends.
      ...(store === "postgres" && {
        "commits/event": +((after[0] - before[0] - 2) / EVENTS).toFixed(3),
        "pooled sessions started": after[1] - before[1] - 1,
      }),
    }),
  );
} finally {
  stop();
}
process.exit(process.exitCode ?? 0);

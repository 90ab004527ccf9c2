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
import { ready } from "./ready.mjs";

const { checkoutCompleted, stripeHeaders } = await import(pathToFileURL(`${process.cwd()}/tests/support/sign.mjs`).href);

const EVENTS = Number(process.env.RATE_EVENTS ?? 600);
const IN_FLIGHT = 16;
const PORT = process.env.RATE_PORT;
const store = process.argv[2];
// make dev writes .dev.vars from .dev.vars.example when there is none.
const secret = () => readFileSync(".dev.vars", "utf8").match(/^STRIPE_WEBHOOK_SECRET=([^,\n]+)/m)[1];
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const psql = (sql) => Number(execFileSync("sh", ["scripts/postgres.sh", "psql", "-tA", "-c", sql], { encoding: "utf8" }).trim());
const commits = () => psql("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()");

const runner = spawn("make", ["dev", `PORT=${PORT}`], { detached: true, stdio: ["ignore", "pipe", "pipe"] });
const started = ready(runner, 5);

/** Posts each body, IN_FLIGHT at a time; each must be answered 200. */
async function drive(bodies) {
  const key = secret();
  const ms = [];
  let next = 0;
  const started = performance.now();
  const lane = async () => {
    while (next < bodies.length) {
      const body = bodies[next++];
      const sent = performance.now();
      const reply = await fetch(`http://127.0.0.1:${PORT}/webhooks/stripe`, { method: "POST", body, headers: stripeHeaders(body, key) });
      const text = await reply.text();
      if (reply.status !== 200) throw new Error(`${reply.status}: ${text.slice(0, 200)}`);
      ms.push(performance.now() - sent);
    }
  };
  await Promise.all(Array.from({ length: IN_FLIGHT }, lane));
  return { seconds: (performance.now() - started) / 1000, ms: ms.sort((a, b) => a - b) };
}

const tag = `${store}${Date.now().toString(36)}`;
const bodies = (name, n) => Array.from({ length: n }, (_, i) => checkoutCompleted({ id: `evt_${tag}_${name}${i}`, session: `cs_${tag}_${name}${i}` }));
try {
  await started;
  await drive(bodies("warm", 50));
  // An idle server process reports its transactions within 10 s.
  if (store === "postgres") await sleep(11_000);
  const before = store === "postgres" ? commits() : 0;
  const cpuBefore = groupCpuMs(runner.pid);
  const { seconds, ms } = await drive(bodies("e", EVENTS));
  const cpuAfter = groupCpuMs(runner.pid);
  if (store === "postgres") await sleep(11_000);
  const after = store === "postgres" ? commits() : 0;
  const cpu = Object.fromEntries(Object.keys(cpuAfter).map((name) => [name, +((cpuAfter[name] - (cpuBefore[name] ?? 0)) / EVENTS).toFixed(2)]));
  const at = (q) => +ms[Math.min(ms.length - 1, Math.floor(q * ms.length))].toFixed(1);
  console.log(
    JSON.stringify({
      store,
      events: EVENTS,
      "acknowledged/s": Math.round(EVENTS / seconds),
      "p50 ms": at(0.5),
      "p99 ms": at(0.99),
      "CPU ms/event by process": cpu,
      // The two reads of the counter are transactions too.
      ...(store === "postgres" && { "commits/event": +((after - before - 1) / EVENTS).toFixed(3) }),
    }),
  );
} finally {
  try {
    process.kill(-runner.pid, "SIGTERM");
  } catch {
    // gone already
  }
}

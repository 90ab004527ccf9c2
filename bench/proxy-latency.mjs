// Benchmark: one new event at a time on Postgres, through the local
// Hyperdrive proxy (Miniflare's, the one `wrangler dev` runs), with its
// sockets as scripts/hyperdrive-guard.cjs sets them (TCP_NODELAY) and as
// the proxy leaves them (Nagle's algorithm on). Each in a process of its
// own. Sequential, so that the figure is the event's latency, not a queue.
//
//   make proxy-bench      (BENCH_EVENTS, default 200)
import { spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const EVENTS = Number(process.env.BENCH_EVENTS ?? 200);
const mode = process.argv[2];

if (!mode) {
  for (const run of ["nodelay", "nagle"]) {
    const child = spawnSync(process.execPath, [fileURLToPath(import.meta.url), run], {
      stdio: ["ignore", "pipe", "inherit"],
      encoding: "utf8",
      timeout: 600_000,
    });
    if (child.status !== 0) process.exit(child.status ?? 1);
    process.stdout.write(child.stdout.split("\n").filter((line) => line.startsWith("proxy-bench")).join("\n") + "\n");
  }
  process.exit(0);
}

const { freshDatabase, startPostgresWorker } = await import("../tests/support/postgres.mjs");
const { checkoutCompleted, stripeHeaders, uniqueId } = await import("../tests/support/sign.mjs");
const { SECRETS } = await import("../tests/support/worker.mjs");

// As the proxy leaves its sockets: the guard (loaded above) does not set
// TCP_NODELAY on them. No other socket changes (the bench's own HTTP
// client keeps its own).
if (mode === "nagle") createRequire(import.meta.url)("../scripts/hyperdrive-guard.cjs").noDelay = false;

const pg = freshDatabase();
const quiet = { handleRuntimeStdio: (out, err) => (out.resume(), err.resume()) };
const w = await startPostgresWorker(pg, { LOG_LEVEL: "warn", OUTBOX_RELAY_GRACE_MS: "600000" }, quiet);
try {
  const secret = SECRETS.STRIPE_WEBHOOK_SECRET.split(",")[0];
  const one = async () => {
    const body = checkoutCompleted({ id: uniqueId("evt"), session: uniqueId("cs") });
    const headers = stripeHeaders(body, secret);
    const started = performance.now();
    const reply = await w.mf.dispatchFetch("http://localhost/webhooks/stripe", {
      method: "POST",
      body,
      headers,
      signal: AbortSignal.timeout(10_000),
    });
    if (reply.status !== 200) throw new Error(`${reply.status} ${await reply.text()}`);
    await reply.text();
    return performance.now() - started;
  };
  for (let i = 0; i < 30; i++) await one();
  const ms = [];
  for (let i = 0; i < EVENTS; i++) ms.push(await one());
  ms.sort((a, b) => a - b);
  const at = (q) => ms[Math.min(ms.length - 1, Math.floor(q * ms.length))].toFixed(1);
  const mean = (ms.reduce((sum, m) => sum + m, 0) / ms.length).toFixed(1);
  console.log(`proxy-bench ${mode === "nagle" ? "Nagle on (as the proxy leaves it)" : "TCP_NODELAY (the guard)"}: ${EVENTS} events one at a time, p50 ${at(0.5)} ms, p90 ${at(0.9)} ms, mean ${mean} ms`);
} finally {
  await w.dispose();
}

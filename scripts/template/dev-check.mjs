// A Postgres copy under its own `make dev` runner (make template-check runs
// it in the copy): a 50-copy storm of one Stripe checkout, 40 distinct
// checkouts in waves with `pg_ctl restart -m immediate` between two of
// them (a 503 is retried, as Stripe would), every event sent again, then
// the rows counted in Postgres with psql: one ledger row and one order per
// event, nothing left to hand off, and one receipt email per order at a
// local sink, each idempotency key once.
import { execFileSync, spawn } from "node:child_process";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { pathToFileURL } from "node:url";

import { ready } from "./ready.mjs";

const { checkoutCompleted, stripeHeaders, uniqueId } = await import(pathToFileURL(`${process.cwd()}/tests/support/sign.mjs`).href);

/** A port nothing listens on now. */
const freePort = () =>
  new Promise((resolve) => {
    const probe = createServer().listen(0, "127.0.0.1", () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });

const SECRET = "whsec_dev_check_secret";
// A cluster of its own, on ports of its own: nothing else on this machine
// (a make dev of another checkout) can answer in its place.
const PG = { ...process.env, PG_DIR: `${process.cwd()}/.wrangler/dev-check-postgres`, PG_PORT: String(await freePort()), PG_DB: "dev_check" };
const PORT = await freePort();
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const psql = (sql) => execFileSync("sh", ["scripts/postgres.sh", "psql", "-tA", "-c", sql], { env: PG, encoding: "utf8" }).trim();
const fail = (why) => {
  console.error(`dev-check: ${why}`);
  process.exitCode = 1;
};

// The email API: every call recorded by its idempotency key.
const emails = new Map();
const sink = createServer((req, res) => {
  const key = req.headers["idempotency-key"];
  emails.set(key, (emails.get(key) ?? 0) + 1);
  req.resume();
  req.on("end", () => res.writeHead(200, { "content-type": "application/json" }).end('{"id":"sent"}'));
});
await new Promise((resolve) => sink.listen(0, "127.0.0.1", resolve));

mkdirSync(".wrangler", { recursive: true });
for (const dir of [".wrangler/dev-check", PG.PG_DIR]) rmSync(dir, { recursive: true, force: true });
const vars = {
  STRIPE_WEBHOOK_SECRET: SECRET,
  EMAIL_API_URL: `http://127.0.0.1:${sink.address().port}`,
  EMAIL_API_KEY: "dev-check",
  ADMIN_TOKEN: "dev-check-admin-token-0123456789abcdef",
};
writeFileSync(".wrangler/dev-check.vars", Object.entries(vars).map(([name, value]) => `${name}=${value}\n`).join(""));
// The make dev runner, in a process group of its own (runner, wrangler, workerd).
const args = ["scripts/dev.mjs", "--port", String(PORT), "--persist-to", ".wrangler/dev-check", "--env-file", ".wrangler/dev-check.vars"];
const runner = spawn("node", args, { env: PG, detached: true, stdio: ["ignore", "pipe", "pipe"] });
const url = `http://127.0.0.1:${PORT}`;
const started = ready(runner, 3);

/** Delivers `body` until it is answered 200, as a provider retries a 503. */
async function deliver(body) {
  for (let i = 0; i < 60; i++) {
    const init = { method: "POST", body, headers: stripeHeaders(body, SECRET), signal: AbortSignal.timeout(30_000) };
    const reply = await fetch(`${url}/webhooks/stripe`, init).catch(() => null);
    if (reply?.status === 200) return (await reply.json()).outcome;
    await reply?.body?.cancel();
    await sleep(1_000);
  }
  throw new Error("no 200 in a minute");
}

try {
  await started;
  const storm = checkoutCompleted({ session: uniqueId("cs") });
  const outcomes = await Promise.all(Array.from({ length: 50 }, () => deliver(storm)));
  const processed = outcomes.filter((o) => o === "processed").length;
  if (processed !== 1) fail(`the storm was processed ${processed} times`);
  const bodies = [storm];
  for (let wave = 0; wave < 4; wave++) {
    if (wave === 2) execFileSync("sh", ["scripts/postgres.sh", "restart", "immediate"], { env: PG });
    const sent = Array.from({ length: 10 }, () => checkoutCompleted({ session: uniqueId("cs") }));
    bodies.push(...sent);
    await Promise.all(sent.map(deliver));
  }
  await Promise.all(bodies.map(deliver));

  const want = bodies.length;
  const counts = () => ({
    ledger: Number(psql("SELECT count(*) FROM processed_events")),
    orders: Number(psql("SELECT count(*) FROM orders")),
    toHandOff: Number(psql("SELECT count(*) FROM webhook_outbox WHERE handed_off_at IS NULL")),
    emails: emails.size,
  });
  let seen = counts();
  for (let i = 0; i < 150 && (seen.ledger < want || seen.toHandOff > 0 || seen.emails < want); i++) {
    await sleep(1_000);
    seen = counts();
  }
  const twice = [...emails].filter(([, calls]) => calls > 1).length;
  console.log(`dev-check: ${want} events; in Postgres ${seen.ledger} ledger rows, ${seen.orders} orders, ${seen.toHandOff} rows left to hand off; ${seen.emails} receipts, ${twice} sent twice`);
  if (seen.ledger !== want || seen.orders !== want) fail(`expected ${want} ledger rows and orders`);
  if (seen.toHandOff !== 0) fail("rows are left to hand off");
  if (seen.emails !== want || twice) fail(`expected ${want} receipts, each once`);
} catch (e) {
  fail(e.message);
} finally {
  try {
    process.kill(-runner.pid, "SIGKILL");
  } catch {
    // Gone already.
  }
  execFileSync("sh", ["scripts/postgres.sh", "stop"], { env: PG });
  sink.close();
}

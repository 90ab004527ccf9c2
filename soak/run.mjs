// Crash soak: signed Stripe and GitHub deliveries at the worker under
// `make dev`'s runner (wrangler dev, state on disk in .wrangler/soak/, the
// cron ticker), while the harness kills the whole runtime with SIGKILL at
// random moments and starts it again on the same state, the way a developer
// or a host crash would. Side effects and forwarded events (Stripe's to two
// destinations, GitHub's to one) go to an HTTP sink here that fails 20 % of
// calls with a 500, answers after 20-200 ms like a real API and, like
// Resend, answers a repeated call under a key that already succeeded with
// the first answer (counted as a repeat).
//
//   node soak/run.mjs [deliveries] [seed] [kills] [settle minutes]
//   (make soak: 10,000 deliveries, seed 1, 6 kills, 15 minutes to settle)
//
// With STORE=postgres (`make soak STORE=postgres`), the effects commit in a
// local Postgres cluster of its own (.wrangler/soak/postgres, port 5435),
// which is also restarted twice with `pg_ctl restart -m immediate` while
// deliveries are sent; the ledger, orders and stars are counted there, and
// no row may be left waiting for its hand-off to D1.
//
// Deliveries: 70 % distinct events (60 % Stripe checkouts, 40 % GitHub
// stars over 20 repositories), 30 % duplicate copies — 20 storms of 50
// concurrent copies, the rest single copies — in a random order, 16 units
// in flight. Every delivery that got no reply, or a 5xx, is sent again after
// the restart, as a provider would. All but one kill land while deliveries
// are being sent; the last lands while the outbox drains, with calls to the
// sink in flight.
//
// When everything has settled (no outbox row pending or sending, every inbox
// `done`), it checks, and exits non-zero on any violation:
// - every event sent, answered or not, has exactly one ledger row;
// - one order per checkout, star counters equal to the distinct stars;
// - every outbox row `sent`, one per effect, and its key succeeded at the
//   sink; every (event, destination) pair delivered, and its webhook-id
//   succeeded at the sink; no success under any other key; a call repeated
//   after its key succeeded only when that row was `sending` at a kill in
//   between (a crash between the call and its record), once per such kill;
// - no inbox left `received` or `failed`, no `panicked` in the runtime's log.
// Traffic goes to 127.0.0.1 only; the run is bounded by its count and by a
// settle deadline. The runtime's output is kept in .wrangler/soak/runtime.log.
import { execFile, execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { promisify } from "node:util";

import { check } from "./checks.mjs";
import { d1Query, freePort, sleep, startDev, startSink, writeEnvFile } from "../tests/support/dev.mjs";
import { prng } from "../tests/support/prng.mjs";
import { pgRows } from "../tests/support/postgres.mjs";
import { checkoutCompleted, githubHeaders, starEvent, stripeHeaders } from "../tests/support/sign.mjs";

const DELIVERIES = Number(process.argv[2] ?? 10_000);
const SEED = Number(process.argv[3] ?? 1);
const KILLS = Number(process.argv[4] ?? 6);
const STRIPE = "whsec_soak_stripe_secret";
const GITHUB = "soak_github_secret";
const TOKEN = "soak-admin-token-0123456789abcdef";
// Forwarding: Stripe's events to two destinations, GitHub's to one; the
// sink serves them all, each under its own path.
const FORWARDS_TO = { stripe: ["primary", "mirror"], github: ["primary"] };
const SIGNING = `whsec_${Buffer.alloc(32, 9).toString("base64")}`;
const IN_FLIGHT = 16;
const STORM_COPIES = 50;
const REPOS = 20;
const SETTLE_MS = Number(process.argv[5] ?? 15) * 60_000;
const POSTGRES = process.env.STORE === "postgres";
const PG_RESTARTS = POSTGRES ? 2 : 0;

// The plan (events, order, kill points) from one stream; when each kill
// lands within its unit from another; the sink's failures from the key and
// the call's number, so a run's plan and failures repeat with its seed.
const rand = prng(SEED);
const pick = (n) => Math.floor(rand() * n);
const jitter = prng(SEED ^ 0x5eed);
const dir = join(".wrangler", "soak");
const persistTo = join(dir, "state");
const envFile = join(dir, "vars.env");
const pgEnv = { PG_DIR: resolve(dir, "postgres"), PG_PORT: "5435", PG_DB: "soak" };
const pgctl = (...args) => promisify(execFile)("sh", ["scripts/postgres.sh", ...args], { env: { ...process.env, ...pgEnv } });
/** The store's rows: Postgres's, or D1's. */
const storeRows = (sql) => (POSTGRES ? pgRows(pgEnv, sql) : d1Query(persistTo, sql));

// --- the events and the order they are delivered in ---------------------

const distinct = Math.round(DELIVERIES * 0.7);
// Up to 20 storms, taking at most a third of the duplicate copies.
const STORMS = Math.min(20, Math.floor((DELIVERIES - distinct) / (STORM_COPIES - 1) / 3));
const events = Array.from({ length: distinct }, (_, i) => {
  if (rand() < 0.6) {
    const id = `evt_soak_${SEED}_${i}`;
    return { source: "stripe", id, session: `cs_soak_${SEED}_${i}`, body: checkoutCompleted({ id, session: `cs_soak_${SEED}_${i}`, email: `buyer${i}@example.com` }) };
  }
  const repo = `soak/repo-${pick(REPOS)}`;
  return { source: "github", id: `delivery-${SEED}-${i}`, repo, body: starEvent({ repo, sender: `stargazer-${SEED}-${i}` }) };
});
// A unit is one delivery, or a storm of concurrent copies of one event.
const units = events.map((event, i) => ({ event, copies: i < STORMS ? STORM_COPIES : 1 }));
const singles = DELIVERIES - distinct - STORMS * (STORM_COPIES - 1);
for (let i = 0; i < singles; i++) units.push({ event: events[pick(distinct)], copies: 1 });
for (let i = units.length - 1; i > 0; i--) {
  const j = pick(i + 1);
  [units[i], units[j]] = [units[j], units[i]];
}
const killAt = Array.from({ length: Math.max(KILLS - 1, 0) }, () => Math.floor(units.length * (0.05 + 0.9 * rand()))).sort(
  (a, b) => a - b,
);
const pgRestartAt = Array.from({ length: PG_RESTARTS }, () => Math.floor(units.length * (0.1 + 0.8 * rand()))).sort((a, b) => a - b);
const pgRestarts = [];

function signed(event) {
  const headers =
    event.source === "stripe"
      ? stripeHeaders(event.body, STRIPE)
      : githubHeaders(event.body, GITHUB, { delivery: event.id, event: "star" });
  return { path: `/webhooks/${event.source}`, headers };
}

// --- the sink -------------------------------------------------------------

const kills = []; // { start, end, sending: keys `sending` in D1 at the kill }
const sink = await startSink();
const firstSuccess = new Map(); // key → time of its first 2xx
const callsPerKey = new Map();
const repeats = []; // { key, first, at }
const fraction = (...parts) => createHash("sha256").update(parts.join("\n")).digest().readUInt32BE(0) / 2 ** 32;
sink.latencyMs = () => 20 + Math.floor(jitter() * 180); // like a real API
sink.answer = (call) => {
  const n = (callsPerKey.get(call.key) ?? 0) + 1;
  callsPerKey.set(call.key, n);
  const first = firstSuccess.get(call.key);
  if (first !== undefined) {
    repeats.push({ key: call.key, first, at: call.at });
    return 200;
  }
  if (fraction(SEED, call.key, n) < 0.2) return 500;
  firstSuccess.set(call.key, call.at);
  return 200;
};

// --- the runtime ----------------------------------------------------------

if (POSTGRES) execFileSync("sh", ["scripts/postgres.sh", "stop"], { env: { ...process.env, ...pgEnv } });
rmSync(dir, { recursive: true, force: true });
mkdirSync(dir, { recursive: true });
writeEnvFile(envFile, {
  STRIPE_WEBHOOK_SECRET: STRIPE,
  GITHUB_WEBHOOK_SECRET: GITHUB,
  ADMIN_TOKEN: TOKEN,
  EMAIL_API_URL: sink.url,
  EMAIL_API_KEY: "re_soak_key",
  NOTIFY_URL: `${sink.url}/notify`,
  // One call in five fails: more attempts than the default 5, and a shorter
  // first retry, so that no row dies and the run settles sooner.
  OUTBOX_MAX_ATTEMPTS: 12,
  OUTBOX_RETRY_BASE_SECS: 2,
  // Tables as JSON in the env file (single-quoted: taken as written).
  SOURCES: `'${JSON.stringify({
    stripe: { provider: "stripe", forward: FORWARDS_TO.stripe },
    github: { provider: "github", forward: FORWARDS_TO.github },
  })}'`,
  DESTINATIONS: `'${JSON.stringify({
    primary: { url: `${sink.url}/primary`, secret: "SOAK_SIGNING_SECRET" },
    mirror: { url: `${sink.url}/mirror`, secret: "SOAK_SIGNING_SECRET", events: ["checkout.*"] },
  })}'`,
  SOAK_SIGNING_SECRET: SIGNING,
  FORWARD_PROBE_SECS: 2,
  // `make soak REPLY_AFTER=record`: first deliveries answered once recorded.
  ...(process.env.REPLY_AFTER ? { REPLY_AFTER: process.env.REPLY_AFTER } : {}),
});
const port = await freePort();
const runtimeLog = [];
const store = POSTGRES ? { store: "postgres", env: pgEnv } : {};
let dev = await startDev({ port, persistTo, envFile, ...store });
let up = Promise.resolve(); // senders wait on it while the runtime restarts
let crashing = false; // one kill at a time
let drainKillMissed = false;
async function crash() {
  try {
    await restart();
  } catch (e) {
    // A runtime that cannot be killed or started again ends the run: keep
    // its log, and fail.
    writeFileSync(join(dir, "runtime.log"), runtimeLog.join(""));
    console.error(`crash soak: the restart failed: ${e.stack ?? e}`);
    process.exit(1);
  }
}
async function restart() {
  crashing = true;
  const start = Date.now();
  let restarted;
  up = new Promise((r) => (restarted = r));
  await dev.kill();
  for (const chunk of dev.output) runtimeLog.push(chunk);
  // Rows claimed by a consumer that died: a call of theirs that reached the
  // sink may be repeated after the restart, under the same key.
  const sending = [
    ...d1Query(persistTo, "SELECT idempotency_key AS key FROM outbox WHERE status = 'sending'"),
    ...d1Query(persistTo, "SELECT delivery_id AS key FROM forwards WHERE status = 'sending'"),
  ];
  kills.push({ start, end: Date.now(), sending: new Set(sending.map((r) => r.key)) });
  dev = await startDev({ port, persistTo, envFile, ...store });
  restarted();
  crashing = false;
  const took = ((Date.now() - start) / 1000).toFixed(1);
  console.log(`kill ${kills.length} after ${stats.sent} sends, ${sending.length} rows sending; up again in ${took} s`);
}

// --- sending --------------------------------------------------------------

const stats = { sent: 0, resends: 0, noReply: 0, statuses: new Map(), refused: [] };
const answered = new Set(); // "source:id" of events answered 2xx at least once
const resend = [];
const count = (label) => stats.statuses.set(label, (stats.statuses.get(label) ?? 0) + 1);

async function deliver(event) {
  await up;
  const { path, headers } = signed(event);
  stats.sent++;
  try {
    const res = await fetch(dev.url + path, { method: "POST", body: event.body, headers });
    const text = await res.text();
    let outcome = "";
    try {
      outcome = JSON.parse(text).outcome ?? JSON.parse(text).error ?? "";
    } catch {}
    count(`${res.status} ${outcome}`.trim());
    if (res.ok) answered.add(`${event.source}:${event.id}`);
    else if (res.status >= 500) resend.push(event);
    else stats.refused.push(`${res.status} ${text.slice(0, 200)} for ${event.source}:${event.id}`);
  } catch {
    stats.noReply++;
    resend.push(event);
  }
}

console.log(`crash soak: ${DELIVERIES} deliveries, ${KILLS} kills, seed ${SEED}, state in ${persistTo}`);
const started = Date.now();
let next = 0;
async function sender() {
  for (;;) {
    if (pgRestartAt.length > 0 && next >= pgRestartAt[0]) {
      pgRestartAt.shift();
      const at = stats.sent;
      // Not awaited: the senders go on while Postgres is down.
      pgctl("restart", "immediate").then(
        () => {
          pgRestarts.push(at);
          console.log(`postgres restarted (immediate) after ${at} sends`);
        },
        (e) => console.error(`postgres restart failed: ${e.message}`),
      );
    }
    if (killAt.length > 0 && next >= killAt[0] && !crashing) {
      killAt.shift();
      crashing = true;
      // A random moment while this unit's neighbours are in flight.
      await sleep(Math.floor(jitter() * 300));
      await crash();
    }
    const event = resend.shift();
    if (event) {
      stats.resends++;
      await deliver(event);
      continue;
    }
    if (next >= units.length) return;
    const unit = units[next++];
    await Promise.all(Array.from({ length: unit.copies }, () => deliver(unit.event)));
  }
}
await Promise.all(Array.from({ length: IN_FLIGHT }, sender));
// Whatever is still unanswered is sent until it is answered, with backoff.
for (let round = 0; resend.length > 0 && round < 10; round++) {
  if (round > 0) await sleep(1_000 * 2 ** round);
  const batch = resend.splice(0);
  stats.resends += batch.length;
  await Promise.all(batch.map(deliver));
}
const unanswered = resend.length;
const sendSeconds = (Date.now() - started) / 1000;

// --- settling -------------------------------------------------------------

const admin = (path) =>
  fetch(`${dev.url}/admin/api/${path}`, { headers: { authorization: `Bearer ${TOKEN}` } }).then(async (res) => {
    if (!res.ok) throw new Error(`admin ${path}: ${res.status}`);
    return res.json();
  });
const outboxBy = async () => {
  const counts = {};
  for (const row of (await admin("stats")).stats.outbox) counts[row.status] = (counts[row.status] ?? 0) + row.rows;
  return counts;
};

if (kills.length < KILLS) {
  // The last kill while the outbox drains, at a moment when calls to the
  // sink are in flight: they die with the runtime.
  await sleep(1_000 + Math.floor(jitter() * 4_000));
  for (let i = 0; i < 600 && sink.inFlight === 0; i++) await sleep(50);
  if (sink.inFlight === 0) drainKillMissed = true;
  await crash();
}
console.log(`all deliveries answered after ${stats.sent} sends; settling`);
const settleStart = Date.now();
let outbox = {};
const inboxStates = new Map();
let lastReport = 0;
while (Date.now() - settleStart < SETTLE_MS) {
  try {
    outbox = await outboxBy();
    const backlog = (await admin("destinations")).destinations.reduce((n, d) => n + d.backlog, 0);
    if (Date.now() - lastReport >= 30_000) {
      lastReport = Date.now();
      console.log(`settling, ${((Date.now() - settleStart) / 1000).toFixed(0)} s: outbox ${JSON.stringify(outbox)}, forwards waiting ${backlog}`);
    }
    const handoffs = POSTGRES ? Number(pgRows(pgEnv, "SELECT count(*) AS n FROM webhook_outbox WHERE handed_off_at IS NULL")[0].n) : 0;
    if (!outbox.pending && !outbox.sending && backlog === 0 && handoffs === 0) {
      await checkInboxes();
      // An inbox alarm may have added a row meanwhile: look again.
      if ([...inboxStates.values()].every((s) => s === "done")) {
        outbox = await outboxBy();
        if (!outbox.pending && !outbox.sending) break;
      }
    }
  } catch (e) {
    console.error(`settle: ${e.message}`);
  }
  await sleep(5_000);
}
const settleSeconds = (Date.now() - settleStart) / 1000;

async function checkInboxes() {
  const todo = events.filter((e) => inboxStates.get(`${e.source}:${e.id}`) !== "done");
  let i = 0;
  await Promise.all(
    Array.from({ length: IN_FLIGHT }, async () => {
      while (i < todo.length) {
        const e = todo[i++];
        const detail = await admin(`events/${e.source}/${encodeURIComponent(e.id)}`);
        inboxStates.set(`${e.source}:${e.id}`, detail.inbox?.state ?? "absent");
      }
    }),
  );
}

await dev.stop();
for (const chunk of dev.output) runtimeLog.push(chunk);
await sink.close();
const postgres = POSTGRES
  ? {
      restarts: pgRestarts,
      waiting: Number(pgRows(pgEnv, "SELECT count(*) AS n FROM webhook_outbox WHERE handed_off_at IS NULL")[0].n),
      mirrored: d1Query(persistTo, "SELECT count(*) AS n FROM processed_events")[0].n,
    }
  : undefined;
writeFileSync(join(dir, "runtime.log"), runtimeLog.join(""));

// --- checks ---------------------------------------------------------------

const { violations, table } = check({
  persistTo, events, distinct, answered, firstSuccess, repeats, kills, unanswered, inboxStates, runtimeLog,
  stats, KILLS, drainKillMissed, sink, outbox, DELIVERIES, STORMS, STORM_COPIES, sendSeconds, settleSeconds,
  forwardsTo: FORWARDS_TO, storeRows, postgres,
});
if (POSTGRES) await pgctl("stop");
console.log(`\ncrash soak, seed ${SEED}${POSTGRES ? ", effects in Postgres" : ""}\n`);
console.log("| measure | value |\n| --- | --- |");
for (const [k, v] of table) console.log(`| ${k} | ${v} |`);
if (violations.length) {
  console.log(`\nFAIL: ${violations.length} violations`);
  for (const v of violations) console.log(`- ${v}`);
  process.exit(1);
}
console.log("\nPASS: every event applied once, every side effect and forwarded delivery made under its key, nothing stuck");

// Crash soak: signed Stripe and GitHub deliveries at the worker under
// `make dev`'s runner (wrangler dev, state on disk in .wrangler/soak/, the
// cron ticker), while the harness kills the whole runtime with SIGKILL at
// random moments and starts it again on the same state, the way a developer
// or a host crash would. Side effects go to an HTTP sink here that fails 20 %
// of calls with a 500, answers after 20-200 ms like a real API and, like
// Resend, answers a repeated call under a key that already succeeded with
// the first answer (counted as a repeat).
//
//   node soak/run.mjs [deliveries] [seed] [kills] [settle minutes]
//   (make soak: 10,000 deliveries, seed 1, 6 kills, 15 minutes to settle)
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
//   sink; no success under any other key; a call repeated after its key
//   succeeded only when that row was `sending` at a kill in between (a crash
//   between the call and `sent`), once per such kill;
// - no inbox left `received` or `failed`, no `panicked` in the runtime's log.
// Traffic goes to 127.0.0.1 only; the run is bounded by its count and by a
// settle deadline. The runtime's output is kept in .wrangler/soak/runtime.log.
import { createHash } from "node:crypto";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { d1Query, freePort, sleep, startDev, startSink, writeEnvFile } from "../tests/support/dev.mjs";
import { prng } from "../tests/support/prng.mjs";
import { checkoutCompleted, githubHeaders, starEvent, stripeHeaders } from "../tests/support/sign.mjs";

const DELIVERIES = Number(process.argv[2] ?? 10_000);
const SEED = Number(process.argv[3] ?? 1);
const KILLS = Number(process.argv[4] ?? 6);
const STRIPE = "whsec_soak_stripe_secret";
const GITHUB = "soak_github_secret";
const TOKEN = "soak-admin-token-0123456789abcdef";
const IN_FLIGHT = 16;
const STORM_COPIES = 50;
const REPOS = 20;
const SETTLE_MS = Number(process.argv[5] ?? 15) * 60_000;

// The plan (events, order, kill points) from one stream; when each kill
// lands within its unit from another; the sink's failures from the key and
// the call's number, so a run's plan and failures repeat with its seed.
const rand = prng(SEED);
const pick = (n) => Math.floor(rand() * n);
const jitter = prng(SEED ^ 0x5eed);
const dir = join(".wrangler", "soak");
const persistTo = join(dir, "state");
const envFile = join(dir, "vars.env");

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
});
const port = await freePort();
const runtimeLog = [];
let dev = await startDev({ port, persistTo, envFile });
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
  const sending = d1Query(persistTo, "SELECT idempotency_key FROM outbox WHERE status = 'sending'");
  kills.push({ start, end: Date.now(), sending: new Set(sending.map((r) => r.idempotency_key)) });
  dev = await startDev({ port, persistTo, envFile });
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
    if (Date.now() - lastReport >= 30_000) {
      lastReport = Date.now();
      console.log(`settling, ${((Date.now() - settleStart) / 1000).toFixed(0)} s: outbox ${JSON.stringify(outbox)}`);
    }
    if (!outbox.pending && !outbox.sending) {
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
writeFileSync(join(dir, "runtime.log"), runtimeLog.join(""));

// --- checks ---------------------------------------------------------------

const violations = [];
const fail = (what) => violations.push(what);

const ledger = d1Query(persistTo, "SELECT source, event_id FROM processed_events");
const ledgerKeys = new Set(ledger.map((r) => `${r.source}:${r.event_id}`));
const missing = events.filter((e) => !ledgerKeys.has(`${e.source}:${e.id}`));
if (missing.length) fail(`${missing.length} events sent have no ledger row, e.g. ${missing[0].source}:${missing[0].id}`);
if (ledger.length !== distinct) fail(`${ledger.length} ledger rows for ${distinct} distinct events`);
const lostAcks = [...answered].filter((k) => !ledgerKeys.has(k)).length;
if (lostAcks) fail(`${lostAcks} events answered 2xx have no ledger row`);

const checkouts = events.filter((e) => e.source === "stripe");
const stars = events.filter((e) => e.source === "github");
const orders = d1Query(persistTo, "SELECT checkout_session_id, status FROM orders");
const sessions = new Set(checkouts.map((e) => e.session));
if (orders.length !== checkouts.length || orders.some((o) => !sessions.has(o.checkout_session_id) || o.status !== "paid"))
  fail(`${orders.length} paid orders for ${checkouts.length} checkouts`);
const expectedStars = new Map();
for (const e of stars) expectedStars.set(e.repo, (expectedStars.get(e.repo) ?? 0) + 1);
let doubleEffects = 0;
const counted = new Map(d1Query(persistTo, "SELECT repo, stars FROM repo_stars").map((r) => [r.repo, r.stars]));
for (const repo of new Set([...expectedStars.keys(), ...counted.keys()])) {
  const [n, want] = [counted.get(repo) ?? 0, expectedStars.get(repo) ?? 0];
  if (n > want) doubleEffects += n - want;
  if (n !== want) fail(`repo ${repo}: ${n} stars counted, ${want} distinct star events`);
}

const rows = d1Query(persistTo, "SELECT idempotency_key, action, status FROM outbox");
const notSent = rows.filter((r) => r.status !== "sent");
if (notSent.length) fail(`${notSent.length} outbox rows not sent: ${JSON.stringify(countBy(notSent, (r) => r.status))}`);
if (rows.length !== distinct) fail(`${rows.length} outbox rows for ${distinct} events with one side effect each`);
const rowKeys = new Set(rows.map((r) => r.idempotency_key));
const neverSucceeded = rows.filter((r) => !firstSuccess.has(r.idempotency_key)).length;
if (neverSucceeded) fail(`${neverSucceeded} side-effect keys never succeeded at the sink`);
const strangers = [...firstSuccess.keys()].filter((k) => !rowKeys.has(k)).length;
if (strangers) fail(`${strangers} keys succeeded at the sink with no outbox row`);
// A repeat is a crash between the call and `sent` only if the key's row was
// `sending` at a kill between its first success and the repeat, and each
// such kill explains one repeat.
const explained = new Map();
const unexplained = repeats.filter((r) => {
  const kill = kills.find(
    (k, i) => k.sending.has(r.key) && r.first <= k.end && k.start <= r.at && !explained.has(`${i}:${r.key}`),
  );
  if (kill) explained.set(`${kills.indexOf(kill)}:${r.key}`, true);
  return !kill;
}).length;
if (unexplained) fail(`${unexplained} calls repeated a key that had succeeded, not explained by a kill`);
if (unanswered) fail(`${unanswered} deliveries never answered 2xx`);

const stuck = countBy([...inboxStates.values()].filter((s) => s !== "done"), (s) => s);
if (Object.keys(stuck).length) fail(`inboxes not done: ${JSON.stringify(stuck)}`);
if (inboxStates.size < events.length) fail(`${events.length - inboxStates.size} inboxes never checked: the outbox never settled`);
const panics = runtimeLog.join("").split("\n").filter((l) => /panicked/.test(l)).length;
if (panics) fail(`${panics} "panicked" lines in the runtime's log`);
if (stats.refused.length) fail(`${stats.refused.length} deliveries refused, e.g. ${stats.refused[0]}`);
if (kills.length < KILLS) fail(`${kills.length} kills, ${KILLS} planned`);
if (drainKillMissed) fail("no call to the sink was in flight at the drain kill");

const calls = sink.calls.length;
const failedCalls = sink.calls.filter((c) => c.status === 500).length;
const repeatedKeys = new Set(repeats.map((r) => r.key)).size;
const table = [
  ["deliveries (first sends)", DELIVERIES],
  ["distinct events (Stripe / GitHub)", `${distinct} (${checkouts.length} / ${stars.length})`],
  ["duplicate copies (in 50-way storms)", `${DELIVERIES - distinct} (${STORMS * (STORM_COPIES - 1)})`],
  ["kills (SIGKILL of runtime) / rows sending at them", `${kills.length} / ${kills.reduce((n, k) => n + k.sending.size, 0)}`],
  ["deliveries with no reply / resends", `${stats.noReply} / ${stats.resends}`],
  ["replies", [...stats.statuses].sort((a, b) => b[1] - a[1]).map(([k, v]) => `${k} x${v}`).join(", ")],
  ["ledger rows / events", `${ledger.length} / ${distinct}`],
  ["double effects", doubleEffects],
  ["lost acks", lostAcks],
  ["side-effect keys / succeeded once", `${rows.length} / ${rows.length - neverSucceeded}`],
  ["sink calls (500s / repeats after success)", `${calls} (${failedCalls} / ${repeats.length})`],
  ["keys called again after success (max per key)", `${repeatedKeys} (${maxPerKey(repeats)})`],
  [
    "left received / pending / sending",
    `${inboxStates.size < events.length ? "unchecked" : stuck.received ?? 0} / ${outbox.pending ?? 0} / ${outbox.sending ?? 0}`,
  ],
  ["send phase", `${sendSeconds.toFixed(0)} s (${(stats.sent / sendSeconds).toFixed(0)} deliveries/s)`],
  ["time to settle after the last kill", `${settleSeconds.toFixed(0)} s`],
];
console.log(`\ncrash soak, seed ${SEED}\n`);
console.log("| measure | value |\n| --- | --- |");
for (const [k, v] of table) console.log(`| ${k} | ${v} |`);
if (violations.length) {
  console.log(`\nFAIL: ${violations.length} violations`);
  for (const v of violations) console.log(`- ${v}`);
  process.exit(1);
}
console.log("\nPASS: every event applied once, every side effect performed under its key, nothing stuck");

function countBy(items, key) {
  const out = {};
  for (const item of items) out[key(item)] = (out[key(item)] ?? 0) + 1;
  return out;
}
function maxPerKey(list) {
  const per = countBy(list, (r) => r.key);
  return Math.max(0, ...Object.values(per));
}

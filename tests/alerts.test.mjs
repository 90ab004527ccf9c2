// End to end: operators' alerts through the outbox itself (notify_operator)
// to a fake chat-webhook ALERT_URL — one per kind, source and time bucket,
// never one per event — for events that give up, dead side effects and a
// burst of refusals; and, with ALERT_URL unset, a log line only. On the
// sources wrangler.toml declares: the first, and a second where there is one.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import { FIRST, SOURCES, SOURCE_SECRETS, eventOf, forgedOf, send } from "./support/sources.mjs";
import { eventually, startWorker } from "./support/worker.mjs";

const SECOND = SOURCES[1]?.[0];

// A bucket of a day: tests that run across midnight UTC may see two.
const INTERVAL_MS = 24 * 60 * 60 * 1000;
const SETTINGS = {
  ...SOURCE_SECRETS,
  ALERT_URL: "http://alert.test/hook",
  ALERT_INTERVAL: "1d",
  ALERT_REFUSALS_PER_MINUTE: "5",
  STATS_FLUSH_MS: "0",
  EFFECT_MAX_ATTEMPTS: "1",
  NOTIFY_URL: "http://chat.test/hook",
  OUTBOX_RETRY_BASE_SECS: "1",
  OUTBOX_MAX_ATTEMPTS: "2",
};

const bucketsSince = (started) => Math.floor(Date.now() / INTERVAL_MS) - Math.floor(started / INTERVAL_MS) + 1;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const FAILS = { "x-test-fault": "effect-always-fails" };
/** The test side effect: one chat message per event. */
const WITH_SIDE_EFFECT = { "x-test-fault": "with-side-effect" };
const alertRowsOf = (w, source, text) =>
  w.db
    .prepare("SELECT * FROM outbox WHERE action = 'notify_operator' AND source = ? AND payload LIKE ?")
    .bind(source, `%${text}%`)
    .all()
    .then((r) => r.results);

describe("alerts with ALERT_URL set", () => {
  let w;
  const started = Date.now();
  before(async () => {
    w = await startWorker(SETTINGS);
  });
  after(() => w.dispose());

  const sendFirst = (event, headers) => send(w, FIRST, event, headers).then((r) => r.body);
  const alertRows = (source, text) => alertRowsOf(w, source, text);
  const alertCalls = (text) => w.target.to("http://alert.test/hook").filter((c) => JSON.parse(c.body).text.includes(text));

  test("ten events that give up: one alert, sent once under its key, naming the first", async () => {
    const events = Array.from({ length: 10 }, () => eventOf(FIRST));
    const ids = events.map((event) => event.id);
    const replies = await Promise.all(events.map((event) => sendFirst(event, FAILS)));
    assert.deepEqual([...new Set(replies.map((r) => r.outcome))], ["failed"]);
    assert.equal(await w.scalar("SELECT count(*) FROM failed_events WHERE source = ?", FIRST), 10);

    const rows = await eventually(async () => {
      const rows = await alertRows(FIRST, "gave up");
      return rows.length > 0 && rows.every((r) => r.status === "sent") && rows;
    }, 20_000, "the alert to be sent");
    assert.ok(rows.length <= bucketsSince(started), `one alert per bucket, not ${rows.length}`);
    const [row] = rows;
    assert.ok(ids.includes(row.event_id), "the alert names an event that gave up");
    const calls = alertCalls("gave up");
    assert.equal(calls.length, rows.length, "one call per alert");
    assert.equal(calls[0].idempotencyKey, row.idempotency_key);
    const [failed] = await w.db.prepare("SELECT * FROM failed_events WHERE source = ? AND event_id = ?").bind(FIRST, row.event_id).all().then((r) => r.results);
    assert.equal(JSON.parse(calls[0].body).text.split(". Replay or dismiss it")[0], `${FIRST}: event ${row.event_id} (${failed.type}) gave up: injected fault: before effect`);

    // The trend counted each once, when listed.
    const failedInTrend = () => w.scalar("SELECT sum(value) FROM delivery_trend WHERE source = ? AND outcome = 'failed'", FIRST);
    assert.equal(await failedInTrend(), 10);
    // A failed event's copy that fails again is still one failure: with the
    // bucket's alert gone, none is written again, nor counted.
    await w.db.prepare("DELETE FROM outbox WHERE action = 'notify_operator' AND source = ?").bind(FIRST).run();
    const again = await sendFirst(events[0], FAILS);
    assert.equal(again.outcome, "failed");
    await sleep(1_500);
    assert.equal((await alertRows(FIRST, "gave up")).length, 0);
    assert.equal(await failedInTrend(), 10);
  });

  test("a side effect that dies: one alert", async () => {
    w.target.answer = (call) => (call.url.startsWith("http://chat.test/") ? 503 : 200);
    const events = [eventOf(FIRST), eventOf(FIRST)];
    for (const event of events) await sendFirst(event, WITH_SIDE_EFFECT);
    await eventually(
      async () => (await w.scalar("SELECT count(*) FROM outbox WHERE event_id IN (?, ?) AND status = 'dead'", ...events.map((e) => e.id))) === 2,
      20_000,
      "two dead side effects",
    );
    const rows = await eventually(async () => {
      const rows = await alertRows(FIRST, "is dead after 2 attempts");
      return rows.length > 0 && rows.every((r) => r.status === "sent") && rows;
    }, 20_000, "the dead alert to be sent");
    assert.ok(rows.length <= bucketsSince(started));
    const text = JSON.parse(rows[0].payload).text;
    assert.ok(events.some((e) => text.startsWith(`${FIRST}: side effect notify_chat of event ${e.id} is dead after 2 attempts: target answered 503. Requeue it`)), text);
    w.target.answer = () => 200;
  });

  test("a burst of refusals past ALERT_REFUSALS_PER_MINUTE: one alert for that source only", async () => {
    // A secret rotated at the sender: every delivery is refused.
    const refused = await Promise.all(Array.from({ length: 12 }, () => sendFirst(forgedOf(FIRST))));
    assert.deepEqual([...new Set(refused.map((r) => r.error))], ["bad_signature"]);
    // Below the threshold for another source.
    if (SECOND) for (let i = 0; i < 3; i++) await send(w, SECOND, forgedOf(SECOND));
    const rows = await eventually(async () => {
      const rows = await alertRows(FIRST, "deliveries refused");
      return rows.length > 0 && rows.every((r) => r.status === "sent") && rows;
    }, 20_000, "the refusal alert to be sent");
    // 12 refusals may straddle a minute; each minute's alert shares the bucket's key.
    assert.ok(rows.length <= bucketsSince(started));
    assert.match(JSON.parse(rows[0].payload).text, new RegExp(`^${FIRST}: 5 or more deliveries refused`));
    assert.match(JSON.parse(rows[0].payload).text, / 5 or more deliveries refused in the minute from \d{4}-\d\d-\d\d \d\d:\d\d UTC/);
    assert.equal(rows[0].event_id, "(refusals)");
    assert.equal(alertCalls("deliveries refused").length, rows.length);
    // Requests to a source that does not exist (a scanner) are charted, never alerted.
    for (let i = 0; i < 8; i++) await w.post("/webhooks/no-such-source", "{}").then((r) => r.arrayBuffer());
    await sleep(1_000);
    if (SECOND) assert.equal((await alertRows(SECOND, "deliveries refused")).length, 0);
    assert.equal((await alertRows("(unknown)", "deliveries refused")).length, 0);
    assert.ok((await w.scalar("SELECT sum(value) FROM delivery_trend WHERE source = '(unknown)' AND outcome = 'refused'")) >= 8);
  });

  test("a burst, then silence: its counters and its refusal alert land within the flush interval", async () => {
    const FLUSH_MS = 3_000;
    const quiet = await startWorker({ ...SETTINGS, STATS_FLUSH_MS: String(FLUSH_MS) });
    try {
      const counter = (name) => quiet.scalar("SELECT coalesce(sum(value), 0) FROM source_counters WHERE source = ? AND counter = ?", FIRST, name);
      // The first delivery flushes at once (nothing flushed yet); the rest
      // of the burst arrives within the interval, and nothing follows it.
      const events = Array.from({ length: 20 }, () => eventOf(FIRST));
      for (const event of events) assert.equal((await send(quiet, FIRST, event)).status, 200);
      const forged = await Promise.all(Array.from({ length: 8 }, () => send(quiet, FIRST, forgedOf(FIRST))));
      assert.deepEqual([...new Set(forged.map((r) => r.status))], [401]);
      const silence = Date.now();
      await eventually(async () => (await counter("received")) === 28, FLUSH_MS + 3_000, "every delivery counted");
      assert.equal(await counter("rejected:bad_signature"), 8);
      assert.equal(await counter("processed"), 20);
      await eventually(async () => (await alertRowsOf(quiet, FIRST, "deliveries refused")).length > 0, 2_000, "the refusal alert");
      assert.ok(Date.now() - silence < FLUSH_MS + 5_000, `${Date.now() - silence} ms after the burst`);
    } finally {
      await quiet.dispose();
    }
  });

  test("a misconfigured alert setting refuses deliveries, naming it (ALERT_URL never quoted)", async () => {
    for (const [name, value, why] of [
      ["ALERT_INTERVAL", "often", /ALERT_INTERVAL must be a duration/],
      ["ALERT_REFUSALS_PER_MINUTE", "0", /ALERT_REFUSALS_PER_MINUTE must be 1 or more/],
      ["ALERT_URL", "hooks.chat.example/services/T0/B0/secret-token", /ALERT_URL must be an http\(s\) URL/],
    ]) {
      const bad = await startWorker({ ...SETTINGS, [name]: value });
      try {
        const event = eventOf(FIRST);
        const res = await bad.post(`/webhooks/${FIRST}`, event.body, event.headers);
        assert.equal(res.status, 500, name);
        assert.deepEqual(await res.json(), { error: "misconfigured" });
        assert.match(bad.logged("delivery")[0].detail, why);
        if (name === "ALERT_URL") assert.ok(!bad.logs.some((line) => line.includes("secret-token")), "a secret is not logged");
      } finally {
        await bad.dispose();
      }
    }
  });
});

describe("an alert whose target is down", () => {
  test("dies after its attempts, and is not alerted; ALERT_URL is never logged", async () => {
    const w = await startWorker(SETTINGS);
    try {
      w.target.answer = (call) => (call.url.startsWith("http://alert.test/") ? 500 : 200);
      await send(w, FIRST, eventOf(FIRST), FAILS);
      await eventually(async () => (await alertRowsOf(w, FIRST, "gave up")).some((r) => r.status === "dead"), 20_000, "the alert to die");
      await sleep(1_500);
      assert.equal((await alertRowsOf(w, FIRST, "is dead")).length, 0, "no alert about an alert");
      assert.ok(!w.logs.some((line) => line.includes("alert.test")), "ALERT_URL is a secret: never logged");
    } finally {
      await w.dispose();
    }
  });
});

describe("alerts with ALERT_URL unset", () => {
  test("an alert is a warn line, and its row is marked sent as logged only", async () => {
    const w = await startWorker({ ...SETTINGS, ALERT_URL: "" });
    try {
      const event = eventOf(FIRST);
      await send(w, FIRST, event, FAILS);
      const row = await eventually(
        () => w.db.prepare("SELECT * FROM outbox WHERE action = 'notify_operator' AND status = 'sent'").first(),
        20_000,
        "the logged alert",
      );
      assert.equal(row.note, "skipped: ALERT_URL is not set: logged only");
      const [line] = w.logged("operator_alert");
      assert.equal(line.idempotency_key, row.idempotency_key);
      assert.ok(line.detail.startsWith(`${FIRST}: event ${event.id} (`) && line.detail.includes(") gave up"), line.detail);
      assert.equal(w.target.to("http://alert.test/").length, 0);
    } finally {
      await w.dispose();
    }
  });
});

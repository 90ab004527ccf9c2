// End to end: operators' alerts through the outbox itself (notify_operator)
// to a fake chat-webhook ALERT_URL — one per kind, source and time bucket,
// never one per event — for events that give up, dead side effects and a
// burst of refusals; and, with ALERT_URL unset, a log line only.
// needs: stripe, github, demos
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import { SECRETS, eventually, startWorker } from "./support/worker.mjs";
import { checkoutCompleted, githubHeaders, starEvent, stripeHeaders, uniqueId } from "./support/sign.mjs";

// A bucket of a day: tests that run across midnight UTC may see two.
const INTERVAL_MS = 24 * 60 * 60 * 1000;
const SETTINGS = {
  ALERT_URL: "http://alert.test/hook",
  ALERT_INTERVAL: "1d",
  ALERT_REFUSALS_PER_MINUTE: "5",
  STATS_FLUSH_MS: "0",
  EFFECT_MAX_ATTEMPTS: "1",
  EMAIL_API_URL: "http://email.test",
  OUTBOX_RETRY_BASE_SECS: "1",
  OUTBOX_MAX_ATTEMPTS: "2",
};

const bucketsSince = (started) => Math.floor(Date.now() / INTERVAL_MS) - Math.floor(started / INTERVAL_MS) + 1;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

describe("alerts with ALERT_URL set", () => {
  let w;
  const started = Date.now();
  before(async () => {
    w = await startWorker(SETTINGS);
  });
  after(() => w.dispose());

  const sendStripe = (body, headers = {}, secret = "whsec_test_current") =>
    w.post("/webhooks/stripe", body, { ...stripeHeaders(body, secret), ...headers }).then((r) => r.json());
  const alertRows = (source, text) =>
    w.db
      .prepare("SELECT * FROM outbox WHERE action = 'notify_operator' AND source = ? AND payload LIKE ?")
      .bind(source, `%${text}%`)
      .all()
      .then((r) => r.results);
  const alertCalls = (text) => w.target.to("http://alert.test/hook").filter((c) => JSON.parse(c.body).text.includes(text));

  test("ten events that give up: one alert, sent once under its key, naming the first", async () => {
    const ids = Array.from({ length: 10 }, () => uniqueId("evt"));
    const replies = await Promise.all(
      ids.map((id) => sendStripe(checkoutCompleted({ id }), { "x-test-fault": "effect-always-fails" })),
    );
    assert.deepEqual([...new Set(replies.map((r) => r.outcome))], ["failed"]);
    assert.equal(await w.scalar("SELECT count(*) FROM failed_events WHERE source = 'stripe'"), 10);

    const rows = await eventually(async () => {
      const rows = await alertRows("stripe", "gave up");
      return rows.length > 0 && rows.every((r) => r.status === "sent") && rows;
    }, 20_000, "the alert to be sent");
    assert.ok(rows.length <= bucketsSince(started), `one alert per bucket, not ${rows.length}`);
    const [row] = rows;
    assert.ok(ids.includes(row.event_id), "the alert names an event that gave up");
    const calls = alertCalls("gave up");
    assert.equal(calls.length, rows.length, "one call per alert");
    assert.equal(calls[0].idempotencyKey, row.idempotency_key);
    assert.match(JSON.parse(calls[0].body).text, /^stripe: event evt_\w+ \(checkout\.session\.completed\) gave up: injected fault: before effect\. Replay or dismiss it/);

    // The trend counted each once, when listed.
    const failedInTrend = () => w.scalar("SELECT sum(value) FROM delivery_trend WHERE source = 'stripe' AND outcome = 'failed'");
    assert.equal(await failedInTrend(), 10);
    // A failed event's copy that fails again is still one failure: with the
    // bucket's alert gone, none is written again, nor counted.
    await w.db.prepare("DELETE FROM outbox WHERE action = 'notify_operator' AND source = 'stripe'").run();
    const again = await sendStripe(checkoutCompleted({ id: ids[0] }), { "x-test-fault": "effect-always-fails" });
    assert.equal(again.outcome, "failed");
    await sleep(1_500);
    assert.equal((await alertRows("stripe", "gave up")).length, 0);
    assert.equal(await failedInTrend(), 10);
  });

  test("a side effect that dies: one alert; an alert that dies is not alerted", async () => {
    w.target.answer = (call) => (call.url.startsWith("http://email.test/") ? 503 : 200);
    const ids = [uniqueId("evt"), uniqueId("evt")];
    for (const id of ids) await sendStripe(checkoutCompleted({ id }));
    await eventually(
      async () => (await w.scalar("SELECT count(*) FROM outbox WHERE event_id IN (?, ?) AND status = 'dead'", ...ids)) === 2,
      20_000,
      "two dead receipts",
    );
    const rows = await eventually(async () => {
      const rows = await alertRows("stripe", "is dead after 2 attempts");
      return rows.length > 0 && rows.every((r) => r.status === "sent") && rows;
    }, 20_000, "the dead alert to be sent");
    assert.ok(rows.length <= bucketsSince(started));
    assert.match(JSON.parse(rows[0].payload).text, /^stripe: side effect send_email of event evt_\w+ is dead after 2 attempts: target answered 503\. Requeue it/);

    // The alert target is down too: GitHub's first failure alert dies, and
    // no alert about it follows.
    w.target.answer = (call) => (call.url.startsWith("http://alert.test/") ? 500 : 200);
    const delivery = uniqueId("delivery");
    const body = starEvent({ repo: "octo/down" });
    await w.post("/webhooks/github", body, {
      ...githubHeaders(body, SECRETS.GITHUB_WEBHOOK_SECRET, { delivery, event: "star" }),
      "x-test-fault": "effect-always-fails",
    });
    await eventually(
      async () => (await alertRows("github", "gave up")).some((r) => r.status === "dead"),
      20_000,
      "github's alert to die",
    );
    await sleep(1_500);
    assert.equal((await alertRows("github", "is dead")).length, 0, "no alert about an alert");
    assert.ok(!w.logs.some((line) => line.includes("alert.test")), "ALERT_URL is a secret: never logged");
    w.target.answer = () => 200;
  });

  test("a burst of refusals past ALERT_REFUSALS_PER_MINUTE: one alert for that source only", async () => {
    const body = checkoutCompleted({ id: uniqueId("evt") });
    // A secret rotated at the sender: every delivery is refused.
    const refused = await Promise.all(Array.from({ length: 12 }, () => sendStripe(body, {}, "whsec_rotated_at_stripe")));
    assert.deepEqual([...new Set(refused.map((r) => r.error))], ["bad_signature"]);
    // Below the threshold for GitHub.
    for (let i = 0; i < 3; i++) {
      const star = starEvent({ repo: "octo/cat" });
      await w
        .post("/webhooks/github", star, githubHeaders(star, "gh_wrong_secret", { delivery: uniqueId("d"), event: "star" }))
        .then((r) => r.arrayBuffer());
    }
    const rows = await eventually(async () => {
      const rows = await alertRows("stripe", "deliveries refused");
      return rows.length > 0 && rows.every((r) => r.status === "sent") && rows;
    }, 20_000, "the refusal alert to be sent");
    // 12 refusals may straddle a minute; each minute's alert shares the bucket's key.
    assert.ok(rows.length <= bucketsSince(started));
    assert.match(JSON.parse(rows[0].payload).text, /^stripe: 5 or more deliveries refused in the minute from \d{4}-\d\d-\d\d \d\d:\d\d UTC/);
    assert.equal(rows[0].event_id, "(refusals)");
    assert.equal(alertCalls("deliveries refused").length, rows.length);
    // Requests to a source that does not exist (a scanner) are charted, never alerted.
    for (let i = 0; i < 8; i++) await w.post("/webhooks/no-such-source", "{}").then((r) => r.arrayBuffer());
    await sleep(1_000);
    assert.equal((await alertRows("github", "deliveries refused")).length, 0);
    assert.equal((await alertRows("(unknown)", "deliveries refused")).length, 0);
    assert.ok((await w.scalar("SELECT sum(value) FROM delivery_trend WHERE source = '(unknown)' AND outcome = 'refused'")) >= 8);
  });

  test("a misconfigured alert setting refuses deliveries, naming it (ALERT_URL never quoted)", async () => {
    for (const [name, value, why] of [
      ["ALERT_INTERVAL", "often", /ALERT_INTERVAL must be a duration/],
      ["ALERT_REFUSALS_PER_MINUTE", "0", /ALERT_REFUSALS_PER_MINUTE must be 1 or more/],
      ["ALERT_URL", "hooks.chat.example/services/T0/B0/secret-token", /ALERT_URL must be an http\(s\) URL/],
    ]) {
      const bad = await startWorker({ ...SETTINGS, [name]: value });
      try {
        const body = checkoutCompleted({ id: uniqueId("evt") });
        const res = await bad.post("/webhooks/stripe", body, stripeHeaders(body, "whsec_test_current"));
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

describe("alerts with ALERT_URL unset", () => {
  test("an alert is a warn line, and its row is marked sent as logged only", async () => {
    const w = await startWorker({ ...SETTINGS, ALERT_URL: "" });
    try {
      const id = uniqueId("evt");
      const body = checkoutCompleted({ id });
      await w.post("/webhooks/stripe", body, { ...stripeHeaders(body, "whsec_test_current"), "x-test-fault": "effect-always-fails" });
      const row = await eventually(
        () => w.db.prepare("SELECT * FROM outbox WHERE action = 'notify_operator' AND status = 'sent'").first(),
        20_000,
        "the logged alert",
      );
      assert.equal(row.note, "skipped: ALERT_URL is not set: logged only");
      const [line] = w.logged("operator_alert");
      assert.equal(line.idempotency_key, row.idempotency_key);
      assert.match(line.detail, new RegExp(`^stripe: event ${id} \\(checkout\\.session\\.completed\\) gave up`));
      assert.equal(w.target.to("http://alert.test/").length, 0);
    } finally {
      await w.dispose();
    }
  });
});

// End to end: side effects through the outbox, the real Queue and the cron
// relay, against a fake HTTP target that records every call.
// needs: stripe, github, demos
import { after, before, beforeEach, describe, test } from "node:test";
import assert from "node:assert/strict";

import { SECRETS, eventually, startWorker } from "./support/worker.mjs";
import { checkoutCompleted, githubHeaders, starEvent, stripeHeaders, uniqueId } from "./support/sign.mjs";

const TARGETS = {
  EMAIL_API_URL: "http://email.test",
  EMAIL_API_KEY: "re_test_key",
  NOTIFY_URL: "http://chat.test/hook",
  OUTBOX_RETRY_BASE_SECS: "1",
  OUTBOX_LEASE_MS: "1500",
  OUTBOX_RELAY_GRACE_MS: "0",
  OUTBOX_MAX_ATTEMPTS: "3",
};

let w;
before(async () => {
  w = await startWorker(TARGETS);
});
after(() => w.dispose());
beforeEach(() => {
  w.target.answer = () => 200;
});

const sendStripe = (body, headers = {}) =>
  w.post("/webhooks/stripe", body, { ...stripeHeaders(body, "whsec_test_current"), ...headers });
const sendStar = (body, headers = {}) =>
  w.post("/webhooks/github", body, {
    ...githubHeaders(body, SECRETS.GITHUB_WEBHOOK_SECRET, { delivery: uniqueId("delivery"), event: "star" }),
    ...headers,
  });

const rowsOf = (eventId) => w.db.prepare("SELECT * FROM outbox WHERE event_id = ? AND action != 'notify_operator'").bind(eventId).all().then((r) => r.results);
const rowOf = async (eventId) => (await rowsOf(eventId))[0];
const settled = (eventId, status, what) =>
  eventually(async () => {
    const row = await rowOf(eventId);
    return row?.status === status && row;
  }, 20_000, what ?? `outbox row of ${eventId} to be ${status}`);
const emailsTo = (to) => w.target.to("http://email.test/").filter((c) => JSON.parse(c.body).to[0] === to);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

describe("the outbox", () => {
  test("50 concurrent copies of one checkout: one outbox row, one idempotency key at the email API", async () => {
    const id = uniqueId("evt");
    const email = `${uniqueId("storm")}@example.com`;
    const body = checkoutCompleted({ id, email, amount: 4205 });
    const replies = await Promise.all(Array.from({ length: 50 }, () => sendStripe(body).then((r) => r.json())));
    assert.equal(replies.filter((r) => r.outcome === "processed").length, 1);

    const row = await settled(id, "sent");
    assert.equal((await rowsOf(id)).length, 1);
    assert.equal(row.action, "send_email");
    const calls = emailsTo(email);
    assert.ok(calls.length >= 1, "the email API was called");
    assert.deepEqual([...new Set(calls.map((c) => c.idempotencyKey))], [row.idempotency_key]);
    const call = calls[0];
    assert.equal(call.url, "http://email.test/emails");
    assert.equal(call.authorization, "Bearer re_test_key");
    const sent = JSON.parse(call.body);
    assert.equal(sent.from, "noreply@example.com");
    assert.match(sent.text, /42\.05 EUR/);
  });

  test("a target that fails twice then succeeds: sent after retries, the same key every time", async () => {
    const id = uniqueId("evt");
    const email = `${uniqueId("flaky")}@example.com`;
    let seen = 0;
    w.target.answer = (call) => (JSON.parse(call.body).to?.[0] === email && ++seen <= 2 ? 500 : 200);
    await sendStripe(checkoutCompleted({ id, email }));
    const row = await settled(id, "sent");
    assert.equal(row.attempts, 3);
    const calls = emailsTo(email);
    assert.equal(calls.length, 3);
    assert.deepEqual([...new Set(calls.map((c) => c.idempotencyKey))], [row.idempotency_key]);
  });

  test("a target that always fails: the row is dead after the attempt limit and the message is dead-lettered", async () => {
    const id = uniqueId("evt");
    const email = `${uniqueId("down")}@example.com`;
    w.target.answer = (call) => (call.url.startsWith("http://email.test/") && JSON.parse(call.body).to[0] === email ? 503 : 200);
    await sendStripe(checkoutCompleted({ id, email }));
    const row = await settled(id, "dead");
    assert.equal(row.attempts, 3);
    assert.equal(row.last_error, "target answered 503");
    assert.equal(emailsTo(email).length, 3);
    const dead = await eventually(
      () => w.target.to("http://dlq.test/").find((c) => JSON.parse(c.body).key === row.idempotency_key),
      10_000,
      "the dead-letter queue",
    );
    assert.ok(dead);
    await eventually(async () => (await rowOf(id)).dead_lettered_at > 0, 5_000, "the copy recorded as sent");

    // The requeue docs/side-effects.md describes, once the target is back: due again, the relay sends it.
    w.target.answer = () => 200;
    await w.db
      .prepare("UPDATE outbox SET status = 'pending', attempts = 0, next_attempt_at = 0 WHERE idempotency_key = ?")
      .bind(row.idempotency_key)
      .run();
    await (await w.mf.getWorker("webhooks")).scheduled({ cron: "* * * * *" });
    const requeued = await settled(id, "sent", "the requeued row to be sent");
    assert.equal(requeued.attempts, 1);
    assert.equal(emailsTo(email).length, 4);
  });

  test("a dead row whose dead-letter send fails: the relay sends its copy, once", async () => {
    const id = uniqueId("evt");
    const email = `${uniqueId("dlq")}@example.com`;
    w.target.answer = (call) => (call.url.startsWith("http://email.test/") && JSON.parse(call.body).to[0] === email ? 503 : 200);
    await sendStripe(checkoutCompleted({ id, email }), { "x-test-fault": "fail-dead-letter" });
    const row = await settled(id, "dead");
    await eventually(() => w.logged("outbox_dead_letter_failed").some((l) => l.idempotency_key === row.idempotency_key), 5_000, "the failed send");
    const copies = () => w.target.to("http://dlq.test/").filter((c) => JSON.parse(c.body).key === row.idempotency_key).length;
    await sleep(2_000); // longer than a queue batch: nothing reached the dead-letter queue
    assert.equal(copies(), 0);
    assert.equal((await rowOf(id)).dead_lettered_at, null);

    const worker = await w.mf.getWorker("webhooks");
    await worker.scheduled({ cron: "* * * * *" });
    await eventually(() => copies() === 1, 10_000, "the relay's copy");
    assert.ok((await rowOf(id)).dead_lettered_at > 0, "recorded as sent");
    // Recorded: the next runs send nothing again.
    await worker.scheduled({ cron: "* * * * *" });
    await worker.scheduled({ cron: "* * * * *" });
    await sleep(2_000);
    assert.equal(copies(), 1);
  });

  test("a queue send that fails after the commit: the cron relay sends it later, once", async () => {
    const id = uniqueId("evt");
    const email = `${uniqueId("relay")}@example.com`;
    const res = await sendStripe(checkoutCompleted({ id, email }), { "x-test-fault": "fail-enqueue" });
    assert.equal((await res.json()).outcome, "processed");
    await sleep(2_500); // longer than a queue batch: nothing was sent
    assert.equal((await rowOf(id)).status, "pending");
    assert.equal(emailsTo(email).length, 0);

    const worker = await w.mf.getWorker("webhooks");
    await worker.scheduled({ cron: "* * * * *" });
    const row = await settled(id, "sent");
    assert.equal(row.attempts, 1);
    await worker.scheduled({ cron: "* * * * *" });
    await sleep(2_500);
    assert.equal(emailsTo(email).length, 1);
  });

  test("a backlog of lost sends larger than a queue batch: one relay run sends all 250, in batches the queue accepts", async () => {
    const batch = uniqueId("backlog");
    const ids = Array.from({ length: 250 }, (_, i) => `${batch}_${i}`);
    for (let i = 0; i < ids.length; i += 25) {
      await Promise.all(
        ids.slice(i, i + 25).map((id) => sendStripe(checkoutCompleted({ id }), { "x-test-fault": "fail-enqueue" }).then((r) => r.arrayBuffer())),
      );
    }
    const rows = (status) =>
      w.db
        .prepare("SELECT count(*) AS n FROM outbox WHERE status = ? AND event_id LIKE ?")
        .bind(status, `${batch}_%`)
        .first("n");
    assert.equal(await rows("pending"), 250);

    const worker = await w.mf.getWorker("webhooks");
    await worker.scheduled({ cron: "* * * * *" });
    await eventually(async () => (await rows("sent")) === 250, 30_000, "all 250 rows sent after one relay run");
    assert.ok(w.logged("outbox_relay").at(-1).sent >= 250);
    const keys = await w.db
      .prepare("SELECT idempotency_key FROM outbox WHERE event_id LIKE ?")
      .bind(`${batch}_%`)
      .all();
    for (const { idempotency_key: key } of keys.results) {
      assert.equal(w.target.calls.filter((c) => c.idempotencyKey === key).length, 1, `one call under ${key}`);
    }
  });

  test("a duplicate queue message for a sent row is acknowledged without a call", async () => {
    const id = uniqueId("evt");
    const email = `${uniqueId("dup")}@example.com`;
    await sendStripe(checkoutCompleted({ id, email }));
    const row = await settled(id, "sent");
    const queue = await w.mf.getQueueProducer("OUTBOX", "webhooks");
    await queue.send(JSON.stringify({ key: row.idempotency_key }), { contentType: "text" });
    await queue.send(JSON.stringify({ key: row.idempotency_key }), { contentType: "text" });
    await sleep(2_500); // longer than a queue batch
    assert.equal(emailsTo(email).length, 1);
    const after = await rowOf(id);
    assert.equal(after.status, "sent");
    assert.equal(after.attempts, 1);
  });

  test("a crash after the call: the retry calls again with the same key", async () => {
    const id = uniqueId("delivery");
    const sender = uniqueId("mona");
    const body = starEvent({ repo: "octo/cat", sender });
    const headers = githubHeaders(body, SECRETS.GITHUB_WEBHOOK_SECRET, { delivery: id, event: "star" });
    await w.post("/webhooks/github", body, { ...headers, "x-test-fault": "crash-after-call" });
    const row = await settled(id, "sent");
    assert.equal(row.attempts, 2);
    const calls = w.target.to("http://chat.test/hook").filter((c) => c.body.includes(sender));
    assert.equal(calls.length, 2);
    assert.deepEqual(calls.map((c) => c.idempotencyKey), [row.idempotency_key, row.idempotency_key]);
    assert.deepEqual(JSON.parse(calls[0].body), { text: `${sender} starred octo/cat` });
  });
});

describe("an unconfigured target", () => {
  test("the action is marked sent as skipped, with no HTTP call", async () => {
    const bare = await startWorker({ ...TARGETS, NOTIFY_URL: "", EMAIL_API_URL: "" });
    try {
      const id = uniqueId("delivery");
      const body = starEvent({ repo: "octo/quiet" });
      await bare.post("/webhooks/github", body, githubHeaders(body, SECRETS.GITHUB_WEBHOOK_SECRET, { delivery: id, event: "star" }));
      const row = await eventually(async () => {
        const r = await bare.db.prepare("SELECT * FROM outbox WHERE event_id = ? AND action != 'notify_operator'").bind(id).first();
        return r?.status === "sent" && r;
      }, 20_000, "the skipped row");
      assert.equal(row.note, "skipped: NOTIFY_URL is not set");
      assert.equal(bare.target.calls.length, 0);
    } finally {
      await bare.dispose();
    }
  });
});

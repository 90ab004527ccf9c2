// End to end: the admin API's token, its views of an event, replay and requeue.
// needs: stripe, github, demos
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";

import { eventually, startWorker } from "./support/worker.mjs";
import { checkoutCompleted, stripeHeaders, uniqueId } from "./support/sign.mjs";

const TOKEN = "admin-e2e-token-0123456789abcdefgh";

let w;
before(async () => {
  w = await startWorker({
    ADMIN_TOKEN: TOKEN,
    EFFECT_MAX_ATTEMPTS: "2",
    EFFECT_RETRY_BASE_MS: "100",
    EMAIL_API_URL: "http://email.test",
    OUTBOX_MAX_ATTEMPTS: "2",
    OUTBOX_RETRY_BASE_SECS: "1",
    STATS_FLUSH_MS: "0",
  });
});
after(() => w.dispose());

const admin = (path, { method = "GET", token = TOKEN } = {}) =>
  w.mf.dispatchFetch(`http://localhost/admin/api/${path}`, {
    method,
    headers: token === null ? {} : { authorization: `Bearer ${token}` },
  });
const adminJson = async (path, options) => {
  const res = await admin(path, options);
  assert.equal(res.status, 200, `${path}: ${res.status}`);
  return res.json();
};
const send = (body, headers = {}) =>
  w.post("/webhooks/stripe", body, { ...stripeHeaders(body, "whsec_test_current"), ...headers }).then((r) => r.json());

describe("admin authentication", () => {
  test("no token configured: the admin API does not exist", async () => {
    const bare = await startWorker();
    try {
      const res = await bare.mf.dispatchFetch("http://localhost/admin/api/events", { headers: { authorization: "Bearer x" } });
      assert.equal(res.status, 404);
      await res.arrayBuffer();
    } finally {
      await bare.dispose();
    }
  });

  test("a missing or wrong token is 401; the right one is served", async () => {
    for (const token of [null, "wrong", `${TOKEN}x`, TOKEN.slice(0, -1)]) {
      const res = await admin("events", { token });
      assert.equal(res.status, 401, String(token));
      await res.arrayBuffer();
    }
    assert.ok(Array.isArray((await adminJson("events")).events));
  });
});

describe("admin views and actions", () => {
  test("an event: its ledger row, its side effects and its inbox, filtered lists", async () => {
    const id = uniqueId("evt");
    const body = checkoutCompleted({ id, email: `${uniqueId("a")}@example.com` });
    await send(body);
    await send(body);
    const detail = await eventually(async () => {
      const d = await adminJson(`events/stripe/${id}`);
      return d.records.outbox[0]?.status === "sent" && d;
    }, 15_000, "the receipt to be sent");
    assert.equal(detail.records.ledger.type, "checkout.session.completed");
    assert.equal(detail.records.failure, null);
    assert.equal(detail.records.outbox.length, 1);
    assert.equal(detail.inbox.state, "done");
    assert.equal(detail.inbox.deliveries, 2);
    // The delivery log: each copy by time, size and payload hash.
    const sha256 = createHash("sha256").update(body).digest("hex");
    assert.deepEqual(
      detail.inbox.delivery_log.map((a) => [a.kind, a.bytes, a.sha256]),
      [["first", Buffer.byteLength(body), sha256], ["duplicate", Buffer.byteLength(body), sha256]],
    );
    assert.ok(detail.inbox.delivery_log[0].at <= detail.inbox.delivery_log[1].at);

    const listed = await adminJson("events?source=stripe&type=checkout.session.completed&limit=500");
    assert.ok(listed.events.some((e) => e.event_id === id));
    assert.ok(listed.events.every((e) => e.source === "stripe" && e.type === "checkout.session.completed"));
    const none = await adminJson("events?source=github&type=checkout.session.completed");
    assert.deepEqual(none.events, []);
  });

  test("each delivery keeps how it was verified: the scheme, the secret's position, the signed time", async () => {
    const id = uniqueId("evt");
    const body = checkoutCompleted({ id });
    const signedAt = Math.floor(Date.now() / 1000) - 40;
    // The first signed with the previous secret of a rotation, 40 s ago;
    // its copy with the current one, now.
    await w.post("/webhooks/stripe", body, stripeHeaders(body, "whsec_test_previous", signedAt)).then((r) => r.json());
    await send(body);
    const { inbox } = await adminJson(`events/stripe/${id}`);
    const scheme = "Stripe-Signature v1: HMAC-SHA256 of t.body";
    assert.deepEqual(inbox.verified, { scheme, secret: 1, signed_at: signedAt });
    assert.deepEqual(inbox.delivery_log[0].verified, inbox.verified);
    const copy = inbox.delivery_log[1].verified;
    assert.equal(copy.secret, 0);
    assert.ok(Math.abs(copy.signed_at - Date.now() / 1000) < 30, "the copy's own signed time");
  });

  test("replaying a done event is a no-op, and says so", async () => {
    const id = uniqueId("evt");
    const session = uniqueId("cs");
    await send(checkoutCompleted({ id, session }));
    const before = await w.scalar("SELECT updated_at FROM orders WHERE checkout_session_id = ?", session);
    const replayed = await adminJson(`events/stripe/${id}/replay`, { method: "POST" });
    assert.deepEqual(replayed, { outcome: "duplicate", noop: true });
    assert.equal(await w.scalar("SELECT count(*) FROM processed_events WHERE event_id = ?", id), 1);
    assert.equal(await w.scalar("SELECT updated_at FROM orders WHERE checkout_session_id = ?", session), before);
    const unknown = await admin(`events/stripe/${uniqueId("never")}/replay`, { method: "POST" });
    assert.equal(unknown.status, 404);
    await unknown.arrayBuffer();
  });

  test("a failed event is listed, and a replay applies it once", async () => {
    const id = uniqueId("evt");
    const session = uniqueId("cs");
    await send(checkoutCompleted({ id, session }), { "x-test-fault": "effect-always-fails" });
    const failed = await eventually(async () => {
      const list = await adminJson("events?status=failed&source=stripe&limit=500");
      return list.events.find((e) => e.event_id === id);
    }, 10_000, "the failed event");
    assert.equal(failed.last_error, "injected fault: before effect");
    assert.equal(await w.scalar("SELECT count(*) FROM orders WHERE checkout_session_id = ?", session), 0);

    assert.deepEqual(await adminJson(`events/stripe/${id}/replay`, { method: "POST" }), { outcome: "processed", noop: false });
    assert.equal(await w.scalar("SELECT count(*) FROM orders WHERE checkout_session_id = ?", session), 1);
    const after = await adminJson("events?status=failed&source=stripe&limit=500");
    assert.ok(!after.events.some((e) => e.event_id === id));
    assert.equal((await adminJson(`events/stripe/${id}`)).inbox.state, "done");
    assert.deepEqual(await adminJson(`events/stripe/${id}/replay`, { method: "POST" }), { outcome: "duplicate", noop: true });
    assert.equal(await w.scalar("SELECT count(*) FROM orders WHERE checkout_session_id = ?", session), 1);
  });

  test("per-source counters: received, processed, duplicates, rejections by reason; exact counts from the tables", async () => {
    const counter = (stats, source, name) =>
      stats.counters.find((c) => c.source === source && c.counter === name)?.value ?? 0;
    const before = (await adminJson("stats")).stats;
    const body = checkoutCompleted();
    await send(body);
    await send(body);
    await w.post("/webhooks/stripe", body, stripeHeaders(body, "whsec_wrong")).then((r) => r.arrayBuffer());
    await w.post("/webhooks/no-such-source", "{}").then((r) => r.arrayBuffer());
    const after = await eventually(async () => {
      const stats = (await adminJson("stats")).stats;
      return counter(stats, "stripe", "received") - counter(before, "stripe", "received") === 3 && stats;
    }, 10_000, "the counters to be flushed");
    assert.equal(counter(after, "stripe", "processed") - counter(before, "stripe", "processed"), 1);
    assert.equal(counter(after, "stripe", "duplicate") - counter(before, "stripe", "duplicate"), 1);
    assert.equal(counter(after, "stripe", "rejected:bad_signature") - counter(before, "stripe", "rejected:bad_signature"), 1);
    assert.equal(counter(after, "(unknown)", "rejected:unknown_source") - counter(before, "(unknown)", "rejected:unknown_source"), 1);
    assert.ok(!after.counters.some((c) => c.source === "no-such-source"), "unknown names are not stored");
    const processed = after.processed.find((p) => p.source === "stripe").events;
    assert.equal(processed, await w.scalar("SELECT count(*) FROM processed_events WHERE source = 'stripe'"));
  });

  test("a dead outbox row is listed, and a requeue performs it once", async () => {
    const id = uniqueId("evt");
    const email = `${uniqueId("dead")}@example.com`;
    let down = true;
    w.target.answer = (call) => (down && call.body.includes(email) ? 503 : 200);
    try {
      await send(checkoutCompleted({ id, email }));
      const dead = await eventually(async () => {
        const list = await adminJson("outbox?status=dead&limit=500");
        return list.outbox.find((r) => r.event_id === id);
      }, 20_000, "the dead row");
      assert.equal(dead.attempts, 2);
      const calls = () => w.target.to("http://email.test/").filter((c) => c.body.includes(email));
      assert.equal(calls().length, 2);

      down = false;
      assert.deepEqual(await adminJson(`outbox/${dead.idempotency_key}/requeue`, { method: "POST" }), { requeued: true });
      await eventually(async () => (await w.scalar("SELECT status FROM outbox WHERE idempotency_key = ?", dead.idempotency_key)) === "sent", 15_000, "the requeued row to be sent");
      await new Promise((r) => setTimeout(r, 1_500));
      assert.equal(calls().length, 3);
      assert.deepEqual([...new Set(calls().map((c) => c.idempotencyKey))], [dead.idempotency_key]);
      const again = await admin(`outbox/${dead.idempotency_key}/requeue`, { method: "POST" });
      assert.equal(again.status, 404, "only a dead row can be requeued");
      await again.arrayBuffer();
    } finally {
      w.target.answer = () => 200;
    }
  });
});

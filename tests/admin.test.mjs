// End to end: the admin API's token, its views of an event, replay and
// requeue, on the first source wrangler.toml declares (a test side effect
// stands in for an effect's own).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";

import { FIRST, SOURCE_SECRETS, eventOf, forgedOf, send as sendTo } from "./support/sources.mjs";
import { eventually, startWorker } from "./support/worker.mjs";
// needs: stripe
import { stripeHeaders, uniqueId } from "./support/sign.mjs";

const TOKEN = "admin-e2e-token-0123456789abcdefgh";
// needs: stripe
const STRIPE_PREVIOUS = "whsec_e2e_stripe_previous";

let w;
before(async () => {
  w = await startWorker({
    ...SOURCE_SECRETS,
    // needs: stripe
    STRIPE_WEBHOOK_SECRET: `${SOURCE_SECRETS.STRIPE_WEBHOOK_SECRET}, ${STRIPE_PREVIOUS}`,
    ADMIN_TOKEN: TOKEN,
    EFFECT_MAX_ATTEMPTS: "2",
    EFFECT_RETRY_BASE_MS: "100",
    NOTIFY_URL: "http://chat.test/hook",
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
const send = (event, headers) => sendTo(w, FIRST, event, headers).then((r) => r.body);
/** The test side effect: one chat message per event. */
const WITH_SIDE_EFFECT = { "x-test-fault": "with-side-effect" };
const ledger = (id) => w.db.prepare("SELECT * FROM processed_events WHERE source = ? AND event_id = ?").bind(FIRST, id).all().then((r) => r.results);

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
    const event = eventOf(FIRST);
    await send(event, WITH_SIDE_EFFECT);
    await send(event);
    const detail = await eventually(async () => {
      const d = await adminJson(`events/${FIRST}/${encodeURIComponent(event.id)}`);
      return d.records.outbox[0]?.status === "sent" && d;
    }, 15_000, "the side effect to be sent");
    const [row] = await ledger(event.id);
    assert.equal(detail.records.ledger.type, row.type);
    assert.equal(detail.records.failure, null);
    assert.equal(detail.records.outbox.length, 1);
    assert.equal(detail.inbox.state, "done");
    assert.equal(detail.inbox.deliveries, 2);
    // The delivery log: each copy by time, size and payload hash.
    const sha256 = createHash("sha256").update(event.body).digest("hex");
    const bytes = Buffer.byteLength(event.body);
    assert.deepEqual(
      detail.inbox.delivery_log.map((a) => [a.kind, a.bytes, a.sha256]),
      [["first", bytes, sha256], ["duplicate", bytes, sha256]],
    );
    assert.ok(detail.inbox.delivery_log[0].at <= detail.inbox.delivery_log[1].at);

    const listed = await adminJson(`events?source=${FIRST}&type=${encodeURIComponent(row.type)}&limit=500`);
    assert.ok(listed.events.some((e) => e.event_id === event.id));
    assert.ok(listed.events.every((e) => e.source === FIRST && e.type === row.type));
    const none = await adminJson(`events?source=no-such-source&type=${encodeURIComponent(row.type)}`);
    assert.deepEqual(none.events, []);
  });

  // needs: stripe
  test("each delivery keeps how it was verified: the scheme, the secret's position, the signed time", async () => {
    const id = uniqueId("evt");
    const signedAt = Math.floor(Date.now() / 1000) - 40;
    const body = JSON.stringify({ id, object: "event", type: "invoice.created", created: signedAt, data: { object: {} } });
    // The first signed with the previous secret of a rotation, 40 s ago;
    // its copy with the current one, now.
    await w.post("/webhooks/stripe", body, stripeHeaders(body, STRIPE_PREVIOUS, signedAt)).then((r) => r.json());
    await w.post("/webhooks/stripe", body, stripeHeaders(body, SOURCE_SECRETS.STRIPE_WEBHOOK_SECRET)).then((r) => r.json());
    const { inbox } = await adminJson(`events/stripe/${id}`);
    const scheme = "Stripe-Signature v1: HMAC-SHA256 of t.body";
    assert.deepEqual(inbox.verified, { scheme, secret: 1, signed_at: signedAt });
    assert.deepEqual(inbox.delivery_log[0].verified, inbox.verified);
    const copy = inbox.delivery_log[1].verified;
    assert.equal(copy.secret, 0);
    assert.ok(Math.abs(copy.signed_at - Date.now() / 1000) < 30, "the copy's own signed time");
  });

  // needs: stripe
  test("one inbox per (source, id): an id holding ':' is reached under its own name only", async () => {
    const [head, tail] = [uniqueId("evt"), "tail"];
    const id = `${head}:${tail}`;
    const body = JSON.stringify({ id, object: "event", type: "invoice.created", created: Math.floor(Date.now() / 1000), data: { object: {} } });
    const sent = await w.post("/webhooks/stripe", body, stripeHeaders(body, SOURCE_SECRETS.STRIPE_WEBHOOK_SECRET)).then((r) => r.json());
    assert.equal(sent.key, `stripe:${id}`);
    assert.equal((await adminJson(`events/stripe/${encodeURIComponent(id)}`)).inbox.state, "done", "its own spelling");
    // The same key spelled as source `stripe:<head>` and id `tail`: no such source, no inbox.
    const other = `events/${encodeURIComponent(`stripe:${head}`)}/${tail}`;
    const detail = await admin(other);
    const inbox = detail.status === 200 ? (await detail.json()).inbox : (await detail.arrayBuffer(), null);
    assert.equal(inbox ?? null, null, "the other spelling reaches no inbox");
    for (const action of ["replay", "dismiss"]) {
      const res = await admin(`${other}/${action}`, { method: "POST" });
      assert.equal(res.status, 404, action);
      await res.arrayBuffer();
    }
  });

  test("replaying a done event is a no-op, and says so", async () => {
    const event = eventOf(FIRST);
    await send(event, WITH_SIDE_EFFECT);
    const before = await ledger(event.id);
    const replayed = await adminJson(`events/${FIRST}/${encodeURIComponent(event.id)}/replay`, { method: "POST" });
    assert.deepEqual(replayed, { outcome: "duplicate", noop: true });
    assert.deepEqual(await ledger(event.id), before);
    assert.equal(await w.scalar("SELECT count(*) FROM outbox WHERE event_id = ?", event.id), 1);
    const unknown = await admin(`events/${FIRST}/never-seen-${Date.now()}/replay`, { method: "POST" });
    assert.equal(unknown.status, 404);
    await unknown.arrayBuffer();
  });

  test("a failed event is listed, and a replay applies it once", async () => {
    const event = eventOf(FIRST);
    const path = `events/${FIRST}/${encodeURIComponent(event.id)}`;
    await send(event, { "x-test-fault": "effect-always-fails" });
    const failed = await eventually(async () => {
      const list = await adminJson(`events?status=failed&source=${FIRST}&limit=500`);
      return list.events.find((e) => e.event_id === event.id);
    }, 10_000, "the failed event");
    assert.equal(failed.last_error, "injected fault: before effect");
    assert.equal((await ledger(event.id)).length, 0);

    assert.deepEqual(await adminJson(`${path}/replay`, { method: "POST" }), { outcome: "processed", noop: false });
    assert.equal((await ledger(event.id)).length, 1);
    const after = await adminJson(`events?status=failed&source=${FIRST}&limit=500`);
    assert.ok(!after.events.some((e) => e.event_id === event.id));
    assert.equal((await adminJson(path)).inbox.state, "done");
    assert.deepEqual(await adminJson(`${path}/replay`, { method: "POST" }), { outcome: "duplicate", noop: true });
    assert.equal((await ledger(event.id)).length, 1);
  });

  test("per-source counters: received, processed, duplicates, rejections by reason; exact counts from the tables", async () => {
    const counter = (stats, source, name) =>
      stats.counters.find((c) => c.source === source && c.counter === name)?.value ?? 0;
    const before = (await adminJson("stats")).stats;
    const event = eventOf(FIRST);
    await send(event);
    await send(event);
    await send(forgedOf(FIRST));
    await w.post("/webhooks/no-such-source", "{}").then((r) => r.arrayBuffer());
    const after = await eventually(async () => {
      const stats = (await adminJson("stats")).stats;
      return counter(stats, FIRST, "received") - counter(before, FIRST, "received") === 3 && stats;
    }, 10_000, "the counters to be flushed");
    assert.equal(counter(after, FIRST, "processed") - counter(before, FIRST, "processed"), 1);
    assert.equal(counter(after, FIRST, "duplicate") - counter(before, FIRST, "duplicate"), 1);
    assert.equal(counter(after, FIRST, "rejected:bad_signature") - counter(before, FIRST, "rejected:bad_signature"), 1);
    assert.equal(counter(after, "(unknown)", "rejected:unknown_source") - counter(before, "(unknown)", "rejected:unknown_source"), 1);
    assert.ok(!after.counters.some((c) => c.source === "no-such-source"), "unknown names are not stored");
    const processed = after.processed.find((p) => p.source === FIRST).events;
    assert.equal(processed, await w.scalar("SELECT count(*) FROM processed_events WHERE source = ?", FIRST));
  });

  test("a dead outbox row is listed, and a requeue performs it once", async () => {
    const event = eventOf(FIRST);
    let down = true;
    w.target.answer = (call) => (down && call.url.startsWith("http://chat.test/") && call.body.includes(event.id) ? 503 : 200);
    try {
      await send(event, WITH_SIDE_EFFECT);
      const dead = await eventually(async () => {
        const list = await adminJson("outbox?status=dead&limit=500");
        return list.outbox.find((r) => r.event_id === event.id);
      }, 20_000, "the dead row");
      assert.equal(dead.attempts, 2);
      const calls = () => w.target.to("http://chat.test/").filter((c) => c.body.includes(event.id));
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

// End to end: the built worker in workerd, real Durable Objects, real D1.
// needs: stripe, github, demos
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import { SECRETS, eventually, startWorker } from "./support/worker.mjs";
import {
  checkoutCompleted,
  githubHeaders,
  paymentIntentSucceeded,
  starEvent,
  stripeHeaders,
  uniqueId,
} from "./support/sign.mjs";

const STRIPE = "whsec_test_current";
const STRIPE_PREVIOUS = "whsec_test_previous";
const GITHUB = SECRETS.GITHUB_WEBHOOK_SECRET;

let w;
before(async () => {
  w = await startWorker();
});
after(() => w.dispose());

const sendStripe = (body, secret = STRIPE, t) => w.post("/webhooks/stripe", body, stripeHeaders(body, secret, t));
const sendStar = (body, delivery, headers = {}) =>
  w.post("/webhooks/github", body, { ...githubHeaders(body, GITHUB, { delivery, event: "star" }), ...headers });

async function reply(res) {
  return { status: res.status, body: await res.json() };
}

const ledgerRows = (source, id) =>
  w.scalar("SELECT count(*) FROM processed_events WHERE source = ? AND event_id = ?", source, id);
const totalLedgerRows = () => w.scalar("SELECT count(*) FROM processed_events");
const stars = (repo) => w.scalar("SELECT stars FROM repo_stars WHERE repo = ?", repo);

describe("a single delivery", () => {
  test("is processed once and recorded in the ledger with its effect", async () => {
    const session = uniqueId("cs");
    const body = checkoutCompleted({ id: "evt_single", session, paymentIntent: "pi_single" });
    const first = await reply(await sendStripe(body));
    assert.deepEqual(first, { status: 200, body: { outcome: "processed", key: "stripe:evt_single" } });

    assert.equal(await ledgerRows("stripe", "evt_single"), 1);
    const order = await w.db.prepare("SELECT * FROM orders WHERE checkout_session_id = ?").bind(session).first();
    assert.equal(order.status, "paid");
    assert.equal(order.amount, 2000);
    assert.equal(order.currency, "eur");
    assert.equal(order.customer_email, "buyer@example.com");
    assert.equal(order.payment_intent_id, "pi_single");
    const ledger = await w.db.prepare("SELECT * FROM processed_events WHERE event_id = 'evt_single'").first();
    assert.equal(ledger.type, "checkout.session.completed");
    assert.ok(ledger.processed_at >= ledger.received_at);

    const state = await w.inboxState("stripe:evt_single");
    assert.equal(state.state, "done");
    assert.equal(state.deliveries, 1);
  });

  test("once the effect commits, the next wake-up is the retention deadline, not the retry", async () => {
    // A retry delay of a minute: the alarm armed before the attempt cannot
    // have fired (and re-armed itself) by the time the state is read.
    const slow = await startWorker({ EFFECT_RETRY_BASE_MS: "60000" });
    try {
      const body = checkoutCompleted({ id: uniqueId("evt"), session: uniqueId("cs") });
      const res = await slow.post("/webhooks/stripe", body, stripeHeaders(body, STRIPE));
      assert.equal((await res.json()).outcome, "processed");
      const state = await slow.inboxState(`stripe:${JSON.parse(body).id}`);
      const retention = 30 * 24 * 60 * 60 * 1000;
      assert.ok(Math.abs(state.next_wake_up_at - (state.done_at + retention)) < 60_000, JSON.stringify(state));
    } finally {
      await slow.dispose();
    }
  });

  test("replayed sequentially is a duplicate and changes nothing", async () => {
    const id = uniqueId("evt");
    const session = uniqueId("cs");
    const body = checkoutCompleted({ id, session });
    assert.equal((await reply(await sendStripe(body))).body.outcome, "processed");
    const before = await w.scalar("SELECT updated_at FROM orders WHERE checkout_session_id = ?", session);
    for (let i = 0; i < 3; i++) {
      // Stripe re-signs each retry with a fresh timestamp: the same event, new signature.
      const again = await reply(await sendStripe(body, STRIPE, Math.floor(Date.now() / 1000) - i));
      assert.deepEqual(again, { status: 200, body: { outcome: "duplicate", key: `stripe:${id}` } });
    }
    assert.equal(await ledgerRows("stripe", id), 1);
    assert.equal(await w.scalar("SELECT updated_at FROM orders WHERE checkout_session_id = ?", session), before);
    assert.equal((await w.inboxState(`stripe:${id}`)).deliveries, 4);
  });

  test("a payment_intent.succeeded for the same purchase does not create a second order", async () => {
    const session = uniqueId("cs");
    const paymentIntent = uniqueId("pi");
    await sendStripe(checkoutCompleted({ session, paymentIntent }));
    const res = await reply(await sendStripe(paymentIntentSucceeded({ paymentIntent })));
    assert.equal(res.body.outcome, "processed");
    assert.equal(await w.scalar("SELECT count(*) FROM orders WHERE payment_intent_id = ?", paymentIntent), 1);
    // Arriving first, it creates nothing either; the checkout event does.
    const lonely = uniqueId("pi");
    await sendStripe(paymentIntentSucceeded({ paymentIntent: lonely }));
    assert.equal(await w.scalar("SELECT count(*) FROM orders WHERE payment_intent_id = ?", lonely), 0);
  });

  test("any other event type writes the ledger row only", async () => {
    const body = JSON.stringify({ id: uniqueId("evt"), type: "invoice.created", created: 1, data: { object: {} } });
    const res = await reply(await sendStripe(body));
    assert.equal(res.body.outcome, "processed");
    assert.equal(await ledgerRows("stripe", JSON.parse(body).id), 1);
  });

  test("a secret being rotated out still verifies", async () => {
    const body = checkoutCompleted();
    const res = await reply(await sendStripe(body, STRIPE_PREVIOUS));
    assert.equal(res.body.outcome, "processed");
  });
});

describe("concurrent copies", () => {
  test("50 copies of one checkout at once: one ledger row, one order", async () => {
    const id = uniqueId("evt");
    const session = uniqueId("cs");
    const body = checkoutCompleted({ id, session });
    const replies = await Promise.all(Array.from({ length: 50 }, () => sendStripe(body).then(reply)));
    assert.ok(replies.every((r) => r.status === 200), JSON.stringify(replies.filter((r) => r.status !== 200)));
    const outcomes = replies.map((r) => r.body.outcome);
    assert.equal(outcomes.filter((o) => o === "processed").length, 1, outcomes.join());
    assert.equal(outcomes.filter((o) => o === "duplicate").length, 49);
    assert.equal(await ledgerRows("stripe", id), 1);
    assert.equal(await w.scalar("SELECT count(*) FROM orders WHERE checkout_session_id = ?", session), 1);
    const state = await w.inboxState(`stripe:${id}`);
    assert.equal(state.deliveries, 50);
    // The log is in the inbox's order: each delivery timed when it met it.
    const times = state.delivery_log.map((d) => d.at);
    assert.deepEqual(times, [...times].sort((a, b) => a - b), "arrival times in log order");
  });

  test("50 copies of one star at once move the counter by exactly one", async () => {
    const repo = `octo/${uniqueId("repo")}`;
    await sendStar(starEvent({ repo }), uniqueId("seed"));
    assert.equal(await stars(repo), 1);
    const delivery = uniqueId("delivery");
    const body = starEvent({ repo });
    const replies = await Promise.all(Array.from({ length: 50 }, () => sendStar(body, delivery).then(reply)));
    assert.ok(replies.every((r) => r.status === 200));
    assert.equal(replies.filter((r) => r.body.outcome === "processed").length, 1);
    assert.equal(await stars(repo), 2);
    assert.equal(await ledgerRows("github", delivery), 1);
  });

  test("50 distinct events at once: 50 effects", async () => {
    const repo = `octo/${uniqueId("repo")}`;
    const before = await totalLedgerRows();
    const replies = await Promise.all(
      Array.from({ length: 50 }, () => sendStar(starEvent({ repo }), uniqueId("delivery")).then(reply)),
    );
    assert.ok(replies.every((r) => r.status === 200 && r.body.outcome === "processed"));
    assert.equal(await stars(repo), 50);
    assert.equal((await totalLedgerRows()) - before, 50);
  });

  test("star deleted moves the counter back", async () => {
    const repo = `octo/${uniqueId("repo")}`;
    await sendStar(starEvent({ repo }), uniqueId("d"));
    await sendStar(starEvent({ repo, action: "deleted" }), uniqueId("d"));
    assert.equal(await stars(repo), 0);
  });
});

describe("faults between claim and effect", () => {
  test("a failure before the effect is retried by the alarm: exactly one effect", async () => {
    const id = uniqueId("evt");
    const session = uniqueId("cs");
    const body = checkoutCompleted({ id, session });
    const res = await reply(await w.post("/webhooks/stripe", body, { ...stripeHeaders(body, STRIPE), "x-test-fault": "fail-before-effect" }));
    assert.deepEqual(res, { status: 200, body: { outcome: "accepted", key: `stripe:${id}` } });
    assert.equal(await ledgerRows("stripe", id), 0, "the injected fault must stop the first attempt");
    // A copy arriving meanwhile is a duplicate of the held event.
    assert.equal((await reply(await sendStripe(body))).body.outcome, "duplicate");

    const state = await eventually(async () => {
      const s = await w.inboxState(`stripe:${id}`);
      return s.state === "done" && s;
    }, 10_000, "the alarm retry");
    assert.equal(state.effect_attempts, 2);
    assert.equal(await ledgerRows("stripe", id), 1);
    assert.equal(await w.scalar("SELECT count(*) FROM orders WHERE checkout_session_id = ?", session), 1);
  });

  test("a failure after the effect committed: the retry finds the ledger row, no second effect", async () => {
    const repo = `octo/${uniqueId("repo")}`;
    const delivery = uniqueId("delivery");
    const res = await reply(await sendStar(starEvent({ repo }), delivery, { "x-test-fault": "fail-after-effect" }));
    assert.equal(res.body.outcome, "accepted");
    assert.equal(await stars(repo), 1, "the first attempt committed before failing");
    await eventually(async () => (await w.inboxState(`github:${delivery}`)).state === "done", 10_000, "the alarm retry");
    assert.equal(await stars(repo), 1);
    assert.equal(await ledgerRows("github", delivery), 1);
  });
});

describe("an effect that never succeeds", () => {
  test("is retried with backoff until the budget is spent, then marked failed, with no effect", async () => {
    const fragile = await startWorker({ EFFECT_MAX_ATTEMPTS: "3", EFFECT_RETRY_BASE_MS: "100" });
    try {
      const body = checkoutCompleted();
      const id = JSON.parse(body).id;
      const send = (headers = {}) =>
        fragile.post("/webhooks/stripe", body, { ...stripeHeaders(body, STRIPE), ...headers }).then((r) => r.json());
      assert.equal((await send({ "x-test-fault": "effect-always-fails" })).outcome, "accepted");
      const state = await eventually(async () => {
        const s = await fragile.inboxState(`stripe:${id}`);
        return s.state === "failed" && s;
      }, 10_000, "the event to be marked failed");
      assert.equal(state.effect_attempts, 3);
      assert.equal(state.last_error, "injected fault: before effect");
      assert.equal(await fragile.scalar("SELECT count(*) FROM processed_events WHERE event_id = ?", id), 0);
      // A later copy reopens it for one more attempt, which fails too: the
      // reply says so, and the event waits for an operator.
      assert.equal((await send()).outcome, "failed");
      const after = await fragile.inboxState(`stripe:${id}`);
      assert.equal(after.state, "failed");
      assert.equal(after.effect_attempts, 4);
      assert.equal(await fragile.scalar("SELECT count(*) FROM processed_events WHERE event_id = ?", id), 0);
    } finally {
      await fragile.dispose();
    }
  });
});

describe("bad input is refused with a 4xx and writes nothing", () => {
  async function refused(res, status, error) {
    assert.deepEqual(await reply(res), { status, body: { error } });
  }

  test("bad signatures, stale and future timestamps, missing headers", async () => {
    const before = await totalLedgerRows();
    const body = checkoutCompleted();
    const now = Math.floor(Date.now() / 1000);
    await refused(await sendStripe(body, "whsec_wrong"), 401, "bad_signature");
    await refused(await sendStripe(body, STRIPE, now - 301), 401, "timestamp_outside_window");
    // Just past the window ahead: a few seconds of margin, since the
    // worker's clock may have passed a second boundary since `now`.
    await refused(await sendStripe(body, STRIPE, now + 305), 401, "timestamp_outside_window");
    await refused(await w.post("/webhooks/stripe", body, { "content-type": "application/json" }), 401, "missing_signature");
    await refused(await w.post("/webhooks/stripe", body, { "stripe-signature": "nonsense" }), 401, "malformed_signature");
    const tampered = stripeHeaders(body, STRIPE);
    await refused(await w.post("/webhooks/stripe", body.replace("2000", "1"), tampered), 401, "bad_signature");
    const star = starEvent({ repo: "octo/never" });
    await refused(
      await w.post("/webhooks/github", star, githubHeaders(star, "wrong", { delivery: uniqueId("d"), event: "star" })),
      401,
      "bad_signature",
    );
    assert.equal(await totalLedgerRows(), before);
    assert.equal(await stars("octo/never"), null);
    assert.equal(await w.inboxState(`stripe:${JSON.parse(body).id}`), null, "no inbox may hold a refused event");
  });

  test("malformed bodies and missing ids are 400", async () => {
    const before = await totalLedgerRows();
    await refused(await sendStripe("not json"), 400, "malformed_body");
    await refused(await sendStripe(JSON.stringify({ type: "x" })), 400, "missing_event_id");
    const noSession = JSON.stringify({ id: uniqueId("evt"), type: "checkout.session.completed", created: 1, data: { object: {} } });
    await refused(await sendStripe(noSession), 400, "malformed_body");
    const longType = JSON.stringify({ id: uniqueId("evt"), type: "t".repeat(257), created: 1, data: { object: {} } });
    await refused(await sendStripe(longType), 400, "malformed_body");
    assert.equal(await w.inboxState(`stripe:${JSON.parse(longType).id}`), null);
    const star = starEvent({ repo: "octo/x" });
    const headers = githubHeaders(star, GITHUB, { delivery: "x", event: "star" });
    delete headers["x-github-delivery"];
    await refused(await w.post("/webhooks/github", star, headers), 400, "missing_event_id");
    assert.equal(await totalLedgerRows(), before);
  });

  test("an event whose effect cannot be planned is refused by its inbox, every concurrent copy, and nothing is stored", async () => {
    const before = await totalLedgerRows();
    const id = uniqueId("evt");
    const noSession = JSON.stringify({ id, type: "checkout.session.completed", created: 1, data: { object: {} } });
    const copies = await Promise.all(Array.from({ length: 10 }, () => sendStripe(noSession)));
    for (const res of copies) await refused(res, 400, "malformed_body");
    assert.equal(await w.inboxState(`stripe:${id}`), null, "the inbox stored nothing");
    assert.equal(await totalLedgerRows(), before);
    const lines = w.logged("delivery").filter((l) => l.key === `stripe:${id}`);
    assert.equal(lines.length, 10);
    assert.ok(lines.every((l) => l.outcome === "rejected" && /^effect: /.test(l.detail)), JSON.stringify(lines[0]));
  });

  test("an oversized body is 413, an unknown source 404, a GET 405", async () => {
    const big = JSON.stringify({ id: uniqueId("evt"), type: "x", pad: "x".repeat(1024 * 1024) });
    await refused(await sendStripe(big), 413, "body_too_large");
    await refused(await w.post("/webhooks/paypal", "{}"), 404, "unknown_source");
    const get = await w.mf.dispatchFetch("http://localhost/webhooks/stripe");
    assert.equal(get.status, 405);
    assert.equal(get.headers.get("allow"), "POST");
    await get.arrayBuffer();
  });

  test("the test fault header is ignored unless the worker enables it", async () => {
    const prod = await startWorker({ TEST_FAULTS: "" });
    try {
      const body = checkoutCompleted();
      const res = await prod.post("/webhooks/stripe", body, { ...stripeHeaders(body, STRIPE), "x-test-fault": "fail-before-effect" });
      assert.equal((await res.json()).outcome, "processed");
    } finally {
      await prod.dispose();
    }
  });
});

describe("retention", () => {
  test("an inbox forgets its event after the retention period; the ledger still dedupes", async () => {
    const short = await startWorker({ RETENTION: "3s" });
    try {
      const body = checkoutCompleted();
      const id = JSON.parse(body).id;
      const send = async () => (await short.post("/webhooks/stripe", body, stripeHeaders(body, STRIPE))).json();
      assert.equal((await send()).outcome, "processed");
      assert.equal((await short.inboxState(`stripe:${id}`)).state, "done");
      await eventually(async () => (await short.inboxState(`stripe:${id}`)) === null, 15_000, "the inbox to forget");
      // A late copy claims an empty inbox, but the ledger says the effect committed.
      assert.equal((await send()).outcome, "duplicate");
      assert.equal(await short.scalar("SELECT count(*) FROM processed_events WHERE event_id = ?", id), 1);
    } finally {
      await short.dispose();
    }
  });
});

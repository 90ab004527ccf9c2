// needs: postgres, stripe, demos
// The hand-off on Postgres without a D1 call of the event's own: the rows
// D1's engine tables are owed (the ledger row, outbox rows, deliveries)
// ride on the event's queue messages, and each consumer writes them in the
// call that claims its batch. No relay runs here, so what reaches D1 came
// on a message, or was copied by the event when it had none to ride.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { unstable_readConfig } from "wrangler";

import { freshDatabase, startPostgresWorker } from "./support/postgres.mjs";
import { checkoutCompleted, stripeHeaders, uniqueId } from "./support/sign.mjs";
import { SECRETS, eventually } from "./support/worker.mjs";

const STRIPE = unstable_readConfig({ config: "wrangler.toml" }).vars.SOURCES.stripe;
const BACKEND = "https://backend.test/hooks";

let pg;
let w;
before(async () => {
  pg = freshDatabase();
  w = await startPostgresWorker(pg, {
    EMAIL_API_URL: "http://email.test",
    EMAIL_API_KEY: "test-email-key",
    EMAIL_FROM: "shop@example.com",
    SOURCES: { stripe: { ...STRIPE, forward: ["backend"] } },
    DESTINATIONS: { backend: { url: BACKEND, secret: "BACKEND_SIGNING_SECRET", events: ["checkout.*"] } },
    BACKEND_SIGNING_SECRET: `whsec_${Buffer.alloc(32, 7).toString("base64")}`,
  });
});
after(async () => {
  await w?.dispose();
});

const send = async (body, fault) => {
  const secret = SECRETS.STRIPE_WEBHOOK_SECRET.split(",")[0];
  const headers = { ...stripeHeaders(body, secret), ...(fault && { "x-test-fault": fault }) };
  const reply = await w.post("/webhooks/stripe", body, headers);
  return { status: reply.status, body: await reply.json() };
};
const d1 = (table, id) => w.scalar(`SELECT count(*) FROM ${table} WHERE event_id = ?`, id);
const unmarked = (id) => pg.scalar(`SELECT count(*) FROM webhook_outbox WHERE event_id = '${id}' AND handed_off_at IS NULL`);

describe("postgres: the hand-off rides on the event's messages", () => {
  test("a checkout's receipt and delivery carry its rows: each done once, D1 holding each row once", async () => {
    const id = uniqueId("evt");
    const email = `${uniqueId("buyer")}@example.com`;
    const body = checkoutCompleted({ id, email });
    // The event never copies its rows itself (a test fault): without the
    // rows they carry, neither consumer would find its row before a relay
    // copied it, and none runs here.
    const replies = await Promise.all(Array.from({ length: 5 }, () => send(body, "no-handoff-copy")));
    assert.deepEqual([...new Set(replies.map((r) => r.status))], [200]);
    await eventually(() => w.target.to(BACKEND).some((c) => c.headers["x-webhook-event-id"] === id), 10_000, "the delivery");
    await eventually(() => w.target.to("http://email.test").some((c) => c.body.includes(email)), 10_000, "the receipt");
    // A target's call is recorded before it is answered: the marks follow.
    await eventually(async () => (await w.scalar("SELECT count(*) FROM outbox WHERE event_id = ? AND status = 'sent'", id)) === 1, 10_000, "the receipt marked sent");
    await eventually(async () => (await w.scalar("SELECT count(*) FROM forwards WHERE event_id = ? AND status = 'delivered'", id)) === 1, 10_000, "the delivery marked");
    assert.equal(await d1("processed_events", id), 1);
    assert.equal(await d1("outbox", id), 1);
    assert.equal(await d1("forwards", id), 1);
    // Postgres keeps its three rows for the relay to mark.
    assert.equal(unmarked(id), "3");
    assert.equal(w.logged("handoff_failed").length, 0);
    assert.equal(w.logged("handoff_unreadable").length, 0);
  });

  test("an event with nothing to send has its ledger row copied before its reply", async () => {
    const id = uniqueId("evt");
    const body = JSON.stringify({ id, object: "event", type: "invoice.created", created: Math.floor(Date.now() / 1000), data: { object: { id: uniqueId("in") } } });
    const reply = await send(body);
    assert.equal(reply.status, 200);
    assert.equal(reply.body.outcome, "processed");
    assert.equal(await d1("processed_events", id), 1);
    assert.equal(await d1("forwards", id), 0);
    assert.equal(unmarked(id), "1");
  });

  test("messages that cannot be sent: the rows are copied to D1, for its relay to send", async () => {
    const id = uniqueId("evt");
    const reply = await send(checkoutCompleted({ id }), "fail-enqueue");
    assert.equal(reply.body.outcome, "processed");
    assert.equal(await d1("processed_events", id), 1);
    assert.equal(await w.scalar("SELECT count(*) FROM outbox WHERE event_id = ? AND status = 'pending'", id), 1);
    assert.equal(await d1("forwards", id), 1);
    await eventually(() => w.logged("enqueue_failed").some((line) => line.key === `stripe:${id}`), 5_000, "the failed send logged");
  });
});

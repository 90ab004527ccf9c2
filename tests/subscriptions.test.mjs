// End to end, the subscriptions demo (src/effects/subscriptions.rs): Stripe
// delivers out of order, and the newest state wins.
// needs: stripe, demos
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import { startWorker } from "./support/worker.mjs";
import { stripeHeaders, subscriptionEvent, uniqueId } from "./support/sign.mjs";

let w;
before(async () => {
  w = await startWorker();
});
after(() => w.dispose());

const sendStripe = (body) => w.post("/webhooks/stripe", body, stripeHeaders(body, "whsec_test_current")).then((r) => r.json());
const ledgerRows = (source, id) => w.scalar("SELECT count(*) FROM processed_events WHERE source = ? AND event_id = ?", source, id);

describe("out-of-order subscription events", () => {
  test("the newest state wins whatever the arrival order", async () => {
    const subscription = uniqueId("sub");
    const older = subscriptionEvent({ type: "customer.subscription.updated", created: 1_700_000_100, subscription, status: "active" });
    const newer = subscriptionEvent({ type: "customer.subscription.deleted", created: 1_700_000_200, subscription, status: "canceled" });
    await sendStripe(newer);
    await sendStripe(older);
    const row = await w.db.prepare("SELECT * FROM subscriptions WHERE id = ?").bind(subscription).first();
    assert.equal(row.status, "canceled");
    assert.equal(row.event_created, 1_700_000_200);
    assert.equal(row.event_id, JSON.parse(newer).id);
    // Both were processed and are in the ledger; only the state was guarded.
    assert.equal(await ledgerRows("stripe", JSON.parse(older).id), 1);

    const newest = subscriptionEvent({ type: "customer.subscription.updated", created: 1_700_000_300, subscription, status: "active" });
    await sendStripe(newest);
    assert.equal(await w.scalar("SELECT status FROM subscriptions WHERE id = ?", subscription), "active");
  });
});

// End to end: a side effect of the app's own (src/effects/contacts.rs),
// registered by name in PERFORMERS, stored as app:crm_contact, and
// performed by the outbox like the engine's: once per key, retried on
// failure, skipped only where SIDE_EFFECTS = "log" says so.
// needs: stripe, demos
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { stripeHeaders, uniqueId } from "./support/sign.mjs";
import { eventually, startWorker } from "./support/worker.mjs";

const TARGETS = {
  CRM_URL: "http://crm.test/v1",
  CRM_API_KEY: "crm_test_key",
  OUTBOX_RETRY_BASE_SECS: "1",
  OUTBOX_RELAY_GRACE_MS: "0",
};

const customerCreated = (customer, email) =>
  JSON.stringify({ id: uniqueId("evt"), type: "customer.created", created: 1_700_000_000, data: { object: { id: customer, email, name: "Ada" } } });
const send = (w, body) => w.post("/webhooks/stripe", body, stripeHeaders(body, "whsec_test_current")).then((r) => r.json());
const rows = (w, customer) =>
  w.db.prepare("SELECT * FROM outbox WHERE action = 'app:crm_contact' AND payload LIKE ?").bind(`%"${customer}"%`).all().then((r) => r.results);
const settled = (w, customer) =>
  eventually(async () => {
    const [row] = await rows(w, customer);
    return row?.status === "sent" && row;
  }, 20_000, `the crm_contact row of ${customer} sent`);
const calls = (w, customer) => w.target.to("http://crm.test/v1/contacts").filter((c) => JSON.parse(c.body).customer === customer);

describe("a side effect of the app's own", () => {
  let w;
  before(async () => (w = await startWorker(TARGETS)));
  after(() => w.dispose());

  test("30 concurrent copies, and a second event about the same customer: one row, one key at the CRM", async () => {
    const customer = uniqueId("cus");
    const body = customerCreated(customer, "ada@example.com");
    const replies = await Promise.all(Array.from({ length: 30 }, () => send(w, body)));
    assert.equal(replies.filter((r) => r.outcome === "processed").length, 1);
    assert.equal((await send(w, customerCreated(customer, "ada@example.com"))).outcome, "processed");
    const row = await settled(w, customer);
    assert.equal((await rows(w, customer)).length, 1);
    const made = calls(w, customer);
    assert.ok(made.length >= 1);
    assert.deepEqual([...new Set(made.map((c) => c.idempotencyKey))], [row.idempotency_key]);
    assert.equal(made[0].authorization, "Bearer crm_test_key");
    assert.deepEqual(JSON.parse(made[0].body), { customer, email: "ada@example.com", name: "Ada" });
  });

  test("the CRM fails once: retried under the same key, then sent", async () => {
    const customer = uniqueId("cus");
    w.target.answer = (call) => (call.url.startsWith("http://crm.test/") && calls(w, customer).length === 1 ? 503 : 200);
    assert.equal((await send(w, customerCreated(customer, null))).outcome, "processed");
    const row = await settled(w, customer).finally(() => (w.target.answer = () => 200));
    assert.equal(row.attempts, 2);
    const made = calls(w, customer);
    assert.deepEqual(made.map((c) => c.status), [503, 200]);
    assert.deepEqual([...new Set(made.map((c) => c.idempotencyKey))], [row.idempotency_key]);
  });
});

describe("a side effect of the app's own, its target unset", () => {
  test("under SIDE_EFFECTS = \"log\": marked sent, noted as skipped, nothing called", async () => {
    const w = await startWorker({ CRM_URL: "", OUTBOX_RELAY_GRACE_MS: "0" });
    try {
      const customer = uniqueId("cus");
      assert.equal((await send(w, customerCreated(customer, null))).outcome, "processed");
      const row = await settled(w, customer);
      assert.equal(row.note, "skipped: CRM_URL is not set");
      assert.equal(calls(w, customer).length, 0);
    } finally {
      await w.dispose();
    }
  });

  test("anywhere else: a failure that retries, naming the variable", async () => {
    const w = await startWorker({ CRM_URL: "", SIDE_EFFECTS: "", OUTBOX_RETRY_BASE_SECS: "1", OUTBOX_RELAY_GRACE_MS: "0" });
    try {
      const customer = uniqueId("cus");
      assert.equal((await send(w, customerCreated(customer, null))).outcome, "processed");
      const row = await eventually(async () => {
        const [row] = await rows(w, customer);
        return row?.last_error && row;
      }, 20_000, "a failed attempt");
      assert.notEqual(row.status, "sent");
      assert.match(row.last_error, /CRM_URL is not set/);
    } finally {
      await w.dispose();
    }
  });
});

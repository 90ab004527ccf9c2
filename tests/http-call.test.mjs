// End to end, the outbox's HTTP call (`outbox::HttpCall`): a row as an
// effect writes it, performed by the queue consumer — a JSON POST of its body
// to the URL in its target variable, under the row's key; the URL never
// stored, a target unset or a payload naming no variable of yours refused. The rows
// are written as an effect's batch would, then the cron relay sends them.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";

import { eventually, startWorker } from "./support/worker.mjs";

let w;
before(async () => {
  w = await startWorker({
    CRM_URL: "http://crm.test/leads?token=crm-secret-token",
    OUTBOX_RELAY_GRACE_MS: "0",
    OUTBOX_MAX_ATTEMPTS: "1",
    SIDE_EFFECTS: "",
  });
});
after(() => w.dispose());

let n = 0;
/** A pending `call_http` row with `payload`, sent to the queue by the relay; its settled row. */
async function perform(payload) {
  const key = `http-call-test-${Date.now()}-${n++}`;
  await w.db
    .prepare("INSERT INTO outbox (idempotency_key, source, event_id, action, payload, next_attempt_at, created_at, updated_at) VALUES (?, 'alpha', ?, 'call_http', ?, 0, 0, 0)")
    .bind(key, key, JSON.stringify(payload))
    .run();
  const worker = await w.mf.getWorker("webhooks");
  await worker.scheduled({ cron: "* * * * *" });
  return eventually(async () => {
    const row = await w.db.prepare("SELECT * FROM outbox WHERE idempotency_key = ?").bind(key).first();
    return ["sent", "dead"].includes(row.status) && row;
  }, 15_000, `the row ${key} to settle`);
}

test("a call posts its body, as written, to its target's URL under the row's key", async () => {
  const body = { email: "lead@example.com", plan: "pro", amount: 1999 };
  const row = await perform({ target: "CRM_URL", body });
  assert.equal(row.status, "sent");
  const [call] = w.target.to("http://crm.test/leads");
  assert.equal(call.url, "http://crm.test/leads?token=crm-secret-token");
  assert.deepEqual(JSON.parse(call.body), body);
  assert.equal(call.idempotencyKey, row.idempotency_key);
  assert.ok(!row.payload.includes("crm.test"), "the row names the variable, not the URL");
});

test("an unset target, or a payload naming no variable, is dead with a fixed phrase; nothing is called", async () => {
  const called = () => w.target.calls.filter((c) => !c.url.startsWith("http://dlq.test/")).length;
  const calls = called();
  const unset = await perform({ target: "NO_SUCH_URL", body: {} });
  assert.equal(unset.status, "dead");
  assert.equal(unset.last_error, 'NO_SUCH_URL is not set (set it, or SIDE_EFFECTS = "log" to skip)', "names the variable");
  assert.ok(w.logged("outbox_dead").some((l) => l.idempotency_key === unset.idempotency_key && l.detail.startsWith("NO_SUCH_URL is not set")), "and so does the log line");
  // Not a name, not a URL variable, one of the worker's own targets.
  for (const target of ["http://evil.test/", "crm_url", "", "ADMIN_TOKEN", "ALERT_URL"]) {
    const row = await perform({ target, body: {} });
    assert.equal(row.status, "dead", target);
    assert.equal(row.last_error, "unreadable payload");
  }
  assert.equal(called(), calls, "only the dead-letter recorder was called");
  assert.ok(!w.logs.some((line) => line.includes("crm-secret-token")), "the URL's token is never logged");
});

// The D1 migrations on a database that already holds rows: a later
// migration that rebuilds a table must keep every row, and every rule the
// table enforced. Real local D1 (Miniflare), the migrations as `wrangler d1
// migrations apply` would run them, in order.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { after, before, describe, test } from "node:test";
import { Miniflare } from "miniflare";
import { unstable_splitSqlQuery } from "wrangler";

const MIGRATIONS = readdirSync("migrations").sort();
const REBUILD = "0008_without_rowid.sql";

let mf;
let db;
const apply = async (file) =>
  db.batch(unstable_splitSqlQuery(readFileSync(`migrations/${file}`, "utf8")).map((q) => db.prepare(q)));
const rows = async (sql) => (await db.prepare(sql).all()).results;

before(async () => {
  mf = new Miniflare({
    modules: true,
    script: "export default { fetch() { return new Response('') } }",
    d1Databases: ["DB"],
  });
  db = await mf.getD1Database("DB");
});
after(() => mf.dispose());

describe(`${REBUILD} on a database in use`, () => {
  test("keeps every ledger row, order and outbox row, and every rule they enforced", async () => {
    for (const file of MIGRATIONS.filter((m) => m < REBUILD)) await apply(file);
    await db.batch([
      db.prepare("INSERT INTO processed_events VALUES ('stripe', 'evt_1', 'checkout.session.completed', 1, 2, NULL)"),
      db.prepare("INSERT INTO processed_events VALUES ('stripe', 'evt_2', 'invoice.paid', 3, 4, NULL)"),
      db.prepare("INSERT INTO processed_events VALUES ('github', 'd-1', 'star.created', 5, 6, 'f00d')"),
      db.prepare("INSERT INTO orders VALUES ('cs_1', 'pi_1', 'paid', 2000, 'eur', 'a@example.com', 1, 2)"),
      db.prepare("INSERT INTO orders VALUES ('cs_2', NULL, 'awaiting_payment', NULL, NULL, NULL, 3, 4)"),
      db.prepare(
        "INSERT INTO outbox (idempotency_key, source, event_id, action, payload, status, attempts, next_attempt_at, created_at, updated_at) " +
          "VALUES ('k1', 'stripe', 'evt_1', 'send_receipt', '{}', 'dead', 3, 9, 1, 2)",
      ),
    ]);
    const before = {
      ledger: await rows("SELECT * FROM processed_events ORDER BY source, event_id"),
      orders: await rows("SELECT * FROM orders ORDER BY checkout_session_id"),
      outbox: await rows("SELECT * FROM outbox ORDER BY idempotency_key"),
    };

    for (const file of MIGRATIONS.filter((m) => m >= REBUILD)) await apply(file);

    assert.deepEqual(await rows("SELECT * FROM processed_events ORDER BY source, event_id"), before.ledger);
    assert.deepEqual(await rows("SELECT * FROM orders ORDER BY checkout_session_id"), before.orders);
    assert.deepEqual(await rows("SELECT * FROM outbox ORDER BY idempotency_key"), before.outbox);
    for (const table of ["processed_events", "orders", "outbox"]) {
      const [{ sql }] = await rows(`SELECT sql FROM sqlite_master WHERE type = 'table' AND name = '${table}'`);
      assert.match(sql, /WITHOUT ROWID/, table);
    }
    const indexes = (await rows("SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")).map((r) => r.name);
    for (const index of ["processed_events_fence", "orders_by_payment_intent", "outbox_due", "outbox_alerts"]) {
      assert.ok(indexes.includes(index), index);
    }

    // The ledger still refuses an event twice, and a fence twice per source;
    // events without a fence are not fenced against each other.
    const insert = (source, id, fence) =>
      db.prepare("INSERT INTO processed_events VALUES (?, ?, 't', 7, 8, ?)").bind(source, id, fence).run();
    await assert.rejects(insert("stripe", "evt_1", null), /UNIQUE constraint failed: processed_events/);
    await assert.rejects(insert("github", "d-2", "f00d"), /UNIQUE constraint failed: processed_events/);
    await insert("stripe", "evt_3", null);
    await insert("shopify", "o-1", "f00d");
    const plan = await rows(
      "EXPLAIN QUERY PLAN SELECT event_id FROM processed_events WHERE source = 'github' AND fence_sha256 = 'f00d'",
    );
    assert.match(JSON.stringify(plan), /processed_events_fence/, "a fence is found by its index");
    // An outbox key is still unique.
    await assert.rejects(
      db
        .prepare(
          "INSERT INTO outbox (idempotency_key, source, event_id, action, payload, next_attempt_at, created_at, updated_at) " +
            "VALUES ('k1', 's', 'e', 'a', '{}', 1, 1, 1)",
        )
        .run(),
      /UNIQUE constraint failed: outbox/,
    );
  });
});

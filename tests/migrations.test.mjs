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
    const shape = async () => {
      const out = {};
      for (const table of ["processed_events", "orders", "outbox"]) out[table] = await rows(`PRAGMA table_info(${table})`);
      return out;
    };
    const indexSql = async () =>
      rows("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL ORDER BY name");
    const shapeBefore = await shape();
    const indexesBefore = await indexSql();
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
    // Every column as it was: name, type, NOT NULL, default, key; only a
    // key column is now NOT NULL, as a WITHOUT ROWID table's key must be.
    const keyNotNull = (columns) => columns.map((c) => (c.pk > 0 ? { ...c, notnull: 1 } : c));
    const expected = Object.fromEntries(Object.entries(shapeBefore).map(([t, cs]) => [t, keyNotNull(cs)]));
    assert.deepEqual(await shape(), expected);
    // Every index on the same columns; two now only over rows that have a value.
    const partial = {
      processed_events_fence: " WHERE fence_sha256 IS NOT NULL",
      orders_by_payment_intent: " WHERE payment_intent_id IS NOT NULL",
    };
    const squash = (sql) => sql.replace(/\s+/g, " ").trim();
    assert.deepEqual(
      (await indexSql()).map(({ name, sql }) => [name, squash(sql)]),
      indexesBefore.map(({ name, sql }) => [name, squash(sql) + (partial[name] ?? "")]),
    );

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
    const byIntent = await rows("EXPLAIN QUERY PLAN UPDATE orders SET status = 'paid' WHERE payment_intent_id = 'pi_1'");
    assert.match(JSON.stringify(byIntent), /orders_by_payment_intent/, "an order is found by its payment intent");
    // The orders' upsert still finds its row by the session id.
    await db
      .prepare(
        "INSERT INTO orders VALUES ('cs_1', NULL, 'paid', 2000, 'eur', NULL, 1, 9) " +
          "ON CONFLICT (checkout_session_id) DO UPDATE SET updated_at = excluded.updated_at",
      )
      .run();
    assert.equal((await rows("SELECT updated_at FROM orders WHERE checkout_session_id = 'cs_1'"))[0].updated_at, 9);
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

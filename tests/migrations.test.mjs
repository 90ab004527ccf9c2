// The D1 migrations on a database that already holds rows: a later
// migration that rebuilds a table must keep every row, and every rule the
// table enforced; and a file that drops a table, run statement by statement
// and stopped after any of them, must end as an uninterrupted run does once
// applied again. Real local D1 (Miniflare), the migrations as `wrangler d1
// migrations apply` runs them locally, in order: each file one batch.
// needs: everything
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { after, before, describe, test } from "node:test";
import { Miniflare } from "miniflare";
import { unstable_splitSqlQuery } from "wrangler";

const MIGRATIONS = readdirSync("migrations").sort();
const REBUILD = "0008_without_rowid.sql";
const statementsOf = (file) => unstable_splitSqlQuery(readFileSync(`migrations/${file}`, "utf8"));
// Every file that drops a table, this one and any later rebuild.
const REBUILDS = MIGRATIONS.filter((file) => statementsOf(file).some((s) => /^DROP\s+TABLE\b/i.test(s)));

// A fresh database per run: the first two tests', the clean history's three, then per rebuild an
// uninterrupted run, one per statement it can stop after, one with a write
// in between, and one failing.
const DATABASES = 5 + REBUILDS.reduce((n, file) => n + statementsOf(file).length + 3, 0);
// The worker runs each batch on the database it names, one call per batch:
// through Miniflare's D1 proxy each prepare() is a call too (3x as slow).
const SCRIPT = `export default {
  async fetch(request, env) {
    const { db, queries } = await request.json();
    const d1 = env[db];
    try {
      const results = await d1.batch(queries.map(([sql, ...params]) => d1.prepare(sql).bind(...params)));
      return Response.json(results.map((r) => r.results));
    } catch (e) {
      return Response.json({ error: e.message }, { status: 500 });
    }
  },
};`;
let mf;
let used = 0;
const fresh = () => `DB${used++}`;

/** Runs `queries` (SQL, or [SQL, ...parameters]) on database `db` as one
 * D1 batch, one transaction: each one's rows. */
async function batch(db, queries) {
  const body = JSON.stringify({ db, queries: queries.map((q) => [q].flat()) });
  const response = await mf.dispatchFetch("http://d1/", { method: "POST", body });
  const out = await response.json();
  if (!response.ok) throw new Error(out.error);
  return out;
}
const rows = async (db, sql, ...params) => (await batch(db, [[sql, ...params]]))[0];
const apply = (db, file) => batch(db, statementsOf(file));

before(async () => {
  mf = new Miniflare({
    modules: true,
    script: SCRIPT,
    d1Databases: Array.from({ length: DATABASES }, (_, i) => `DB${i}`),
  });
});
after(() => mf.dispose());

/** Rows in every table 0001-0007 made: a fence, an order without a payment
 * intent, an operator's alert among the outbox rows. */
const seed = (db) =>
  batch(db, [
    "INSERT INTO processed_events (source, event_id, type, received_at, processed_at, fence_sha256) VALUES ('stripe', 'evt_1', 'checkout.session.completed', 1, 2, NULL)",
    "INSERT INTO processed_events (source, event_id, type, received_at, processed_at, fence_sha256) VALUES ('stripe', 'evt_2', 'invoice.paid', 3, 4, NULL)",
    "INSERT INTO processed_events (source, event_id, type, received_at, processed_at, fence_sha256) VALUES ('github', 'd-1', 'star.created', 5, 6, 'f00d')",
    "INSERT INTO orders (checkout_session_id, payment_intent_id, status, amount, currency, customer_email, created_at, updated_at) VALUES ('cs_1', 'pi_1', 'paid', 2000, 'eur', 'a@example.com', 1, 2)",
    "INSERT INTO orders (checkout_session_id, payment_intent_id, status, amount, currency, customer_email, created_at, updated_at) VALUES ('cs_2', NULL, 'awaiting_payment', NULL, NULL, NULL, 3, 4)",
    "INSERT INTO outbox (idempotency_key, source, event_id, action, payload, status, attempts, next_attempt_at, created_at, updated_at) VALUES ('k1', 'stripe', 'evt_1', 'send_receipt', '{}', 'dead', 3, 9, 1, 2)",
    "INSERT INTO outbox (idempotency_key, source, event_id, action, payload, next_attempt_at, created_at, updated_at) VALUES ('k2', 'ops', 'a-1', 'notify_operator', '{}', 5, 5, 5)",
    "INSERT INTO subscriptions (id, customer_id, status, event_created, event_id, updated_at) VALUES ('sub_1', 'cus_1', 'active', 7, 'evt_3', 8)",
    "INSERT INTO repo_stars (repo, stars) VALUES ('o/r', 2)",
    "INSERT INTO failed_events (source, event_id, type, received_at, failed_at, last_error, dismissed_at) VALUES ('github', 'd-2', 'push', 1, 2, 'boom', NULL)",
    "INSERT INTO source_counters (source, counter, value) VALUES ('stripe', 'received', 3)",
    "INSERT INTO delivery_trend (minute, source, outcome, value) VALUES (100, 'stripe', 'processed', 2)",
  ]);

/** Every object's definition, and every table's columns and rows. */
async function snapshot(db) {
  const schema = await rows(
    db,
    "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT GLOB '_cf_*' ORDER BY type, name",
  );
  const names = schema.filter((o) => o.type === "table" && !o.name.startsWith("sqlite_")).map((o) => o.name);
  const columns = await batch(db, names.map((name) => `PRAGMA table_info(${name})`));
  const order = (i) => columns[i].map((_, c) => c + 1).join(", ");
  const contents = await batch(db, names.map((name, i) => `SELECT * FROM ${name} ORDER BY ${order(i)}`));
  const tables = Object.fromEntries(names.map((name, i) => [name, { columns: columns[i], rows: contents[i] }]));
  return { schema, tables };
}

describe(`${REBUILD} on a database in use`, () => {
  test("keeps every ledger row, order and outbox row, and every rule they enforced", async () => {
    const db = fresh();
    for (const file of MIGRATIONS.filter((m) => m < REBUILD)) await apply(db, file);
    await seed(db);
    const shape = async () => {
      const out = {};
      for (const table of ["processed_events", "orders", "outbox"]) out[table] = await rows(db, `PRAGMA table_info(${table})`);
      return out;
    };
    // The rebuilt tables' indexes (a later migration may add other tables').
    const indexSql = async () =>
      rows(
        db,
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL " +
          "AND tbl_name IN ('processed_events', 'orders', 'outbox') ORDER BY name",
      );
    const shapeBefore = await shape();
    const indexesBefore = await indexSql();
    const before = {
      ledger: await rows(db, "SELECT * FROM processed_events ORDER BY source, event_id"),
      orders: await rows(db, "SELECT * FROM orders ORDER BY checkout_session_id"),
      outbox: await rows(db, "SELECT * FROM outbox ORDER BY idempotency_key"),
    };

    // This file alone: a later one may add a column or an index of its own.
    await apply(db, REBUILD);

    assert.deepEqual(await rows(db, "SELECT * FROM processed_events ORDER BY source, event_id"), before.ledger);
    assert.deepEqual(await rows(db, "SELECT * FROM orders ORDER BY checkout_session_id"), before.orders);
    assert.deepEqual(await rows(db, "SELECT * FROM outbox ORDER BY idempotency_key"), before.outbox);
    for (const table of ["processed_events", "orders", "outbox"]) {
      const [{ sql }] = await rows(db, `SELECT sql FROM sqlite_master WHERE type = 'table' AND name = '${table}'`);
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
    const insert = (source, id, fence) => rows(db, "INSERT INTO processed_events VALUES (?, ?, 't', 7, 8, ?)", source, id, fence);
    await assert.rejects(insert("stripe", "evt_1", null), /UNIQUE constraint failed: processed_events/);
    await assert.rejects(insert("github", "d-2", "f00d"), /UNIQUE constraint failed: processed_events/);
    await insert("stripe", "evt_3", null);
    await insert("shopify", "o-1", "f00d");
    const plan = await rows(
      db,
      "EXPLAIN QUERY PLAN SELECT event_id FROM processed_events WHERE source = 'github' AND fence_sha256 = 'f00d'",
    );
    assert.match(JSON.stringify(plan), /processed_events_fence/, "a fence is found by its index");
    const byIntent = await rows(db, "EXPLAIN QUERY PLAN UPDATE orders SET status = 'paid' WHERE payment_intent_id = 'pi_1'");
    assert.match(JSON.stringify(byIntent), /orders_by_payment_intent/, "an order is found by its payment intent");
    // The orders' upsert still finds its row by the session id.
    await rows(
      db,
      "INSERT INTO orders VALUES ('cs_1', NULL, 'paid', 2000, 'eur', NULL, 1, 9) " +
        "ON CONFLICT (checkout_session_id) DO UPDATE SET updated_at = excluded.updated_at",
    );
    assert.equal((await rows(db, "SELECT updated_at FROM orders WHERE checkout_session_id = 'cs_1'"))[0].updated_at, 9);
    // An outbox key is still unique.
    await assert.rejects(
      rows(
        db,
        "INSERT INTO outbox (idempotency_key, source, event_id, action, payload, next_attempt_at, created_at, updated_at) " +
          "VALUES ('k1', 's', 'e', 'a', '{}', 1, 1, 1)",
      ),
      /UNIQUE constraint failed: outbox/,
    );
  });

  test("a row with no key makes it fail and change nothing, rather than lose the row", async () => {
    const db = fresh();
    for (const file of MIGRATIONS.filter((m) => m < REBUILD)) await apply(db, file);
    await seed(db);
    await rows(db, "INSERT INTO orders (checkout_session_id, status, created_at, updated_at) VALUES (NULL, 'open', 1, 1)");
    const before = await snapshot(db);
    await assert.rejects(apply(db, REBUILD), /NOT NULL constraint failed: orders_new\.checkout_session_id/);
    assert.deepEqual(await snapshot(db), before);
  });
});

// wrangler applies a file in one transaction, but a file run statement by
// statement (a paste into the console, another tool) can stop anywhere.
for (const file of REBUILDS) {
  const statements = statementsOf(file);
  const n = statements.length;

  /** A fresh database with the migrations before `file` and the seed rows. */
  async function seeded() {
    const db = fresh();
    await batch(db, MIGRATIONS.filter((m) => m < file).flatMap(statementsOf));
    await seed(db);
    return db;
  }
  /** `file` and the later migrations, each whole, then what they left. */
  async function finish(db) {
    for (const later of MIGRATIONS.filter((m) => m >= file)) await apply(db, later);
    return snapshot(db);
  }

  describe(`${file}, stopped after any of its ${n} statements and applied again`, { concurrency: true }, () => {
    let expected;
    before(async () => {
      const db = await seeded();
      const { tables } = await snapshot(db);
      for (const s of statements) {
        const table = s.match(/^DROP\s+TABLE\s+(?:IF\s+EXISTS\s+)?(\w+)/i)?.[1];
        if (tables[table]) assert.ok(tables[table].rows.length > 0, `seed() must give ${table}, which ${file} rebuilds, a row`);
      }
      expected = await finish(db);
    });

    for (let k = 1; k <= n; k++) {
      const what = statements[k - 1].split("\n")[0].slice(0, 60);
      const name = k < n ? `stopped after statement ${k} (${what})` : "run whole, not recorded: applied twice";
      test(name, async () => {
        const db = await seeded();
        // Each statement its own query: its own transaction, as a run
        // statement by statement commits them.
        for (const s of statements.slice(0, k)) await batch(db, [s]);
        assert.deepEqual(await finish(db), expected);
      });
    }

    const copyOutbox = statements.findIndex((s) => /^INSERT INTO outbox_new/i.test(s));
    if (copyOutbox >= 0) {
      test("stopped after copying the outbox, a row the worker updates meanwhile keeps its update", async () => {
        const db = await seeded();
        for (const s of statements.slice(0, copyOutbox + 1)) await batch(db, [s]);
        const [{ key }] = await rows(db, "SELECT min(idempotency_key) AS key FROM outbox");
        await rows(db, "UPDATE outbox SET status = 'sent', attempts = attempts + 1 WHERE idempotency_key = ?", key);
        const [updated] = await rows(db, "SELECT * FROM outbox WHERE idempotency_key = ?", key);
        await finish(db);
        // Its columns as updated (a later migration may add one).
        const [after] = await rows(db, "SELECT * FROM outbox WHERE idempotency_key = ?", key);
        assert.deepEqual(Object.fromEntries(Object.keys(updated).map((column) => [column, after[column]])), updated);
      });
    }

    test("applied as wrangler applies it, one batch, a failure part-way leaves nothing of it", async () => {
      const db = await seeded();
      const before = await snapshot(db);
      const failing = [...statements, "INSERT INTO no_such_table VALUES (1)"];
      await assert.rejects(batch(db, failing), /no such table: no_such_table/);
      assert.deepEqual(await snapshot(db), before);
    });
  });
}

// needs: template
describe("the clean history a generated copy starts from", () => {
  const CLEAN = ["crates/engine/migrations", "scripts/template/migrations"];
  const DEMO_TABLES = ["orders", "repo_stars", "subscriptions"];
  /** Each table's and index's shape (less `skip`'s), and whether it keeps a rowid. */
  async function shape(db, skip = []) {
    const objects = await rows(db, "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT GLOB '_cf_*' AND name NOT GLOB 'sqlite_*' ORDER BY name");
    const out = {};
    for (const o of objects.filter((o) => !skip.includes(o.tbl_name))) {
      const [info] = await batch(db, [o.type === "table" ? `PRAGMA table_xinfo(${o.name})` : `PRAGMA index_xinfo(${o.name})`]);
      const partial = o.sql?.match(/WHERE .*$/s)?.[0].replace(/\s+/g, " ");
      out[`${o.type} ${o.name}`] = { info, withoutRowid: /WITHOUT ROWID/i.test(o.sql ?? ""), partial };
    }
    return out;
  }
  /** A database with the clean files whose names `keep` says yes to applied: the engine's, then the demos'. */
  async function clean(keep) {
    const db = fresh();
    for (const dir of CLEAN) {
      for (const file of readdirSync(dir).sort().filter(keep)) await batch(db, unstable_splitSqlQuery(readFileSync(`${dir}/${file}`, "utf8")));
    }
    return db;
  }

  test("it ends where the whole history ends, with the demos and without them", async () => {
    const history = fresh();
    for (const file of MIGRATIONS) await apply(history, file);
    const want = await shape(history);
    assert.equal(Object.keys(want).length, 18, JSON.stringify(Object.keys(want)));
    assert.deepEqual(await shape(await clean(() => true)), want);
    assert.deepEqual(await shape(await clean((file) => !file.includes("demos")), DEMO_TABLES), await shape(history, DEMO_TABLES));
  });
});

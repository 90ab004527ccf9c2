// needs: postgres
// STORE = "postgres" with whatever source this checkout declares first (a
// generated copy's own provider): a storm of one event, distinct events,
// and Postgres stopped and started again, each counted in Postgres's
// ledger. The demo effects' own Postgres tests, where a copy keeps them, go further.
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { after, before, test } from "node:test";

import { POSTGRES_BUILD, freshDatabase, startPostgresWorker } from "./support/postgres.mjs";
import { FIRST, SOURCE_SECRETS, eventOf, send } from "./support/sources.mjs";
import { eventually, startWorker } from "./support/worker.mjs";

let pg;
let w;
const ledger = () => Number(pg.scalar(`SELECT count(*) FROM processed_events WHERE source = '${FIRST}'`));

/** A copy, once the inbox has recorded the event as done: a duplicate, never processed again. */
const untilDuplicate = (worker, event) =>
  eventually(
    async () => {
      const { outcome } = (await send(worker, FIRST, event)).body;
      assert.notEqual(outcome, "processed");
      return outcome === "duplicate";
    },
    10_000,
    "a duplicate",
  );

before(async () => {
  pg = freshDatabase();
  w = await startPostgresWorker(pg, SOURCE_SECRETS);
});
after(async () => {
  await w?.dispose();
  pg?.start();
});

test(`${FIRST}: 30 concurrent copies of one event, one ledger row in Postgres`, async () => {
  const event = eventOf(FIRST);
  const replies = await Promise.all(Array.from({ length: 30 }, () => send(w, FIRST, event)));
  assert.deepEqual([...new Set(replies.map((r) => r.status))], [200]);
  assert.equal(replies.filter((r) => r.body.outcome === "processed").length, 1);
  assert.equal(ledger(), 1);
});

test(`${FIRST}: 10 distinct events at once, 10 more ledger rows`, async () => {
  const replies = await Promise.all(Array.from({ length: 10 }, () => send(w, FIRST, eventOf(FIRST))));
  assert.deepEqual(replies.map((r) => r.body.outcome), Array(10).fill("processed"));
  assert.equal(ledger(), 11);
});

test(`${FIRST}: Postgres stopped, 503 with Retry-After; started again, the alarm applies it once`, async () => {
  const event = eventOf(FIRST);
  pg.stop();
  try {
    const reply = await w.post(`/webhooks/${FIRST}`, event.body, event.headers);
    assert.equal(reply.status, 503);
    assert.ok(Number(reply.headers.get("retry-after")) > 0);
    assert.equal((await reply.json()).store, "unavailable");
  } finally {
    pg.start();
  }
  await eventually(() => ledger() === 12, 20_000, "the alarm's retry");
  await untilDuplicate(w, event);
  assert.equal(ledger(), 12);
});

test(`${FIRST}: a database without the engine's newest migration: 500 naming it, one log line; applied, the alarm applies the event once`, async () => {
  // As a database migrated before migrations-postgres/…_engine_handoff_due.sql.
  const behind = freshDatabase();
  behind.query("DROP INDEX webhook_outbox_due; DELETE FROM webhook_migrations WHERE name LIKE '%_engine_handoff_due.sql'");
  const worker = await startPostgresWorker(behind, { ...SOURCE_SECRETS, EFFECT_RETRY_BASE_MS: "1000" });
  const count = () => Number(behind.scalar(`SELECT count(*) FROM processed_events WHERE source = '${FIRST}'`));
  try {
    const event = eventOf(FIRST);
    const key = `${FIRST}:${event.id}`;
    for (let i = 0; i < 2; i++) {
      const reply = await worker.post(`/webhooks/${FIRST}`, event.body, event.headers);
      assert.equal(reply.status, 500);
      assert.deepEqual(await reply.json(), { outcome: "accepted", key, error: "misconfigured", missing_migration: "engine_handoff_due" });
    }
    assert.equal(count(), 0, "nothing committed");
    const told = worker.logged("store_behind");
    assert.equal(told.length, 1, "once");
    assert.match(told[0].detail, /migrations-postgres\/NNNN_engine_handoff_due\.sql/);
    assert.match(told[0].detail, /42P01/);
    // What make deploy (or make dev) runs: the migration, as a copy holds it.
    behind.query(readFileSync(`migrations-postgres/${readdirSync("migrations-postgres").find((f) => /^\d{4}_engine_handoff_due\.sql$/.test(f))}`, "utf8"));
    await eventually(() => count() === 1, 20_000, "the alarm's retry");
    await untilDuplicate(worker, event);
    assert.equal(count(), 1);
  } finally {
    await worker.dispose();
  }
});

test(`${FIRST}: an app's bug (fewer values than placeholders) spends its attempts, then is listed failed and alerted, never a 503`, async () => {
  const alerts = "http://alert.test/hook";
  const worker = await startPostgresWorker(pg, { ...SOURCE_SECRETS, EFFECT_MAX_ATTEMPTS: "2", ALERT_URL: alerts });
  const bug = { "x-test-fault": "bad-statement" };
  const before = ledger();
  try {
    const event = eventOf(FIRST);
    const key = `${FIRST}:${event.id}`;
    const first = await send(worker, FIRST, event, bug);
    assert.equal(first.status, 200, "the event is kept: the sender is not asked to come back");
    assert.equal(first.body.outcome, "accepted");
    const listed = () => worker.scalar("SELECT count(*) FROM failed_events WHERE source = ? AND event_id = ?", FIRST, event.id);
    await eventually(async () => (await listed()) === 1, 20_000, "listed as failed");
    const state = await worker.inboxState(key);
    assert.equal(state.state, "failed");
    assert.equal(state.effect_attempts, 2);
    const refused = /^postgres refused: the effect's statement (\d+) of \1 is not sent: it uses \?2 but binds 1 value: SELECT \?1::text AS one, \?2::text AS two$/;
    assert.match(state.last_error, refused);
    const tries = worker.logged("effect_failed").filter((line) => line.key === key);
    assert.ok(tries.length >= 2 && tries.every((line) => refused.test(line.error)), JSON.stringify(tries));
    const copy = await send(worker, FIRST, event, bug);
    assert.equal(copy.status, 200);
    const alerted = () => worker.target.to(alerts).filter((call) => JSON.parse(call.body).text.includes(event.id));
    await eventually(() => alerted().length === 1, 20_000, "the operators' alert");
    assert.match(JSON.parse(alerted()[0].body).text, /gave up: postgres refused: the effect's statement/);
    assert.equal(ledger(), before, "nothing committed");
  } finally {
    await worker.dispose();
  }
});

test("STORE = postgres without its Hyperdrive binding: 500 misconfigured naming it, nothing held", async () => {
  const worker = await startWorker({ ...SOURCE_SECRETS, STORE: "postgres" }, { main: POSTGRES_BUILD });
  try {
    const event = eventOf(FIRST);
    const reply = await worker.post(`/webhooks/${FIRST}`, event.body, event.headers);
    assert.equal(reply.status, 500);
    assert.deepEqual(await reply.json(), { error: "misconfigured" });
    assert.match(worker.logged("delivery")[0].detail, /STORE = "postgres" needs the \[\[hyperdrive\]\] binding HYPERDRIVE/);
  } finally {
    await worker.dispose();
  }
});

test(`${FIRST}: a local connection string with sslmode=prefer (the proxy asks for TLS, is told no, connects again): applied`, async () => {
  const url = new URL(pg.url);
  url.searchParams.set("sslmode", "prefer");
  const worker = await startPostgresWorker(pg, SOURCE_SECRETS, { hyperdrives: { HYPERDRIVE: url.href } });
  try {
    const before = ledger();
    const reply = await send(worker, FIRST, eventOf(FIRST));
    assert.equal(reply.status, 200, JSON.stringify(reply.body));
    assert.equal(reply.body.outcome, "processed");
    assert.equal(ledger(), before + 1);
  } finally {
    await worker.dispose();
  }
});

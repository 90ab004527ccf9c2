// needs: postgres
// STORE = "postgres" with whatever source this checkout declares first (a
// generated copy's own provider): a storm of one event, distinct events,
// and Postgres stopped and started again, each counted in Postgres's
// ledger. The demo effects' own Postgres tests, where a copy keeps them, go further.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { freshDatabase, startPostgresWorker } from "./support/postgres.mjs";
import { FIRST, SOURCE_SECRETS, eventOf, send } from "./support/sources.mjs";
import { eventually } from "./support/worker.mjs";

let pg;
let w;
const ledger = () => Number(pg.scalar(`SELECT count(*) FROM processed_events WHERE source = '${FIRST}'`));

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
  // A copy once the inbox has recorded it: a duplicate, never processed again.
  await eventually(
    async () => {
      const { outcome } = (await send(w, FIRST, event)).body;
      assert.notEqual(outcome, "processed");
      return outcome === "duplicate";
    },
    10_000,
    "a duplicate",
  );
  assert.equal(ledger(), 12);
});

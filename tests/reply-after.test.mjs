// REPLY_AFTER = "record": a first delivery is answered `accepted` once its
// inbox has claimed it and armed its alarm; the effect follows the reply.
// Every guarantee holds as with "effect": storms of copies make one effect,
// a crash between the reply and the effect is retried by the alarm, and a
// side effect is queued once. No demo effect is needed: this file stays in
// every generated copy.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { unstable_readConfig } from "wrangler";

import { FIRST, SOURCES, SOURCE_SECRETS, UNSIGNABLE, eventOf, send } from "./support/sources.mjs";
import { eventually, startWorker } from "./support/worker.mjs";

const VARS = {
  ...SOURCE_SECRETS,
  REPLY_AFTER: "record",
  NOTIFY_URL: "http://chat.test/hook",
  OUTBOX_RELAY_GRACE_MS: "0",
  // Long enough that a test sees the event before the alarm's retry.
  EFFECT_RETRY_BASE_MS: "1500",
};
const DECLARED = unstable_readConfig({ config: "wrangler.toml" }).vars.SOURCES;

let w;
before(async () => {
  w = await startWorker(VARS);
});
after(() => w.dispose());

const ledgerRows = (worker, source, id) =>
  worker.scalar("SELECT count(*) FROM processed_events WHERE source = ? AND event_id = ?", source, id);
const done = (worker, key, ms = 10_000) =>
  eventually(async () => {
    const state = await worker.inboxState(key);
    return state?.state === "done" && state;
  }, ms, `${key} to be done`);
const accepted = (name, id) => ({ status: 200, body: { outcome: "accepted", key: `${name}:${id}`, reply_after: "record" } });

describe('REPLY_AFTER = "record"', () => {
  for (const name of UNSIGNABLE) {
    test.skip(`${name}: tests/support/events.mjs does not sign its events`);
  }
  for (const [name, { provider }] of SOURCES) {
    test(`${name} (${provider}): 30 concurrent copies, one accepted, then one effect`, async () => {
      const event = eventOf(name);
      const replies = await Promise.all(Array.from({ length: 30 }, () => send(w, name, event)));
      const first = replies.filter((r) => r.body.outcome === "accepted");
      assert.deepEqual(first, [accepted(name, event.id)]);
      assert.equal(replies.filter((r) => r.status === 200 && r.body.outcome === "duplicate").length, 29);
      const state = await done(w, `${name}:${event.id}`);
      assert.equal(state.effect_attempts, 1);
      assert.equal(await ledgerRows(w, name, event.id), 1);
    });
  }

  test("a crash between the reply and the effect: the alarm applies it, once", async () => {
    const event = eventOf(FIRST);
    const key = `${FIRST}:${event.id}`;
    const reply = await send(w, FIRST, event, { "x-test-fault": "crash-after-reply" });
    assert.deepEqual(reply, accepted(FIRST, event.id));
    await eventually(() => w.logged("effect_after_reply_lost").some((l) => l.key === key), 5_000, "the lost effect's log line");
    const held = await w.inboxState(key);
    assert.equal(held.state, "received", "nothing applied the effect yet");
    assert.equal(held.effect_attempts, 0);
    assert.equal(await ledgerRows(w, FIRST, event.id), 0);
    assert.equal((await send(w, FIRST, event)).body.outcome, "duplicate", "a copy meanwhile is a duplicate");
    const state = await done(w, key);
    assert.equal(state.effect_attempts, 1);
    assert.equal(await ledgerRows(w, FIRST, event.id), 1);
  });

  test("a side effect is queued once and sent once, however many copies", async () => {
    const event = eventOf(FIRST);
    const headers = { "x-test-fault": "with-side-effect" };
    const replies = await Promise.all(Array.from({ length: 20 }, () => send(w, FIRST, event, headers)));
    assert.equal(replies.filter((r) => r.body.outcome === "accepted").length, 1);
    const sent = await eventually(async () => {
      const rows = await w.db.prepare("SELECT status FROM outbox WHERE event_id = ?").bind(event.id).all();
      return rows.results.length === 1 && rows.results[0].status === "sent" && rows.results;
    }, 20_000, "the side effect to be sent");
    assert.equal(sent.length, 1);
    assert.equal(w.target.to("http://chat.test/").filter((c) => c.body.includes(event.id)).length, 1);
  });

  test("when the alarm cannot be armed, the effect comes before the reply", async () => {
    const event = eventOf(FIRST);
    const reply = await send(w, FIRST, event, { "x-test-fault": "fail-set-alarm" });
    assert.deepEqual(reply, { status: 200, body: { outcome: "processed", key: `${FIRST}:${event.id}` } });
    assert.equal(await ledgerRows(w, FIRST, event.id), 1);
  });

  test("an effect that fails after the reply is retried by the alarm", async () => {
    const event = eventOf(FIRST);
    const key = `${FIRST}:${event.id}`;
    assert.deepEqual(await send(w, FIRST, event, { "x-test-fault": "fail-before-effect" }), accepted(FIRST, event.id));
    const failed = await eventually(async () => {
      const state = await w.inboxState(key);
      return state.effect_attempts === 1 && state;
    }, 5_000, "the first attempt");
    assert.equal(failed.state, "received");
    const state = await done(w, key);
    assert.equal(state.effect_attempts, 2);
    assert.equal(await ledgerRows(w, FIRST, event.id), 1);
  });
});

describe("per source, and misconfigured", () => {
  test("a source's reply_after overrides REPLY_AFTER; the default answers once applied", async () => {
    const sources = { ...DECLARED, [FIRST]: { ...DECLARED[FIRST], reply_after: "record" } };
    const mixed = await startWorker({ ...SOURCE_SECRETS, SOURCES: JSON.stringify(sources) });
    try {
      const event = eventOf(FIRST);
      assert.deepEqual(await send(mixed, FIRST, event), accepted(FIRST, event.id));
      await done(mixed, `${FIRST}:${event.id}`);
      const other = SOURCES.find(([name]) => name !== FIRST);
      if (other) {
        const plain = eventOf(other[0]);
        assert.deepEqual(await send(mixed, other[0], plain), { status: 200, body: { outcome: "processed", key: `${other[0]}:${plain.id}` } });
      }
      const back = { ...DECLARED, [FIRST]: { ...DECLARED[FIRST], reply_after: "effect" } };
      await mixed.reconfigure({ REPLY_AFTER: "record", SOURCES: JSON.stringify(back) });
      const applied = eventOf(FIRST);
      assert.equal((await send(mixed, FIRST, applied)).body.outcome, "processed");
    } finally {
      await mixed.dispose();
    }
  });

  test("a value other than effect or record refuses deliveries as misconfigured, storing nothing", async () => {
    const bad = await startWorker({ ...SOURCE_SECRETS, REPLY_AFTER: "later" });
    try {
      const event = eventOf(FIRST);
      assert.deepEqual(await send(bad, FIRST, event), { status: 500, body: { error: "misconfigured" } });
      assert.ok(bad.logged("delivery").some((l) => l.detail === "REPLY_AFTER must be effect or record"));
      assert.equal(await bad.inboxState(`${FIRST}:${event.id}`), null);
      const sources = { ...DECLARED, [FIRST]: { ...DECLARED[FIRST], reply_after: "soon" } };
      await bad.reconfigure({ REPLY_AFTER: undefined, SOURCES: JSON.stringify(sources) });
      assert.equal((await send(bad, FIRST, event)).status, 500);
      assert.ok(bad.logged("delivery").some((l) => l.detail === `SOURCES.${FIRST}.reply_after must be effect or record`));
    } finally {
      await bad.dispose();
    }
  });
});

// The guarantees, on whatever this copy receives: every source in
// wrangler.toml gets storms of copies and forged signatures (and, where the
// id is unsigned, its body under fresh ids), and the first one an oversized
// body, a blank secret and the faults — a crash between claim and effect, a
// lost reply after the commit, an effect that never succeeds — and the
// outbox's retries, lease and fencing, through the operators' alert and a
// side effect the tests add (`x-test-fault: with-side-effect`). No demo
// effect is needed: this file stays in every generated copy.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import { UNSIGNED_ID } from "./support/events.mjs";
import { FIRST, FIRST_PROVIDER, SOURCES, SOURCE_SECRETS, UNSIGNABLE, eventOf, forgedOf, secretVar, send as sendTo } from "./support/sources.mjs";
import { eventually, startWorker } from "./support/worker.mjs";

const TARGETS = {
  ALERT_URL: "http://alerts.test/hook",
  NOTIFY_URL: "http://chat.test/hook",
  OUTBOX_RETRY_BASE_SECS: "1",
  OUTBOX_LEASE_MS: "1500",
  OUTBOX_RELAY_GRACE_MS: "0",
  OUTBOX_MAX_ATTEMPTS: "3",
  MAX_BODY_BYTES: "65536",
  EFFECT_MAX_ATTEMPTS: "3",
  // Long enough that a retry cannot land before a test looks at the first attempt.
  EFFECT_RETRY_BASE_MS: "1000",
};

let w;
before(async () => {
  w = await startWorker({ ...SOURCE_SECRETS, ...TARGETS });
});
after(() => w.dispose());

const send = (name, event, headers, worker = w) => sendTo(worker, name, event, headers);
const ledgerRows = (source, id) => w.scalar("SELECT count(*) FROM processed_events WHERE source = ? AND event_id = ?", source, id);
const outboxRows = (id, action) => w.db.prepare("SELECT * FROM outbox WHERE event_id = ? AND action = ?").bind(id, action).all().then((r) => r.results);
const settled = (id, action, status) =>
  eventually(async () => {
    const [row] = await outboxRows(id, action);
    return row?.status === status && row;
  }, 20_000, `the ${action} row of ${id} to be ${status}`);
const calls = (url, id) => w.target.to(url).filter((c) => c.body.includes(id));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

describe("every source", () => {
  for (const name of UNSIGNABLE) {
    test.skip(`${name}: tests/support/events.mjs does not sign its events`);
  }
  for (const [name, { provider }] of SOURCES) {
    test(`${name} (${provider}): 30 concurrent copies, one processed, one ledger row`, async () => {
      const event = eventOf(name);
      const replies = await Promise.all(Array.from({ length: 30 }, () => send(name, event)));
      assert.ok(replies.every((r) => r.status === 200), JSON.stringify(replies[0]));
      assert.equal(replies.filter((r) => r.body.outcome === "processed").length, 1);
      assert.equal(replies.filter((r) => r.body.outcome === "duplicate").length, 29);
      assert.equal(await ledgerRows(name, event.id), 1);
    });

    test(`${name}: a forged signature is a 401 that writes nothing`, async () => {
      const forged = forgedOf(name);
      const reply = await send(name, forged);
      assert.equal(reply.status, 401);
      assert.equal(reply.body.error, "bad_signature");
      assert.equal(await ledgerRows(name, forged.id), 0);
    });
  }
});

describe("a signed body under a fresh id, where the signature does not cover the id", () => {
  for (const [name, { provider }] of SOURCES.filter(([, source]) => UNSIGNED_ID[source.provider])) {
    test(`${name} (${provider}): the body under 3 fresh ids at once is one event; the rest are duplicates`, async () => {
      const event = eventOf(name);
      assert.equal((await send(name, event)).body.outcome, "processed");
      const ids = [1, 2, 3].map((n) => `${event.id}-again-${n}`);
      const replays = await Promise.all(ids.map((id) => send(name, { ...event, headers: { ...event.headers, [UNSIGNED_ID[provider]]: id } })));
      assert.deepEqual(replays.map((r) => [r.status, r.body.outcome]), ids.map(() => [200, "duplicate"]));
      assert.equal(await w.scalar(`SELECT count(*) FROM processed_events WHERE source = ? AND event_id IN (?, ?, ?, ?)`, name, event.id, ...ids), 1);
    });
  }
});

describe(`bad input and bad settings, on ${FIRST}`, () => {
  test("a body past MAX_BODY_BYTES is a 413 that writes nothing", async () => {
    const event = eventOf(FIRST);
    const before = await w.scalar("SELECT count(*) FROM processed_events");
    const reply = await send(FIRST, { ...event, body: event.body.padEnd(65_537, " ") });
    assert.deepEqual([reply.status, reply.body.error], [413, "body_too_large"]);
    assert.equal(await w.scalar("SELECT count(*) FROM processed_events"), before);
  });

  test("a source whose secret is blank is a 500 that names the variable; the others still work", async () => {
    const [, source] = SOURCES[0];
    const variable = secretVar(FIRST, source);
    const bare = await startWorker({ ...SOURCE_SECRETS, [variable]: "" });
    try {
      const reply = await send(FIRST, eventOf(FIRST), {}, bare);
      assert.deepEqual([reply.status, reply.body], [500, { error: "misconfigured" }]);
      assert.match(bare.logged("delivery")[0].detail, new RegExp(`^${variable}: holds no secret`));
      for (const [name] of SOURCES.slice(1)) assert.equal((await send(name, eventOf(name), {}, bare)).status, 200, name);
    } finally {
      await bare.dispose();
    }
  });
});

describe(`faults, on ${FIRST} (${FIRST_PROVIDER})`, () => {
  test("a crash between claim and effect: the alarm applies it, once", async () => {
    const event = eventOf(FIRST);
    const reply = await send(FIRST, event, { "x-test-fault": "fail-before-effect" });
    assert.deepEqual(reply.body, { outcome: "accepted", key: `${FIRST}:${event.id}` });
    assert.equal(await ledgerRows(FIRST, event.id), 0, "the injected fault stops the first attempt");
    assert.equal((await send(FIRST, event)).body.outcome, "duplicate");
    const state = await eventually(async () => {
      const s = await w.inboxState(`${FIRST}:${event.id}`);
      return s.state === "done" && s;
    }, 10_000, "the alarm's retry");
    assert.equal(state.effect_attempts, 2);
    assert.equal(await ledgerRows(FIRST, event.id), 1);
  });

  test("a lost reply after the commit: the retry finds the ledger row, no second effect", async () => {
    const event = eventOf(FIRST);
    // The fault adds a test side effect: the one effect is its one row and one call.
    assert.equal((await send(FIRST, event, { "x-test-fault": "fail-after-effect" })).body.outcome, "accepted");
    await eventually(async () => (await w.inboxState(`${FIRST}:${event.id}`)).state === "done", 10_000, "the alarm's retry");
    assert.equal(await ledgerRows(FIRST, event.id), 1);
    await settled(event.id, "notify_chat", "sent");
    await sleep(1_500); // a second send would land meanwhile
    assert.equal((await outboxRows(event.id, "notify_chat")).length, 1);
    assert.equal(calls("http://chat.test/", event.id).length, 1);
  });

  test("an effect that never succeeds is listed as failed, and the operators are alerted once, through the outbox", async () => {
    const event = eventOf(FIRST);
    let failures = 0;
    w.target.answer = (call) => (call.url.startsWith("http://alerts.test/") && call.body.includes(event.id) && ++failures <= 2 ? 503 : 200);
    try {
      assert.equal((await send(FIRST, event, { "x-test-fault": "effect-always-fails" })).body.outcome, "accepted");
      await eventually(async () => (await w.inboxState(`${FIRST}:${event.id}`)).state === "failed", 10_000, "the event to be marked failed");
      assert.equal(await w.scalar("SELECT count(*) FROM failed_events WHERE source = ? AND event_id = ?", FIRST, event.id), 1);
      assert.equal(await ledgerRows(FIRST, event.id), 0);
      // The alert's target failed twice: retried under one key, then sent.
      const row = await eventually(async () => {
        const [alert] = await w.db.prepare("SELECT * FROM outbox WHERE action = 'notify_operator' AND payload LIKE ?").bind(`%${event.id}%`).all().then((r) => r.results);
        return alert?.status === "sent" && alert;
      }, 20_000, "the alert to be sent");
      assert.equal(row.attempts, 3);
      const alerted = calls("http://alerts.test/", event.id);
      assert.equal(alerted.length, 3);
      assert.deepEqual([...new Set(alerted.map((c) => c.idempotencyKey))], [row.idempotency_key]);
    } finally {
      w.target.answer = () => 200;
    }
  });
});

describe("without TEST_FAULTS, as deployed", () => {
  test("the fault header, and the test side effect with it, are ignored", async () => {
    const deployed = await startWorker({ ...SOURCE_SECRETS, ...TARGETS, TEST_FAULTS: "" });
    try {
      const event = eventOf(FIRST);
      const reply = await deployed.post(`/webhooks/${FIRST}`, event.body, { ...event.headers, "x-test-fault": "with-side-effect" });
      assert.equal((await reply.json()).outcome, "processed");
      const rows = await deployed.db.prepare("SELECT count(*) AS n FROM outbox WHERE event_id = ?").bind(event.id).first("n");
      assert.equal(rows, 0);
    } finally {
      await deployed.dispose();
    }
  });
});

describe(`the outbox, on ${FIRST}'s events with a test side effect`, () => {
  test("30 concurrent copies write one row, performed under one key", async () => {
    const event = eventOf(FIRST);
    const replies = await Promise.all(Array.from({ length: 30 }, () => send(FIRST, event, { "x-test-fault": "with-side-effect" })));
    assert.equal(replies.filter((r) => r.body.outcome === "processed").length, 1);
    const row = await settled(event.id, "notify_chat", "sent");
    assert.equal((await outboxRows(event.id, "notify_chat")).length, 1);
    assert.equal(row.attempts, 1);
    await sleep(1_500); // a second send would land meanwhile
    const chat = calls("http://chat.test/", event.id);
    assert.equal(chat.length, 1);
    assert.equal(chat[0].idempotencyKey, row.idempotency_key);
  });

  test("a crash after the call: performed again, with the same key", async () => {
    const event = eventOf(FIRST);
    await send(FIRST, event, { "x-test-fault": "crash-after-call" });
    const row = await settled(event.id, "notify_chat", "sent");
    assert.equal(row.attempts, 2);
    await sleep(1_500); // a third send would land meanwhile
    assert.deepEqual(calls("http://chat.test/", event.id).map((c) => c.idempotencyKey), [row.idempotency_key, row.idempotency_key]);
  });

  test("a consumer stalled past its lease cannot overwrite the run that took over", async () => {
    const event = eventOf(FIRST);
    let tries = 0;
    w.target.answer = (call) => (call.url.startsWith("http://chat.test/") && call.body.includes(event.id) && ++tries === 1 ? 503 : 200);
    try {
      // The first run's call fails, then it stalls for 3 s before writing
      // "pending". Meanwhile its lease ends and another run takes the row
      // over and sends it (played here with the consumer's own claim).
      await send(FIRST, event, { "x-test-fault": "pause-before-complete:3000" });
      await eventually(() => tries >= 1, 10_000, "the first call");
      await eventually(async () => {
        const [row] = await outboxRows(event.id, "notify_chat");
        return row.status === "sending" && row.lease_until < Date.now();
      }, 2_500, "the stalled run's lease to end");
      const lost = w.logged("outbox_claim_lost").length;
      const takeover = await w.db
        .prepare("UPDATE outbox SET status = 'sending', attempts = attempts + 1, lease_until = ?2 + 60000 WHERE event_id = ?1 AND status = 'sending' AND lease_until < ?2")
        .bind(event.id, Date.now())
        .run();
      assert.equal(takeover.meta.changes, 1, "the lease had expired");
      await w.db.prepare("UPDATE outbox SET status = 'sent', lease_until = NULL WHERE event_id = ? AND attempts = 2").bind(event.id).run();
      await sleep(3_500); // the stalled run wakes, and must lose
      const [row] = await outboxRows(event.id, "notify_chat");
      assert.equal(row.status, "sent");
      assert.equal(row.attempts, 2);
      assert.equal(row.last_error, null);
      assert.equal(w.logged("outbox_claim_lost").length, lost + 1);
    } finally {
      w.target.answer = () => 200;
    }
  });

  test("a slow call holds up no other side effect's sent mark", async () => {
    const slow = eventOf(FIRST);
    const quick = eventOf(FIRST);
    // Sent together, their side effects reach the consumer in one batch
    // (the local queue waits up to 1 s to fill one). The slow one's run
    // stalls 3 s after its call, past its 1.5 s lease.
    await Promise.all([send(FIRST, slow, { "x-test-fault": "pause-before-complete:3000" }), send(FIRST, quick, { "x-test-fault": "with-side-effect" })]);
    await eventually(() => calls("http://chat.test/", slow.id).length === 1, 10_000, "the slow call");
    const row = await settled(quick.id, "notify_chat", "sent");
    assert.equal(row.attempts, 1);
    assert.equal((await outboxRows(slow.id, "notify_chat"))[0].status, "sending", "the slow run is still asleep");
    // Nothing took the slow row over meanwhile: its claim holds.
    await settled(slow.id, "notify_chat", "sent");
    assert.equal(calls("http://chat.test/", quick.id).length, 1);
    assert.equal(calls("http://chat.test/", slow.id).length, 1);
  });

  test("a queue send lost after the commit: the cron relay sends it, once", async () => {
    const event = eventOf(FIRST);
    assert.equal((await send(FIRST, event, { "x-test-fault": "fail-enqueue" })).body.outcome, "processed");
    await sleep(2_500); // longer than a queue batch: nothing was sent
    assert.equal((await outboxRows(event.id, "notify_chat"))[0].status, "pending");
    const worker = await w.mf.getWorker("webhooks");
    await worker.scheduled({ cron: "* * * * *" });
    await settled(event.id, "notify_chat", "sent");
    await worker.scheduled({ cron: "* * * * *" });
    await sleep(2_500);
    assert.equal(calls("http://chat.test/", event.id).length, 1);
  });
});

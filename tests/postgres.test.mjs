// needs: postgres, stripe, demos
// STORE = "postgres": the built postgres variant of the worker in workerd,
// its Hyperdrive binding on a real local Postgres (scripts/postgres.sh).
// Each event's ledger row, effect and outbox rows commit in one Postgres
// transaction; storms, faults, a database that is down, slow, restarting or
// refusing the password; rows counted in Postgres itself.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
// needs: github
import { createHash } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { CLUSTER, freshDatabase, pgctl, startPostgresWorker } from "./support/postgres.mjs";
import { checkoutCompleted, stripeHeaders, uniqueId } from "./support/sign.mjs";
// needs: github
import { githubHeaders, starEvent } from "./support/sign.mjs";
import { SECRETS, eventually } from "./support/worker.mjs";

const TARGETS = {
  EMAIL_API_URL: "http://email.test",
  EMAIL_API_KEY: "test-email-key",
  EMAIL_FROM: "shop@example.com",
  OUTBOX_RETRY_BASE_SECS: "1",
  OUTBOX_RELAY_GRACE_MS: "0",
  EFFECT_RETRY_BASE_MS: "300",
};

let pg;
let w;
before(async () => {
  pg = freshDatabase();
  w = await startPostgresWorker(pg, TARGETS);
});
after(async () => {
  await w?.dispose();
  pg?.start();
});

const sendStripe = async (body, headers = {}) => {
  const reply = await w.post("/webhooks/stripe", body, { ...stripeHeaders(body, SECRETS.STRIPE_WEBHOOK_SECRET.split(",")[0]), ...headers });
  return { status: reply.status, retryAfter: reply.headers.get("retry-after"), body: await reply.json() };
};
const ledgerRows = (id) => Number(pg.scalar(`SELECT count(*) FROM processed_events WHERE event_id = '${id}'`));
const orders = (session) => pg.query(`SELECT status, amount FROM orders WHERE checkout_session_id = '${session}'`);
const emailsFor = (to) => w.target.to("http://email.test").filter((call) => call.body.includes(to));

describe("postgres: one event, one effect", () => {
  test("50 concurrent copies: one processed, one ledger row, one order, one email", async () => {
    const id = uniqueId("evt");
    const session = uniqueId("cs");
    const email = `${session}@example.com`;
    const body = checkoutCompleted({ id, session, email, amount: 4200 });
    const replies = await Promise.all(Array.from({ length: 50 }, () => sendStripe(body)));
    assert.deepEqual([...new Set(replies.map((r) => r.status))], [200]);
    assert.equal(replies.filter((r) => r.body.outcome === "processed").length, 1);
    assert.equal(ledgerRows(id), 1);
    assert.deepEqual(orders(session), [["paid", "4200"]]);
    // The hand-off: the receipt's queue message carried the ledger row and
    // the outbox row to D1, and the email went once, under the row's key.
    await eventually(() => emailsFor(email).length === 1, 10_000, "the receipt");
    assert.equal(await w.scalar("SELECT count(*) FROM processed_events WHERE event_id = ?", id), 1);
    await eventually(async () => (await w.scalar("SELECT count(*) FROM outbox WHERE event_id = ? AND status = 'sent'", id)) === 1, 10_000, "the receipt marked sent");
    await sleep(1_000);
    assert.equal(emailsFor(email).length, 1);
    // Postgres keeps its two hand-off rows (the ledger's, the receipt's)
    // for the relay to mark, hundreds to a transaction, once due: the
    // event committed one transaction, not a second for the mark.
    assert.equal(pg.scalar(`SELECT count(*) FROM webhook_outbox WHERE event_id = '${id}' AND handed_off_at IS NULL`), "2");
    // The relay copies them again (a no-op) and marks them.
    await (await w.mf.getWorker("webhooks")).scheduled({ cron: "* * * * *" });
    assert.equal(pg.scalar(`SELECT count(*) FROM webhook_outbox WHERE event_id = '${id}' AND handed_off_at IS NULL`), "0");
    assert.equal(await w.scalar("SELECT count(*) FROM processed_events WHERE event_id = ?", id), 1);
    assert.equal(emailsFor(email).length, 1);
  });

  test("50 distinct events at once: 50 ledger rows, 50 orders", async () => {
    const run = uniqueId("run");
    const bodies = Array.from({ length: 50 }, (_, i) => checkoutCompleted({ id: `${run}_${i}`, session: `${run}_cs_${i}`, email: `${run}_${i}@example.com` }));
    const replies = await Promise.all(bodies.map((body) => sendStripe(body)));
    assert.equal(replies.filter((r) => r.body.outcome === "processed").length, 50);
    assert.equal(pg.scalar(`SELECT count(*) FROM processed_events WHERE event_id LIKE '${run}_%'`), "50");
    assert.equal(pg.scalar(`SELECT count(*) FROM orders WHERE checkout_session_id LIKE '${run}_cs_%'`), "50");
  });

  test("a crash between claim and effect: applied once by the retry", async () => {
    const id = uniqueId("evt");
    const session = uniqueId("cs");
    const reply = await sendStripe(checkoutCompleted({ id, session }), { "x-test-fault": "fail-before-effect" });
    assert.equal(reply.body.outcome, "accepted");
    assert.equal(ledgerRows(id), 0);
    await eventually(() => ledgerRows(id) === 1, 10_000, "the retry");
    assert.equal(orders(session).length, 1);
  });

  test("a lost reply after the commit: the retry finds the ledger row and changes nothing", async () => {
    const id = uniqueId("evt");
    const session = uniqueId("cs");
    const reply = await sendStripe(checkoutCompleted({ id, session }), { "x-test-fault": "fail-after-effect" });
    assert.equal(reply.body.outcome, "accepted");
    assert.equal(ledgerRows(id), 1);
    await eventually(async () => (await w.inboxState(`stripe:${id}`))?.state === "done", 10_000, "done");
    assert.equal(ledgerRows(id), 1);
    assert.equal(orders(session).length, 1);
  });

  test("a write Postgres refuses rolls back the ledger row with it; the retry applies both", async () => {
    const id = uniqueId("evt");
    const session = uniqueId("cs");
    pg.query("ALTER TABLE orders ADD CONSTRAINT under_1000 CHECK (amount < 1000) NOT VALID");
    try {
      const reply = await sendStripe(checkoutCompleted({ id, session, amount: 5000 }));
      assert.equal(reply.status, 200);
      assert.equal(reply.body.outcome, "accepted");
      assert.equal(ledgerRows(id), 0);
      assert.equal(orders(session).length, 0);
      assert.equal(pg.scalar(`SELECT count(*) FROM webhook_outbox WHERE event_id = '${id}'`), "0");
      assert.match(w.logged("effect_failed").at(-1).error, /postgres refused: 23514/);
    } finally {
      pg.query("ALTER TABLE orders DROP CONSTRAINT under_1000");
    }
    await eventually(() => ledgerRows(id) === 1, 10_000, "the retry");
    assert.deepEqual(orders(session), [["paid", "5000"]]);
  });

  test("a unique key the effect's write breaks is a refusal, not a duplicate: nothing written, the retry applies it", async () => {
    // 23505 is a duplicate only from the ledger's own statement.
    const [first, second] = [uniqueId("evt"), uniqueId("evt")];
    const paymentIntent = uniqueId("pi");
    const session = uniqueId("cs");
    assert.equal((await sendStripe(checkoutCompleted({ id: first, paymentIntent }))).body.outcome, "processed");
    pg.query("CREATE UNIQUE INDEX one_order_per_payment ON orders (payment_intent_id)");
    try {
      const reply = await sendStripe(checkoutCompleted({ id: second, session, paymentIntent }));
      assert.equal(reply.status, 200);
      assert.equal(reply.body.outcome, "accepted");
      assert.equal(ledgerRows(second), 0);
      assert.equal(orders(session).length, 0);
      assert.equal(pg.scalar(`SELECT count(*) FROM webhook_outbox WHERE event_id = '${second}'`), "0");
      assert.match(w.logged("effect_failed").at(-1).error, /postgres refused: 23505 .*constraint one_order_per_payment/);
    } finally {
      pg.query("DROP INDEX one_order_per_payment");
    }
    await eventually(() => ledgerRows(second) === 1, 10_000, "the retry");
    assert.equal(orders(session).length, 1);
  });

  // needs: github
  test("the replay fence: a signed body under a fresh delivery id applies nothing", async () => {
    const repo = uniqueId("repo");
    const body = starEvent({ repo });
    const secret = SECRETS.GITHUB_WEBHOOK_SECRET;
    const deliver = async (delivery) => {
      const reply = await w.post("/webhooks/github", body, githubHeaders(body, secret, { delivery, event: "star" }));
      return reply.json();
    };
    assert.equal((await deliver(uniqueId("d"))).outcome, "processed");
    assert.equal((await deliver(uniqueId("d"))).outcome, "duplicate");
    assert.equal(pg.scalar(`SELECT stars FROM repo_stars WHERE repo = '${repo}'`), "1");
    const fence = createHash("sha256").update(body).digest("hex");
    assert.equal(pg.scalar(`SELECT count(*) FROM processed_events WHERE fence_sha256 = '${fence}'`), "1");
  });
});

describe("postgres: failure is an answer", () => {
  test("Postgres down: 503 with Retry-After, the runtime serves on, the alarm applies it once it is back", async () => {
    const id = uniqueId("evt");
    const session = uniqueId("cs");
    pg.stop();
    let reply;
    try {
      reply = await sendStripe(checkoutCompleted({ id, session }));
      assert.equal(reply.status, 503);
      assert.equal(reply.body.outcome, "accepted");
      assert.equal(reply.body.store, "unavailable");
      assert.ok(Number(reply.retryAfter) >= 1, reply.retryAfter);
      // The runtime is alive: another request is answered.
      const alive = await w.mf.dispatchFetch("http://localhost/");
      assert.equal(alive.status, 200);
      await alive.arrayBuffer();
      // The sender's retry meanwhile is told to come back too, not "done".
      const copy = await sendStripe(checkoutCompleted({ id, session }));
      assert.equal(copy.status, 503);
      assert.equal(copy.body.store, "unavailable");
      assert.ok(Number(copy.retryAfter) >= 1, copy.retryAfter);
    } finally {
      pg.start();
    }
    await eventually(() => ledgerRows(id) === 1, 15_000, "the alarm's retry");
    assert.equal(orders(session).length, 1);
  });

  test("slower than the deadline: 503, and the retry applies it once the lock is gone", async () => {
    const id = uniqueId("evt");
    const session = uniqueId("cs");
    const locker = spawn("sh", ["scripts/postgres.sh", "psql", "-c", "BEGIN; LOCK TABLE processed_events IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(7); COMMIT;"], {
      env: { ...process.env, ...CLUSTER, PG_DB: pg.db },
      stdio: "ignore",
    });
    const exited = new Promise((resolve) => locker.on("exit", resolve));
    await sleep(500);
    const started = Date.now();
    const reply = await sendStripe(checkoutCompleted({ id, session }));
    assert.equal(reply.status, 503);
    assert.ok(Date.now() - started < 6_500, `answered after ${Date.now() - started} ms`);
    await exited;
    await eventually(() => ledgerRows(id) === 1, 15_000, "the retry");
    assert.equal(orders(session).length, 1);
  });

  test("a restart mid-stream (immediate): every event applied exactly once", async () => {
    const run = uniqueId("run");
    const bodies = Array.from({ length: 40 }, (_, i) => checkoutCompleted({ id: `${run}_${i}`, session: `${run}_cs_${i}` }));
    const sending = (async () => {
      const replies = [];
      for (const body of bodies) {
        replies.push(await sendStripe(body));
        await sleep(25);
      }
      return replies;
    })();
    await sleep(300);
    pg.restart("immediate");
    const replies = await sending;
    assert.ok(replies.every((r) => r.status === 200 || r.status === 503), JSON.stringify(replies.map((r) => r.status)));
    await eventually(() => pg.scalar(`SELECT count(*) FROM processed_events WHERE event_id LIKE '${run}_%'`) === "40", 20_000, "every event");
    assert.equal(pg.scalar(`SELECT count(*) FROM orders WHERE checkout_session_id LIKE '${run}_cs_%'`), "40");
  });

  test("a refused password: 503, never a crash", async () => {
    const wrong = { ...pg, url: pg.url.replace(":webhooks@", ":wrong-password@") };
    const bad = await startPostgresWorker(wrong, TARGETS);
    try {
      const body = checkoutCompleted({});
      const reply = await bad.post("/webhooks/stripe", body, stripeHeaders(body, SECRETS.STRIPE_WEBHOOK_SECRET.split(",")[0]));
      assert.equal(reply.status, 503);
      assert.equal((await reply.json()).store, "unavailable");
      // Postgres says 28P01; the pooler, which checks the password first, 08P01.
      assert.match(bad.logged("effect_failed").at(-1).error, /store unavailable: postgres: (28P01|08P01 SASL authentication failed)/);
    } finally {
      await bad.dispose();
    }
  });
});

describe("postgres: the hand-off relay", () => {
  test("a row D1 refuses counts a try and holds no other back", async () => {
    const id = uniqueId("evt");
    const good = JSON.stringify(["stripe", id, "invoice.created", 1, 2, null]);
    pg.query(`INSERT INTO webhook_outbox (kind, key, source, event_id, params, created_at) VALUES
      ('ledger', 'stripe:${id}_bad', 'stripe', '${id}_bad', '["too", "few"]', 0),
      ('ledger', 'stripe:${id}_unreadable', 'stripe', '${id}_unreadable', '{}', 0),
      ('ledger', 'stripe:${id}', 'stripe', '${id}', '${good}', 1)`);
    await (await w.mf.getWorker("webhooks")).scheduled({ cron: "* * * * *" });
    assert.equal(await w.scalar("SELECT count(*) FROM processed_events WHERE event_id = ?", id), 1);
    assert.deepEqual(pg.query(`SELECT key, tries, handed_off_at IS NULL FROM webhook_outbox WHERE event_id LIKE '${id}%' ORDER BY key`), [
      [`stripe:${id}`, "0", "f"],
      [`stripe:${id}_bad`, "1", "t"],
      [`stripe:${id}_unreadable`, "1", "t"],
    ]);
    pg.query(`DELETE FROM webhook_outbox WHERE event_id LIKE '${id}_%'`);
  });

  test("a row left by an attempt cut short is handed off by the cron, once", async () => {
    const id = uniqueId("evt");
    const params = JSON.stringify(["stripe", id, "invoice.created", 1, 2, null]);
    pg.query(`INSERT INTO webhook_outbox (kind, key, source, event_id, params, created_at) VALUES ('ledger', 'stripe:${id}', 'stripe', '${id}', '${params}', 1)`);
    const worker = await w.mf.getWorker("webhooks");
    await Promise.all([worker.scheduled({ cron: "* * * * *" }), worker.scheduled({ cron: "* * * * *" })]);
    assert.equal(await w.scalar("SELECT count(*) FROM processed_events WHERE event_id = ?", id), 1);
    assert.ok(Number(pg.scalar(`SELECT handed_off_at FROM webhook_outbox WHERE event_id = '${id}'`)) > 0);
    assert.ok(w.logged("handoff_relay").length >= 1);
  });

  test("a claim is cut at a megabyte of values, and the run goes on past the cut", async () => {
    const worker = await w.mf.getWorker("webhooks");
    // What other tests left is handed off first.
    await worker.scheduled({ cron: "* * * * *" });
    const id = uniqueId("evt");
    // Three rows of 700 KB each: each claim locks all three and reads the
    // first left (two come to more than 1 MB).
    pg.query(`INSERT INTO webhook_outbox (kind, key, source, event_id, params, created_at)
      SELECT 'ledger', 'stripe:${id}_' || g, 'stripe', '${id}_' || g,
        json_build_array('stripe', '${id}_' || g, repeat('x', 700000), 1, 2, NULL)::text, -1
      FROM generate_series(1, 3) AS g`);
    const relayed = w.logged("handoff_relay").length;
    await worker.scheduled({ cron: "* * * * *" });
    assert.equal(Number(pg.scalar(`SELECT count(*) FROM webhook_outbox WHERE event_id LIKE '${id}_%' AND handed_off_at IS NULL`)), 0);
    assert.equal(await w.scalar("SELECT count(*) FROM processed_events WHERE event_id LIKE ?", `${id}_%`), 3);
    // One batch a row: more only if a D1 call ran late and halved a claim.
    const [run] = w.logged("handoff_relay").slice(relayed);
    assert.equal(run.sent, 3);
    assert.ok(Number(run.detail.match(/^in (\d+) batch/)[1]) >= 3, run.detail);
  });
});

describe("postgres: an operator's failed list and dismissal", () => {
  const TOKEN = "postgres-admin-token-0123456789abcdef";
  let ops;
  before(async () => {
    ops = await startPostgresWorker(pg, { ...TARGETS, ADMIN_TOKEN: TOKEN, EFFECT_MAX_ATTEMPTS: "1" });
  });
  after(() => ops?.dispose());
  const send = async (body, headers = {}) => {
    const reply = await ops.post("/webhooks/stripe", body, { ...stripeHeaders(body, SECRETS.STRIPE_WEBHOOK_SECRET.split(",")[0]), ...headers });
    return reply.json();
  };

  test("a failed event is listed, dismissed in Postgres's ledger, and a copy then applies nothing", async () => {
    const id = uniqueId("evt");
    const session = uniqueId("cs");
    const body = checkoutCompleted({ id, session });
    assert.equal((await send(body, { "x-test-fault": "effect-always-fails" })).outcome, "failed");
    assert.equal(await ops.scalar("SELECT count(*) FROM failed_events WHERE event_id = ? AND dismissed_at IS NULL", id), 1);
    const dismissal = await ops.mf.dispatchFetch(`http://localhost/admin/api/events/stripe/${id}/dismiss`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    assert.equal(dismissal.status, 200, await dismissal.text());
    assert.ok(Number(pg.scalar(`SELECT dismissed_at FROM processed_events WHERE event_id = '${id}'`)) > 0);
    assert.ok((await ops.scalar("SELECT dismissed_at FROM failed_events WHERE event_id = ?", id)) > 0);
    assert.equal((await send(body)).outcome, "duplicate");
    assert.equal(orders(session).length, 0, "dismissed: never applied");
  });

  test("Postgres down past the retry budget: the event waits for it, never failed", async () => {
    const id = uniqueId("evt");
    const session = uniqueId("cs");
    pg.stop();
    try {
      const body = checkoutCompleted({ id, session });
      const reply = await ops.post("/webhooks/stripe", body, stripeHeaders(body, SECRETS.STRIPE_WEBHOOK_SECRET.split(",")[0]));
      assert.equal(reply.status, 503);
      await reply.arrayBuffer();
      // EFFECT_MAX_ATTEMPTS is 1 here: a refused attempt would have failed
      // it. Waiting for the store spends none, however many tries.
      const tries = () => ops.logged("effect_failed").filter((line) => line.key === `stripe:${id}`).length;
      await eventually(() => tries() >= 2, 10_000, "a retry");
      const state = await ops.inboxState(`stripe:${id}`);
      assert.equal(state.state, "received");
      assert.equal(state.effect_attempts, 0);
      assert.match(state.last_error, /^store unavailable: postgres: /);
    } finally {
      pg.start();
    }
    // Retried after as long as it has waited (each try up to the pooler's
    // 2 s wait for a server): within 30 s.
    await eventually(() => ledgerRows(id) === 1, 30_000, "applied once Postgres is back");
    assert.equal(orders(session).length, 1);
  });

  test("applied, but the last attempt's reply was lost: the report finds it in Postgres and lists nothing", async () => {
    const id = uniqueId("evt");
    const session = uniqueId("cs");
    const reply = await send(checkoutCompleted({ id, session }), { "x-test-fault": "fail-after-effect" });
    assert.notEqual(reply.outcome, "failed");
    assert.equal(ledgerRows(id), 1);
    assert.equal(await ops.scalar("SELECT count(*) FROM failed_events WHERE event_id = ?", id), 0);
    await eventually(async () => (await ops.inboxState(`stripe:${id}`))?.state === "done", 10_000, "done");
  });
});

describe("postgres: a hand-off row D1 keeps refusing", () => {
  const TOKEN = "postgres-stuck-token-0123456789abcdef";
  let ops;
  before(async () => {
    ops = await startPostgresWorker(pg, { ...TARGETS, ADMIN_TOKEN: TOKEN });
  });
  after(() => ops?.dispose());
  const api = (path, init = {}) => ops.mf.dispatchFetch(`http://localhost/admin/api/${path}`, { ...init, headers: { authorization: `Bearer ${TOKEN}` } });
  const relay = async () => (await ops.mf.getWorker("webhooks")).scheduled({ cron: "* * * * *" });
  // A source of its own, so that its alert (one per source and interval)
  // is this row's; markup in the id, which every page must escape. D1
  // refuses the row (processed_events.type is NOT NULL) until mended.
  const stuckRow = (tries) => {
    const source = uniqueId("stuck");
    const id = `${uniqueId("evt")}<i>`;
    const key = `${source}:${id}`;
    const refused = JSON.stringify([source, id, null, 1, 2, null]);
    pg.query(`INSERT INTO webhook_outbox (kind, key, source, event_id, params, created_at, tries) VALUES ('ledger', '${key}', '${source}', '${id}', '${refused}', 0, ${tries})`);
    return {
      source,
      id,
      key,
      tries: () => pg.scalar(`SELECT tries FROM webhook_outbox WHERE key = '${key}'`),
      mend: () => pg.query(`UPDATE webhook_outbox SET params = '${JSON.stringify([source, id, "invoice.created", 1, 2, null])}' WHERE key = '${key}'`),
    };
  };

  test("at its tenth try it is alerted and no longer claimed, listed by the API, and retried once D1 takes it", async () => {
    const row = stuckRow(9);
    await relay();
    assert.equal(row.tries(), "10");
    assert.ok(ops.logged("handoff_stuck").some((line) => line.detail.includes(row.key)), "logged");
    const alerts = "SELECT count(*) FROM outbox WHERE action = 'notify_operator' AND event_id = ?";
    assert.equal(await ops.scalar(alerts, row.id), 1, "alerted");
    const refusals = () => ops.logged("handoff_refused").filter((line) => line.detail === row.key).length;
    const before = refusals();
    await relay();
    assert.equal(row.tries(), "10", "no longer claimed");
    assert.equal(refusals(), before, "not sent to D1 again");

    const listed = await api("handoff");
    assert.equal(listed.status, 200);
    const backlog = await listed.json();
    assert.ok(backlog.stuck >= 1 && backlog.waiting >= backlog.stuck, JSON.stringify(backlog));
    assert.equal(backlog.stuck_after_tries, 10);
    assert.deepEqual(
      backlog.stuck_rows.filter((r) => r.key === row.key).map(({ kind, source, event_id, tries }) => ({ kind, source, event_id, tries })),
      [{ kind: "ledger", source: row.source, event_id: row.id, tries: 10 }],
    );

    // The operator mends what D1 refused, then retries.
    row.mend();
    assert.equal((await (await api("handoff/retry", { method: "POST" })).json()).retried, 1);
    assert.equal(row.tries(), "0");
    await relay();
    assert.equal(await ops.scalar("SELECT count(*) FROM processed_events WHERE event_id = ?", row.id), 1);
    assert.ok(Number(pg.scalar(`SELECT handed_off_at FROM webhook_outbox WHERE key = '${row.key}'`)) > 0);
    assert.ok(!(await (await api("handoff")).json()).stuck_rows.some((r) => r.key === row.key));
    assert.equal((await (await api("handoff/retry", { method: "POST" })).json()).retried, 0);
  });

  // needs: dashboard
  test("the dashboard shows a stuck row, escaped, and its Retry makes it due again", async () => {
    const row = stuckRow(10);
    const login = await ops.mf.dispatchFetch("http://localhost/admin/login", {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", "sec-fetch-site": "same-origin" },
      body: `token=${TOKEN}`,
      redirect: "manual",
    });
    await login.arrayBuffer();
    const cookie = login.headers.get("set-cookie").split(";")[0];
    const overview = await (await ops.mf.dispatchFetch("http://localhost/admin", { headers: { cookie } })).text();
    assert.match(overview, /<h2>Hand-off to D1<\/h2>/);
    assert.ok(overview.includes(row.key.replace("<i>", "&lt;i&gt;")), "the stuck row is shown");
    assert.ok(!overview.includes(row.id), "escaped");
    const formToken = overview.match(/action="\/admin\/handoff\/retry"><input type="hidden" name="form_token" value="([0-9a-f]+)"/)[1];
    const retried = await ops.mf.dispatchFetch("http://localhost/admin/handoff/retry", {
      method: "POST",
      headers: { cookie, "content-type": "application/x-www-form-urlencoded", "sec-fetch-site": "same-origin" },
      body: `form_token=${formToken}`,
      redirect: "manual",
    });
    await retried.arrayBuffer();
    assert.equal(retried.headers.get("location"), "/admin?done=retried-handoff");
    assert.equal(row.tries(), "0");
    pg.query(`DELETE FROM webhook_outbox WHERE key = '${row.key}'`);
  });
});

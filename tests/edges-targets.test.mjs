// End to end, at the edges: secrets that fail loudly, side effects fenced,
// timed out and honest, and the demo effects' own rules.
// needs: everything
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import { STRIPE, GITHUB, TOKEN, reply, sendStripe, adminJson, sleep, edgeWorker } from "./support/edges.mjs";
import { eventually, startWorker } from "./support/worker.mjs";
import { checkoutCompleted, githubHeaders, starEvent, stripeHeaders, uniqueId } from "./support/sign.mjs";

let w;
before(async () => {
  w = await edgeWorker();
});
after(() => w.dispose());

describe("secrets fail loudly, never weakly", () => {
  const githubSigned = (body, secret, delivery) => githubHeaders(body, secret, { delivery, event: "star" });

  test("a phrase, a short secret, an empty or truncated whsec_: 500 misconfigured naming the variable, never the value", async () => {
    const s = await startWorker({
      SOURCES: {
        phrase: { provider: "github", secret: "PHRASE_SECRET" },
        short: { provider: "github", secret: "SHORT_SECRET" },
        emptywh: { provider: "standard-webhooks", secret: "EMPTY_WHSEC" },
        tinywh: { provider: "svix", secret: "TINY_WHSEC" },
        pasted: { provider: "github", secret: "whsec_pasted/value+xyz=" },
      },
      PHRASE_SECRET: "my team hook secret",
      SHORT_SECRET: "abc",
      EMPTY_WHSEC: "whsec_",
      TINY_WHSEC: "whsec_AAAAAAAA",
    });
    try {
      const body = starEvent({ repo: "octo/weak" });
      const cases = [
        ["phrase", githubSigned(body, "my team hook secret", "d1"), "PHRASE_SECRET"],
        ["short", githubSigned(body, "abc", "d2"), "SHORT_SECRET"],
        ["emptywh", { "webhook-id": "m1", "webhook-timestamp": "1", "webhook-signature": "v1,AAAA" }, "EMPTY_WHSEC"],
        ["tinywh", { "svix-id": "m1", "svix-timestamp": "1", "svix-signature": "v1,AAAA" }, "TINY_WHSEC"],
        ["pasted", githubSigned(body, "whsec_pasted/value+xyz=", "d3"), "SOURCES.pasted.secret"],
      ];
      for (const [source, headers, variable] of cases) {
        const res = await s.post(`/webhooks/${source}`, body, headers);
        assert.deepEqual(await reply(res), { status: 500, body: { error: "misconfigured" } }, source);
        const line = s.logged("delivery").find((l) => l.source === source);
        assert.ok(line.detail.includes(variable), `${source}: ${line.detail}`);
      }
      for (const value of ["my team hook secret", "whsec_pasted/value+xyz=", "whsec_AAAAAAAA"]) {
        assert.ok(!s.logs.some((l) => l.includes(value)), `the log repeats ${value}`);
      }
      assert.equal(await s.scalar("SELECT count(*) FROM processed_events"), 0);
    } finally {
      await s.dispose();
    }
  });

  test("which secret verified a delivery is logged and counted, by position", async () => {
    const s = await startWorker({ ADMIN_TOKEN: TOKEN, STATS_FLUSH_MS: "0" });
    try {
      const body = checkoutCompleted();
      const res = await s.post("/webhooks/stripe", body, stripeHeaders(body, "whsec_test_previous"));
      assert.equal((await res.json()).outcome, "processed");
      const line = s.logged("delivery").find((l) => l.key === `stripe:${JSON.parse(body).id}`);
      assert.equal(line.secret, 1);
      const current = checkoutCompleted();
      await s.post("/webhooks/stripe", current, stripeHeaders(current, STRIPE)).then((r) => r.arrayBuffer());
      const counters = await eventually(async () => {
        const { stats } = await adminJson(s, "stats");
        const c = stats.counters.filter((x) => x.source === "stripe");
        return c.some((x) => x.counter === "secret:0") && c;
      }, 10_000, "the counters");
      assert.equal(counters.find((x) => x.counter === "secret:1").value, 1);
      assert.equal(counters.find((x) => x.counter === "secret:0").value, 1);
      assert.ok(!s.logs.some((l) => l.includes("whsec_test")), "no secret in any log line");
    } finally {
      await s.dispose();
    }
  });

  test("an unreachable target's error is a fixed phrase: the URL's token goes nowhere", async () => {
    // The runtime refuses to fetch this scheme, with an error that quotes
    // the URL: as a dead host's error may.
    const s = await startWorker({ NOTIFY_URL: "ftp://chat.test/hook/T0KEN-IN-URL", OUTBOX_RETRY_BASE_SECS: "60" });
    try {
      const body = starEvent({ repo: `octo/${uniqueId("repo")}` });
      const delivery = uniqueId("delivery");
      await s.post("/webhooks/github", body, githubSigned(body, GITHUB, delivery)).then((r) => r.arrayBuffer());
      const row = await eventually(
        () => s.db.prepare("SELECT * FROM outbox WHERE event_id = ? AND action != 'notify_operator' AND last_error IS NOT NULL").bind(delivery).first(),
        10_000,
        "the failed call",
      );
      assert.equal(row.last_error, "target unreachable");
      assert.ok(!s.logs.some((l) => l.includes("T0KEN-IN-URL")), "the token is in a log line");
    } finally {
      await s.dispose();
    }
  });
});

describe("side effects: fenced, timed out, honest", () => {
  const TARGETS = {
    EMAIL_API_URL: "http://email.test",
    NOTIFY_URL: "http://chat.test/hook",
    OUTBOX_RETRY_BASE_SECS: "1",
    OUTBOX_LEASE_MS: "1000",
    OUTBOX_RELAY_GRACE_MS: "0",
    OUTBOX_MAX_ATTEMPTS: "3",
  };
  const rowOf = (worker, eventId) => worker.db.prepare("SELECT * FROM outbox WHERE event_id = ? AND action != 'notify_operator'").bind(eventId).first();
  const emailsTo = (worker, to) =>
    worker.target.to("http://email.test/").filter((c) => JSON.parse(c.body).to[0] === to);

  test("a call that hangs is aborted before the lease ends, then retried", async () => {
    const s = await startWorker(TARGETS);
    try {
      const email = `${uniqueId("slow")}@example.com`;
      let calls = 0;
      s.target.handle = async (request) => {
        const body = await request.text();
        if (request.url.startsWith("http://email.test/") && JSON.parse(body).to[0] === email && ++calls === 1) {
          await sleep(5_000); // far past the lease
        }
        return new Response("{}", { status: 200 });
      };
      const body = checkoutCompleted({ email });
      await sendStripe(s, body);
      const row = await eventually(async () => {
        const r = await rowOf(s, JSON.parse(body).id);
        return r?.status === "sent" && r;
      }, 15_000, "the retried call");
      assert.equal(row.last_error, "target timed out after 500 ms");
      assert.equal(row.attempts, 2);
    } finally {
      await s.dispose();
    }
  });

  test("a message that arrives before the row is due does not perform it early", async () => {
    const s = await startWorker({ ...TARGETS, OUTBOX_RETRY_BASE_SECS: "60" });
    try {
      const email = `${uniqueId("early")}@example.com`;
      s.target.answer = (call) => (call.url.startsWith("http://email.test/") ? 503 : 200);
      const body = checkoutCompleted({ email });
      await sendStripe(s, body);
      const id = JSON.parse(body).id;
      const row = await eventually(async () => {
        const r = await rowOf(s, id);
        return r?.last_error && r;
      }, 10_000, "the first failed call");
      assert.ok(row.next_attempt_at > Date.now() + 20_000, "due in 30 s or more");
      s.target.answer = () => 200;
      const queue = await s.mf.getQueueProducer("OUTBOX", "webhooks");
      await queue.send(JSON.stringify({ key: row.idempotency_key }), { contentType: "text" });
      await (await s.mf.getWorker("webhooks")).scheduled({ cron: "* * * * *" });
      await sleep(2_500);
      assert.equal(emailsTo(s, email).length, 1, "performed again before it was due");
      assert.equal((await rowOf(s, id)).status, "pending");
    } finally {
      await s.dispose();
    }
  });

  test("a consumer stalled past its lease cannot overwrite the run that took over", async () => {
    const s = await startWorker(TARGETS);
    try {
      const email = `${uniqueId("stall")}@example.com`;
      let calls = 0;
      s.target.answer = (call) =>
        call.url.startsWith("http://email.test/") && JSON.parse(call.body).to[0] === email && ++calls === 1 ? 503 : 200;
      const body = checkoutCompleted({ email });
      const id = JSON.parse(body).id;
      // The first run's call fails, then it stalls for 3 s before writing
      // "pending". Meanwhile its lease ends, and another run takes the row
      // over and sends it: the local queue runs one batch at a time, so that
      // other run is played here with the consumer's own claim and completion.
      await sendStripe(s, body, { "x-test-fault": "pause-before-complete:3000" });
      await eventually(() => calls >= 1, 10_000, "the first call");
      await sleep(1_200);
      const now = Date.now();
      const takeover = await s.db
        .prepare(
          "UPDATE outbox SET status = 'sending', attempts = attempts + 1, lease_until = ?2 + 60000 " +
            "WHERE event_id = ?1 AND status = 'sending' AND lease_until < ?2",
        )
        .bind(id, now)
        .run();
      assert.equal(takeover.meta.changes, 1, "the lease had expired");
      await s.db.prepare("UPDATE outbox SET status = 'sent', lease_until = NULL WHERE event_id = ? AND attempts = 2").bind(id).run();
      await sleep(3_500); // the stalled run wakes, and must lose
      const after = await rowOf(s, id);
      assert.equal(after.status, "sent");
      assert.equal(after.attempts, 2);
      assert.equal(after.last_error, null);
      assert.equal(s.logged("outbox_claim_lost").length, 1);
    } finally {
      await s.dispose();
    }
  });

  test("a missing target is a failure that dead-letters unless SIDE_EFFECTS = log", async () => {
    const s = await startWorker({ ...TARGETS, SIDE_EFFECTS: "", NOTIFY_URL: "", OUTBOX_MAX_ATTEMPTS: "2" });
    try {
      const delivery = uniqueId("delivery");
      const body = starEvent({ repo: `octo/${uniqueId("repo")}` });
      await s.post("/webhooks/github", body, githubHeaders(body, GITHUB, { delivery, event: "star" })).then((r) => r.arrayBuffer());
      const row = await eventually(async () => {
        const r = await rowOf(s, delivery);
        return r?.status === "dead" && r;
      }, 20_000, "the dead row");
      assert.match(row.last_error, /^NOTIFY_URL is not set/);
      assert.equal(row.attempts, 2);
    } finally {
      await s.dispose();
    }
  });

  test("one purchase seen through two sources sends one receipt", async () => {
    const s = await startWorker({
      ...TARGETS,
      SOURCES: { stripe: { provider: "stripe" }, "stripe-connect": { provider: "stripe" } },
      STRIPE_CONNECT_WEBHOOK_SECRET: "whsec_connect_test",
    });
    try {
      const email = `${uniqueId("migrated")}@example.com`;
      const session = uniqueId("cs");
      const body = checkoutCompleted({ email, session });
      await sendStripe(s, body);
      const other = await s.post("/webhooks/stripe-connect", body, stripeHeaders(body, "whsec_connect_test"));
      assert.equal((await other.json()).outcome, "processed");
      assert.equal(await s.scalar("SELECT count(*) FROM processed_events WHERE event_id = ?", JSON.parse(body).id), 2);
      assert.equal(await s.scalar("SELECT count(*) FROM orders WHERE checkout_session_id = ?", session), 1);
      await eventually(() => emailsTo(s, email).length >= 1, 10_000, "the receipt");
      await sleep(2_000);
      assert.equal(emailsTo(s, email).length, 1);
      assert.equal(await s.scalar("SELECT count(*) FROM outbox WHERE status = 'sent'"), 1);
    } finally {
      await s.dispose();
    }
  });
});

describe("the demo effects are right", () => {
  test("a checkout paid later: no receipt until the money is in, one after; a failed one is marked so", async () => {
    const s = await startWorker({ EMAIL_API_URL: "http://email.test" });
    try {
      const email = `${uniqueId("async")}@example.com`;
      const session = uniqueId("cs");
      const order = () => s.db.prepare("SELECT * FROM orders WHERE checkout_session_id = ?").bind(session).first();
      await sendStripe(s, checkoutCompleted({ session, email, paymentStatus: "unpaid" }));
      assert.equal((await order()).status, "awaiting_payment");
      assert.equal(await s.scalar("SELECT count(*) FROM outbox WHERE payload LIKE ?", `%${email}%`), 0);
      const succeeded = checkoutCompleted({ session, email, type: "checkout.session.async_payment_succeeded" });
      assert.equal((await sendStripe(s, succeeded)).body.outcome, "processed");
      assert.equal((await order()).status, "paid");
      await eventually(() => s.target.to("http://email.test/").some((c) => c.body.includes(email)), 10_000, "the receipt");

      const failedSession = uniqueId("cs");
      await sendStripe(s, checkoutCompleted({ session: failedSession, paymentStatus: "unpaid" }));
      await sendStripe(s, checkoutCompleted({ session: failedSession, paymentStatus: "unpaid", type: "checkout.session.async_payment_failed" }));
      assert.equal(await s.scalar("SELECT status FROM orders WHERE checkout_session_id = ?", failedSession), "payment_failed");
      // A late "completed" cannot move a paid order back, nor a failed one
      // back to waiting.
      await sendStripe(s, checkoutCompleted({ session, email, paymentStatus: "unpaid" }));
      assert.equal((await order()).status, "paid");
      await sendStripe(s, checkoutCompleted({ session: failedSession, paymentStatus: "unpaid" }));
      assert.equal(await s.scalar("SELECT status FROM orders WHERE checkout_session_id = ?", failedSession), "payment_failed");
    } finally {
      await s.dispose();
    }
  });

  test("receipts write amounts with the currency's exponent", async () => {
    const s = await startWorker({ EMAIL_API_URL: "http://email.test" });
    try {
      for (const [currency, amount, shown] of [["jpy", 500, "500 JPY"], ["kwd", 1234, "1.234 KWD"], ["usd", 4205, "42.05 USD"]]) {
        const email = `${uniqueId(currency)}@example.com`;
        await sendStripe(s, checkoutCompleted({ email, currency, amount }));
        const call = await eventually(
          () => s.target.to("http://email.test/").find((c) => JSON.parse(c.body).to[0] === email),
          10_000,
          `the ${currency} receipt`,
        );
        assert.match(JSON.parse(call.body).text, new RegExp(`payment of ${shown.replace(".", "\\.")} `));
      }
    } finally {
      await s.dispose();
    }
  });
});

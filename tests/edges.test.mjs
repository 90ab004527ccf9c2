// End to end: the guarantees at their edges — a signed body replayed under
// fresh ids, a D1 outage longer than the retry budget, retention on every
// path, and bodies at and past the size cap.
// needs: everything
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { request } from "node:http";
import { connect } from "node:net";
import { createHash } from "node:crypto";

import { SECRETS, eventually, startWorker } from "./support/worker.mjs";
import { SIGNATURES, checkoutCompleted, githubHeaders, starEvent, stripeHeaders, uniqueId } from "./support/sign.mjs";

const STRIPE = "whsec_test_current";
const GITHUB = SECRETS.GITHUB_WEBHOOK_SECRET;
const TOKEN = "edges-admin-token-0123456789abcdef";

let w;
before(async () => {
  w = await startWorker(
    { ADMIN_TOKEN: TOKEN, NOTIFY_URL: "http://chat.test/hook", OUTBOX_RELAY_GRACE_MS: "0" },
    { port: 0 },
  );
});
after(() => w.dispose());

const reply = async (res) => ({ status: res.status, body: await res.json() });
const sendStripe = (worker, body, headers = {}) =>
  worker.post("/webhooks/stripe", body, { ...stripeHeaders(body, STRIPE), ...headers }).then(reply);
const sendGithub = (body, delivery, event = "star") =>
  w.post("/webhooks/github", body, githubHeaders(body, GITHUB, { delivery, event })).then(reply);
const adminJson = async (worker, path, method = "GET") => {
  const res = await worker.mf.dispatchFetch(`http://localhost/admin/api/${path}`, {
    method,
    headers: { authorization: `Bearer ${TOKEN}` },
  });
  assert.equal(res.status, 200, `${path}: ${res.status}`);
  return res.json();
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Counts of every table an effect could touch (the demos' as far as they are there). */
async function tableCounts(worker) {
  const counts = {};
  const tables = await worker.db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT GLOB '_cf_*' AND name NOT GLOB 'sqlite_*' AND name NOT IN ('source_counters', 'delivery_trend', 'd1_migrations')").all();
  for (const { name: table } of tables.results) {
    counts[table] = await worker.scalar(`SELECT count(*) FROM ${table}`);
  }
  return counts;
}

describe("a signed body replayed under fresh ids", () => {
  test("one GitHub star body under 5 fresh delivery ids: the counter moves once, one chat message", async () => {
    const repo = `octo/${uniqueId("repo")}`;
    const body = starEvent({ repo });
    const ids = Array.from({ length: 5 }, () => uniqueId("delivery"));
    const first = await sendGithub(body, ids[0]);
    assert.deepEqual(first, { status: 200, body: { outcome: "processed", key: `github:${ids[0]}` } });
    // The rest at once, as an attacker replaying a captured delivery would.
    const replays = await Promise.all(ids.slice(1).map((id) => sendGithub(body, id)));
    for (const [i, r] of replays.entries()) {
      assert.deepEqual(r, { status: 200, body: { outcome: "duplicate", key: `github:${ids[i + 1]}` } });
    }
    assert.equal(await w.scalar("SELECT stars FROM repo_stars WHERE repo = ?", repo), 1);
    assert.equal(await w.scalar("SELECT count(*) FROM processed_events WHERE source = 'github' AND event_id IN (?, ?, ?, ?, ?)", ...ids), 1);
    assert.equal(await w.scalar("SELECT count(*) FROM outbox WHERE event_id IN (?, ?, ?, ?, ?)", ...ids), 1);
    // The delivery log of a replay names the event it repeats.
    const state = await w.inboxState(`github:${ids[3]}`);
    assert.equal(state.state, "done");
    assert.equal(state.delivery_log[0].kind, "replayed_body");
    assert.equal(state.delivery_log[0].duplicate_of, `github:${ids[0]}`);
    const chat = () => w.target.calls.filter((c) => c.url.startsWith("http://chat.test") && c.body.includes(repo));
    await eventually(() => chat().length >= 1, 10_000, "the chat message");
    await sleep(1500);
    assert.equal(chat().length, 1, "one chat message, not one per replay");
  });

  test("a signed comment relabelled as a star is refused and changes no table", async () => {
    const repo = `octo/${uniqueId("repo")}`;
    const comment = JSON.stringify({
      action: "created",
      issue: { number: 1, title: "hello" },
      comment: { id: 7, body: "nice" },
      repository: { full_name: repo },
      sender: { login: "mallory" },
    });
    const before = await tableCounts(w);
    const delivery = uniqueId("delivery");
    const res = await sendGithub(comment, delivery, "star");
    assert.deepEqual(res, { status: 400, body: { error: "malformed_body" } });
    assert.deepEqual(await tableCounts(w), before);
    assert.equal(await w.inboxState(`github:${delivery}`), null);
    // As what it is, it is an ordinary event: the ledger row only.
    assert.equal((await sendGithub(comment, uniqueId("delivery"), "issue_comment")).body.outcome, "processed");
    assert.equal(await w.scalar("SELECT stars FROM repo_stars WHERE repo = ?", repo), null);
  });

  test("where the signature covers the id, equal bodies under two ids are two events", async () => {
    // Stripe signs the body, which holds the id: the fence never sees two
    // ids with one body. Standard Webhooks signs the id itself.
    const body = JSON.stringify({ type: "ping", data: {} });
    const key = Buffer.from("c2VjcmV0LWtleS1mb3ItdGVzdHMtMTIzNDU2", "base64");
    const sources = JSON.stringify({ std: { provider: "standard-webhooks", secret: "STD_SECRET" } });
    const std = await startWorker({ SOURCES: JSON.parse(sources), STD_SECRET: "whsec_c2VjcmV0LWtleS1mb3ItdGVzdHMtMTIzNDU2" });
    try {
      for (const id of ["msg_a", "msg_b"]) {
        const t = Math.floor(Date.now() / 1000);
        const res = await std.post("/webhooks/std", body, {
          "webhook-id": id,
          "webhook-timestamp": String(t),
          "webhook-signature": SIGNATURES.standardWebhooks(key, id, t, body),
        });
        assert.deepEqual(await reply(res), { status: 200, body: { outcome: "processed", key: `std:${id}` } });
      }
    } finally {
      await std.dispose();
    }
  });
});

describe("no acknowledged event is lost or stuck", () => {
  test("D1 down past the retry budget, failed_events unwritable too: listed once D1 is back, and a resend applies it once", async () => {
    const o = await startWorker({ ADMIN_TOKEN: TOKEN, EFFECT_MAX_ATTEMPTS: "3", EFFECT_RETRY_BASE_MS: "100" });
    try {
      const session = uniqueId("cs");
      const body = checkoutCompleted({ session });
      const id = JSON.parse(body).id;
      const downUntil = Date.now() + 3_000;
      const first = await sendStripe(o, body, { "x-test-fault": `d1-down-until:${downUntil}` });
      assert.deepEqual(first.body, { outcome: "accepted", key: `stripe:${id}` });
      const failed = await eventually(async () => {
        const s = await o.inboxState(`stripe:${id}`);
        return s.state === "failed" && s;
      }, 10_000, "the budget to run out");
      assert.ok(Date.now() < downUntil, "the budget ran out while D1 was down");
      assert.equal(failed.reported, false);
      assert.equal(await o.scalar("SELECT count(*) FROM failed_events WHERE event_id = ?", id), 0);
      // D1 comes back: the inbox's alarm writes the report it owes.
      await eventually(async () => (await o.inboxState(`stripe:${id}`)).reported, 15_000, "the failure report");
      const listed = (await adminJson(o, "events?status=failed")).events;
      assert.ok(listed.some((e) => e.event_id === id), JSON.stringify(listed));
      // A resend (Stripe's retry, or the merchant's button) reopens it.
      assert.deepEqual((await sendStripe(o, body)).body, { outcome: "processed", key: `stripe:${id}` });
      assert.equal(await o.scalar("SELECT count(*) FROM processed_events WHERE event_id = ?", id), 1);
      assert.equal(await o.scalar("SELECT count(*) FROM orders WHERE checkout_session_id = ?", session), 1);
      assert.equal(await o.scalar("SELECT count(*) FROM failed_events WHERE event_id = ?", id), 0);
      assert.equal((await sendStripe(o, body)).body.outcome, "duplicate");
      assert.equal(await o.scalar("SELECT count(*) FROM processed_events WHERE event_id = ?", id), 1);
    } finally {
      await o.dispose();
    }
  });

  test("an effect that committed but lost its reply on the last attempt ends done, not listed as failed", async () => {
    const o = await startWorker({ ADMIN_TOKEN: TOKEN, EFFECT_MAX_ATTEMPTS: "1", EFFECT_RETRY_BASE_MS: "100" });
    try {
      const body = checkoutCompleted();
      const id = JSON.parse(body).id;
      // Its one attempt committed, then failed: the budget is spent.
      const res = await sendStripe(o, body, { "x-test-fault": "fail-after-effect" });
      assert.equal(res.body.outcome, "duplicate", "answered as an effect the ledger shows committed");
      // The report finds the ledger row: nothing is owed, the event is done.
      const state = await eventually(async () => {
        const s = await o.inboxState(`stripe:${id}`);
        return s.state === "done" && s;
      }, 10_000, "the event to settle");
      assert.equal(state.reported, false);
      assert.equal(await o.scalar("SELECT count(*) FROM failed_events WHERE event_id = ?", id), 0);
      assert.equal(await o.scalar("SELECT count(*) FROM processed_events WHERE event_id = ?", id), 1);
    } finally {
      await o.dispose();
    }
  });

  test("an event done by an alarm retry is forgotten at retention", async () => {
    const short = await startWorker({ RETENTION: "3s" });
    try {
      const body = checkoutCompleted();
      const id = JSON.parse(body).id;
      const res = await sendStripe(short, body, { "x-test-fault": "fail-before-effect" });
      assert.equal(res.body.outcome, "accepted");
      await eventually(async () => (await short.inboxState(`stripe:${id}`)).state === "done", 10_000, "the alarm retry");
      await eventually(async () => (await short.inboxState(`stripe:${id}`)) === null, 15_000, "the inbox to forget");
      assert.equal(await short.scalar("SELECT count(*) FROM processed_events WHERE event_id = ?", id), 1);
    } finally {
      await short.dispose();
    }
  });

  test("a failed event outlives retention until an operator dismisses it", async () => {
    const short = await startWorker({
      ADMIN_TOKEN: TOKEN,
      RETENTION: "2s",
      EFFECT_MAX_ATTEMPTS: "2",
      EFFECT_RETRY_BASE_MS: "100",
    });
    try {
      const body = checkoutCompleted();
      const id = JSON.parse(body).id;
      await sendStripe(short, body, { "x-test-fault": "effect-always-fails" });
      await eventually(async () => (await short.inboxState(`stripe:${id}`)).reported, 10_000, "the failure report");
      await sleep(4_000);
      assert.equal((await short.inboxState(`stripe:${id}`)).state, "failed", "kept past retention");

      const dismissed = await adminJson(short, `events/stripe/${id}/dismiss`, "POST");
      assert.equal(dismissed.outcome, "dismissed");
      assert.ok(!(await adminJson(short, "events?status=failed")).events.some((e) => e.event_id === id));
      const detail = await adminJson(short, `events/stripe/${id}`);
      assert.ok(detail.records.failure.dismissed_at > 0, "the decision is on record");
      const again = await short.mf.dispatchFetch(`http://localhost/admin/api/events/stripe/${id}/dismiss`, {
        method: "POST",
        headers: { authorization: `Bearer ${TOKEN}` },
      });
      assert.equal(again.status, 409);
      await again.arrayBuffer();
      await eventually(async () => (await short.inboxState(`stripe:${id}`)) === null, 15_000, "the inbox to forget");
      // The ledger records it as handled: a copy after the inbox forgot is
      // a duplicate, and the effect never happens.
      assert.equal((await sendStripe(short, body)).body.outcome, "duplicate");
      assert.equal(await short.scalar("SELECT count(*) FROM processed_events WHERE event_id = ?", id), 1);
      const session = JSON.parse(body).data.object.id;
      assert.equal(await short.scalar("SELECT count(*) FROM orders WHERE checkout_session_id = ?", session), 0);
    } finally {
      await short.dispose();
    }
  });
});

/** POSTs `total` bytes in chunks without a Content-Length; resolves with the
 * status and how many bytes had been written when the answer came. A server
 * that answers and closes while the client is still sending may reset the
 * connection, and the reset can discard its answer before the client reads
 * it: that resolves with `reset: true` (the server stopped reading early all
 * the same). */
function chunkedPost(url, total, headers = {}) {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: "POST", headers: { "transfer-encoding": "chunked", ...headers } });
    const chunk = Buffer.alloc(64 * 1024, 0x61);
    let written = 0;
    let answered = false;
    req.on("response", (res) => {
      answered = true;
      res.resume();
      res.on("end", () => resolve({ status: res.statusCode, written }));
    });
    req.on("error", (e) => {
      if (answered) return;
      answered = true;
      if (e.code === "ECONNRESET" || e.code === "EPIPE") resolve({ status: null, reset: true, written });
      else reject(e);
    });
    const pump = () => {
      while (!answered && written < total) {
        written += chunk.length;
        if (!req.write(chunk)) return req.once("drain", pump);
      }
      if (!answered) req.end();
    };
    pump();
  });
}

describe("memory is bounded whatever the request", () => {
  test("a 64 MiB chunked POST is refused with 413 long before it is all sent; a valid event follows", async () => {
    const origin = (await w.mf.ready).origin;
    const sent = await chunkedPost(`${origin}/webhooks/stripe`, 64 * 1024 * 1024, { "stripe-signature": "t=1,v1=00" });
    assert.ok(sent.status === 413 || sent.reset, JSON.stringify(sent));
    assert.ok(sent.written < 16 * 1024 * 1024, `answered after ${sent.written} bytes`);
    const login = await chunkedPost(`${origin}/admin/login`, 64 * 1024 * 1024, {
      "content-type": "application/x-www-form-urlencoded",
    });
    assert.ok(login.status === 413 || login.reset, JSON.stringify(login));
    assert.ok(login.written < 16 * 1024 * 1024, `login answered after ${login.written} bytes`);
    const body = checkoutCompleted();
    assert.equal((await sendStripe(w, body)).body.outcome, "processed");
  });

  test("a body declared 0 bytes long but sent chunked is answered, not left waiting", async () => {
    const { hostname, port } = new URL((await w.mf.ready).origin);
    const answer = await new Promise((resolve, reject) => {
      const socket = connect(Number(port), hostname);
      const chunks = [];
      const timer = setTimeout(() => (socket.destroy(), reject(new Error("no answer in 10 s"))), 10_000);
      socket.on("data", (c) => chunks.push(c));
      socket.on("end", () => (clearTimeout(timer), resolve(Buffer.concat(chunks).toString())));
      socket.on("error", (e) => (clearTimeout(timer), reject(e)));
      socket.end(
        "POST /webhooks/stripe HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n" +
          "Transfer-Encoding: chunked\r\nStripe-Signature: t=1,v1=00\r\nConnection: close\r\n\r\n" +
          "5\r\nhello\r\n0\r\n\r\n",
      );
    });
    assert.match(answer, /^HTTP\/1\.1 4\d\d /, answer.slice(0, 200));
  });

  test("a 1 MiB body of quotes and backslashes is stored, retried by the alarm and shown by the admin API", async () => {
    const id = uniqueId("evt");
    const skeleton = JSON.stringify({ id, type: "invoice.created", created: 1, data: { object: { note: "" } } });
    const room = 1024 * 1024 - skeleton.length;
    // Each `"\` pair in a JSON string is written as 4 bytes: \" and \\.
    const note = '"\\'.repeat(Math.floor(room / 4));
    const body = JSON.stringify({ id, type: "invoice.created", created: 1, data: { object: { note } } });
    assert.ok(body.length <= 1024 * 1024 && body.length > 1024 * 1024 - 8, String(body.length));
    const res = await sendStripe(w, body, { "x-test-fault": "fail-before-effect" });
    assert.equal(res.body.outcome, "accepted");
    await eventually(async () => (await w.inboxState(`stripe:${id}`)).state === "done", 10_000, "the alarm retry");
    assert.equal(await w.scalar("SELECT count(*) FROM processed_events WHERE event_id = ?", id), 1);
    const detail = await adminJson(w, `events/stripe/${id}`);
    assert.equal(detail.inbox.body, body);
  });

  test("a request replayed many times keeps a bounded delivery log, and a count of all", async () => {
    const body = checkoutCompleted();
    const id = JSON.parse(body).id;
    const headers = stripeHeaders(body, STRIPE);
    const copies = 250;
    for (let sent = 0; sent < copies; sent += 25) {
      await Promise.all(Array.from({ length: 25 }, () => w.post("/webhooks/stripe", body, headers).then((r) => r.arrayBuffer())));
    }
    const state = await w.inboxState(`stripe:${id}`);
    assert.equal(state.deliveries, copies);
    assert.equal(state.delivery_log.length, 101, "the first copy and the last 100");
    assert.equal(state.delivery_log[0].kind, "first");
  });
});

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

describe("smaller truths", () => {
  test("503 not_recorded only when nothing was stored; unconfirmed when the inbox may hold it", async () => {
    const body = checkoutCompleted();
    const id = JSON.parse(body).id;
    const notStored = await sendStripe(w, body, { "x-test-fault": "fail-claim" });
    assert.deepEqual(notStored, { status: 503, body: { error: "not_recorded" } });
    assert.equal(await w.inboxState(`stripe:${id}`), null);

    const other = checkoutCompleted();
    const otherId = JSON.parse(other).id;
    const lost = await sendStripe(w, other, { "x-test-fault": "lose-reply" });
    assert.deepEqual(lost, { status: 503, body: { error: "unconfirmed" } });
    // It was stored: the alarm applies it, and the provider's retry is a copy.
    await eventually(async () => (await w.inboxState(`stripe:${otherId}`))?.state === "done", 10_000, "the alarm");
    assert.equal((await sendStripe(w, other)).body.outcome, "duplicate");
    assert.equal(await w.scalar("SELECT count(*) FROM processed_events WHERE event_id = ?", otherId), 1);
  });

  test("an inbox an older release left is upgraded in place: its event, its delivery log, how each was verified", async () => {
    const body = checkoutCompleted();
    const id = JSON.parse(body).id;
    // The first release's event table holding this event, done, and the log
    // the release before this one left (no seq): this delivery is a copy.
    const copy = await sendStripe(w, body, { "x-test-fault": "older-tables" });
    assert.deepEqual(copy, { status: 200, body: { outcome: "duplicate", key: `stripe:${id}` } });
    const again = await sendStripe(w, body);
    assert.equal(again.body.outcome, "duplicate");
    const state = await w.inboxState(`stripe:${id}`);
    assert.equal(state.state, "done");
    // The first, the copy the older release logged, and these two.
    assert.equal(state.deliveries, 4);
    assert.deepEqual(state.delivery_log.map((d) => d.kind), ["first", "duplicate", "duplicate", "duplicate"]);
    assert.equal(state.verified, null, "the first delivery's verification was not kept then");
    assert.equal(state.delivery_log[0].verified, undefined);
    assert.equal(state.delivery_log[1].sha256, "logged by an older release");
    assert.equal(state.delivery_log[1].verified, undefined);
    for (const logged of state.delivery_log.slice(2)) {
      assert.equal(logged.verified.scheme, "Stripe-Signature v1: HMAC-SHA256 of t.body");
      assert.equal(logged.verified.secret, 0);
    }
  });

  test("an upgrade interrupted half-way is taken up again: the renamed older log is copied into the new one", async () => {
    const body = checkoutCompleted();
    const id = JSON.parse(body).id;
    // The older event table holding this event, done; a new delivery log
    // without the columns added since; and the older log, renamed to
    // deliveries_before but never copied.
    const copy = await sendStripe(w, body, { "x-test-fault": "interrupted-upgrade" });
    assert.deepEqual(copy, { status: 200, body: { outcome: "duplicate", key: `stripe:${id}` } });
    assert.equal((await sendStripe(w, body)).body.outcome, "duplicate");
    const state = await w.inboxState(`stripe:${id}`);
    // The first, the copy the older log held, and these two.
    assert.equal(state.deliveries, 4);
    assert.deepEqual(state.delivery_log.map((d) => d.kind), ["first", "duplicate", "duplicate", "duplicate"]);
    assert.equal(state.delivery_log[1].sha256, "left by an interrupted upgrade");
    for (const logged of state.delivery_log.slice(2)) assert.equal(logged.verified.secret, 0);
  });

  test("the dashboard session expires, a logout clears it, every admin response forbids framing", async () => {
    const s = await startWorker({ ADMIN_TOKEN: TOKEN, ADMIN_SESSION_TTL: "3s" });
    try {
      const login = await s.mf.dispatchFetch("http://localhost/admin/login", {
        method: "POST",
        body: `token=${TOKEN}`,
        headers: { "content-type": "application/x-www-form-urlencoded" },
        redirect: "manual",
      });
      assert.equal(login.status, 303);
      const setCookie = login.headers.get("set-cookie");
      assert.match(setCookie, /Max-Age=3(;|$)/);
      const cookie = setCookie.split(";")[0];
      const page = (c) => s.mf.dispatchFetch("http://localhost/admin", { headers: c ? { cookie: c } : {} });
      const signedIn = await page(cookie);
      assert.equal(signedIn.status, 200);
      assert.match(await signedIn.text(), /Sign out/);
      // A cookie claiming a later issue time fails its MAC.
      const [issued, mac] = cookie.split("=")[1].split(".");
      const forged = await page(`admin_session=${Number(issued) + 60_000}.${mac}`);
      assert.equal(forged.status, 401);
      await forged.arrayBuffer();

      // Another site cannot sign the operator out.
      for (const from of [{ "sec-fetch-site": "cross-site" }, { origin: "https://evil.example" }]) {
        const crossSite = await s.mf.dispatchFetch("http://localhost/admin/logout", {
          method: "POST",
          headers: { cookie, ...from },
          redirect: "manual",
        });
        assert.equal(crossSite.status, 403);
        assert.equal(crossSite.headers.get("set-cookie"), null);
        assert.match(crossSite.headers.get("content-security-policy") ?? "", /frame-ancestors 'none'/);
        await crossSite.arrayBuffer();
      }
      // From the dashboard, or from a client that says nothing (curl, an
      // older browser), the sign-out clears the cookie.
      for (const from of [{ origin: "http://localhost" }, {}]) {
        const sameSite = await s.mf.dispatchFetch("http://localhost/admin/logout", {
          method: "POST",
          headers: { cookie, ...from },
          redirect: "manual",
        });
        assert.equal(sameSite.status, 303);
        await sameSite.arrayBuffer();
      }
      const logout = await s.mf.dispatchFetch("http://localhost/admin/logout", {
        method: "POST",
        headers: { cookie, "sec-fetch-site": "same-origin" },
        redirect: "manual",
      });
      assert.equal(logout.status, 303);
      assert.match(logout.headers.get("set-cookie"), /^admin_session=; .*Max-Age=0/);
      await sleep(3_200);
      const expired = await page(cookie);
      assert.equal(expired.status, 401, "the session outlived its lifetime");
      await expired.arrayBuffer();

      for (const res of [
        await page(null),
        await s.mf.dispatchFetch("http://localhost/admin/api/events", { headers: { authorization: `Bearer ${TOKEN}` } }),
        await s.mf.dispatchFetch("http://localhost/admin/api/events"),
      ]) {
        assert.match(res.headers.get("content-security-policy") ?? "", /frame-ancestors 'none'/);
        await res.arrayBuffer();
      }
    } finally {
      await s.dispose();
    }
  });
});

describe("Twilio at its edges", () => {
  const TOKEN_TWILIO = "twilio_auth_token_1234";
  const sign = (url) => SIGNATURES.twilio(TOKEN_TWILIO, url);
  const formSigned = (url, pairs) => SIGNATURES.twilio(TOKEN_TWILIO, url, pairs);
  let t;
  before(async () => {
    t = await startWorker({ SOURCES: { twilio: { provider: "twilio" } }, TWILIO_WEBHOOK_SECRET: TOKEN_TWILIO });
  });
  after(() => t.dispose());
  const post = (body, headers) =>
    t.post("/webhooks/twilio", body, { "content-type": "application/x-www-form-urlencoded", ...headers }).then(reply);

  test("the URL verifies with and without its default port", async () => {
    const pairs = [["MessageSid", uniqueId("SM")], ["MessageStatus", "delivered"]];
    const body = pairs.map(([n, v]) => `${n}=${v}`).join("&");
    const res = await post(body, {
      "x-twilio-signature": formSigned("http://localhost:80/webhooks/twilio", pairs),
      "i-twilio-idempotency-token": uniqueId("idem"),
    });
    assert.equal(res.body.outcome, "processed");
  });

  test("a JSON request's signature re-sent with an empty form is refused: bodySHA256 binds the body", async () => {
    const json = JSON.stringify({ status: "delivered" });
    const digest = createHash("sha256").update(json).digest("hex");
    const url = `http://localhost/webhooks/twilio?bodySHA256=${digest}`;
    const signature = sign(url);
    const headers = { "x-twilio-signature": signature, "i-twilio-idempotency-token": uniqueId("idem") };
    const ok = await t.post(`/webhooks/twilio?bodySHA256=${digest}`, json, { "content-type": "application/json", ...headers }).then(reply);
    assert.equal(ok.body.outcome, "processed");
    const empty = await t
      .post(`/webhooks/twilio?bodySHA256=${digest}`, "", {
        "content-type": "application/x-www-form-urlencoded",
        ...headers,
        "i-twilio-idempotency-token": uniqueId("idem"),
      })
      .then(reply);
    assert.deepEqual(empty, { status: 401, body: { error: "bad_signature" } });
  });

  test("a form of more than 1,000 parameters is 400 before any HMAC", async () => {
    const body = Array.from({ length: 1001 }, (_, i) => `p${i}=1`).join("&");
    const res = await post(body, { "x-twilio-signature": "AAAA", "i-twilio-idempotency-token": uniqueId("idem") });
    assert.deepEqual(res, { status: 400, body: { error: "malformed_body" } });
  });

  test("the same signed form, reordered, under a fresh idempotency token is a replay", async () => {
    const sid = uniqueId("SM");
    const pairs = [["MessageSid", sid], ["MessageStatus", "delivered"]];
    const signature = formSigned("http://localhost/webhooks/twilio", pairs);
    const first = await post(`MessageSid=${sid}&MessageStatus=delivered`, {
      "x-twilio-signature": signature,
      "i-twilio-idempotency-token": uniqueId("idem"),
    });
    assert.equal(first.body.outcome, "processed");
    const token = uniqueId("idem");
    const again = await post(`MessageStatus=delivered&MessageSid=${sid}&`, {
      "x-twilio-signature": signature,
      "i-twilio-idempotency-token": token,
    });
    assert.deepEqual(again.body, { outcome: "duplicate", key: `twilio:${token}` });
    assert.ok(t.logged("delivery").some((l) => l.key === `twilio:${token}` && l.reason === "replayed_body"));
  });
});

describe("the dashboard resolves a failed event", () => {
  test("Dismiss on the event's page; a cross-site post is refused", async () => {
    const s = await startWorker({ ADMIN_TOKEN: TOKEN, EFFECT_MAX_ATTEMPTS: "1", EFFECT_RETRY_BASE_MS: "100" });
    try {
      const body = checkoutCompleted();
      const id = JSON.parse(body).id;
      await sendStripe(s, body, { "x-test-fault": "effect-always-fails" });
      await eventually(async () => (await s.inboxState(`stripe:${id}`)).reported, 10_000, "the failure");
      const cookie = await s.signIn(TOKEN);
      const pageHtml = await (await s.mf.dispatchFetch(`http://localhost/admin/events/stripe/${id}`, { headers: { cookie } })).text();
      assert.match(pageHtml, /action="\/admin\/events\/stripe\/[^"]+\/dismiss"/);
      const formToken = /name="form_token" value="([0-9a-f]{64})"/.exec(pageHtml)[1];
      const action = (headers, token = formToken) =>
        s.mf.dispatchFetch(`http://localhost/admin/events/stripe/${id}/dismiss`, {
          method: "POST",
          headers: { cookie, "content-type": "application/x-www-form-urlencoded", ...headers },
          body: `form_token=${token}`,
          redirect: "manual",
        });
      // With the session's own form token, but from another origin: refused.
      for (const headers of [{ origin: "http://evil.example" }, { "sec-fetch-site": "cross-site" }, { origin: "null" }]) {
        const forged = await action(headers);
        assert.equal(forged.status, 403, JSON.stringify(headers));
        await forged.arrayBuffer();
      }
      // From this origin, but without the token, or with another: refused.
      const sameOrigin = { origin: "http://localhost", "sec-fetch-site": "same-origin" };
      for (const token of ["", "00".repeat(32), formToken.slice(0, 62)]) {
        const forged = await action(sameOrigin, token);
        assert.equal(forged.status, 403, `token ${JSON.stringify(token)}`);
        await forged.arrayBuffer();
      }
      assert.equal((await s.inboxState(`stripe:${id}`)).state, "failed");
      const refusals = s.logged("admin_action").filter((l) => l.outcome === "refused");
      assert.equal(refusals.length, 6);
      const logs = s.logs.join("\n");
      assert.ok(!logs.includes(formToken) && !logs.includes(cookie.split("=")[1]), "no form token or cookie in the logs");
      const done = await action(sameOrigin);
      assert.equal(done.status, 303);
      const location = done.headers.get("location");
      assert.match(location, /\?done=dismissed$/);
      await done.arrayBuffer();
      const shown = await s.mf.dispatchFetch(`http://localhost${location}`, { headers: { cookie } });
      assert.match(await shown.text(), /Dismissed: the event will not be applied/);
      assert.equal((await s.inboxState(`stripe:${id}`)).state, "dismissed");
    } finally {
      await s.dispose();
    }
  });
});

describe("LOG_LEVEL", () => {
  test("warn keeps refusals and failures, and drops the lines of deliveries that went well", async () => {
    const quiet = await startWorker({ LOG_LEVEL: "warn", EMAIL_API_URL: "http://email.test" });
    try {
      const body = checkoutCompleted();
      const id = JSON.parse(body).id;
      assert.equal((await sendStripe(quiet, body)).body.outcome, "processed");
      assert.equal((await sendStripe(quiet, body)).body.outcome, "duplicate");
      const forged = await quiet.post("/webhooks/stripe", body, stripeHeaders(body, "whsec_not_the_secret")).then(reply);
      assert.equal(forged.status, 401);
      await eventually(() => quiet.target.calls.some((c) => c.url.startsWith("http://email.test")), 10_000, "the receipt");
      const deliveries = quiet.logged("delivery");
      assert.deepEqual(
        deliveries.map((l) => [l.outcome, l.reason]),
        [["rejected", "bad_signature"]],
        "only the refusal is logged",
      );
      assert.equal(quiet.logged("outbox_sent").length, 0);
      assert.ok(!deliveries.some((l) => l.key === `stripe:${id}` && l.outcome !== "rejected"));
    } finally {
      await quiet.dispose();
    }
  });

  test("info (the default) logs every delivery; a bad value refuses deliveries as misconfigured", async () => {
    const body = checkoutCompleted();
    assert.equal((await sendStripe(w, body)).body.outcome, "processed");
    assert.ok(w.logged("delivery").some((l) => l.key === `stripe:${JSON.parse(body).id}` && l.outcome === "processed"));
    const bad = await startWorker({ LOG_LEVEL: "verbose" });
    try {
      assert.deepEqual(await sendStripe(bad, checkoutCompleted()), { status: 500, body: { error: "misconfigured" } });
      assert.ok(bad.logged("delivery").some((l) => l.detail === "LOG_LEVEL must be info or warn"));
    } finally {
      await bad.dispose();
    }
  });
});

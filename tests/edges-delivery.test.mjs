// End to end, the guarantees at their edges: a signed body replayed under
// fresh ids, a D1 outage longer than the retry budget, retention on every
// path, and bodies at and past the size cap.
// needs: everything
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { connect } from "node:net";

import { STRIPE, TOKEN, reply, sendStripe, sendGithub, adminJson, sleep, tableCounts, chunkedPost, edgeWorker } from "./support/edges.mjs";
import { eventually, startWorker } from "./support/worker.mjs";
import { SIGNATURES, checkoutCompleted, starEvent, stripeHeaders, uniqueId } from "./support/sign.mjs";

let w;
before(async () => {
  w = await edgeWorker();
});
after(() => w.dispose());

describe("a signed body replayed under fresh ids", () => {
  test("one GitHub star body under 5 fresh delivery ids: the counter moves once, one chat message", async () => {
    const repo = `octo/${uniqueId("repo")}`;
    const body = starEvent({ repo });
    const ids = Array.from({ length: 5 }, () => uniqueId("delivery"));
    const first = await sendGithub(w, body, ids[0]);
    assert.deepEqual(first, { status: 200, body: { outcome: "processed", key: `github:${ids[0]}` } });
    // The rest at once, as an attacker replaying a captured delivery would.
    const replays = await Promise.all(ids.slice(1).map((id) => sendGithub(w, body, id)));
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
    const res = await sendGithub(w, comment, delivery, "star");
    assert.deepEqual(res, { status: 400, body: { error: "malformed_body" } });
    assert.deepEqual(await tableCounts(w), before);
    assert.equal(await w.inboxState(`github:${delivery}`), null);
    // As what it is, it is an ordinary event: the ledger row only.
    assert.equal((await sendGithub(w, comment, uniqueId("delivery"), "issue_comment")).body.outcome, "processed");
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

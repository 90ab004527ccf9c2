// End to end, at the edges: replies when storage fails, inboxes an older
// release left, the dashboard's session, Twilio's URL and forms, and
// LOG_LEVEL.
// needs: everything
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";

import { TOKEN, reply, sendStripe, sleep, edgeWorker } from "./support/edges.mjs";
import { eventually, startWorker } from "./support/worker.mjs";
import { SIGNATURES, checkoutCompleted, stripeHeaders, uniqueId } from "./support/sign.mjs";

let w;
before(async () => {
  w = await edgeWorker();
});
after(() => w.dispose());

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

  // Read once per isolate, still checked on every delivery: an event is
  // never acknowledged into an inbox or an outbox that cannot run.
  test("a bad inbox or outbox setting refuses deliveries, naming it, and stores nothing", async () => {
    for (const [name, value, why] of [
      ["RETENTION", "30x", /^RETENTION must be a duration/],
      ["EFFECT_MAX_ATTEMPTS", "ten", /^EFFECT_MAX_ATTEMPTS must be a whole number/],
      ["OUTBOX_LEASE_MS", "abc", /^OUTBOX_LEASE_MS must be a whole number/],
    ]) {
      const bad = await startWorker({ [name]: value });
      try {
        const body = checkoutCompleted();
        assert.deepEqual(await sendStripe(bad, body), { status: 500, body: { error: "misconfigured" } }, name);
        assert.match(bad.logged("delivery")[0].detail, why);
        assert.equal(await bad.inboxState(`stripe:${JSON.parse(body).id}`), null, "nothing stored");
        assert.equal(await bad.scalar("SELECT count(*) FROM processed_events"), 0);
      } finally {
        await bad.dispose();
      }
    }
  });
});

// End to end: the operators' side under faults and hostile use — failed
// listings that heal whatever order the writes land in, the alarm a copy
// re-arms, an admin token that must be strong, a throttle on guessing it,
// a sign-out that revokes, and an event page whose size is bounded. On
// the first source wrangler.toml declares (and a provider's own where kept).
import assert from "node:assert/strict";
// needs: dashboard
import { createHmac } from "node:crypto";
import { readFileSync, readdirSync } from "node:fs";
import { after, before, describe, test } from "node:test";
import { unstable_splitSqlQuery } from "wrangler";

// needs: github
import { githubHeaders, uniqueId } from "./support/sign.mjs";
import { FIRST, SOURCE_SECRETS, eventOf } from "./support/sources.mjs";
import { eventually, startWorker } from "./support/worker.mjs";

const TOKEN = "operator-admin-token-0123456789abcdef";
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// needs: dashboard
const WINDOW_MS = 15 * 60 * 1000; // crates/engine/src/admin_guard/policy.rs
const reply = async (res) => ({ status: res.status, body: await res.json() });

describe("a failed listing heals when the event ends done", () => {
  let w;
  before(async () => {
    w = await startWorker({ ...SOURCE_SECRETS, ADMIN_TOKEN: TOKEN, EFFECT_MAX_ATTEMPTS: "1", EFFECT_RETRY_BASE_MS: "100" });
  });
  after(() => w.dispose());
  const send = (event, headers = {}) => w.post(`/webhooks/${FIRST}`, event.body, { ...event.headers, ...headers });
  const listed = (id) => w.scalar("SELECT count(*) FROM failed_events WHERE event_id = ?", id);

  test("a copy reopens the event while its failure report is still awaited", async () => {
    const event = eventOf(FIRST);
    const { id } = event;
    const until = Date.now() + 1_000;
    // The one attempt fails, the report is written, and its reply is late:
    // the first delivery's answer waits for it.
    const first = send(event, { "x-test-fault": `report-late:${until}` });
    await eventually(async () => (await listed(id)) === 1, 5_000, "the report to be written");
    await sleep(Math.max(0, until - Date.now()) + 200);
    assert.deepEqual((await reply(await send(event))).body, { outcome: "processed", key: `${FIRST}:${id}` });
    await reply(await first);
    const state = await w.inboxState(`${FIRST}:${id}`);
    assert.equal(state.state, "done");
    assert.equal(await listed(id), 0, "no longer listed as failed");
    assert.equal(await w.scalar("SELECT count(*) FROM processed_events WHERE event_id = ?", id), 1);
  });

  test("the report committed but its reply was lost; a copy then applies the event", async () => {
    const event = eventOf(FIRST);
    const { id } = event;
    const until = Date.now() + 1_500;
    const first = await reply(await send(event, { "x-test-fault": `report-reply-lost:${until}:${until + 60_000}` }));
    assert.equal(first.body.outcome, "failed");
    assert.equal(await listed(id), 1, "written, though the inbox never heard so");
    assert.equal((await w.inboxState(`${FIRST}:${id}`)).reported, false);
    await sleep(Math.max(0, until - Date.now()) + 100);
    assert.equal((await reply(await send(event))).body.outcome, "processed");
    await eventually(async () => (await listed(id)) === 0, 5_000, "the listing to be resolved");
    // The alarm's retries of the report must not list it again.
    await sleep(1_000);
    assert.equal(await listed(id), 0);
    assert.equal((await w.inboxState(`${FIRST}:${id}`)).state, "done");
  });
});

// needs: github
describe("a failed listing heals when the event ends done (continued)", () => {
  test("a report whose reply was lost, then the same body applied under another id: the listing goes", async () => {
    const w = await startWorker({ ...SOURCE_SECRETS, ADMIN_TOKEN: TOKEN, EFFECT_MAX_ATTEMPTS: "1", EFFECT_RETRY_BASE_MS: "100" });
    try {
      const body = JSON.stringify({ zen: "Keep it logically awesome.", hook_id: uniqueId("heal") });
      const [failing, applied] = [uniqueId("d"), uniqueId("d")];
      const send = (delivery, headers = {}) =>
        w.post("/webhooks/github", body, { ...githubHeaders(body, SOURCE_SECRETS.GITHUB_WEBHOOK_SECRET, { delivery, event: "ping" }), ...headers });
      const now = Date.now();
      // Its effect never commits; its report is written, and for 1.5 s
      // every reply to it is lost.
      const first = await reply(await send(failing, { "x-test-fault": `report-reply-lost:${now + 60_000}:${now + 1_500}` }));
      assert.equal(first.body.outcome, "failed");
      const listed = () => w.scalar("SELECT count(*) FROM failed_events WHERE event_id = ?", failing);
      assert.equal(await listed(), 1);
      // GitHub's redelivery of the same body comes under a new id.
      assert.equal((await reply(await send(applied))).body.outcome, "processed");
      // The next report finds the body applied: done, and no longer listed.
      await eventually(async () => (await w.inboxState(`github:${failing}`)).state === "done", 10_000, "the report to settle it");
      await eventually(async () => (await listed()) === 0, 5_000, "the listing to go");
    } finally {
      await w.dispose();
    }
  });
});

describe("an operator's dismissal whose reply was lost", () => {
  test("a copy arriving before the alarm settles it leaves the event dismissed, not done", async () => {
    // The alarm left by the undone dismissal is 30 s away: only the copy
    // can settle the event within the test.
    const w = await startWorker({ ...SOURCE_SECRETS, ADMIN_TOKEN: TOKEN, EFFECT_MAX_ATTEMPTS: "1", EFFECT_RETRY_BASE_MS: "30000" });
    try {
      const event = eventOf(FIRST);
      const { id } = event;
      const key = `${FIRST}:${id}`;
      const send = (headers = {}) => w.post(`/webhooks/${FIRST}`, event.body, { ...event.headers, ...headers });
      const until = Date.now() + 1_000;
      const first = await reply(await send({ "x-test-fault": `dismiss-reply-lost:${until}` }));
      assert.equal(first.body.outcome, "failed");
      const dismissal = await w.mf.dispatchFetch(`http://localhost/admin/api/events/${FIRST}/${encodeURIComponent(id)}/dismiss`, {
        method: "POST",
        headers: { authorization: `Bearer ${TOKEN}` },
      });
      assert.equal(dismissal.status, 500, "the operator is told to try again");
      await dismissal.arrayBuffer();
      assert.equal((await w.inboxState(key)).state, "failed", "undone, for lack of an answer");
      assert.ok((await w.scalar("SELECT dismissed_at FROM failed_events WHERE event_id = ?", id)) > 0, "yet D1 committed it");
      await sleep(Math.max(0, until - Date.now()) + 100);
      const copy = await reply(await send());
      assert.deepEqual(copy, { status: 200, body: { outcome: "duplicate", key } });
      const held = await w.inboxState(key);
      assert.equal(held.state, "dismissed");
      assert.ok(held.next_wake_up_at > Date.now(), "its alarm is set");
      assert.equal(await w.scalar("SELECT count(*) FROM processed_events WHERE event_id = ?", id), 1, "the dismissal's row alone");
      assert.ok(w.logged("event_dismissed").some((l) => l.key === key));
    } finally {
      await w.dispose();
    }
  });
});

describe("while an event's row exists, its inbox has an alarm", () => {
  test("arming the alarm fails after the claim: the first attempt goes ahead", async () => {
    const w = await startWorker({ ...SOURCE_SECRETS, EFFECT_RETRY_BASE_MS: "100" });
    try {
      const event = eventOf(FIRST);
      const key = `${FIRST}:${event.id}`;
      const res = await reply(await w.post(`/webhooks/${FIRST}`, event.body, { ...event.headers, "x-test-fault": "fail-set-alarm" }));
      assert.deepEqual(res, { status: 200, body: { outcome: "processed", key } });
      const held = await w.inboxState(key);
      assert.equal(held.state, "done");
      assert.ok(held.next_wake_up_at > Date.now() + 60_000, "armed for retention by the attempt");
      assert.ok(w.logged("alarm_not_set").some((l) => l.key === key));
    } finally {
      await w.dispose();
    }
  });

  test("a crash before arming the alarm: the sender's retry re-arms it, and the effect happens", async () => {
    const w = await startWorker({ ...SOURCE_SECRETS, EFFECT_RETRY_BASE_MS: "100" });
    try {
      const event = eventOf(FIRST);
      const key = `${FIRST}:${event.id}`;
      const post = (headers = {}) => w.post(`/webhooks/${FIRST}`, event.body, { ...event.headers, ...headers });
      const first = await reply(await post({ "x-test-fault": "crash-before-arming" }));
      assert.deepEqual(first, { status: 503, body: { error: "unconfirmed" } });
      const held = await w.inboxState(key);
      assert.deepEqual([held.state, held.next_wake_up_at], ["received", null]);
      const copy = await reply(await post());
      assert.deepEqual(copy.body, { outcome: "duplicate", key });
      await eventually(async () => (await w.inboxState(key)).state === "done", 5_000, "the re-armed alarm");
      assert.equal(await w.scalar("SELECT count(*) FROM processed_events WHERE event_id = ?", event.id), 1);
      assert.ok(w.logged("alarm_rearmed").some((l) => l.key === key));
    } finally {
      await w.dispose();
    }
  });
});

describe("the admin token", () => {
  for (const [why, token] of [
    ["under 32 bytes", "s3cr3t-short"],
    ["with whitespace inside", "operator-admin-token 0123456789abcdef"],
  ]) {
    test(`${why}: the admin surface is misconfigured, webhooks still work`, async () => {
      const w = await startWorker({ ...SOURCE_SECRETS, ADMIN_TOKEN: token });
      try {
        const api = await w.mf.dispatchFetch("http://localhost/admin/api/stats", {
          headers: { authorization: `Bearer ${token}` },
        });
        assert.deepEqual([api.status, await api.text()], [500, "misconfigured"]);
        // needs: dashboard
        {
          const dashboard = await w.mf.dispatchFetch("http://localhost/admin");
          assert.equal(dashboard.status, 500);
          assert.match(await dashboard.text(), /ADMIN_TOKEN is misconfigured/);
        }
        const line = w.logged("admin_misconfigured")[0];
        assert.match(line.detail, /ADMIN_TOKEN/);
        assert.ok(!JSON.stringify(w.logged("admin_misconfigured")).includes(token), "the token is never logged");
        const event = eventOf(FIRST);
        const res = await reply(await w.post(`/webhooks/${FIRST}`, event.body, event.headers));
        assert.equal(res.body.outcome, "processed");
      } finally {
        await w.dispose();
      }
    });
  }
});

describe("a D1 without its tables", () => {
  test("the event is held, the sender told which migration is missing (500), the log says it once; applied, the alarm applies it", async () => {
    const w = await startWorker({ ...SOURCE_SECRETS, EFFECT_RETRY_BASE_MS: "1000" });
    try {
      // As plain `wrangler dev` before `wrangler d1 migrations apply`, or
      // an engine upgraded without its migrations.
      await w.db.prepare("DROP TABLE processed_events").run();
      const keys = [];
      for (let i = 0; i < 3; i++) {
        const event = eventOf(FIRST);
        const key = `${FIRST}:${event.id}`;
        keys.push(key);
        const res = await reply(await w.post(`/webhooks/${FIRST}`, event.body, event.headers));
        assert.deepEqual(res, {
          status: 500,
          body: { outcome: "accepted", key, error: "misconfigured", missing_migration: "engine_schema" },
        });
        assert.equal((await w.inboxState(key)).state, "received", "held for its alarm");
        // A copy meanwhile is told the same.
        const copy = await reply(await w.post(`/webhooks/${FIRST}`, event.body, event.headers));
        assert.equal(copy.status, 500);
        assert.equal(copy.body.missing_migration, "engine_schema");
      }
      const told = w.logged("store_behind");
      assert.equal(told.length, 1, "once");
      assert.match(told[0].detail, /missing migration engine_schema \(migrations\/NNNN_engine_schema\.sql\)/);
      assert.match(told[0].detail, /wrangler d1 migrations apply DB/);
      assert.equal(w.logged("effect_failed").filter((l) => !/missing migration/.test(l.error)).length, 0);
      const schema = readdirSync("migrations").find((file) => /^\d{4}_engine_schema\.sql$/.test(file));
      const sql = readFileSync(`migrations/${schema}`, "utf8");
      await w.db.batch(unstable_splitSqlQuery(sql).map((q) => w.db.prepare(q)));
      await eventually(async () => {
        const { results } = await w.db.prepare("SELECT source || ':' || event_id AS key FROM processed_events").all();
        return results.length === 3;
      }, 20_000, "the alarms apply the held events");
      for (const key of keys) assert.equal((await w.inboxState(key)).state, "done");
    } finally {
      await w.dispose();
    }
  });
});

describe("an admin guard that does not answer", () => {
  for (const fault of ["guard-fails", "guard-hangs"]) {
    test(`${fault}: 503 with Retry-After, and nothing gets through`, async () => {
      const w = await startWorker({ ...SOURCE_SECRETS, ADMIN_TOKEN: TOKEN, EFFECT_MAX_ATTEMPTS: "1" });
      try {
        const event = eventOf(FIRST);
        const key = `${FIRST}:${event.id}`;
        const sent = await reply(await w.post(`/webhooks/${FIRST}`, event.body, { ...event.headers, "x-test-fault": "effect-always-fails" }));
        assert.equal(sent.body.outcome, "failed");
        const admin = (path, method = "GET") =>
          w.mf.dispatchFetch(`http://localhost/admin/api/${path}`, {
            method,
            headers: { authorization: `Bearer ${TOKEN}`, "x-test-fault": fault },
          });
        for (const [path, method] of [["stats", "GET"], [`events/${FIRST}/${encodeURIComponent(event.id)}/dismiss`, "POST"]]) {
          const started = Date.now();
          const res = await admin(path, method);
          const took = Date.now() - started;
          const text = await res.text();
          assert.equal(res.status, 503, `${path}: ${text}`);
          assert.equal(res.headers.get("retry-after"), "5");
          assert.ok(!text.includes("counters") && !text.includes("dismissed"), text);
          assert.ok(took < 10_000, `answered in ${took} ms`);
        }
        assert.equal((await w.inboxState(key)).state, "failed", "not dismissed");
        assert.ok(w.logged("admin_guard_failed").length >= 2);
        // Without the fault, the same token is let in.
        const ok = await w.mf.dispatchFetch("http://localhost/admin/api/stats", { headers: { authorization: `Bearer ${TOKEN}` } });
        assert.equal(ok.status, 200);
        await ok.arrayBuffer();
      } finally {
        await w.dispose();
      }
    });
  }
});

// needs: dashboard
describe("guessing the admin token", () => {
  let w;
  before(async () => {
    // Failures count in fixed 15-minute windows: start well inside one.
    const left = WINDOW_MS - (Date.now() % WINDOW_MS);
    if (left < 60_000) await sleep(left + 100);
    w = await startWorker({ ADMIN_TOKEN: TOKEN });
  });
  after(() => w.dispose());
  const api = async (ip, token) => {
    const res = await w.mf.dispatchFetch("http://localhost/admin/api/stats", {
      headers: { authorization: `Bearer ${token}`, "cf-connecting-ip": ip },
    });
    await res.arrayBuffer();
    return res;
  };
  const login = async (ip, token, from = {}) => {
    const res = await w.mf.dispatchFetch("http://localhost/admin/login", {
      method: "POST",
      body: `token=${encodeURIComponent(token)}`,
      headers: { "content-type": "application/x-www-form-urlencoded", "cf-connecting-ip": ip, ...from },
      redirect: "manual",
    });
    return { status: res.status, retryAfter: res.headers.get("retry-after"), text: await res.text() };
  };

  test("a client gets 10 wrong guesses, then 429 with Retry-After even for the right token; others are not blocked", async () => {
    for (let i = 0; i < 10; i++) assert.equal((await api("203.0.113.1", `wrong-${i}`)).status, 401);
    const refused = await api("203.0.113.1", "wrong-again");
    assert.equal(refused.status, 429);
    const wait = Number(refused.headers.get("retry-after"));
    assert.ok(wait > 0 && wait <= 900, `Retry-After ${wait}`);
    assert.equal((await api("203.0.113.1", TOKEN)).status, 429, "no answer tells the guesser anything");
    assert.equal((await api("203.0.113.2", TOKEN)).status, 200, "another client signs in");
    // The sign-in form counts the same way, for the same client.
    const form = await login("203.0.113.1", TOKEN);
    assert.equal(form.status, 429);
    assert.match(form.text, /Too many failed sign-ins/);
    assert.ok(Number(form.retryAfter) > 0);
    assert.ok(w.logged("admin_throttled").length >= 3);
  });

  test("another site cannot spend an operator's failures, and an empty form is no guess", async () => {
    for (let i = 0; i < 12; i++) {
      const crossSite = await login("203.0.113.9", `wrong-${i}`, { "sec-fetch-site": "cross-site" });
      assert.equal(crossSite.status, 403);
      assert.equal((await login("203.0.113.9", "")).status, 401);
    }
    const bare = await w.mf.dispatchFetch("http://localhost/admin/api/stats", {
      headers: { authorization: "Bearer ", "cf-connecting-ip": "203.0.113.9" },
    });
    assert.equal(bare.status, 401);
    await bare.arrayBuffer();
    assert.equal((await login("203.0.113.9", TOKEN)).status, 303, "none of those counted");
  });

  test("30 concurrent wrong guesses from one client: exactly 10 are checked", async () => {
    const statuses = await Promise.all(Array.from({ length: 30 }, (_, i) => api("198.51.100.7", `guess-${i}`).then((r) => r.status)));
    assert.deepEqual(
      statuses.reduce((n, s) => ({ ...n, [s]: (n[s] ?? 0) + 1 }), {}),
      { 401: 10, 429: 20 },
    );
  });

  test("an IPv6 client is counted by its /64", async () => {
    for (let i = 0; i < 10; i++) assert.equal((await api(`2001:db8:7:7::${i + 1}`, "wrong")).status, 401);
    assert.equal((await api("2001:db8:7:7:ffff::1", "wrong")).status, 429);
  });

  test("under many clients' failures, a client that failed 3 times is refused, one with none signs in", async () => {
    // Enough distinct clients failing once each to pass the overall limit.
    for (let i = 0; i < 100; i++) assert.equal((await api(`2001:db8:1:${i.toString(16)}::1`, "wrong")).status, 401);
    for (let i = 0; i < 3; i++) assert.equal((await api("192.0.2.50", "wrong")).status, 401, "a typo or two");
    assert.equal((await api("192.0.2.50", TOKEN)).status, 429, "then it is refused");
    assert.equal((await api("192.0.2.51", TOKEN)).status, 200, "a clean client is never blocked");
    const signIn = await login("192.0.2.52", TOKEN);
    assert.equal(signIn.status, 303);
  });
});

// needs: dashboard
describe("signing out", () => {
  test("revokes the session on the server: a copy of its cookie is refused, other sessions stay", async () => {
    const w = await startWorker({ ADMIN_TOKEN: TOKEN });
    try {
      const page = async (cookie) => {
        const res = await w.mf.dispatchFetch("http://localhost/admin", { headers: { cookie } });
        await res.arrayBuffer();
        return res.status;
      };
      const mine = await w.signIn(TOKEN);
      await sleep(5); // another issue time, so another session
      const theirs = await w.signIn(TOKEN);
      assert.notEqual(mine, theirs);
      assert.equal(await page(mine), 200);
      const out = await w.mf.dispatchFetch("http://localhost/admin/logout", {
        method: "POST",
        headers: { cookie: mine, "sec-fetch-site": "same-origin" },
        redirect: "manual",
      });
      assert.equal(out.status, 303);
      assert.match(out.headers.get("set-cookie"), /Max-Age=0/);
      assert.equal(await page(mine), 401, "the kept copy of the cookie is no good");
      assert.equal(await page(theirs), 200, "another session is untouched");
      // Nor can it act, even with its own form token (as the dashboard
      // makes it: an HMAC of the session under the admin token).
      const act = async (cookie) => {
        const session = cookie.slice("admin_session=".length);
        const formToken = createHmac("sha256", TOKEN).update(`dashboard-form\n${session}`).digest("hex");
        const res = await w.mf.dispatchFetch(`http://localhost/admin/events/${FIRST}/evt_x/replay`, {
          method: "POST",
          body: `form_token=${formToken}`,
          headers: { cookie, "content-type": "application/x-www-form-urlencoded", "sec-fetch-site": "same-origin" },
          redirect: "manual",
        });
        await res.arrayBuffer();
        return res.status;
      };
      assert.equal(await act(theirs), 303, "the form token is made right");
      assert.equal(w.logged("admin_action").length, 1);
      assert.equal(await act(mine), 401);
      assert.equal(w.logged("admin_action").length, 1, "no action, not even a refused one, for a revoked session");
    } finally {
      await w.dispose();
    }
  });
});

// needs: github, dashboard
describe("an event page", () => {
  test("a signed body wide and 32 deep: the page stays under 3 MB", async () => {
    const w = await startWorker({ ...SOURCE_SECRETS, ADMIN_TOKEN: TOKEN });
    try {
      // 31 arrays inside the object, then about 499,000 numbers: indented
      // one a line, 62 spaces each, this would be some 35 MB of HTML.
      const body = `{"action":"opened","x":${"[".repeat(31)}${"0,".repeat(499_000)}0${"]".repeat(31)}}`;
      const delivery = uniqueId("d");
      const headers = githubHeaders(body, SOURCE_SECRETS.GITHUB_WEBHOOK_SECRET, { delivery, event: "issues" });
      assert.equal((await reply(await w.post("/webhooks/github", body, headers))).body.outcome, "processed");
      const cookie = await w.signIn(TOKEN);
      const res = await w.mf.dispatchFetch(`http://localhost/admin/events/github/${delivery}`, { headers: { cookie } });
      assert.equal(res.status, 200);
      const html = await res.text();
      assert.ok(html.length < 3 * 1024 * 1024, `${html.length} bytes`);
      assert.ok(html.includes(`0,0,0${"]".repeat(31)}}`), "the rest shown as sent");
    } finally {
      await w.dispose();
    }
  });
});

// Forwarding to your own backend ([vars.DESTINATIONS]): each event delivered
// once per destination, signed as Standard Webhooks (checked here with
// Node's crypto, independently of the worker's Rust), retried by the rules,
// held by a breaker while a destination is down. Real workerd, D1, Durable
// Objects and queues; the destinations are the recording fake target.
import assert from "node:assert/strict";
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { Webhook } from "standardwebhooks";

import { FIRST, SOURCES, SOURCE_SECRETS, eventOf, send } from "./support/sources.mjs";
import { eventually, startWorker } from "./support/worker.mjs";

const KEY = randomBytes(32);
const SIGNING_SECRET = `whsec_${KEY.toString("base64")}`;
const [, FIRST_SETTINGS] = SOURCES[0];
const url = (name) => `https://${name}.test/hooks`;
const destination = (name, settings = {}) => ({ url: url(name), secret: "BACKEND_SIGNING_SECRET", ...settings });

/** The worker with `destinations`, the first source forwarding to all of them. */
function forwarding(destinations, vars = {}) {
  return startWorker({
    ...SOURCE_SECRETS,
    SOURCES: { [FIRST]: { ...FIRST_SETTINGS, forward: Object.keys(destinations) } },
    DESTINATIONS: destinations,
    BACKEND_SIGNING_SECRET: SIGNING_SECRET,
    OUTBOX_RETRY_BASE_SECS: "1",
    FORWARD_PROBE_SECS: "1",
    FORWARD_BREAKER_FAILURES: "3",
    ...vars,
  });
}

/** Whether a recorded request carries a valid signature, checked as a Standard Webhooks library does. */
function signedFor(call) {
  const { "webhook-id": id, "webhook-timestamp": ts, "webhook-signature": header } = call.headers;
  const expected = Buffer.from(createHmac("sha256", KEY).update(`${id}.${ts}.${call.body}`).digest("base64"));
  return header.split(" ").some((signature) => {
    const [version, value] = signature.split(",");
    const given = Buffer.from(value ?? "");
    return version === "v1" && given.length === expected.length && timingSafeEqual(given, expected);
  });
}

/** The calls to destination `name` for event `id`. */
const callsTo = (w, name, id) => w.target.to(url(name)).filter((c) => c.headers["x-webhook-event-id"] === id);
const delivered = (w, name, id) => callsTo(w, name, id).filter((c) => c.status < 300);
const pause = (ms) => new Promise((r) => setTimeout(r, ms));

describe("forwarding", () => {
  let w;
  // Per event id and destination, the statuses to answer in turn (then 200).
  const scripts = new Map();
  before(async () => {
    w = await forwarding({
      backend: destination("backend", { headers: ["X-Request-Id"] }),
      audit: destination("audit"),
      picky: destination("picky", { events: ["nothing.*"] }),
      flaky: destination("flaky"),
    });
    w.target.answer = (call) => {
      const host = new URL(call.url).hostname.split(".")[0];
      const script = scripts.get(`${call.headers["x-webhook-event-id"]} ${host}`) ?? [];
      return script.shift() ?? 200;
    };
  });
  after(() => w?.dispose());

  test("a 50-way storm is one successful delivery per destination", async () => {
    const event = eventOf(FIRST);
    const replies = await Promise.all(Array.from({ length: 50 }, () => send(w, FIRST, event)));
    assert.deepEqual(new Set(replies.map((r) => r.status)), new Set([200]));
    await eventually(() => ["backend", "audit", "flaky"].every((d) => delivered(w, d, event.id).length === 1), 10_000, "a delivery to each");
    await pause(1_500);
    for (const name of ["backend", "audit", "flaky"]) assert.equal(callsTo(w, name, event.id).length, 1, name);
    const rows = await w.db.prepare("SELECT destination, status, attempts FROM forwards WHERE event_id = ? ORDER BY destination").bind(event.id).all();
    assert.deepEqual(rows.results, [
      { destination: "audit", status: "delivered", attempts: 1 },
      { destination: "backend", status: "delivered", attempts: 1 },
      { destination: "flaky", status: "delivered", attempts: 1 },
    ]);
  });

  test("filters by glob: a destination whose events do not match gets nothing", async () => {
    const event = eventOf(FIRST);
    await send(w, FIRST, event);
    await eventually(() => delivered(w, "backend", event.id).length === 1, 10_000, "the delivery");
    const type = delivered(w, "backend", event.id)[0].headers["x-webhook-event-type"];
    assert.equal(callsTo(w, "picky", event.id).length, 0);
    assert.equal(await w.scalar("SELECT count(*) FROM forwards WHERE event_id = ? AND destination = 'picky'", event.id), 0);
    // And a glob that matches, on a worker of its own.
    const v = await forwarding({ prefix: destination("prefix", { events: ["nothing", `${type.slice(0, 2)}*`] }) });
    try {
      const again = eventOf(FIRST);
      await send(v, FIRST, again);
      await eventually(() => delivered(v, "prefix", again.id).length === 1, 10_000, `a glob matching ${type}`);
    } finally {
      await v.dispose();
    }
  });

  test("the request is the original body, re-signed, with the delivery's id", async () => {
    const event = eventOf(FIRST);
    const sent = Date.now();
    await send(w, FIRST, event, { "x-request-id": "req-42" });
    await eventually(() => ["backend", "audit"].every((d) => delivered(w, d, event.id).length === 1), 10_000, "the deliveries");
    const [call] = delivered(w, "backend", event.id);
    assert.equal(call.body, event.body);
    assert.equal(call.headers["content-type"], event.headers["content-type"]);
    assert.ok(signedFor(call), "the signature verifies with the destination's key");
    // And with the Standard Webhooks reference library, as a backend would.
    const verifier = new Webhook(SIGNING_SECRET);
    assert.doesNotThrow(() => verifier.verify(call.body, call.headers, { jsonParse: false }));
    assert.throws(() => verifier.verify(`${call.body} `, call.headers, { jsonParse: false }), /signature/i);
    assert.match(call.headers["webhook-id"], /^[0-9a-f]{64}$/);
    assert.equal(call.headers["idempotency-key"], call.headers["webhook-id"]);
    assert.ok(Math.abs(Number(call.headers["webhook-timestamp"]) * 1000 - sent) < 10_000);
    assert.equal(call.headers["x-webhook-source"], FIRST);
    assert.equal(call.headers["x-webhook-event-id"], event.id);
    assert.equal(call.headers["x-request-id"], "req-42", "a listed header passes through");
    assert.equal(delivered(w, "audit", event.id)[0].headers["x-request-id"], undefined, "only where listed");
    for (const name of Object.keys(event.headers).filter((h) => h !== "content-type")) {
      assert.equal(call.headers[name], undefined, `the provider's ${name} is not passed on`);
    }
    // Another destination gets its own id.
    assert.notEqual(delivered(w, "audit", event.id)[0].headers["webhook-id"], call.headers["webhook-id"]);
  });

  test("500, 500, then 200 is three calls under one webhook-id", async () => {
    const event = eventOf(FIRST);
    scripts.set(`${event.id} flaky`, [500, 500]);
    await send(w, FIRST, event);
    await eventually(() => delivered(w, "flaky", event.id).length === 1, 15_000, "the third call");
    const calls = callsTo(w, "flaky", event.id);
    assert.deepEqual(calls.map((c) => c.status), [500, 500, 200]);
    assert.equal(new Set(calls.map((c) => c.headers["webhook-id"])).size, 1);
    assert.ok(calls.every(signedFor));
    const row = await w.db.prepare("SELECT status, attempts, last_status FROM forwards WHERE event_id = ? AND destination = 'flaky'").bind(event.id).first();
    assert.deepEqual(row, { status: "delivered", attempts: 3, last_status: 200 });
  });

  test("Retry-After is respected on a 429", async () => {
    const event = eventOf(FIRST);
    scripts.set(`${event.id} flaky`, [{ status: 429, headers: { "retry-after": "3" } }]);
    await send(w, FIRST, event);
    await eventually(() => delivered(w, "flaky", event.id).length === 1, 15_000, "the retry");
    const [first, second] = callsTo(w, "flaky", event.id);
    // Without Retry-After the first retry comes after 0.5 to 1 s.
    assert.ok(second.at - first.at >= 2_900, `retried after ${second.at - first.at} ms`);
  });

  test("a 400 is dead at once, and the operators are alerted", async () => {
    const event = eventOf(FIRST);
    scripts.set(`${event.id} flaky`, [400]);
    await send(w, FIRST, event);
    const dead = () => w.scalar("SELECT status FROM forwards WHERE event_id = ? AND destination = 'flaky'", event.id);
    await eventually(async () => (await dead()) === "dead", 10_000, "the dead delivery");
    await eventually(() => w.logged("operator_alert").some((l) => l.detail.includes(`event ${event.id} could not be forwarded to flaky`)), 10_000, "the alert");
    await pause(2_000);
    assert.equal(callsTo(w, "flaky", event.id).length, 1);
    assert.equal(await w.scalar("SELECT last_error FROM forwards WHERE event_id = ? AND destination = 'flaky'", event.id), "target answered 400");
  });

  test("a 1 MiB body arrives byte for byte", async () => {
    const event = eventOf(FIRST, undefined, 1024 * 1024);
    assert.equal(Buffer.byteLength(event.body), 1024 * 1024);
    assert.equal((await send(w, FIRST, event)).status, 200);
    await eventually(() => delivered(w, "backend", event.id).length === 1, 15_000, "the delivery");
    const [call] = delivered(w, "backend", event.id);
    assert.equal(call.body.length, event.body.length);
    assert.ok(call.body === event.body, "the same bytes");
    assert.ok(signedFor(call));
  });

  test("attempts are logged with status and latency, never the URL or the key", async () => {
    const lines = w.logged("forward_attempt");
    assert.ok(lines.length > 0);
    for (const line of lines) {
      assert.ok("status" in line && "latency_ms" in line && line.delivery_id && line.destination, JSON.stringify(line));
    }
    const all = w.logs.join("\n");
    assert.ok(!all.includes(".test/hooks"), "no destination URL in any log line");
    assert.ok(!all.includes(SIGNING_SECRET.slice(6)), "no signing key in any log line");
  });
});

describe("a destination that answers 410 Gone", () => {
  test("is disabled, with an alert, and called no more", async () => {
    const w = await forwarding({ gone: destination("gone") });
    try {
      w.target.answer = () => 410;
      const first = eventOf(FIRST);
      await send(w, FIRST, first);
      const state = () => w.scalar("SELECT state FROM destinations WHERE name = 'gone'");
      await eventually(async () => (await state()) === "disabled", 10_000, "disabled");
      await eventually(() => w.logged("operator_alert").some((l) => l.detail.includes("destination gone answered 410 Gone")), 10_000, "the alert");
      const second = eventOf(FIRST);
      await send(w, FIRST, second);
      await pause(2_000);
      await (await w.mf.getWorker("webhooks")).scheduled({ cron: "* * * * *" });
      await pause(1_000);
      assert.equal(w.target.to(url("gone")).length, 1, "one call: the one answered 410");
      const rows = await w.db.prepare("SELECT status FROM forwards WHERE destination = 'gone'").all();
      assert.deepEqual(rows.results.map((r) => r.status), ["pending", "pending"], "both wait, neither is lost");
    } finally {
      await w.dispose();
    }
  });
});

describe("a destination that is down", () => {
  test("opens its breaker after 3 failures, makes no calls but probes, then closes and drains", async () => {
    const w = await forwarding({ down: destination("down") });
    try {
      let up = false;
      w.target.answer = () => (up ? 200 : 503);
      const events = Array.from({ length: 3 }, () => eventOf(FIRST));
      for (const event of events) await send(w, FIRST, event);
      const state = () => w.scalar("SELECT state FROM destinations WHERE name = 'down'");
      await eventually(async () => (await state()) === "open", 15_000, "the breaker opens");
      await eventually(() => w.logged("operator_alert").some((l) => l.detail.includes("destination down keeps failing")), 10_000, "the alert");
      // While open: more events, and the relay's ticks; only probes go out.
      const opened = w.target.to(url("down")).length;
      const started = Date.now();
      const later = Array.from({ length: 3 }, () => eventOf(FIRST));
      for (const event of later) await send(w, FIRST, event);
      const worker = await w.mf.getWorker("webhooks");
      for (let i = 0; i < 4; i++) {
        await pause(1_000);
        await worker.scheduled({ cron: "* * * * *" });
      }
      const probes = w.target.to(url("down")).length - opened;
      const seconds = (Date.now() - started) / 1000;
      assert.ok(probes >= 1 && probes <= Math.ceil(seconds) + 1, `${probes} calls in ${seconds} s while open`);
      const spent = await w.scalar("SELECT sum(attempts) FROM forwards WHERE destination = 'down'");
      assert.equal(spent, opened + probes, "only calls spend attempts");
      // It answers again: the next probe closes it, and everything drains.
      up = true;
      await eventually(async () => {
        await worker.scheduled({ cron: "* * * * *" });
        return (await state()) === "closed";
      }, 10_000, "the breaker closes");
      const all = [...events, ...later];
      await eventually(() => all.every((e) => delivered(w, "down", e.id).length === 1), 15_000, "the backlog drains");
      await pause(1_500);
      for (const event of all) assert.equal(delivered(w, "down", event.id).length, 1, event.id);
      assert.ok(w.logged("operator_alert").some((l) => l.detail.includes("destination down answers again")));
    } finally {
      await w.dispose();
    }
  });
});

describe("a destination whose configuration changes after its events were accepted", () => {
  test("waits, its attempts unspent, while undeclared or without a key, and delivers once fixed", async () => {
    const w = await forwarding({ later: destination("later") }, { OUTBOX_RELAY_GRACE_MS: "0" });
    try {
      let up = false;
      w.target.answer = () => (up ? 200 : 503);
      const event = eventOf(FIRST);
      await send(w, FIRST, event);
      const row = () => w.db.prepare("SELECT status, attempts FROM forwards WHERE destination = 'later'").first();
      // Its first attempt made and recorded: it waits for its retry.
      await eventually(async () => (await row())?.status === "pending" && (await row()).attempts === 1, 10_000, "the first attempt");
      const tick = async () => (await w.mf.getWorker("webhooks")).scheduled({ cron: "* * * * *" });
      for (const [what, change] of [
        ["undeclared", { DESTINATIONS: {} }],
        ["without its key", { BACKEND_SIGNING_SECRET: undefined }],
      ]) {
        await w.reconfigure(change);
        const before = { calls: w.target.to(url("later")).length, row: await row() };
        for (let i = 0; i < 3; i++) {
          await pause(1_000);
          await tick();
        }
        assert.equal(w.target.to(url("later")).length, before.calls, `no call while ${what}`);
        assert.deepEqual(await row(), { ...before.row, status: "pending" }, `waiting, unspent, while ${what}`);
      }
      assert.ok(w.logged("forward_misconfigured").some((l) => l.error.includes("BACKEND_SIGNING_SECRET")));
      assert.ok(w.logged("forward_waiting").some((l) => l.detail === "later"), "never silently");
      up = true;
      await w.reconfigure({});
      await eventually(async () => {
        await tick();
        return (await row()).status === "delivered";
      }, 15_000, "delivered once fixed");
      assert.equal(w.target.to(url("later")).filter((c) => c.status === 200).length, 1);
    } finally {
      await w.dispose();
    }
  });
});

describe("deliveries held for a destination that was removed", () => {
  test("an operator discards them: dead, saying why, and never sent", async () => {
    const TOKEN = "discard-admin-token-0123456789abcdef";
    const w = await forwarding({ gone: destination("gone") }, { OUTBOX_RELAY_GRACE_MS: "0", ADMIN_TOKEN: TOKEN });
    try {
      w.target.answer = () => 503;
      const event = eventOf(FIRST);
      await send(w, FIRST, event);
      const row = () => w.db.prepare("SELECT status, attempts, last_error FROM forwards WHERE destination = 'gone'").first();
      await eventually(async () => (await row())?.status === "pending" && (await row()).attempts === 1, 10_000, "the first attempt");
      const api = async (path) => {
        const res = await w.mf.dispatchFetch(`http://localhost/admin/api/${path}`, { method: "POST", headers: { authorization: `Bearer ${TOKEN}` } });
        return { status: res.status, body: await res.json().catch(() => null) };
      };
      // Declared: not discarded (pause it instead).
      assert.deepEqual((await api("destinations/gone/discard")).body, { changed: false });
      assert.equal((await row()).status, "pending");
      await w.reconfigure({ DESTINATIONS: {}, SOURCES: { [FIRST]: FIRST_SETTINGS } });
      const calls = w.target.to(url("gone")).length;
      assert.deepEqual((await api("destinations/gone/discard")).body, { changed: true });
      assert.deepEqual(await row(), { status: "dead", attempts: 1, last_error: "discarded by an operator: the destination is no longer declared" });
      assert.deepEqual((await api("destinations/gone/discard")).body, { changed: false }, "nothing left to discard");
      w.target.answer = () => 200;
      await (await w.mf.getWorker("webhooks")).scheduled({ cron: "* * * * *" });
      await pause(1_500);
      assert.equal(w.target.to(url("gone")).length, calls, "never sent");
      assert.ok(w.logged("forward_discarded").some((l) => l.detail === "gone"));
    } finally {
      await w.dispose();
    }
  });
});

// needs: dashboard
describe("deliveries held for a destination that was removed, from the console", () => {
  test("the destinations page offers Discard held, and it ends them", async () => {
    const TOKEN = "discard-console-token-0123456789abcdef";
    const w = await forwarding({ gone: destination("gone") }, { OUTBOX_RELAY_GRACE_MS: "0", ADMIN_TOKEN: TOKEN });
    try {
      w.target.answer = () => 503;
      await send(w, FIRST, eventOf(FIRST));
      const row = () => w.db.prepare("SELECT status, last_error FROM forwards WHERE destination = 'gone'").first();
      await eventually(async () => (await row())?.status === "pending", 10_000, "a delivery waiting");
      await w.reconfigure({ DESTINATIONS: {}, SOURCES: { [FIRST]: FIRST_SETTINGS } });
      const cookie = await w.signIn(TOKEN);
      const destinations = async () => (await w.mf.dispatchFetch("http://localhost/admin/destinations", { headers: { cookie } })).text();
      // The cron relay notes a destination its deliveries wait for.
      const page = await eventually(async () => {
        await (await w.mf.getWorker("webhooks")).scheduled({ cron: "* * * * *" });
        const html = await destinations();
        return /no longer declared/.test(html) && html;
      }, 10_000, "the removed destination on the page");
      const [, action, formToken] = /<form class="actions" method="post" action="(\/admin\/destinations\/gone\/discard)"><input type="hidden" name="form_token" value="([0-9a-f]+)">/.exec(page) ?? [];
      assert.ok(action, "a Discard held button");
      const res = await w.mf.dispatchFetch(`http://localhost${action}`, {
        method: "POST",
        body: `form_token=${formToken}`,
        headers: { cookie, "content-type": "application/x-www-form-urlencoded", "sec-fetch-site": "same-origin" },
        redirect: "manual",
      });
      assert.equal(res.status, 303);
      assert.match(res.headers.get("location"), /done=discard/);
      await res.arrayBuffer();
      assert.deepEqual(await row(), { status: "dead", last_error: "discarded by an operator: the destination is no longer declared" });
      assert.doesNotMatch(await destinations(), /Discard held/, "nothing left to discard");
    } finally {
      await w.dispose();
    }
  });
});

describe("a misconfigured destination", () => {
  for (const [what, destinations, vars, names] of [
    ["one that does not exist", {}, {}, `SOURCES.${FIRST}.forward names backend,`],
    ["a URL that is not http(s)", { backend: { url: "ftp://example.com/", secret: "BACKEND_SIGNING_SECRET" } }, {}, "DESTINATIONS.backend.url"],
    ["a missing secret", { backend: destination("backend") }, { BACKEND_SIGNING_SECRET: undefined }, "BACKEND_SIGNING_SECRET is not set"],
    ["a weak secret", { backend: destination("backend") }, { BACKEND_SIGNING_SECRET: "whsec_c2hvcnQta2V5" }, "BACKEND_SIGNING_SECRET: each key"],
    ["a breaker its consumer cannot run", { backend: destination("backend") }, { FORWARD_PROBE_SECS: "0" }, "FORWARD_BREAKER_FAILURES and FORWARD_PROBE_SECS must be 1 or more"],
  ]) {
    test(`${what} refuses deliveries as misconfigured, naming the setting`, async () => {
      const settings = {
        ...SOURCE_SECRETS,
        SOURCES: { [FIRST]: { ...FIRST_SETTINGS, forward: ["backend"] } },
        DESTINATIONS: destinations,
        BACKEND_SIGNING_SECRET: SIGNING_SECRET,
        ...vars,
      };
      const w = await startWorker(Object.fromEntries(Object.entries(settings).filter(([, v]) => v !== undefined)));
      try {
        const event = eventOf(FIRST);
        const reply = await send(w, FIRST, event);
        assert.deepEqual([reply.status, reply.body.error], [500, "misconfigured"]);
        const line = w.logged("delivery").at(-1);
        assert.ok(line.detail.includes(names), line.detail);
        const configured = settings.BACKEND_SIGNING_SECRET;
        if (configured) assert.ok(!line.detail.includes(configured.slice("whsec_".length)), "never the key");
        assert.equal(await w.inboxState(`${FIRST}:${event.id}`), null, "nothing stored");
        assert.equal(await w.scalar("SELECT count(*) FROM forwards"), 0);
      } finally {
        await w.dispose();
      }
    });
  }
});

// Operating forwarding: the destinations report, pause and resume, requeue
// of dead deliveries, re-enabling after a 410, and redelivery, through the
// admin API and the dashboard (a redelivery keeps its webhook-id).
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, test } from "node:test";

import { FIRST, SOURCES, SOURCE_SECRETS, eventOf, send } from "./support/sources.mjs";
import { eventually, startWorker } from "./support/worker.mjs";

const TOKEN = "forward-admin-token-0123456789abcdef";
const [, FIRST_SETTINGS] = SOURCES[0];
const url = (name) => `https://${name}.test/hooks`;

describe("operating forwarding", () => {
  let w;
  // Per destination, the status it answers.
  const answers = { main: 200, other: 200 };
  before(async () => {
    w = await startWorker({
      ...SOURCE_SECRETS,
      ADMIN_TOKEN: TOKEN,
      SOURCES: { [FIRST]: { ...FIRST_SETTINGS, forward: ["main", "other"] } },
      DESTINATIONS: {
        main: { url: url("main"), secret: "SIGNING_SECRET" },
        other: { url: url("other"), secret: "SIGNING_SECRET" },
      },
      SIGNING_SECRET: `whsec_${randomBytes(32).toString("base64")}`,
      OUTBOX_RETRY_BASE_SECS: "1",
    });
    w.target.answer = (call) => answers[new URL(call.url).hostname.split(".")[0]] ?? 200;
  });
  after(() => w?.dispose());

  const api = async (method, path) => {
    const res = await w.mf.dispatchFetch(`http://localhost/admin/api/${path}`, {
      method,
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    return { status: res.status, body: await res.json().catch(() => null) };
  };
  const calls = (name, id) => w.target.to(url(name)).filter((c) => c.headers["x-webhook-event-id"] === id);
  const report = async (name) => (await api("GET", "destinations")).body.destinations.find((d) => d.name === name);
  const forwarded = async (event) => {
    assert.equal((await send(w, FIRST, event)).status, 200);
    await eventually(() => calls("main", event.id).length > 0 && calls("other", event.id).length > 0, 10_000, "both calls");
  };

  test("the report shows each destination's state, backlog, rate and latency", async () => {
    await forwarded(eventOf(FIRST));
    const main = await report("main");
    assert.equal(main.state, "closed");
    assert.equal(main.paused, false);
    assert.equal(main.backlog, 0);
    assert.equal(main.dead, 0);
    assert.equal(main.success_rate, 1);
    assert.equal(typeof main.p50_ms, "number");
    assert.equal(typeof main.p99_ms, "number");
    assert.equal(main.declared, true);
  });

  test("a paused destination holds its deliveries until resumed; the other is not held", async () => {
    assert.deepEqual((await api("POST", "destinations/main/pause")).body, { changed: true });
    assert.deepEqual((await api("POST", "destinations/main/pause")).body, { changed: false });
    const event = eventOf(FIRST);
    await send(w, FIRST, event);
    await eventually(() => calls("other", event.id).length === 1, 10_000, "the other destination's call");
    await new Promise((r) => setTimeout(r, 1_500));
    assert.equal(calls("main", event.id).length, 0, "no call while paused");
    assert.equal((await report("main")).backlog, 1);
    assert.equal((await report("main")).paused, true);
    assert.deepEqual((await api("POST", "destinations/main/resume")).body, { changed: true });
    await eventually(() => calls("main", event.id).length === 1, 10_000, "the held delivery, once resumed");
  });

  test("dead deliveries are requeued under their webhook-id; one is redelivered", async () => {
    answers.main = 400;
    const event = eventOf(FIRST);
    await forwarded(event);
    await eventually(async () => (await report("main")).dead === 1, 10_000, "the dead delivery");
    answers.main = 200;
    assert.deepEqual((await api("POST", "destinations/main/requeue")).body, { changed: true });
    await eventually(() => calls("main", event.id).some((c) => c.status === 200), 10_000, "the requeued call");
    const ids = new Set(calls("main", event.id).map((c) => c.headers["webhook-id"]));
    assert.equal(ids.size, 1, "the same webhook-id");
    // Redelivered by its id: once more, still the same id.
    const [id] = ids;
    assert.equal((await api("POST", `deliveries/${id}/redeliver`)).status, 200);
    await eventually(() => calls("main", event.id).length === 3, 10_000, "the redelivery");
    assert.equal(calls("main", event.id)[2].headers["webhook-id"], id);
    assert.equal((await api("POST", "deliveries/nonesuch/redeliver")).status, 404);
    const detail = (await api("GET", `events/${FIRST}/${encodeURIComponent(event.id)}`)).body;
    assert.deepEqual(detail.records.forwards.map((f) => [f.destination, f.status]), [["main", "delivered"], ["other", "delivered"]]);
  });

  test("a destination disabled by a 410 is re-enabled, and what waited goes out", async () => {
    answers.other = 410;
    const event = eventOf(FIRST);
    await forwarded(event);
    await eventually(async () => (await report("other")).state === "disabled", 10_000, "disabled");
    answers.other = 200;
    assert.deepEqual((await api("POST", "destinations/other/enable")).body, { changed: true });
    await eventually(() => calls("other", event.id).some((c) => c.status === 200), 10_000, "the waiting delivery");
    assert.equal((await report("other")).state, "closed");
    assert.equal((await api("POST", "destinations/other/launch")).status, 404);
    assert.deepEqual((await api("POST", "destinations/undeclared/pause")).body, { changed: false });
    assert.equal(await w.scalar("SELECT count(*) FROM destinations WHERE name = 'undeclared'"), 0);
  });

  // needs: dashboard
  test("the console shows destinations, and redelivers from an event's page under the same webhook-id", async () => {
    const cookie = await w.signIn(TOKEN);
    const get = async (path) => {
      const res = await w.mf.dispatchFetch(`http://localhost${path}`, { headers: { cookie } });
      return { status: res.status, html: await res.text() };
    };
    // A post from another site is refused, as every dashboard action's.
    const crossSite = await w.mf.dispatchFetch("http://localhost/admin/destinations/main/pause", {
      method: "POST",
      body: "form_token=00",
      headers: { cookie, "content-type": "application/x-www-form-urlencoded", "sec-fetch-site": "cross-site" },
      redirect: "manual",
    });
    assert.equal(crossSite.status, 403);
    assert.equal((await report("main")).paused, false);
    const destinations = await get("/admin/destinations");
    assert.equal(destinations.status, 200);
    assert.match(destinations.html, /<code>main<\/code>/);
    assert.match(destinations.html, /Pause/);
    const event = eventOf(FIRST);
    await forwarded(event);
    const eventPath = `/admin/events/${encodeURIComponent(FIRST)}/${encodeURIComponent(event.id)}`;
    await eventually(async () => /Redeliver/.test((await get(eventPath)).html), 10_000, "a delivered row");
    const page = (await get(eventPath)).html;
    const [, action, formToken] = /<form class="actions" method="post" action="([^"]*\/redeliver\/[^"]*)"><input type="hidden" name="form_token" value="([0-9a-f]+)">/.exec(page);
    const before = calls("main", event.id).length + calls("other", event.id).length;
    const res = await w.mf.dispatchFetch(`http://localhost${action.replaceAll("&amp;", "&")}`, {
      method: "POST",
      body: `form_token=${formToken}`,
      headers: { cookie, "content-type": "application/x-www-form-urlencoded", "sec-fetch-site": "same-origin" },
      redirect: "manual",
    });
    assert.equal(res.status, 303);
    assert.match(res.headers.get("location"), /done=redelivered/);
    await eventually(() => calls("main", event.id).length + calls("other", event.id).length === before + 1, 10_000, "the redelivery");
    const all = [...calls("main", event.id), ...calls("other", event.id)].sort((a, b) => a.at - b.at);
    const again = all.at(-1);
    assert.equal(all.filter((c) => c.headers["webhook-id"] === again.headers["webhook-id"]).length, 2, "the same webhook-id as before");
  });
});

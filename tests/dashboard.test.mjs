// The dashboard as a person sees it, in headless Chromium (Debian's, driven
// by playwright-core): sign in, read the counters, the trend, the events and
// the alerts, open one;
// Replay, Dismiss and Requeue, and a cross-site or tokenless post refused.
// Saves tests/artifacts/dashboard.png, dashboard-event.png,
// dashboard-failed-event.png, dashboard-requeued.png and dashboard-find.png
// (the copies in docs/ are these). On the first source wrangler.toml
// declares; a test side effect stands in for an effect's own.
// needs: dashboard
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import { chromium } from "playwright-core";

import { FIRST, SOURCES, SOURCE_SECRETS, eventOf, forgedOf, send as sendTo } from "./support/sources.mjs";
import { eventually, startWorker } from "./support/worker.mjs";
// needs: stripe
import { stripeHeaders } from "./support/sign.mjs";

const TOKEN = "dashboard-e2e-token-0123456789abcdef";
const started = Date.now();
let w;
let origin;
let browser;
const processed = eventOf(FIRST);
const [failed, failedFromOverview, attacked] = [eventOf(FIRST), eventOf(FIRST), eventOf(FIRST)];
const [processedId, failedId, failedFromOverviewId, attackedId] = [processed, failed, failedFromOverview, attacked].map((e) => e.id);
/** An event's page. */
const eventPage = (id) => `${origin}/admin/events/${FIRST}/${encodeURIComponent(id)}`;

before(async () => {
  w = await startWorker(
    {
      ...SOURCE_SECRETS,
      ADMIN_TOKEN: TOKEN,
      STATS_FLUSH_MS: "0",
      EFFECT_MAX_ATTEMPTS: "1",
      NOTIFY_URL: "http://chat.test/hook",
      OUTBOX_MAX_ATTEMPTS: "1",
    },
    { port: 0 },
  );
  origin = (await w.mf.ready).origin;
  w.target.answer = () => 503; // every side effect fails: its row goes dead
  const send = (event, headers) => sendTo(w, FIRST, event, headers);
  // The test side effect (one chat message) stands in for an effect's own.
  await send(processed, { "x-test-fault": "with-side-effect" });
  await send(processed);
  for (const event of [failed, failedFromOverview, attacked]) await send(event, { "x-test-fault": "effect-always-fails" });
  await send(forgedOf(FIRST));
  await eventually(
    async () =>
      (await w.scalar("SELECT count(*) FROM outbox WHERE event_id = ? AND status = 'dead'", processedId)) === 1 &&
      (await w.scalar("SELECT count(*) FROM failed_events WHERE event_id IN (?, ?, ?)", failedId, failedFromOverviewId, attackedId)) === 3,
    20_000,
    "a dead side effect and a failed event",
  );
  // A day of another source's traffic for the trend's screenshot, with a
  // burst of refusals 12 minutes ago (a rotated secret not yet deployed).
  const now = Math.floor(Date.now() / 60_000);
  const history = [];
  for (let m = now - 24 * 60 + 1; m <= now; m++) {
    const wave = 6 + Math.round(4 * Math.sin(m / 90));
    history.push([m, "processed", wave], [m, "duplicate", m % 3]);
    if (m >= now - 14 && m <= now - 10) history.push([m, "refused", 18 + (m % 4)]);
    if (m % 97 === 0) history.push([m, "accepted", 1]);
  }
  const other = SOURCES[1]?.[0];
  const insert = w.db.prepare("INSERT INTO delivery_trend (minute, source, outcome, value) VALUES (?, ?, ?, ?)");
  if (other) await w.db.batch(history.filter(([, , n]) => n > 0).map(([m, outcome, n]) => insert.bind(m, other, outcome, n)));
  // CHROMIUM: another Chromium-based browser (CI's preinstalled Chrome).
  const executablePath =
    process.env.CHROMIUM || execFileSync("sh", ["-c", "command -v chromium"], { encoding: "utf8" }).trim();
  browser = await chromium.launch({
    executablePath,
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"],
  });
  mkdirSync("tests/artifacts", { recursive: true });
});
after(async () => {
  await browser?.close();
  await w.dispose();
});

test("sign in, read the counters and events, open an event", async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  await page.goto(`${origin}/admin`);
  assert.equal(await page.locator("h1").textContent(), "Sign in");

  await page.fill("#token", "not-the-token");
  await page.click("button[type=submit]");
  assert.match(await page.locator("body").textContent(), /That is not the admin token\./);

  await page.fill("#token", TOKEN);
  await page.click("button[type=submit]");
  await page.waitForURL(`${origin}/admin`);
  assert.equal(await page.locator("h1").textContent(), "Webhooks");

  const firstRow = page.locator("table").first().locator("tr").filter({ has: page.locator(`code:text-is("${FIRST}")`) });
  const cells = await firstRow.locator("td").allTextContents();
  // source, received, processed, duplicates, rejected, ledger, failed, sent, dead
  assert.deepEqual(cells.slice(0, 5), [FIRST, "6", "1", "1", "1"]);
  assert.deepEqual(cells.slice(5), ["1", "3", "0", "1"]);

  // The trend: the same deliveries, per minute and per hour, by outcome;
  // the three events that gave up counted once each, when listed.
  const trendRow = page.locator("table").nth(1).locator("tr").filter({ has: page.locator(`code:text-is("${FIRST}")`) });
  const charts = trendRow.locator("svg.trend");
  assert.equal(await charts.count(), 2, "last hour and last day");
  for (const chart of [charts.nth(0), charts.nth(1)]) {
    const sums = {};
    for (const rect of await chart.locator("rect[data-series]").all()) {
      const series = await rect.getAttribute("data-series");
      sums[series] = (sums[series] ?? 0) + Number(await rect.getAttribute("data-n"));
    }
    assert.deepEqual(sums, { processed: 1, duplicate: 1, failed: 3, refused: 1 });
  }
  assert.equal((await trendRow.locator("td").last().textContent()).trim(), "1", "refused in the last hour");

  // The alerts: one for the three events that gave up (not three), one for
  // the dead side effect (one more of each should an ALERT_INTERVAL end
  // between them); logged only, as ALERT_URL is unset.
  const alerts = await page.locator("table").last().locator("tbody tr").allTextContents();
  const dead = alerts.filter((a) => a.includes(`${FIRST}: side effect notify_chat of event ${processedId} is dead after 1 attempt: target answered 503`));
  const gaveUp = alerts.filter((a) => new RegExp(`${FIRST}: event \\S+ \\(\\S+\\) gave up: injected fault: before effect`).test(a));
  assert.equal(dead.length + gaveUp.length, alerts.length, alerts.join("\n"));
  assert.equal(dead.length, 1);
  assert.ok(gaveUp.length === 1 || (gaveUp.length === 2 && Math.floor(Date.now() / 900_000) > Math.floor(started / 900_000)));
  assert.ok(alerts.every((a) => a.endsWith("logged")));

  const text = await page.locator("body").textContent();
  assert.ok(text.includes(processedId));
  assert.match(text, /injected fault: before effect/);
  assert.match(text, /notify_chat/);
  assert.match(text, /target answered 503/);
  await page.screenshot({ path: "tests/artifacts/dashboard.png", fullPage: true });

  await page.click(`a:has-text("${processedId}")`);
  await page.waitForURL(eventPage(processedId));
  const detail = await page.locator("body").textContent();
  assert.match(detail, /Deliveries/);
  const inbox = await page.locator("table").first().locator("tbody td").allTextContents();
  assert.deepEqual(inbox.slice(0, 3), ["done", "2", "1"]);
  assert.ok(detail.includes(await w.scalar("SELECT type FROM processed_events WHERE event_id = ?", processedId)), "its type");
  const copies = await page.locator("table").nth(1).locator("tbody tr").allTextContents();
  assert.equal(copies.length, 2, "every copy is in the delivery log");
  assert.match(copies[0], /first/);
  assert.match(copies[1], /duplicate.*same as the first/);
  // Each as verified: the secret by position, the signed time (if signed).
  for (const copy of copies) assert.match(copy, /secret 0 \(by position\)/);
  // The stored payload, its values as sent.
  assert.ok((await page.locator("details pre").textContent()).includes(processedId));
  assert.match(detail, /notify_chat.*dead/s);
  await page.close();
});

// needs: stripe
test("Stripe: an event's copies as verified, and a copy whose bytes differ, marked", async () => {
  const page = await signedIn();
  const id = `evt_dashboard_${Date.now()}`;
  const signedAt = Math.floor(Date.now() / 1000);
  const body = (amount) => JSON.stringify({ id, object: "event", type: "invoice.voided", created: signedAt, data: { object: { amount_due: amount } } });
  const post = (text) => w.post("/webhooks/stripe", text, stripeHeaders(text, SOURCE_SECRETS.STRIPE_WEBHOOK_SECRET)).then((r) => r.json());
  await post(body(2000));
  await post(body(2000));
  // A copy under the same id whose bytes differ (signed all the same).
  await post(body(2001));
  await page.goto(`${origin}/admin/events/stripe/${id}`);
  const copies = await page.locator("table").nth(1).locator("tbody tr").allTextContents();
  assert.equal(copies.length, 3);
  assert.match(copies[1], /duplicate.*same as the first/);
  assert.match(copies[2], /duplicate.*differs from the first/);
  for (const copy of copies) {
    assert.match(copy, /Stripe-Signature v1: HMAC-SHA256 of t\.bodysecret 0 \(by position\)/);
    assert.match(copy, /\d{4}-\d\d-\d\dT[\d:.]+Z(the second it arrived|\d+ s before it arrived)/);
  }
  // The stored payload, indented for reading, its values as sent.
  const shown = await page.locator("details pre").textContent();
  assert.match(shown, new RegExp(`^\\{\\n  "id": "${id}",\\n`));
  assert.match(shown, /"amount_due": 2000/);
  await page.screenshot({ path: "tests/artifacts/dashboard-event.png", fullPage: true });
  await page.close();
});

test("without the session cookie every page asks to sign in; HTML in ids is escaped", async () => {
  const page = await browser.newPage();
  const res = await page.goto(eventPage("<b>x</b>"));
  assert.equal(res.status(), 401);
  assert.equal(await page.locator("h1").textContent(), "Sign in");
  await page.fill("#token", TOKEN);
  await page.click("button[type=submit]");
  await page.goto(eventPage("<b>x</b>"));
  assert.equal(await page.locator("h1").textContent(), "Event <b>x</b>");
  assert.equal(await page.locator("h1 b").count(), 0, "no markup from an id");
  await page.close();
});

test("a failed event's page: Replay applies it once, and says so", async () => {
  const page = await browser.newPage();
  await page.goto(`${origin}/admin`);
  await page.fill("#token", TOKEN);
  await page.click("button[type=submit]");
  await page.waitForURL(`${origin}/admin`);
  await page.goto(eventPage(failedId));
  assert.equal(await page.locator("button", { hasText: "Dismiss" }).count(), 1);
  await page.screenshot({ path: "tests/artifacts/dashboard-failed-event.png", fullPage: true });
  // A real browser's own form post: Sec-Fetch-Site same-origin, accepted.
  await page.click("button:has-text('Replay')");
  await page.waitForURL(/\?done=applied$/);
  assert.match(await page.locator(".notice").textContent(), /Replayed: the effect was applied, once\./);
  assert.equal(await page.locator("button", { hasText: "Dismiss" }).count(), 0, "a done event cannot be dismissed");
  assert.equal(await w.scalar("SELECT count(*) FROM processed_events WHERE event_id = ?", failedId), 1);
  assert.equal(await w.scalar("SELECT count(*) FROM failed_events WHERE event_id = ?", failedId), 0);
  await page.close();
});

/** A page signed in to the dashboard. */
async function signedIn() {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  await page.goto(`${origin}/admin`);
  await page.fill("#token", TOKEN);
  await page.click("button[type=submit]");
  await page.waitForURL(`${origin}/admin`);
  return page;
}

test("from the overview: Replay a failed event, Requeue a dead side effect; each says what it did", async () => {
  const page = await signedIn();
  const failedRow = page.locator("tr", { hasText: failedFromOverviewId });
  await failedRow.locator("button:has-text('Replay')").click();
  await page.waitForURL(/\?done=applied$/);
  assert.match(await page.locator(".notice").textContent(), /applied, once/);
  assert.equal(await w.scalar("SELECT count(*) FROM processed_events WHERE event_id = ?", failedFromOverviewId), 1);

  await page.goto(`${origin}/admin`);
  const calls = w.target.calls.length;
  const deadRow = page.locator("tr", { hasText: "notify_chat" }).filter({ hasText: processedId });
  await deadRow.locator("button:has-text('Requeue')").click();
  await page.waitForURL(`${origin}/admin?done=requeued`);
  assert.match(await page.locator(".notice").textContent(), /Requeued: the side effect will be tried again/);
  await page.screenshot({ path: "tests/artifacts/dashboard-requeued.png", fullPage: true });
  // Performed once more, under its same key (the fake target still fails it).
  const key = await w.scalar("SELECT idempotency_key FROM outbox WHERE event_id = ? AND action != 'notify_operator'", processedId);
  await eventually(
    () => w.target.calls.slice(calls).some((c) => c.idempotencyKey === key),
    10_000,
    "the requeued call, under its key",
  );
  await page.close();
});

test("Replay of an event already applied is a no-op, and says so", async () => {
  const page = await signedIn();
  await page.goto(eventPage(processedId));
  await page.click("button:has-text('Replay')");
  await page.waitForURL(/\?done=no-op$/);
  assert.match(await page.locator(".notice").textContent(), /No-op: the effect had already been applied\./);
  assert.equal(await w.scalar("SELECT count(*) FROM processed_events WHERE event_id = ?", processedId), 1);
  await page.close();
});

test("a post from another site, or without the session's form token, is refused and changes nothing", async () => {
  const page = await signedIn();
  const action = `${eventPage(attackedId)}/dismiss`;
  // Another site's page, with a form aimed at the dashboard.
  await page.route("http://evil.test/", (route) =>
    route.fulfill({
      contentType: "text/html",
      body: `<form method="post" action="${action}"><input type="hidden" name="form_token" value="00"><button>win</button></form>`,
    }),
  );
  await page.goto("http://evil.test/");
  const [crossSite] = await Promise.all([page.waitForResponse(action), page.click("button")]);
  // The cookie is SameSite=Strict: the dashboard sees no session, and asks to sign in.
  assert.ok([401, 403].includes(crossSite.status()), String(crossSite.status()));

  // Same origin, signed in, but no token: a script or a forgery that got the cookie sent.
  const bare = await page.request.post(action, { form: { form_token: "" } });
  assert.equal(bare.status(), 403);
  const wrong = await page.request.post(action, { form: { form_token: "ab".repeat(32) } });
  assert.equal(wrong.status(), 403);

  assert.equal((await w.inboxState(`${FIRST}:${attackedId}`)).state, "failed", "not dismissed");
  const refused = w.logged("admin_action").filter((l) => l.target === `${FIRST}:${attackedId}`);
  assert.ok(refused.length >= 2 && refused.every((l) => l.outcome === "refused"), JSON.stringify(refused));
  await page.close();
});

test("find events by id or key, status, type and day, 50 a page, older pages by keyset", async () => {
  // 60 events of the first source (the ledger row alone).
  const events = Array.from({ length: 60 }, () => eventOf(FIRST));
  const ids = events.map((e) => e.id);
  for (let i = 0; i < events.length; i += 10) await Promise.all(events.slice(i, i + 10).map((event) => sendTo(w, FIRST, event)));
  const type = encodeURIComponent(await w.scalar("SELECT type FROM processed_events WHERE event_id = ?", ids[0]));
  // What else has this type: the processed event and the one failed event
  // replayed so far.
  const others = await w.scalar("SELECT count(*) FROM processed_events WHERE source = ? AND type = ? AND event_id NOT IN (SELECT value FROM json_each(?))", FIRST, decodeURIComponent(type), JSON.stringify(ids));
  const page = await signedIn();
  await page.click("a:has-text('Find events')");
  await page.waitForURL(`${origin}/admin/events`);
  const rowIds = async () => page.locator("table tbody tr td:nth-child(3)").allTextContents();

  await page.fill("input[name=q]", processedId);
  await page.click("button:has-text('Find')");
  assert.deepEqual(await rowIds(), [processedId]);

  await page.goto(`${origin}/admin/events`);
  await page.fill("input[name=q]", `${FIRST}:${attackedId}`);
  await page.selectOption("select[name=status]", "failed");
  await page.click("button:has-text('Find')");
  assert.deepEqual(await rowIds(), [attackedId]);
  assert.equal(await page.locator("button", { hasText: "Replay" }).count(), 1, "a failed event's actions");

  const day = (offset) => new Date(Date.now() + offset * 86_400_000).toISOString().slice(0, 10);
  await page.goto(`${origin}/admin/events?type=${type}&from=${day(2)}`);
  assert.match(await page.locator("body").textContent(), /None\./, "nothing from the day after tomorrow");
  await page.goto(`${origin}/admin/events?type=${type}&to=${day(-2)}`);
  assert.match(await page.locator("body").textContent(), /None\./, "nothing up to the day before yesterday");
  await page.goto(`${origin}/admin/events?type=${type}&source=no-such-source`);
  assert.match(await page.locator("body").textContent(), /None\./, "none from another source");

  await page.goto(`${origin}/admin/events?type=${type}&source=${FIRST}&from=${day(-1)}&to=${day(1)}`);
  const first = await rowIds();
  assert.equal(first.length, 50);
  await page.screenshot({ path: "tests/artifacts/dashboard-find.png", fullPage: false });
  await page.click("a.older");
  const second = await rowIds();
  assert.equal(second.length, 10 + others);
  const shown = [...first, ...second];
  assert.equal(new Set(shown).size, shown.length, "every event once, on one page or the other");
  assert.ok(ids.every((id) => shown.includes(id)));
  assert.equal(await page.locator("a.older").count(), 0, "no page after the last");
  await page.close();
});

test("every action is an audit line naming the session by a digest, never the token", async () => {
  const lines = w.logged("admin_action");
  const done = lines.filter((l) => l.outcome !== "refused");
  assert.ok(done.some((l) => l.action === "replay" && l.outcome === "applied"));
  assert.ok(done.some((l) => l.action === "requeue" && l.outcome === "requeued"));
  for (const line of lines) {
    assert.match(line.session, /^[0-9a-f]{16}$/);
    assert.ok(!JSON.stringify(line).includes(TOKEN), "the token is never logged");
  }
});

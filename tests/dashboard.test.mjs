// The dashboard as a person sees it, in headless Chromium (Debian's, driven
// by playwright-core): sign in, read the counters, the trend, the events and
// the alerts, open one;
// Replay, Dismiss and Requeue, and a cross-site or tokenless post refused.
// Saves tests/artifacts/dashboard.png, dashboard-event.png,
// dashboard-failed-event.png, dashboard-requeued.png and dashboard-find.png
// (the copies in docs/ are these).
// needs: stripe, github, demos, dashboard
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import { chromium } from "playwright-core";

import { eventually, startWorker } from "./support/worker.mjs";
import { checkoutCompleted, stripeHeaders, uniqueId } from "./support/sign.mjs";

const TOKEN = "dashboard-e2e-token-0123456789abcdef";
const started = Date.now();
let w;
let origin;
let browser;
const processedId = uniqueId("evt");
const failedId = uniqueId("evt");
const failedFromOverviewId = uniqueId("evt");
const attackedId = uniqueId("evt");

before(async () => {
  w = await startWorker(
    {
      ADMIN_TOKEN: TOKEN,
      STATS_FLUSH_MS: "0",
      EFFECT_MAX_ATTEMPTS: "1",
      EMAIL_API_URL: "http://email.test",
      OUTBOX_MAX_ATTEMPTS: "1",
    },
    { port: 0 },
  );
  origin = (await w.mf.ready).origin;
  w.target.answer = () => 503; // every receipt fails: its row goes dead
  const send = (body, headers = {}) =>
    w.post("/webhooks/stripe", body, { ...stripeHeaders(body, "whsec_test_current"), ...headers }).then((r) => r.json());
  const body = checkoutCompleted({ id: processedId });
  await send(body);
  await send(body);
  // A copy under the same id whose bytes differ (signed all the same).
  await send(checkoutCompleted({ id: processedId, amount: 2001 }));
  for (const id of [failedId, failedFromOverviewId, attackedId]) {
    await send(checkoutCompleted({ id }), { "x-test-fault": "effect-always-fails" });
  }
  await w.post("/webhooks/stripe", body, stripeHeaders(body, "whsec_wrong")).then((r) => r.arrayBuffer());
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
  const insert = w.db.prepare("INSERT INTO delivery_trend (minute, source, outcome, value) VALUES (?, 'github', ?, ?)");
  await w.db.batch(history.filter(([, , n]) => n > 0).map((row) => insert.bind(...row)));
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

  const stripeRow = page.locator("table").first().locator("tr", { hasText: "stripe" });
  const cells = await stripeRow.locator("td").allTextContents();
  // source, received, processed, duplicates, rejected, ledger, failed, sent, dead
  assert.deepEqual(cells.slice(0, 5), ["stripe", "7", "1", "2", "1"]);
  assert.deepEqual(cells.slice(5), ["1", "3", "0", "1"]);

  // The trend: the same deliveries, per minute and per hour, by outcome;
  // the three events that gave up counted once each, when listed.
  const trendRow = page.locator("table").nth(1).locator("tr", { hasText: "stripe" });
  const charts = trendRow.locator("svg.trend");
  assert.equal(await charts.count(), 2, "last hour and last day");
  for (const chart of [charts.nth(0), charts.nth(1)]) {
    const sums = {};
    for (const rect of await chart.locator("rect[data-series]").all()) {
      const series = await rect.getAttribute("data-series");
      sums[series] = (sums[series] ?? 0) + Number(await rect.getAttribute("data-n"));
    }
    assert.deepEqual(sums, { processed: 1, duplicate: 2, failed: 3, refused: 1 });
  }
  assert.equal((await trendRow.locator("td").last().textContent()).trim(), "1", "refused in the last hour");

  // The alerts: one for the three events that gave up (not three), one for
  // the dead receipt (one more of each should an ALERT_INTERVAL end
  // between them); logged only, as ALERT_URL is unset.
  const alerts = await page.locator("table").last().locator("tbody tr").allTextContents();
  const dead = alerts.filter((a) => /stripe: side effect send_email of event evt_\w+ is dead after 1 attempt: target answered 503/.test(a));
  const gaveUp = alerts.filter((a) => /stripe: event evt_\w+ \(checkout\.session\.completed\) gave up: injected fault: before effect/.test(a));
  assert.equal(dead.length + gaveUp.length, alerts.length, alerts.join("\n"));
  assert.equal(dead.length, 1);
  assert.ok(gaveUp.length === 1 || (gaveUp.length === 2 && Math.floor(Date.now() / 900_000) > Math.floor(started / 900_000)));
  assert.ok(alerts.every((a) => a.endsWith("logged")));

  const text = await page.locator("body").textContent();
  assert.match(text, new RegExp(processedId));
  assert.match(text, /injected fault: before effect/);
  assert.match(text, /send_email/);
  assert.match(text, /target answered 503/);
  await page.screenshot({ path: "tests/artifacts/dashboard.png", fullPage: true });

  await page.click(`a:has-text("${processedId}")`);
  await page.waitForURL(/\/admin\/events\/stripe\//);
  const detail = await page.locator("body").textContent();
  assert.match(detail, /Deliveries/);
  const inbox = await page.locator("table").first().locator("tbody td").allTextContents();
  assert.deepEqual(inbox.slice(0, 3), ["done", "3", "1"]);
  assert.match(detail, /checkout\.session\.completed/);
  const copies = await page.locator("table").nth(1).locator("tbody tr").allTextContents();
  assert.equal(copies.length, 3, "every copy is in the delivery log");
  assert.match(copies[0], /first/);
  assert.match(copies[1], /duplicate.*same as the first/);
  assert.match(copies[2], /duplicate.*differs from the first/);
  // Each as verified: the scheme, the secret by position, the signed time.
  for (const copy of copies) {
    assert.match(copy, /Stripe-Signature v1: HMAC-SHA256 of t\.bodysecret 0 \(by position\)/);
    assert.match(copy, /\d{4}-\d\d-\d\dT[\d:.]+Z(the second it arrived|\d+ s before it arrived)/);
  }
  // The stored payload, indented for reading, its values as sent.
  const shown = await page.locator("details pre").textContent();
  assert.match(shown, new RegExp(`^\\{\\n  "id": "${processedId}",\\n`));
  assert.match(shown, /"amount_total": 2000,/);
  assert.match(detail, /send_email.*dead/s);
  await page.screenshot({ path: "tests/artifacts/dashboard-event.png", fullPage: true });
  await page.close();
});

test("without the session cookie every page asks to sign in; HTML in ids is escaped", async () => {
  const page = await browser.newPage();
  const res = await page.goto(`${origin}/admin/events/stripe/${encodeURIComponent("<b>x</b>")}`);
  assert.equal(res.status(), 401);
  assert.equal(await page.locator("h1").textContent(), "Sign in");
  await page.fill("#token", TOKEN);
  await page.click("button[type=submit]");
  await page.goto(`${origin}/admin/events/stripe/${encodeURIComponent("<b>x</b>")}`);
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
  await page.goto(`${origin}/admin/events/stripe/${failedId}`);
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
  const deadRow = page.locator("tr", { hasText: "send_email" }).filter({ hasText: processedId });
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
  await page.goto(`${origin}/admin/events/stripe/${processedId}`);
  await page.click("button:has-text('Replay')");
  await page.waitForURL(/\?done=no-op$/);
  assert.match(await page.locator(".notice").textContent(), /No-op: the effect had already been applied\./);
  assert.equal(await w.scalar("SELECT count(*) FROM processed_events WHERE event_id = ?", processedId), 1);
  await page.close();
});

test("a post from another site, or without the session's form token, is refused and changes nothing", async () => {
  const page = await signedIn();
  const action = `${origin}/admin/events/stripe/${attackedId}/dismiss`;
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

  assert.equal((await w.inboxState(`stripe:${attackedId}`)).state, "failed", "not dismissed");
  const refused = w.logged("admin_action").filter((l) => l.target === `stripe:${attackedId}`);
  assert.ok(refused.length >= 2 && refused.every((l) => l.outcome === "refused"), JSON.stringify(refused));
  await page.close();
});

test("find events by id or key, status, type and day, 50 a page, older pages by keyset", async () => {
  // 60 events of a type no effect handles (the ledger row alone).
  const ids = Array.from({ length: 60 }, () => uniqueId("evt"));
  for (let i = 0; i < ids.length; i += 10) {
    await Promise.all(
      ids.slice(i, i + 10).map((id) => {
        const body = JSON.stringify({ id, object: "event", type: "invoice.finalized", created: 1, data: { object: {} } });
        return w.post("/webhooks/stripe", body, stripeHeaders(body, "whsec_test_current")).then((r) => r.json());
      }),
    );
  }
  const page = await signedIn();
  await page.click("a:has-text('Find events')");
  await page.waitForURL(`${origin}/admin/events`);
  const rowIds = async () => page.locator("table tbody tr td:nth-child(3)").allTextContents();

  await page.fill("input[name=q]", processedId);
  await page.click("button:has-text('Find')");
  assert.deepEqual(await rowIds(), [processedId]);

  await page.goto(`${origin}/admin/events`);
  await page.fill("input[name=q]", `stripe:${attackedId}`);
  await page.selectOption("select[name=status]", "failed");
  await page.click("button:has-text('Find')");
  assert.deepEqual(await rowIds(), [attackedId]);
  assert.equal(await page.locator("button", { hasText: "Replay" }).count(), 1, "a failed event's actions");

  const day = (offset) => new Date(Date.now() + offset * 86_400_000).toISOString().slice(0, 10);
  await page.goto(`${origin}/admin/events?type=invoice.finalized&from=${day(2)}`);
  assert.match(await page.locator("body").textContent(), /None\./, "nothing from the day after tomorrow");
  await page.goto(`${origin}/admin/events?type=invoice.finalized&to=${day(-2)}`);
  assert.match(await page.locator("body").textContent(), /None\./, "nothing up to the day before yesterday");
  await page.goto(`${origin}/admin/events?type=invoice.finalized&source=github`);
  assert.match(await page.locator("body").textContent(), /None\./, "none from another source");

  await page.goto(`${origin}/admin/events?type=invoice.finalized&source=stripe&from=${day(-1)}&to=${day(1)}`);
  const first = await rowIds();
  assert.equal(first.length, 50);
  await page.screenshot({ path: "tests/artifacts/dashboard-find.png", fullPage: false });
  await page.click("a.older");
  const second = await rowIds();
  assert.equal(second.length, 10);
  assert.deepEqual([...first, ...second].sort(), [...ids].sort(), "every event once, on one page or the other");
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

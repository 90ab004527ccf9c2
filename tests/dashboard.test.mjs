// The dashboard as a person sees it, in headless Chromium (Debian's, driven
// by playwright-core): sign in, read the counters and the events, open one.
// Saves tests/artifacts/dashboard.png, dashboard-event.png and
// dashboard-failed-event.png (the copies in docs/ are these).
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import { chromium } from "playwright-core";

import { eventually, startWorker } from "./support/worker.mjs";
import { checkoutCompleted, stripeHeaders, uniqueId } from "./support/sign.mjs";

const TOKEN = "dashboard-e2e-token";
let w;
let origin;
let browser;
const processedId = uniqueId("evt");
const failedId = uniqueId("evt");

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
  await send(checkoutCompleted({ id: failedId }), { "x-test-fault": "effect-always-fails" });
  await w.post("/webhooks/stripe", body, stripeHeaders(body, "whsec_wrong")).then((r) => r.arrayBuffer());
  await eventually(
    async () =>
      (await w.scalar("SELECT count(*) FROM outbox WHERE event_id = ? AND status = 'dead'", processedId)) === 1 &&
      (await w.scalar("SELECT count(*) FROM failed_events WHERE event_id = ?", failedId)) === 1,
    20_000,
    "a dead side effect and a failed event",
  );
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
  assert.deepEqual(cells.slice(0, 5), ["stripe", "4", "1", "1", "1"]);
  assert.deepEqual(cells.slice(5), ["1", "1", "0", "1"]);

  const text = await page.locator("body").textContent();
  assert.match(text, new RegExp(processedId));
  assert.match(text, /injected fault: before effect/);
  assert.match(text, /send_receipt/);
  assert.match(text, /target answered 503/);
  await page.screenshot({ path: "tests/artifacts/dashboard.png", fullPage: true });

  await page.click(`a:has-text("${processedId}")`);
  await page.waitForURL(/\/admin\/events\/stripe\//);
  const detail = await page.locator("body").textContent();
  assert.match(detail, /Deliveries/);
  const inbox = await page.locator("table").first().locator("tbody td").allTextContents();
  assert.deepEqual(inbox.slice(0, 3), ["done", "2", "1"]);
  assert.match(detail, /checkout\.session\.completed/);
  const copies = await page.locator("table").nth(1).locator("tbody tr").allTextContents();
  assert.equal(copies.length, 2, "both copies are in the delivery log");
  assert.match(copies[0], /first/);
  assert.match(copies[1], /duplicate/);
  assert.match(detail, /send_receipt.*dead/s);
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
  assert.equal(await page.locator("button", { hasText: "Replay" }).count(), 0, "no actions on a done event");
  assert.equal(await w.scalar("SELECT count(*) FROM processed_events WHERE event_id = ?", failedId), 1);
  assert.equal(await w.scalar("SELECT count(*) FROM failed_events WHERE event_id = ?", failedId), 0);
  await page.close();
});

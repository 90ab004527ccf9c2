// End to end, as a developer meets it: `make dev`'s runner (scripts/dev.mjs:
// wrangler dev with state on disk, plus the cron ticker) is killed with
// SIGKILL after events were acknowledged but before their side effects were
// performed, then started again on the same state the way `make dev` starts.
// The local queue keeps its messages in memory, so they die with the process;
// the ticker runs the cron relay, which sends them again. Every outbox row
// must be `sent` within three minutes, each key succeeding once at the target.
// Events whose first attempt failed just before the kill show that the
// inboxes' alarms survive it: workerd keeps them on disk (the template's RELIABILITY.md).
// needs: stripe, github, demos
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { cronMatches } from "../scripts/cron.mjs";
import { d1Query, freePort, sleep, startDev, startSink, writeEnvFile } from "./support/dev.mjs";
import { checkoutCompleted, githubHeaders, starEvent, stripeHeaders, uniqueId } from "./support/sign.mjs";

const STRIPE_SECRET = "whsec_dev_restart_secret";
const GITHUB_SECRET = "dev_restart_github_secret";
const ADMIN_TOKEN = "dev-restart-admin-token-0123456789ab";

describe("the local cron ticker's schedule", () => {
  const at = (iso) => new Date(iso);
  test("matches in UTC, as Cloudflare runs crons", () => {
    assert.ok(cronMatches("* * * * *", at("2026-11-30T10:17:00Z")));
    assert.ok(cronMatches("*/15 * * * *", at("2026-11-30T10:45:00Z")));
    assert.ok(!cronMatches("*/15 * * * *", at("2026-11-30T10:46:00Z")));
    assert.ok(cronMatches("10-50/20 * * * *", at("2026-11-30T10:50:00Z")));
    assert.ok(!cronMatches("10-50/20 * * * *", at("2026-11-30T10:40:00Z")));
    assert.ok(cronMatches("0 9-17 * * MON-FRI", at("2026-11-30T09:00:00Z")), "a Monday");
    assert.ok(!cronMatches("0 9-17 * * MON-FRI", at("2026-11-29T09:00:00Z")), "a Sunday");
    assert.ok(cronMatches("30 2 1,15 JAN,DEC *", at("2026-12-15T02:30:00Z")));
    // Both day fields restricted: either may match; one starting with `*`
    // does not count as restricted.
    assert.ok(cronMatches("0 0 1 * MON", at("2026-11-30T00:00:00Z")));
    assert.ok(!cronMatches("0 0 */2 * MON", at("2026-11-30T00:00:00Z")));
  });
  test("refuses what it does not understand instead of guessing", () => {
    assert.throws(() => cronMatches("* * * *", new Date()), /five fields/);
    assert.throws(() => cronMatches("0 0 L * *", new Date()), /day of month/);
    assert.throws(() => cronMatches("61 * * * *", new Date()), /minute/);
    assert.throws(() => cronMatches("*/0 * * * *", new Date()), /step/);
    assert.throws(() => cronMatches("5-3 * * * *", new Date()), /reversed/);
    assert.throws(() => cronMatches("1-5-9 * * * *", new Date()), /range/);
    // Cloudflare counts weekdays 1-7 from Sunday, Unix cron 0-6: names only.
    assert.throws(() => cronMatches("0 0 * * 1", new Date()), /day of week/);
  });
});

describe("make dev after a crash", { timeout: 420_000 }, () => {
  let dir, sink, dev, port, envFile, persistTo;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), "dev-restart-"));
    persistTo = join(dir, "state");
    envFile = join(dir, ".dev.vars");
    sink = await startSink();
    writeEnvFile(envFile, {
      STRIPE_WEBHOOK_SECRET: STRIPE_SECRET,
      GITHUB_WEBHOOK_SECRET: GITHUB_SECRET,
      ADMIN_TOKEN,
      EMAIL_API_URL: sink.url,
      EMAIL_API_KEY: "re_dev_restart_key",
      NOTIFY_URL: `${sink.url}/notify`,
      TEST_FAULTS: "enabled",
      // A row claimed just before the kill is re-sent once its lease and the
      // relay's 60 s grace have passed, at the next minute's tick: with the
      // default 60 s lease, up to 3 minutes after the claim. A 30 s lease
      // keeps a margin against the 3-minute bound.
      OUTBOX_LEASE_MS: 30000,
      // The retry of an event whose first attempt failed is 30-60 s away:
      // after the restart, so only a surviving alarm can run it.
      EFFECT_RETRY_BASE_MS: 60000,
    });
    port = await freePort();
  });
  after(async () => {
    await dev?.stop();
    await sink?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test("side effects acknowledged before a SIGKILL are all performed after a restart, once per key", async () => {
    // The target never answers before the crash: calls are in flight, and
    // the rest of the messages wait in the local queue.
    sink.answer = () => "hang";
    dev = await startDev({ port, persistTo, envFile });
    assert.match(dev.output.join(""), /running the cron triggers locally \(\* \* \* \* \*, UTC\)/);

    const replies = [];
    for (let i = 0; i < 20; i++) {
      const body = checkoutCompleted({ id: uniqueId("evt"), email: `buyer${i}@example.com` });
      replies.push(await post(dev.url, "/webhooks/stripe", body, stripeHeaders(body, STRIPE_SECRET)));
    }
    for (let i = 0; i < 10; i++) {
      const body = starEvent({ repo: `octo/restart-${i}` });
      const headers = githubHeaders(body, GITHUB_SECRET, { delivery: uniqueId("delivery"), event: "star" });
      replies.push(await post(dev.url, "/webhooks/github", body, headers));
    }
    assert.deepEqual(
      replies.map((r) => `${r.status} ${r.outcome}`),
      Array(30).fill("200 processed"),
    );
    for (let i = 0; i < 400 && sink.calls.length === 0; i++) await sleep(50);
    assert.ok(sink.calls.length > 0, "the consumer was calling the target when the runtime died");
    // Five more whose first attempt fails: their inboxes' alarms (30 to 60 s
    // away) hold the retry when the runtime dies.
    for (let i = 0; i < 5; i++) {
      const body = checkoutCompleted({ id: uniqueId("evt"), email: `retry${i}@example.com` });
      const headers = { ...stripeHeaders(body, STRIPE_SECRET), "x-test-fault": "fail-before-effect" };
      const reply = await post(dev.url, "/webhooks/stripe", body, headers);
      assert.equal(`${reply.status} ${reply.outcome}`, "200 accepted");
    }

    await dev.kill();
    const before = d1Query(persistTo, "SELECT status, count(*) AS n FROM outbox GROUP BY status");
    const rows = Object.fromEntries(before.map((r) => [r.status, r.n]));
    assert.equal((rows.pending ?? 0) + (rows.sending ?? 0), 30, `nothing performed yet: ${JSON.stringify(rows)}`);
    assert.equal(d1Query(persistTo, "SELECT count(*) AS n FROM processed_events")[0].n, 30, "5 effects not applied yet");

    sink.answer = () => 200;
    const restarted = Date.now();
    dev = await startDev({ port, persistTo, envFile });
    let sent = [];
    while (Date.now() - restarted < 180_000) {
      sent = await outboxSent(dev.url);
      if (sent.length === 35) break;
      await sleep(2_000);
    }
    const took = Math.round((Date.now() - restarted) / 1000);
    assert.equal(sent.length, 35, `rows sent ${took} s after the restart: ${sent.length} of 35`);

    await dev.stop();
    dev = undefined;
    const keys = d1Query(persistTo, "SELECT idempotency_key FROM outbox").map((r) => r.idempotency_key);
    assert.equal(keys.length, 35, "the alarms applied the 5 held events after the restart");
    const ledger = d1Query(persistTo, "SELECT count(*) AS n FROM processed_events")[0].n;
    assert.equal(ledger, 35, "every acknowledged event has its ledger row");
    const successes = sink.successes();
    for (const key of keys) assert.equal(successes.get(key), 1, `key ${key} succeeded once at the target`);
    assert.equal(successes.size, 35, "no call under any other key");
    console.log(
      `# ${rows.sending ?? 0} rows in flight and ${rows.pending ?? 0} waiting in the queue at the kill; ` +
        `all 35 sent ${took} s after the restart`,
    );
  });
});

async function post(url, path, body, headers) {
  const res = await fetch(url + path, { method: "POST", body, headers });
  const reply = await res.json().catch(() => ({}));
  return { status: res.status, outcome: reply.outcome };
}

async function outboxSent(url) {
  const res = await fetch(`${url}/admin/api/outbox?status=sent&limit=100`, {
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
  });
  if (!res.ok) throw new Error(`admin API: ${res.status} ${await res.text()}`);
  return (await res.json()).outbox;
}

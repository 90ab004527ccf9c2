// The dashboard over a long history: 10,000 processed events, 200 failed
// ones and 200 dead side effects, a full day of the trend for 9 sources in
// every outcome (the most its table holds: 25 hours × 5 outcomes × 9) and
// 500 alerts, written straight into local D1; then each page requested 20
// times. Prints the runtime (workerd) CPU and the wall time per page view.
//
//   node bench/pages.mjs          (make build first)
import { existsSync, rmSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";

import { workerdCpuMs } from "./harness.mjs";
import { startWorker } from "../tests/support/worker.mjs";

const EVENTS = Number(process.env.PAGES_EVENTS ?? 10_000);
const VIEWS = 20;
const TOKEN = "pages-bench-admin-token-0123456789ab";
const STATE_DIR = join(existsSync("/dev/shm") ? "/dev/shm" : os.tmpdir(), `webhooks-pages-${process.pid}`);

rmSync(STATE_DIR, { recursive: true, force: true });
const w = await startWorker(
  { ADMIN_TOKEN: TOKEN },
  {
    unsafeDirectSockets: [{ host: "127.0.0.1", port: 0 }],
    handleRuntimeStdio: (out, err) => (out.resume(), err.resume()),
    d1Persist: join(STATE_DIR, "d1"),
    durableObjectsPersist: join(STATE_DIR, "do"),
  },
);
const base = await w.mf.unsafeGetDirectURL("webhooks");

// The history, oldest first, a minute apart.
const start = Date.now() - EVENTS * 60_000;
const id = (n) => `evt_hist_${String(n).padStart(6, "0")}`;
const statements = [];
for (let n = 0; n < EVENTS; n++) {
  const at = start + n * 60_000;
  statements.push(
    w.db
      .prepare("INSERT INTO processed_events (source, event_id, type, received_at, processed_at) VALUES (?, ?, ?, ?, ?)")
      .bind(n % 2 ? "stripe" : "github", id(n), n % 3 ? "checkout.session.completed" : "star.created", at, at + 20),
  );
}
for (let n = 0; n < 200; n++) {
  const at = start + n * 60_000;
  statements.push(
    w.db
      .prepare("INSERT INTO failed_events (source, event_id, type, received_at, failed_at, last_error) VALUES ('stripe', ?, 'invoice.paid', ?, ?, 'target answered 503')")
      .bind(`evt_failed_${n}`, at, at + 1000),
    w.db
      .prepare("INSERT INTO outbox (idempotency_key, source, event_id, action, payload, status, attempts, next_attempt_at, created_at, updated_at, last_error) VALUES (?, 'stripe', ?, 'send_receipt', '{}', 'dead', 5, ?, ?, ?, 'target answered 503')")
      .bind(`key_${n}`, id(n * 2 + 1), at, at, at),
  );
}
// The trend at its bound: every minute of the 25 hours kept, every outcome.
const SOURCES = ["stripe", "github", "clerk", "shop", "slack", "linear", "paddle", "twilio", "acme"];
const OUTCOMES = ["processed", "duplicate", "accepted", "failed", "refused"];
const nowMinute = Math.floor(Date.now() / 60_000);
const trend = w.db.prepare("INSERT INTO delivery_trend (minute, source, outcome, value) VALUES (?, ?, ?, ?)");
for (let m = nowMinute - 25 * 60 + 1; m <= nowMinute; m++) {
  for (const source of SOURCES) {
    for (const [i, outcome] of OUTCOMES.entries()) statements.push(trend.bind(m, source, outcome, 1 + ((m + i) % 40)));
  }
}
for (let n = 0; n < 500; n++) {
  const at = start + n * 60_000;
  statements.push(
    w.db
      .prepare("INSERT INTO outbox (idempotency_key, source, event_id, action, payload, status, attempts, next_attempt_at, created_at, updated_at, note) VALUES (?, 'stripe', ?, 'notify_operator', ?, 'sent', 1, ?, ?, ?, NULL)")
      .bind(`alert_${n}`, id(n), JSON.stringify({ text: `stripe: event ${id(n)} (invoice.paid) gave up: target answered 503.` }), at, at, at),
  );
}
for (let i = 0; i < statements.length; i += 500) await w.db.batch(statements.slice(i, i + 500));

const cookie = await w.signIn(TOKEN);

const far = start + Math.floor(EVENTS / 10) * 60_000; // a page 90 % of the way back
const pages = [
  ["overview", "/admin"],
  ["find: newest 50", "/admin/events"],
  ["find: by id", `/admin/events?q=${id(1234)}`],
  ["find: by key", `/admin/events?q=stripe:${id(1235)}`],
  ["find: type and days", `/admin/events?type=star.created&from=${new Date(start).toISOString().slice(0, 10)}`],
  ["find: a page 90 % back", `/admin/events?after=${far}&after_source=stripe&after_id=${id(1001)}`],
  ["find: failed", "/admin/events?status=failed"],
  ["event page", `/admin/events/stripe/${id(4321)}`],
];
const rows = [];
for (const [name, path] of pages) {
  const url = new URL(path, base);
  const first = await fetch(url, { headers: { cookie } });
  if (first.status !== 200) throw new Error(`${path}: ${first.status}`);
  const bytes = (await first.arrayBuffer()).byteLength;
  const cpuBefore = workerdCpuMs();
  const started = process.hrtime.bigint();
  for (let i = 0; i < VIEWS; i++) await (await fetch(url, { headers: { cookie } })).arrayBuffer();
  const wall = Number(process.hrtime.bigint() - started) / 1e6 / VIEWS;
  const cpu = (workerdCpuMs() - cpuBefore) / VIEWS;
  rows.push({ page: name, "html bytes": bytes, "workerd CPU ms/view": +cpu.toFixed(1), "wall ms/view": +wall.toFixed(1) });
}
await w.dispose();
rmSync(STATE_DIR, { recursive: true, force: true });
console.log(`the dashboard over ${EVENTS} events, ${VIEWS} views each:`);
console.table(rows);

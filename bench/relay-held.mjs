// The forward relay during an outage: the D1 rows one cron run reads while
// HELD deliveries (default 100,000) wait for a destination whose breaker is
// open (its probe due), beside 10 due for a healthy one. Read from the
// relay's own `forward_relay` log line (`rows_read`: D1's count for all its
// queries: the due rows, the probes, the destinations that cannot take
// theirs).
//
// With RELAY_BENCH=drain, the destination is healthy instead (its breaker
// closed, as when an outage ends): each run should read about the rows it
// re-sends, not the whole backlog.
//
//   make relay-bench   (builds first)   or   node bench/relay-held.mjs [HELD]
import assert from "node:assert/strict";

import { startWorker } from "../tests/support/worker.mjs";

const HELD = Number(process.argv[2] ?? 100_000);
const SIGNING = { url: "http://sink.test/hooks", secret: "BENCH_SIGNING_SECRET" };
const w = await startWorker({
  DESTINATIONS: { down: SIGNING, up: SIGNING },
  BENCH_SIGNING_SECRET: "whsec_YmVuY2gtc2lnbmluZy1zZWNyZXQtMzItYnl0ZXM=",
  OUTBOX_RELAY_GRACE_MS: "0",
});
try {
  const now = Date.now();
  const rows = (destination, n, prefix) =>
    w.db
      .prepare(
        `WITH RECURSIVE i(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM i WHERE n < ?1)
         INSERT INTO forwards (delivery_id, source, event_id, event_type, destination, status, attempts,
                               next_attempt_at, created_at, budget_from, updated_at)
         SELECT ?2 || n, 'bench', ?2 || n, 'bench.event', ?3, 'pending', 1, ?4 - n, ?4 - n, ?4, ?4 - n FROM i`,
      )
      .bind(n, prefix, destination, now - 120_000)
      .run();
  await rows("down", HELD, "held_");
  await rows("up", 10, "due_");
  const drain = process.env.RELAY_BENCH === "drain";
  // Open, its probe due: each run also looks for the probe's delivery.
  if (!drain) await w.db
    .prepare("INSERT INTO destinations (name, state, failures, state_since, probe_at, updated_at) VALUES ('down', 'open', 5, ?1, ?2, ?1)")
    .bind(now, now - 1_000)
    .run();
  const worker = await w.mf.getWorker("webhooks");
  const runs = [];
  for (let run = 0; run < 3; run++) {
    const before = w.logged("forward_relay").length;
    const started = performance.now();
    await worker.scheduled({ cron: "* * * * *" });
    const ms = performance.now() - started;
    const line = w.logged("forward_relay").slice(before).at(-1);
    assert.ok(line, "the relay's line");
    runs.push({ run: run + 1, held: HELD, down: !drain, resent: line.sent, rows_read: line.rows_read, ms: Math.round(ms) });
  }
  console.table(runs);
  console.log(JSON.stringify({ held: HELD, down: !drain, rows_read_per_run: runs.map((r) => r.rows_read) }));
} finally {
  await w.dispose();
}

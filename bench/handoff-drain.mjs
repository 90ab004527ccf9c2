// Benchmark: how fast the cron relay drains a hand-off backlog, the rows a
// Postgres store owes D1 after D1 was down (issue #47's "an hour's D1
// outage at 50 events/s"). The postgres build in workerd (Miniflare), real
// D1, a real local Postgres behind the local Hyperdrive binding, through
// the pooler.
//
//   make drain-bench      (BENCH_ROWS, default 60000; BENCH_ROW_BYTES,
//                          each row's event type padded to so many bytes)
//
// BENCH_ROWS ledger rows are written straight into `webhook_outbox`, as
// events committed while D1 was down leave them, and the cron relay runs,
// one run after another (each is one minute's cron), until none is left or
// 100 runs have gone. Prints rows per run, seconds per run, and what that
// makes of the outage: 180,000 events of two rows each (a ledger
// row and a receipt's outbox row) at one run a minute, while events keep
// arriving at that rate.
import { join } from "node:path";
import os from "node:os";
import { existsSync, rmSync } from "node:fs";

import { freshDatabase, startPostgresWorker } from "../tests/support/postgres.mjs";

const ROWS = Number(process.env.BENCH_ROWS ?? 60_000);
const ROW_BYTES = Number(process.env.BENCH_ROW_BYTES ?? 0);
const RUNS_MAX = 100;
const STATE_DIR = join(existsSync("/dev/shm") ? "/dev/shm" : os.tmpdir(), `webhooks-drain-${process.pid}`);
const quiet = { handleRuntimeStdio: (out, err) => (out.resume(), err.resume()) };

const pg = freshDatabase();
const w = await startPostgresWorker(pg, { LOG_LEVEL: "warn", OUTBOX_RELAY_GRACE_MS: "0" }, {
  ...quiet,
  durableObjectsPersist: join(STATE_DIR, "do"),
  d1Persist: join(STATE_DIR, "d1"),
});
try {
  pg.query(`INSERT INTO webhook_outbox (kind, key, source, event_id, params, created_at)
    SELECT 'ledger', 'stripe:evt_drain_' || g, 'stripe', 'evt_drain_' || g,
      json_build_array('stripe', 'evt_drain_' || g, rpad('checkout.session.completed', greatest(${ROW_BYTES}, 26), '.'), 1, 2, NULL)::text, g
    FROM generate_series(1, ${ROWS}) AS g`);
  const waiting = () => Number(pg.scalar("SELECT count(*) FROM webhook_outbox WHERE handed_off_at IS NULL"));
  const worker = await w.mf.getWorker("webhooks");
  const runs = [];
  for (let left = waiting(); left > 0 && runs.length < RUNS_MAX; ) {
    const started = Date.now();
    await worker.scheduled({ cron: "* * * * *" });
    const now = waiting();
    runs.push({ rows: left - now, seconds: (Date.now() - started) / 1000 });
    left = now;
  }
  const inD1 = await w.scalar("SELECT count(*) FROM processed_events WHERE event_id LIKE 'evt_drain_%'");
  const full = runs.filter((run) => run.rows > 0);
  const perRun = Math.round(full.reduce((sum, run) => sum + run.rows, 0) / full.length);
  const seconds = full.map((run) => run.seconds).sort((a, b) => a - b);
  const outage = 180_000 * 2;
  console.log(`drain-bench: ${ROWS} rows waiting (${pg.scalar("SELECT avg(octet_length(params))::int FROM webhook_outbox")} bytes of values each); ${runs.length} relay runs; ${inD1} ledger rows in D1; ${waiting()} left`);
  console.log(`  rows per run: ${perRun} (the first ${runs[0]?.rows}, the last ${runs.at(-1)?.rows})`);
  console.log(`  seconds per run: median ${seconds[Math.floor(seconds.length / 2)]}, max ${seconds.at(-1)}`);
  // Events keep coming meanwhile, and their rows pass through the relay too.
  const arriving = 50 * 60 * 2;
  const minutes = perRun > arriving ? Math.ceil(outage / (perRun - arriving)) : Infinity;
  console.log(`  an hour's outage at 50 events/s (${outage} rows): ${Math.ceil(outage / perRun)} runs; with 50 events/s still arriving (${arriving} rows a minute), drained in about ${minutes} minutes of cron`);
} finally {
  await w.dispose();
  rmSync(STATE_DIR, { recursive: true, force: true });
}

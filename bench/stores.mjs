// Benchmark: D1 and Postgres as the store, one after the other in one run,
// with the same build (the postgres variant, which has both) in workerd
// (Miniflare), real Durable Objects, D1 and Queues, and a real local
// Postgres behind the local Hyperdrive binding.
//
//   make store-bench      (builds the postgres variant first)
//
// Per store: `distinct` new checkouts at 32 in flight (acknowledged/s, and
// fully processed/s: until their receipts' outbox rows are performed, and,
// with Postgres, handed off and marked by the relay), the runtime's CPU
// per event (workerd's, all of it: the event, its receipt, the hand-off),
// then storms of 50 copies of one event (copies/s). With Postgres, through
// the pooler (scripts/postgres.sh; Hyperdrive's stand-in), Postgres's own
// counters per event (transactions committed and rolled back, rows
// inserted and updated), and two more runs of 200 events: one through a
// proxy counting the wire's round trips and statements (bench/pg-wire.mjs),
// one through a pooler that asks no password, whose CPU against the
// first's is what authenticating (SCRAM-SHA-256, in wasm) costs.
import { existsSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";
import { gzipSync } from "node:zlib";

import { spawnSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";

import { agent, checkoutBody, drive, signed, STORM_SIZE, workerdCpuMs } from "./harness.mjs";
import { countingProxy } from "./pg-wire.mjs";
import { freshDatabase, POSTGRES_BUILD, startPostgresWorker } from "../tests/support/postgres.mjs";
import { startWorker } from "../tests/support/worker.mjs";

const DISTINCT = Number(process.env.BENCH_DISTINCT ?? 1000);
const STORMS = Number(process.env.BENCH_STORMS ?? 20);
const CONCURRENCY = 32;
const STATE_DIR = join(existsSync("/dev/shm") ? "/dev/shm" : os.tmpdir(), `webhooks-stores-${process.pid}`);
const quiet = { handleRuntimeStdio: (out, err) => (out.resume(), err.resume()), unsafeDirectSockets: [{ host: "127.0.0.1", port: 0 }] };
// The log lines at `warn`: printing them would measure this process.
// No grace: the relay marks the hand-off rows as soon as the bench runs it.
const VARS = { LOG_LEVEL: "warn", EMAIL_API_URL: "http://email.test", EMAIL_API_KEY: "bench-key", EMAIL_FROM: "shop@example.com", OUTBOX_RELAY_GRACE_MS: "0" };
const SMALL = 200;

async function run(store) {
  const pg = store === "postgres" ? freshDatabase() : undefined;
  const persist = { durableObjectsPersist: join(STATE_DIR, store, "do"), d1Persist: join(STATE_DIR, store, "d1") };
  const w = pg
    ? await startPostgresWorker(pg, VARS, { ...quiet, ...persist })
    : await startWorker(VARS, { ...quiet, ...persist, main: POSTGRES_BUILD });
  const url = new URL("/webhooks/stripe", await w.mf.unsafeGetDirectURL("webhooks")).href;
  const tag = `${store}_${process.pid}`;
  await drive(url, Array.from({ length: 100 }, (_, i) => signed(checkoutBody(`${tag}_warm${i}`))), CONCURRENCY);
  while ((await w.scalar("SELECT count(*) FROM outbox WHERE status IN ('pending', 'sending')")) > 0) await sleep(100);
  // Postgres counts a transaction when its server process reports it: at
  // most a second after, or when it ends (the pooler closes idle ones
  // after 10 s).
  if (pg) await sleep(11_000);
  const before = pg && counters(pg);

  const started = Date.now();
  const cpuBefore = workerdCpuMs();
  const machineBefore = machineCpuMs();
  const distinct = await drive(url, Array.from({ length: DISTINCT }, (_, i) => signed(checkoutBody(`${tag}_${i}`))), CONCURRENCY);
  const acked = distinct.results.filter((r) => r.status === 200).length;
  // This process's own reads of Postgres, each one transaction: taken
  // out of Postgres's counts below.
  let probes = 0;
  const waiting = () => (probes++, Number(pg.scalar("SELECT count(*) FROM webhook_outbox WHERE handed_off_at IS NULL")));
  for (;;) {
    const open = await w.scalar("SELECT count(*) FROM outbox WHERE status IN ('pending', 'sending')");
    if (open === 0 && w.target.calls.length >= DISTINCT + 100) break;
    await sleep(50);
  }
  // The relay marks what the events handed off, as the cron would: hundreds
  // of rows to a transaction.
  let relayRuns = 0;
  while (pg && waiting() > 0) {
    await (await w.mf.getWorker("webhooks")).scheduled({ cron: "* * * * *" });
    relayRuns++;
  }
  const processedSeconds = (Date.now() - started) / 1000;
  const cpuMs = workerdCpuMs() - cpuBefore;
  const machineMs = machineCpuMs() - machineBefore;
  if (pg) await sleep(11_000);
  const after = pg && counters(pg);

  const storms = { results: [], seconds: 0 };
  for (let s = 0; s < STORMS; s++) {
    const one = signed(checkoutBody(`${tag}_storm${s}`));
    const burst = await drive(url, Array(STORM_SIZE).fill(one), STORM_SIZE);
    storms.results.push(...burst.results);
    storms.seconds += burst.seconds;
  }
  const ms = distinct.results.map((r) => r.ms).sort((a, b) => a - b);
  const at = (q) => +ms[Math.min(ms.length - 1, Math.floor(q * ms.length))].toFixed(1);
  const ledger = pg
    ? Number(pg.scalar(`SELECT count(*) FROM processed_events WHERE event_id LIKE 'evt_bench_${process.pid}_${tag}%'`))
    : await w.scalar("SELECT count(*) FROM processed_events WHERE event_id LIKE ?", `evt_bench_${process.pid}_${tag}%`);
  // The probes, and the counters' own read.
  const own = { xact_commit: probes + 1 };
  const perEvent = (name) => (pg ? +((after[name] - before[name] - (own[name] ?? 0)) / DISTINCT).toFixed(2) : "");
  await w.dispose();
  return {
    store,
    "acknowledged/s": Math.round(acked / distinct.seconds),
    "fully processed/s": Math.round(DISTINCT / processedSeconds),
    "copies/s (storms)": Math.round(storms.results.length / storms.seconds),
    "p50 ms": at(0.5),
    "p99 ms": at(0.99),
    "ledger rows": ledger,
    "relay runs": pg ? relayRuns : "",
    "runtime CPU ms/event": +(cpuMs / DISTINCT).toFixed(2),
    "machine CPU ms/event": +(machineMs / DISTINCT).toFixed(2),
    "commits/event": perEvent("xact_commit"),
    "rollbacks/event": perEvent("xact_rollback"),
    "rows inserted/event": perEvent("tup_inserted"),
    "rows updated/event": perEvent("tup_updated"),
  };
}

/** Postgres's own counters for the database (pg_stat_database). */
function counters(pg) {
  pg.query("SELECT pg_stat_clear_snapshot()");
  const [row] = pg.query(`SELECT xact_commit, xact_rollback, tup_inserted, tup_updated FROM pg_stat_database WHERE datname = '${pg.db}'`);
  const [xact_commit, xact_rollback, tup_inserted, tup_updated] = row.map(Number);
  return { xact_commit, xact_rollback, tup_inserted, tup_updated };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** CPU time (ms) every process of the machine has used (/proc/stat). */
function machineCpuMs() {
  const [cpu] = readFileSync("/proc/stat", "utf8").split("\n");
  const [user, nice, system, , , irq, softirq, steal] = cpu.split(/\s+/).slice(1).map(Number);
  return ((user + nice + system + irq + softirq + steal) * 1000) / 100;
}

/**
 * SMALL new events through the pooler on `port` (a fresh database): the
 * wire's counts per event, and the runtime's CPU per event.
 */
async function small(name, pg, port, counted) {
  const proxy = counted ? await countingProxy(port) : undefined;
  const via = { ...pg, url: pg.url.replace(/:\d+\//, `:${proxy?.port ?? port}/`) };
  const persist = { durableObjectsPersist: join(STATE_DIR, name, "do"), d1Persist: join(STATE_DIR, name, "d1") };
  const w = await startPostgresWorker(via, VARS, { ...quiet, ...persist });
  const url = new URL("/webhooks/stripe", await w.mf.unsafeGetDirectURL("webhooks")).href;
  await drive(url, Array.from({ length: 20 }, (_, i) => signed(checkoutBody(`${name}_${process.pid}_warm${i}`))), CONCURRENCY);
  const before = proxy?.counts();
  const cpuBefore = workerdCpuMs();
  await drive(url, Array.from({ length: SMALL }, (_, i) => signed(checkoutBody(`${name}_${process.pid}_${i}`))), CONCURRENCY);
  const cpuMs = workerdCpuMs() - cpuBefore;
  const after = proxy?.counts();
  await w.dispose();
  await proxy?.close();
  const per = (name) => +((after[name] - before[name]) / SMALL).toFixed(2);
  return {
    cpu: +(cpuMs / SMALL).toFixed(2),
    ...(proxy && { connections: per("connections"), startupTrips: per("startupTrips"), queryTrips: per("queryTrips"), statements: per("statements") }),
  };
}

/**
 * A second PgBouncer on the cluster, as scripts/postgres.sh runs one but
 * asking no password (`auth_type = trust`): its port, and how to stop it.
 */
function trustingPooler(pg) {
  const dir = join(STATE_DIR, "trusting");
  mkdirSync(dir, { recursive: true });
  const server = new URL(pg.direct).port;
  const port = 30_000 + (process.pid % 20_000);
  writeFileSync(join(dir, "userlist.txt"), `"webhooks" "webhooks"\n`);
  writeFileSync(
    join(dir, "pgbouncer.ini"),
    `[databases]\n* = host=127.0.0.1 port=${server}\n[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = ${port}\n` +
      `unix_socket_dir =\nauth_type = trust\nauth_file = ${dir}/userlist.txt\npool_mode = transaction\n` +
      `pidfile = ${dir}/pgbouncer.pid\nlogfile = ${dir}/pgbouncer.log\nmax_client_conn = 1000\ndefault_pool_size = 10\n`,
  );
  const root = process.getuid?.() === 0;
  if (root) spawnSync("chown", ["-R", "postgres", STATE_DIR]);
  const command = ["/usr/sbin/pgbouncer", "-d", "-q", join(dir, "pgbouncer.ini")];
  const started = root ? spawnSync("runuser", ["-u", "postgres", "--", ...command]) : spawnSync(command[0], command.slice(1));
  if (started.status !== 0) throw new Error(`pgbouncer: ${started.stderr}`);
  return { port, stop: () => spawnSync("sh", ["-c", `kill $(cat ${dir}/pgbouncer.pid)`]) };
}

/** The wire's counts, and what authenticating costs, per new event. */
async function wire() {
  const pg = freshDatabase();
  const pooled = Number(new URL(pg.url).port);
  const counted = await small("counted", pg, pooled, true);
  const scram = await small("scram", pg, pooled, false);
  const trusting = trustingPooler(pg);
  try {
    await sleep(300);
    const trust = await small("trust", pg, trusting.port, false);
    return { ...counted, scram: scram.cpu, trust: trust.cpu };
  } finally {
    trusting.stop();
  }
}

rmSync(STATE_DIR, { recursive: true, force: true });
const rows = [await run("d1"), await run("postgres")];
const counts = await wire();
agent.destroy();
rmSync(STATE_DIR, { recursive: true, force: true });
console.table(rows);
const wasm = readFileSync(POSTGRES_BUILD.replace("index.js", "index_bg.wasm"));
console.log(`postgres build: ${gzipSync(wasm, { level: 9 }).length} bytes of wasm gzipped`);
console.log(
  `Postgres, per new event (${SMALL} events each): ${counts.connections} connections, ${counts.startupTrips} round trips to connect and authenticate, ` +
    `${counts.queryTrips} after, ${counts.statements} statements; runtime CPU ${counts.scram} ms, ${counts.trust} ms with a pooler that asks no password ` +
    `(authenticating: ${(counts.scram - counts.trust).toFixed(2)} ms)`,
);
console.log(`machine: ${os.cpus().length} x ${os.cpus()[0].model}, node ${process.version}; ${DISTINCT} events, ${STORMS} storms of ${STORM_SIZE}`);
const sent = 100 + DISTINCT + STORMS;
const short = rows.find((r) => r["ledger rows"] !== sent);
if (short) {
  console.error(`MISMATCH: ${short.store} holds ${short["ledger rows"]} ledger rows for ${sent} events`);
  process.exit(1);
}

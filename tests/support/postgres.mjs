// needs: postgres
// A real Postgres for the tests of STORE = "postgres": one cluster, the
// checkout's postgres-test (scripts/postgres.sh says where it lives, and
// with PG_DIR set, it is $PG_DIR-test), a fresh database per
// worker started, and the built postgres variant of the worker in workerd
// with a Hyperdrive binding to it. Nothing is mocked.
import { execFileSync } from "node:child_process";
import { createRequire } from "node:module";
import { startWorker } from "./worker.mjs";

// The local Hyperdrive proxy runs in this process (Miniflare).
createRequire(import.meta.url)("../../scripts/hyperdrive-guard.cjs");

export const POSTGRES_BUILD = "target/variants/postgres/index.js";
// A port of this checkout's own (from its path), so that two checkouts'
// test runs never meet on one.
const PORT = 20000 + ([...process.cwd()].reduce((hash, c) => (hash * 31 + c.charCodeAt(0)) >>> 0, 7) % 10000);
export const CLUSTER = {
  PG_CLUSTER: "postgres-test",
  ...(process.env.PG_DIR ? { PG_DIR: `${process.env.PG_DIR}-test` } : {}),
  PG_PORT: String(PORT),
};
let databases = 0;
/** Whether this process started the cluster (undefined: not asked yet). */
let startedHere;

/** Whether the test cluster runs. */
function running() {
  try {
    pgctl("postgres", "status");
    return true;
  } catch {
    return false;
  }
}

/** Runs scripts/postgres.sh with `args` on the test cluster (and `db`). */
export function pgctl(db, ...args) {
  try {
    return execFileSync("sh", ["scripts/postgres.sh", ...args], {
      env: { ...process.env, ...CLUSTER, PG_DB: db },
      encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"],
    });
  } catch (e) {
    // The script's own words (a missing server, a directory the server
    // cannot reach), not a bare exit status.
    throw new Error(`scripts/postgres.sh ${args[0]} failed (exit ${e.status}): ${String(e.stderr ?? e.message).trim()}`);
  }
}

/**
 * A new database on the test cluster (started if need be), migrations
 * applied: its `url`, `query(sql)` (rows as arrays of strings), `scalar`,
 * and `restart(mode)`, `stop()`, `start()` of the cluster.
 */
export function freshDatabase() {
  const db = `t_${process.pid}_${++databases}`;
  if (startedHere === undefined) {
    startedHere = !running();
    // make test leaves no cluster behind: the one this file started stops with it.
    if (startedHere) process.once("exit", () => pgctl(db, "stop"));
  }
  pgctl(db, "start");
  const query = (sql) =>
    pgctl(db, "psql", "-tA", "-F", "\t", "-c", sql)
      .split("\n")
      .filter((line) => line !== "")
      .map((line) => line.split("\t"));
  return {
    db,
    url: pgctl(db, "url").trim(),
    query,
    scalar: (sql) => query(sql)[0]?.[0] ?? null,
    restart: (mode = "fast") => pgctl(db, "restart", mode),
    stop: () => pgctl(db, "stop"),
    start: () => pgctl(db, "start"),
  };
}

/**
 * Rows of `sql` on the cluster `env` (PG_DIR, PG_PORT, PG_DB) as objects,
 * values as text (psql's CSV; for the soak's ids and statuses, which hold
 * no comma or quote).
 */
export function pgRows(env, sql) {
  const out = execFileSync("sh", ["scripts/postgres.sh", "psql", "--csv", "-c", sql], {
    env: { ...process.env, ...env },
    encoding: "utf8",
    maxBuffer: 256 * 1024 * 1024,
  });
  const [header, ...lines] = out.split("\n").filter((line) => line !== "");
  const names = header.split(",");
  return lines.map((line) => Object.fromEntries(line.split(",").map((value, i) => [names[i], value])));
}

/** The postgres build of the worker, its effects in `pg` (`STORE = "postgres"`). */
export function startPostgresWorker(pg, vars = {}, options = {}) {
  return startWorker(
    { STORE: "postgres", ...vars },
    { main: POSTGRES_BUILD, hyperdrives: { HYPERDRIVE: pg.url }, ...options },
  );
}

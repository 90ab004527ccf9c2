// needs: postgres
// A real Postgres for the tests of STORE = "postgres": one cluster, the
// checkout's postgres-test (scripts/postgres.sh says where it lives, and
// with PG_DIR set, it is $PG_DIR-test), a fresh database per
// worker started, and the built postgres variant of the worker in workerd
// with a Hyperdrive binding to it. Nothing is mocked.
import { execFileSync, spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import { startWorker } from "./worker.mjs";

// The local Hyperdrive proxy runs in this process (Miniflare).
createRequire(import.meta.url)("../../scripts/hyperdrive-guard.cjs");

export const POSTGRES_BUILD = "target/variants/postgres/index.js";
// On a port of this checkout's own, which scripts/postgres.sh chooses for
// postgres-test (the host tests of the effects use it too).
export const CLUSTER = {
  PG_CLUSTER: "postgres-test",
  ...(process.env.PG_DIR ? { PG_DIR: `${process.env.PG_DIR}-test` } : {}),
  PG_PORT: "",
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

/**
 * Runs scripts/postgres.sh with `args` on the test cluster (and `db`). A
 * failure carries the script's own words (a missing server, a folder the
 * server cannot reach), not a bare exit status.
 */
function run(db, args) {
  const result = spawnSync("sh", ["scripts/postgres.sh", ...args], { env: { ...process.env, ...CLUSTER, PG_DB: db }, encoding: "utf8" });
  if (result.status !== 0) {
    const said = (result.stderr || result.error?.message || "").trim();
    throw new Error(`scripts/postgres.sh ${args[0]} failed (exit ${result.status ?? result.signal}): ${said}`);
  }
  return result;
}

/** Runs scripts/postgres.sh with `args` on the test cluster (and `db`): its output. */
export const pgctl = (db, ...args) => run(db, args).stdout;

/**
 * A new database on the test cluster (started if need be), migrations
 * applied: its `url` (through the cluster's pooler, as the worker reaches
 * it), `direct` (the server's), `query(sql)` (rows as arrays of strings),
 * `scalar`, and `restart(mode)`, `stop()` (the server alone), `start()`.
 */
export function freshDatabase() {
  const db = `t_${process.pid}_${++databases}`;
  const first = startedHere === undefined;
  if (first) startedHere = !running();
  const { stderr } = run(db, ["start"]);
  if (first && startedHere) {
    // Where the cluster lives, when not in the checkout (scripts/postgres.sh says why).
    if (stderr.trim()) console.log(stderr.trim());
    // make test leaves no cluster behind: the one this file started stops with it.
    process.once("exit", () => {
      try {
        pgctl(db, "stop");
      } catch (e) {
        console.error(e.message);
      }
    });
  }
  const query = (sql) =>
    pgctl(db, "psql", "-tA", "-F", "\t", "-c", sql)
      .split("\n")
      .filter((line) => line !== "")
      .map((line) => line.split("\t"));
  return {
    db,
    url: pgctl(db, "url").trim(),
    // The server's own, past the pooler.
    direct: pgctl(db, "direct-url").trim(),
    query,
    scalar: (sql) => query(sql)[0]?.[0] ?? null,
    restart: (mode = "fast") => pgctl(db, "restart", mode),
    // The server goes down; its pooler stays up, as Hyperdrive does.
    stop: () => pgctl(db, "stop-server"),
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

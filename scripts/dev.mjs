// `make dev`: the worker under `wrangler dev`, plus what wrangler dev leaves
// out locally — the cron triggers. wrangler does not run scheduled handlers
// in local development, and the local queue keeps its messages in memory, so
// without the cron relay a side effect whose message died with the process
// would stay `pending` for good. This runner starts the worker as `wrangler
// dev` does (wrangler's API, below) and, on the schedule in wrangler.toml's
// `[triggers] crons` (in UTC, like Cloudflare), calls the scheduled handler
// through the local runtime's own trigger route,
// `/cdn-cgi/handler/scheduled?cron=…` — the one wrangler's start-up warning
// suggests — until it stops. Nothing here changes the deployed worker.
//
//   node scripts/dev.mjs [--port 8787] [--persist-to .wrangler/state]
//                        [--env-file FILE] [--var NAME:VALUE ...]
//
// Without --env-file, secrets come from .dev.vars (copied from
// .dev.vars.example if absent). Binds to 127.0.0.1 only.
import { spawnSync } from "node:child_process";
import { copyFileSync, existsSync } from "node:fs";
// needs: postgres
import { createRequire } from "node:module";
import { parseArgs } from "node:util";
import { unstable_readConfig, unstable_startWorker } from "wrangler";

import { cronMatches } from "./cron.mjs";

const WRANGLER = "node_modules/.bin/wrangler";

const { values: options } = parseArgs({
  options: {
    port: { type: "string", default: "8787" },
    "persist-to": { type: "string", default: ".wrangler/state" },
    "env-file": { type: "string" },
    var: { type: "string", multiple: true, default: [] },
    // needs: postgres
    store: { type: "string" },
  },
});
const persist = ["--persist-to", options["persist-to"]];
// No banner (whose update check calls the npm registry), and let
// scripts/build.sh skip a build when nothing it is built from changed
// (BUILD_IF_CHANGED=0 forces one, e.g. after a toolchain upgrade).
process.env.WRANGLER_HIDE_BANNER ??= "true";
process.env.BUILD_IF_CHANGED ??= "1";
// Nothing fetched from outside: no metrics, and no `Request.cf` object from
// Cloudflare (a placeholder serves locally), also when run without make.
process.env.WRANGLER_SEND_METRICS ??= "false";
process.env.CLOUDFLARE_CF_FETCH_ENABLED ??= "false";

// An expression the ticker cannot run is an error now, not in a minute.
const config = unstable_readConfig({ config: "wrangler.toml" });
const crons = config.triggers?.crons ?? [];
for (const cron of crons) cronMatches(cron, new Date());

if (!options["env-file"] && !existsSync(".dev.vars")) {
  copyFileSync(".dev.vars.example", ".dev.vars");
  console.log("dev: wrote .dev.vars from .dev.vars.example");
}

const migrations = spawnSync(WRANGLER, ["d1", "migrations", "apply", "DB", "--local", ...persist], {
  stdio: "inherit",
});
if (migrations.status !== 0) process.exit(migrations.status ?? 1);

const bindings = Object.fromEntries(
  options.var.map((pair) => {
    const [name, ...value] = pair.split(":");
    return [name, { type: "plain_text", value: value.join(":"), hidden: true }];
  }),
);
// needs: postgres
// With effects in Postgres (`--store postgres`, or STORE = "postgres" in
// wrangler.toml): a local cluster, in .wrangler/postgres where the server
// can reach it (scripts/postgres.sh), with migrations-postgres/ applied, the Hyperdrive
// binding pointed at it, and the guard of the local Hyperdrive proxy
// (scripts/hyperdrive-guard.cjs).
if ((options.store ?? config.vars?.STORE) === "postgres") {
  const cluster = spawnSync("sh", ["scripts/postgres.sh", "start"], { stdio: "inherit" });
  if (cluster.status !== 0) process.exit(cluster.status ?? 1);
  const url = spawnSync("sh", ["scripts/postgres.sh", "url"], { encoding: "utf8" }).stdout.trim();
  createRequire(import.meta.url)("./hyperdrive-guard.cjs");
  bindings.STORE = { type: "plain_text", value: "postgres" };
  if (config.hyperdrive?.some((h) => h.binding === "HYPERDRIVE")) {
    process.env.CLOUDFLARE_HYPERDRIVE_LOCAL_CONNECTION_STRING_HYPERDRIVE ??= url;
  } else {
    bindings.HYPERDRIVE = { type: "hyperdrive", id: "local", localConnectionString: url };
  }
  console.log(`dev: effects commit in the local Postgres (${url.replace(/:[^:@/]*@/, ":…@")})`);
} else if (options.store) {
  bindings.STORE = { type: "plain_text", value: options.store };
}

// The worker, as `wrangler dev` runs it, through wrangler's own API: the
// CLI always attaches its DevTools proxy to the runtime, which turns every
// log line and subrequest into DevTools messages. Under a burst that halves
// throughput and stalls every reply for seconds (measured in the template's
// benchmarks); without it nothing is lost but the DevTools link.
const worker = await unstable_startWorker({
  config: "wrangler.toml",
  envFiles: options["env-file"] ? [options["env-file"]] : undefined,
  // `--var NAME:VALUE`, as the CLI reads it (and hides it), and the store's.
  bindings,
  sendMetrics: false,
  dev: {
    remote: false,
    inspector: false,
    server: { hostname: "127.0.0.1", port: Number(options.port) },
    persist: options["persist-to"],
  },
});
// What ends the CLI's session ends this runner: a runtime that cannot start
// (a port in use) or reload. A build that fails is only logged, as there.
worker.raw.once("error", (e) => {
  console.error(`dev: ${e.reason ?? e.message}${e.cause ? `: ${e.cause.message ?? e.cause}` : ""}`);
  process.exit(1);
});
await worker.ready;

const ticker = crons.length > 0 ? startTicker(crons) : undefined;
if (ticker) console.log(`dev: running the cron triggers locally (${crons.join(", ")}, UTC)`);

// Ctrl-C, or a SIGTERM to this runner: the runtime stops with it.
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) {
  process.on(signal, async () => {
    clearTimeout(ticker?.timer);
    await worker.dispose().catch(() => {});
    process.exit(0);
  });
}
process.on("uncaughtException", (e) => {
  console.error(`dev: ${e.stack ?? e}`);
  process.exit(1);
});

/** Wakes at each minute boundary and runs every cron that matches it. */
function startTicker(schedule) {
  const state = { timer: undefined, failing: false };
  const arm = () => {
    const now = Date.now();
    state.timer = setTimeout(tick, 60_000 - (now % 60_000) + 50);
  };
  const tick = async () => {
    arm();
    const minute = new Date(Math.floor(Date.now() / 60_000) * 60_000);
    for (const cron of schedule) {
      const url = `http://127.0.0.1:${options.port}/cdn-cgi/handler/scheduled?cron=${encodeURIComponent(cron)}`;
      try {
        if (!cronMatches(cron, minute)) continue;
        const res = await fetch(url, { signal: AbortSignal.timeout(30_000) });
        // "ok", or the handler's outcome (e.g. "exception") with a 500.
        const outcome = await res.text();
        if (!res.ok) throw new Error(`HTTP ${res.status} ${outcome.slice(0, 100)}`);
        if (state.failing) console.log("dev: cron triggers reach the worker again");
        // For the template's stall benchmark, which proves a tick landed during its run.
        if (process.env.DEV_LOG_TICKS) console.log(`dev: cron "${cron}" ran`);
        state.failing = false;
      } catch (e) {
        // Once per outage, not once a minute (e.g. while wrangler reloads).
        if (!state.failing) console.log(`dev: cron "${cron}" did not run: ${e.message}`);
        state.failing = true;
      }
    }
  };
  arm();
  return state;
}

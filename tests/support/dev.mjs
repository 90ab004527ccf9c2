// Runs the worker the way `make dev` does (scripts/dev.mjs: wrangler dev,
// state on disk, the cron ticker), as a process group the tests can kill with
// SIGKILL and start again on the same state. Also a recording HTTP sink for
// side effects, and D1 queries on the on-disk state. Loopback only.
// needs: stripe, github, demos
import { spawn, spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { connect } from "node:net";
import { constants } from "node:os";

// No metrics, no Request.cf fetch, and no banner (whose update check calls
// the npm registry).
const ENV = {
  ...process.env,
  WRANGLER_SEND_METRICS: "false",
  CLOUDFLARE_CF_FETCH_ENABLED: "false",
  WRANGLER_HIDE_BANNER: "true",
};

// Every process group started here is killed when this process ends, however
// it ends (a failed test, a timeout, Ctrl-C): no runtime outlives its test.
const groups = new Set();
const signalGroup = (pgid, signal) => {
  try {
    process.kill(-pgid, signal);
  } catch (e) {
    if (e.code !== "ESRCH") throw e;
  }
};
const killGroup = (pgid) => signalGroup(pgid, "SIGKILL");
process.on("exit", () => groups.forEach(killGroup));
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) {
  process.once(signal, () => {
    groups.forEach(killGroup);
    process.exit(128 + constants.signals[signal]);
  });
}

/** A free loopback port. */
export function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
    server.on("error", reject);
  });
}

/**
 * Starts `node scripts/dev.mjs` in its own process group and resolves once
 * wrangler says it is ready; `vars` are the worker's, `env` the runner's
 * (e.g. `DEV_LOG_TICKS`). `script` is another runner taking the same flags
 * (the benchmarks' reference gateway). dev.mjs's store is D1 unless
 * `store` says "postgres" (its cluster from `env`'s PG_DIR, PG_PORT, PG_DB).
 * `kill()` SIGKILLs the whole group (runner, wrangler, workerd): a crash,
 * with no chance to flush anything.
 */
export async function startDev({ port, persistTo, envFile, vars = {}, env = {}, readyMs = 180_000, script = "scripts/dev.mjs", store }) {
  const args = [script, "--port", String(port), "--persist-to", persistTo, "--env-file", envFile];
  // needs: postgres
  if (script === "scripts/dev.mjs") args.push("--store", store ?? "d1");
  for (const [name, value] of Object.entries(vars)) args.push("--var", `${name}:${value}`);
  const child = spawn("node", args, { env: { ...ENV, ...env }, detached: true, stdio: ["ignore", "pipe", "pipe"] });
  groups.add(child.pid);
  const output = [];
  let exited = false;
  const exit = new Promise((resolve) =>
    child.on("exit", () => {
      exited = true;
      resolve();
    }),
  );
  const tail = () => output.join("").split("\n").slice(-40).join("\n");
  const ready = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`wrangler dev not ready in ${readyMs} ms:\n${tail()}`)), readyMs);
    const onData = (chunk) => {
      const text = chunk.toString();
      output.push(text);
      if (process.env.WORKER_LOGS) process.stderr.write(text);
      if (/Ready on http/.test(text)) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stdout.on("data", onData);
    child.stderr.on("data", onData);
    exit.then(() => {
      clearTimeout(timer);
      reject(new Error(`wrangler dev exited before it was ready:\n${tail()}`));
    });
  });
  const gone = async () => {
    killGroup(child.pid);
    await exit;
    groups.delete(child.pid);
    // workerd may hold the port a moment after its parent died.
    for (let i = 0; (await portOpen(port)) && i < 200; i++) await sleep(50);
    if (await portOpen(port)) throw new Error(`port ${port} still in use after the kill`);
  };
  try {
    await ready;
  } catch (e) {
    // The start-up failure is the news, not a port still held after it.
    await gone().catch(() => {});
    throw e;
  }
  return {
    url: `http://127.0.0.1:${port}`,
    /** The runner's process group (runner, wrangler, workerd). */
    pid: child.pid,
    output,
    /** SIGKILL to every process of the group; resolves when the port is free. */
    kill: gone,
    /** A clean stop (what Ctrl-C does), then SIGKILL for what is left. */
    async stop() {
      if (!exited) signalGroup(child.pid, "SIGTERM");
      await Promise.race([exit, sleep(10_000)]);
      await gone();
    },
  };
}

/** Whether something accepts connections on 127.0.0.1:port. */
function portOpen(port) {
  return new Promise((resolve) => {
    const socket = connect(port, "127.0.0.1");
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}

/** Writes `vars` as the env file the runner's --env-file reads. */
export function writeEnvFile(path, vars) {
  writeFileSync(path, Object.entries(vars).map(([name, value]) => `${name}=${value}\n`).join(""));
}

/** Rows of a query against the local D1 in `persistTo` (wrangler d1 execute). */
export function d1Query(persistTo, sql) {
  const run = spawnSync(
    "node_modules/.bin/wrangler",
    ["d1", "execute", "DB", "--local", "--persist-to", persistTo, "--json", "--command", sql],
    { env: ENV, encoding: "utf8", maxBuffer: 256 * 1024 * 1024 },
  );
  if (run.status !== 0) throw new Error(`d1 execute failed: ${run.stderr}\n${run.stdout}`);
  return JSON.parse(run.stdout)[0].results;
}

/**
 * An HTTP target for side effects on 127.0.0.1. Every call is recorded with
 * its Idempotency-Key and the status it got; `answer(call)` returns a status,
 * or "hang" to never answer (a call in flight when the runtime dies).
 * `latencyMs()` delays each answer, like a real API; `inFlight` counts calls
 * not yet answered.
 */
export async function startSink() {
  const sockets = new Set();
  const sink = {
    calls: [],
    inFlight: 0,
    answer: () => 200,
    latencyMs: () => 0,
    /** Keys that got a 2xx, with how many times each did. */
    successes() {
      const counts = new Map();
      for (const c of sink.calls) if (c.status >= 200 && c.status < 300) counts.set(c.key, (counts.get(c.key) ?? 0) + 1);
      return counts;
    },
  };
  const server = createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const call = {
        at: Date.now(),
        path: req.url,
        key: req.headers["idempotency-key"] ?? null,
        body: Buffer.concat(chunks).toString(),
      };
      const status = sink.answer(call);
      call.status = status === "hang" ? null : status;
      sink.calls.push(call);
      sink.inFlight++;
      if (status === "hang") return;
      setTimeout(() => {
        sink.inFlight--;
        res.writeHead(status, { "content-type": "application/json" });
        res.end(JSON.stringify({ id: `call_${sink.calls.length}` }));
      }, sink.latencyMs());
    });
  });
  server.on("connection", (s) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  sink.url = `http://127.0.0.1:${server.address().port}`;
  sink.close = () =>
    new Promise((resolve) => {
      for (const s of sockets) s.destroy();
      server.close(resolve);
    });
  return sink;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

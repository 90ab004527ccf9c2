// What the benchmarks share: the event they send, signed, a driver that
// posts over loopback and reads the runtime's CPU time, and `make dev`'s
// runner started for them.
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import http from "node:http";
import os from "node:os";
import { join } from "node:path";

import { freePort, startDev, writeEnvFile } from "../tests/support/dev.mjs";
import { stripeHeaders } from "../tests/support/sign.mjs";

const SECRET = "whsec_test_current";

/**
 * A realistic checkout.session.completed: about 930 bytes. With an `email`
 * (null for none) its effect queues one side effect, the receipt. As
 * another `type` (checkout.session.expired), an event with no effect.
 */
export function checkoutBody(n, { email = "buyer@example.com", type = "checkout.session.completed" } = {}) {
  return JSON.stringify({
    id: `evt_bench_${process.pid}_${n}`,
    object: "event",
    api_version: "2024-06-20",
    created: Math.floor(Date.now() / 1000),
    type,
    livemode: false,
    pending_webhooks: 1,
    request: { id: null, idempotency_key: null },
    data: {
      object: {
        id: `cs_bench_${process.pid}_${n}`,
        object: "checkout.session",
        amount_subtotal: 2000,
        amount_total: 2000,
        currency: "eur",
        customer: "cus_QbY9bench",
        customer_details: { address: { city: "Lyon", country: "FR", line1: "1 rue de la Paix", postal_code: "69001" }, email, name: "A Buyer", phone: null, tax_exempt: "none", tax_ids: [] },
        livemode: false,
        metadata: { order_ref: `ref-${n}` },
        mode: "payment",
        payment_intent: `pi_bench_${process.pid}_${n}`,
        payment_method_types: ["card"],
        payment_status: "paid",
        status: "complete",
        success_url: "https://example.com/success",
        cancel_url: "https://example.com/cancel",
        total_details: { amount_discount: 0, amount_shipping: 0, amount_tax: 0 },
        url: null,
      },
    },
  });
}


export function signed(body) {
  return { body, headers: stripeHeaders(body, SECRET) };
}

/**
 * `make dev`'s runner (or `script`, taking its flags) on a free port, with
 * its state on tmpfs, the secret `signed` signs with, side effects logged,
 * and `vars`; `env` is the runner's. Its `stop` also deletes the state.
 */
export async function startBenchDev(name, { vars = {}, env = {}, script } = {}) {
  const dir = mkdtempSync(join(existsSync("/dev/shm") ? "/dev/shm" : os.tmpdir(), `${name}-`));
  const forget = () => rmSync(dir, { recursive: true, force: true });
  try {
    const envFile = join(dir, "dev.vars");
    writeEnvFile(envFile, { STRIPE_WEBHOOK_SECRET: SECRET, GITHUB_WEBHOOK_SECRET: "gh_test_secret", SIDE_EFFECTS: "log", ...vars });
    const dev = await startDev({ port: await freePort(), persistTo: join(dir, "state"), envFile, env, script });
    return { ...dev, stop: () => dev.stop().finally(forget) };
  } catch (e) {
    forget();
    throw e;
  }
}

/** Copies of one event sent at once in a storm: also the most sockets open. */
export const STORM_SIZE = 50;
export const agent = new http.Agent({ keepAlive: true, maxSockets: STORM_SIZE });

export function post(url, { body, headers }) {
  return new Promise((resolve, reject) => {
    const started = process.hrtime.bigint();
    const req = http.request(url, { method: "POST", agent, headers: { ...headers, "content-length": Buffer.byteLength(body) } }, (res) => {
      const chunks = [];
      res.on("data", (c) => chunks.push(c));
      res.on("end", () => {
        const ms = Number(process.hrtime.bigint() - started) / 1e6;
        let reply = {};
        try {
          reply = JSON.parse(Buffer.concat(chunks));
        } catch {
          reply = { error: "not_json" };
        }
        resolve({ status: res.statusCode, ms, outcome: reply.outcome ?? reply.error });
      });
    });
    // A reply held this long is a failure to report, not a hung benchmark.
    req.setTimeout(30_000, () => req.destroy(new Error("no reply in 30 s")));
    req.on("error", reject);
    req.end(body);
  });
}

/**
 * CPU time (user + system, ms) used so far by the workerd process that
 * Miniflare started, or null off Linux. Less at the mercy of a noisy machine
 * than events/s: it is what one event costs the runtime, whatever the wait.
 */
export function workerdCpuMs() {
  try {
    for (const pid of readdirSync("/proc").filter((d) => /^\d+$/.test(d))) {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (stat.includes("(workerd)") && Number(fields[1]) === process.pid) {
        return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100; // clock ticks at 100 Hz
      }
    }
  } catch {
    // not Linux
  }
  return null;
}

/**
 * Sends `requests` with at most `concurrency` in flight; results in the
 * order of `requests`. A request that fails (a reset, a refused connection)
 * is a result (`status` 0, its error as `outcome`), not the end of the run.
 */
export async function driveAll(url, requests, concurrency) {
  const results = new Array(requests.length);
  let next = 0;
  const started = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < requests.length) {
        const i = next++;
        results[i] = await post(url, requests[i]).catch((e) => ({ status: 0, ms: Infinity, outcome: e.code ?? e.message }));
      }
    }),
  );
  return { results, seconds: Number(process.hrtime.bigint() - started) / 1e9 };
}

/**
 * `driveAll`, for benchmarks where a failed request ends the run, with the
 * workerd CPU it took.
 */
export async function drive(url, requests, concurrency) {
  const cpuBefore = workerdCpuMs();
  const { results, seconds } = await driveAll(url, requests, concurrency);
  const failed = results.find((r) => r.status === 0);
  if (failed) throw new Error(`a request failed: ${failed.outcome}`);
  const cpuAfter = workerdCpuMs();
  const cpuMs = cpuBefore === null || cpuAfter === null ? null : cpuAfter - cpuBefore;
  return { results, seconds, cpuMs };
}

/** The `q` quantile of ascending `sorted`. */
export const quantile = (sorted, q) => sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * q))];

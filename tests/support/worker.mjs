// Runs the built wasm worker (build/) in workerd through Miniflare, with the
// bindings wrangler.toml declares: real SQLite-backed Durable Objects and a
// real local D1 with migrations/ applied. Nothing is mocked.
import { readdirSync, readFileSync } from "node:fs";
import { Miniflare, Response } from "miniflare";
import { unstable_getMiniflareWorkerOptions, unstable_readConfig, unstable_splitSqlQuery } from "wrangler";

/** The dead-letter queue the project's wrangler.toml names. */
const DLQ = unstable_readConfig({ config: "wrangler.toml" }).queues.consumers[0].dead_letter_queue;

export const SECRETS = {
  // needs: stripe
  STRIPE_WEBHOOK_SECRET: "whsec_test_current, whsec_test_previous",
  // needs: github
  GITHUB_WEBHOOK_SECRET: "gh_test_secret",
};

/**
 * The effects that failed in this test file's workers, newest last: printed
 * when one of its tests fails, so that a failing assertion on rows comes
 * with the store's own error (the column, the constraint, the statement),
 * which the worker logs but no reply carries.
 */
const effectFailures = [];
process.on("exit", () => {
  if (!process.exitCode || effectFailures.length === 0) return;
  const shown = effectFailures.slice(-20).map(({ key, attempt, error }) => `  ${key} (attempt ${attempt}): ${error}`);
  console.error(`The worker's effect_failed lines (the newest ${shown.length} of ${effectFailures.length}):\n${shown.join("\n")}`);
});

/**
 * A fake HTTP target for side effects (the email API, the chat webhook, the
 * dead-letter recorder): every outbound fetch of the workers lands here and
 * is recorded. `answer(call)` picks the status; 200 by default.
 */
export function fakeTarget() {
  const target = {
    calls: [],
    answer: () => 200,
    async handle(request) {
      const call = {
        at: Date.now(),
        url: request.url,
        idempotencyKey: request.headers.get("idempotency-key"),
        authorization: request.headers.get("authorization"),
        headers: Object.fromEntries(request.headers),
        body: await request.text(),
      };
      target.calls.push(call);
      // A status, or `{ status, headers }`.
      const answer = target.answer(call, target.calls.length);
      const { status, headers } = typeof answer === "number" ? { status: answer } : answer;
      call.status = status;
      return new Response(JSON.stringify({ id: `call_${target.calls.length}` }), { status, headers });
    },
    /** The calls to one URL prefix. */
    to: (prefix) => target.calls.filter((c) => c.url.startsWith(prefix)),
  };
  return target;
}

// Consumes the dead-letter queue in the tests, forwarding each message to the
// fake target, so that a test can see what was dead-lettered.
const DLQ_RECORDER = `export default {
  async queue(batch) {
    for (const m of batch.messages) {
      await fetch("http://dlq.test/", { method: "POST", body: String(m.body) });
      m.ack();
    }
  },
};`;

/**
 * Starts the worker; `vars` override wrangler.toml's [vars]. `options` adds
 * Miniflare options (`unsafeDirectSockets` goes to the worker, the rest to
 * Miniflare itself, e.g. `{ d1Persist: "/some/dir" }`).
 */
export async function startWorker(vars = {}, options = {}) {
  // `main`: another entry module wrapping build/index.js (bench/meter.mjs).
  const { unsafeDirectSockets, main, hyperdrives, ...shared } = options;
  const { workerOptions } = unstable_getMiniflareWorkerOptions("wrangler.toml");
  const target = fakeTarget();
  const outboundService = (request) => target.handle(request);
  // Every line the runtime logs, for tests of what is (and is not) logged.
  const logs = [];
  /** Miniflare's options with `more` vars (see `reconfigure`). */
  const optionsWith = (more) => ({
    d1Persist: false,
    durableObjectsPersist: false,
    cf: false,
    handleStructuredLogs: ({ message }) => {
      logs.push(message);
      if (message.includes('"effect_failed"')) {
        try {
          effectFailures.push(JSON.parse(message));
        } catch {}
      }
      if (process.env.WORKER_LOGS) console.error(Date.now() % 100000, message);
    },
    ...shared,
    workers: [
      {
        ...workerOptions,
        name: "webhooks",
        modules: true,
        scriptPath: main ?? "build/index.js",
        modulesRoot: main ? "." : "build",
        modulesRules: [
          { type: "ESModule", include: ["**/*.js", "**/*.mjs"] },
          { type: "CompiledWasm", include: ["**/*.wasm"] },
        ],
        // wrangler.toml's [vars] only: a developer's .dev.vars must not leak
        // into the tests.
        bindings: {
          ...unstable_readConfig({ config: "wrangler.toml" }).vars,
          ...SECRETS,
          TEST_FAULTS: "enabled",
          // As in .dev.vars.example: an unset target is skipped, not failed.
          SIDE_EFFECTS: "log",
          EFFECT_RETRY_BASE_MS: "200",
          // needs: postgres
          // D1, unless a test says otherwise (tests/support/postgres.mjs).
          STORE: "d1",
          ...vars,
          ...more,
        },
        outboundService,
        unsafeDirectSockets,
        hyperdrives,
      },
      {
        name: "dlq-recorder",
        modules: true,
        script: DLQ_RECORDER,
        queueConsumers: { [DLQ]: { maxBatchTimeout: 1 } },
        outboundService,
      },
    ],
  });
  const mf = new Miniflare(optionsWith({}));
  let db = await mf.getD1Database("DB");
  for (const file of readdirSync("migrations").sort()) {
    const sql = readFileSync(`migrations/${file}`, "utf8");
    await db.batch(unstable_splitSqlQuery(sql).map((q) => db.prepare(q)));
  }
  let inboxes = await mf.getDurableObjectNamespace("EVENT_INBOX");
  return {
    mf,
    /** The local D1 (new after `reconfigure`). */
    get db() {
      return db;
    },
    target,
    logs,
    /** The JSON log lines with this `msg`. */
    logged: (msg) =>
      logs.flatMap((line) => {
        try {
          const json = JSON.parse(line);
          return json.msg === msg ? [json] : [];
        } catch {
          return [];
        }
      }),
    /** POSTs to the worker; `init` as for fetch. */
    post(path, body, headers = {}) {
      return mf.dispatchFetch(`http://localhost${path}`, { method: "POST", body, headers });
    },
    /** Signs in to the dashboard with `token`; the session cookie, `name=value`. */
    async signIn(token) {
      const login = await mf.dispatchFetch("http://localhost/admin/login", {
        method: "POST",
        body: `token=${encodeURIComponent(token)}`,
        headers: { "content-type": "application/x-www-form-urlencoded" },
        redirect: "manual",
      });
      await login.arrayBuffer();
      if (login.status !== 303) throw new Error(`sign-in answered ${login.status}`);
      return login.headers.get("set-cookie").split(";")[0];
    },
    /** One value from D1. */
    async scalar(sql, ...params) {
      const row = await db.prepare(sql).bind(...params).first();
      return row === null ? null : Object.values(row)[0];
    },
    /** An inbox's stored state, or null when it holds nothing. */
    async inboxState(key) {
      const stub = inboxes.get(inboxes.idFromName(key));
      const res = await stub.fetch("https://inbox/state");
      if (res.status === 404) {
        await res.arrayBuffer();
        return null;
      }
      return res.json();
    },
    /**
     * Restarts the runtime with `more` vars (a deploy that changed its
     * configuration); its state is kept. `undefined` removes a var.
     */
    async reconfigure(more) {
      const options = optionsWith(more);
      const bindings = options.workers[0].bindings;
      for (const [name, value] of Object.entries(bindings)) if (value === undefined) delete bindings[name];
      await mf.setOptions(options);
      // The runtime's stubs are new.
      db = await mf.getD1Database("DB");
      inboxes = await mf.getDurableObjectNamespace("EVENT_INBOX");
    },
    dispose: () => mf.dispose(),
  };
}

/** Polls `check` until it returns a truthy value, or fails after `ms`. */
export async function eventually(check, ms = 10_000, what = "condition") {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

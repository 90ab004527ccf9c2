// Runs the built wasm worker (build/) in workerd through Miniflare, with the
// bindings wrangler.toml declares: real SQLite-backed Durable Objects and a
// real local D1 with migrations/ applied. Nothing is mocked.
import { readdirSync, readFileSync } from "node:fs";
import { Miniflare } from "miniflare";
import { unstable_getMiniflareWorkerOptions, unstable_readConfig, unstable_splitSqlQuery } from "wrangler";

export const SECRETS = {
  STRIPE_WEBHOOK_SECRET: "whsec_test_current, whsec_test_previous",
  GITHUB_WEBHOOK_SECRET: "gh_test_secret",
};

/**
 * Starts the worker; `vars` override wrangler.toml's [vars]. `serve` adds
 * Miniflare options such as `{ port: 0 }` to listen on loopback.
 */
export async function startWorker(vars = {}, serve = {}) {
  const { workerOptions } = unstable_getMiniflareWorkerOptions("wrangler.toml");
  const mf = new Miniflare({
    ...workerOptions,
    modules: true,
    scriptPath: "build/worker/shim.mjs",
    modulesRoot: "build",
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
      EFFECT_RETRY_BASE_MS: "200",
      ...vars,
    },
    d1Persist: false,
    durableObjectsPersist: false,
    cf: false,
    ...serve,
  });
  const db = await mf.getD1Database("DB");
  for (const file of readdirSync("migrations").sort()) {
    const sql = readFileSync(`migrations/${file}`, "utf8");
    await db.batch(unstable_splitSqlQuery(sql).map((q) => db.prepare(q)));
  }
  const inboxes = await mf.getDurableObjectNamespace("EVENT_INBOX");
  return {
    mf,
    db,
    /** POSTs to the worker; `init` as for fetch. */
    post(path, body, headers = {}) {
      return mf.dispatchFetch(`http://localhost${path}`, { method: "POST", body, headers });
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

// `make deploy` (scripts/deploy.mjs) against a stand-in `wrangler` on PATH
// that answers like the real one: a first run creates the database (its id
// written into wrangler.toml), the queues, the migrations and the secrets,
// then deploys and prints the webhook URLs; a second run changes nothing.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { chmodSync, copyFileSync, cpSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

import { unstable_readConfig } from "wrangler";

const ROOT = resolve(import.meta.dirname, "..");
// The names the project's own config gives (a generated copy has its own).
const CONFIG = unstable_readConfig({ config: join(ROOT, "wrangler.toml") });
const DATABASE = CONFIG.d1_databases[0].database_name;
const [QUEUE, DLQ] = [CONFIG.queues.consumers[0].queue, CONFIG.queues.consumers[0].dead_letter_queue];
let dir;
let env;

before(() => {
  dir = mkdtempSync(join(tmpdir(), "deploy-test-"));
  copyFileSync(join(ROOT, "wrangler.toml"), join(dir, "wrangler.toml"));
  cpSync(join(ROOT, "migrations"), join(dir, "migrations"), { recursive: true });
  mkdirSync(join(dir, "bin"));
  copyFileSync(join(ROOT, "tests/support/fake-wrangler.mjs"), join(dir, "bin/wrangler"));
  chmodSync(join(dir, "bin/wrangler"), 0o755);
  env = {
    ...process.env,
    PATH: `${join(dir, "bin")}:${process.env.PATH}`,
    FAKE_WRANGLER_LOG: join(dir, "calls.jsonl"),
    FAKE_WRANGLER_STATE: join(dir, "account.json"),
    FAKE_LOGGED_IN: "1",
    STRIPE_WEBHOOK_SECRET: "whsec_deploy_test_stripe",
    GITHUB_WEBHOOK_SECRET: "deploy-test-github-secret",
  };
  for (const name of ["ADMIN_TOKEN", "EMAIL_API_KEY", "NOTIFY_URL", "ALERT_URL", "CLOUDFLARE_ACCOUNT_ID", "CLOUDFLARE_API_TOKEN"]) {
    delete env[name];
  }
});
after(() => rmSync(dir, { recursive: true, force: true }));

/** Runs `make deploy`'s script in the copy: its exit code, output and the
 * calls it made. `extra`: more environment. */
async function run(extra = {}) {
  rmSync(env.FAKE_WRANGLER_LOG, { force: true });
  const { code, out, err } = await new Promise((done) =>
    execFile("node", [join(ROOT, "scripts/deploy.mjs")], { cwd: dir, env: { ...env, ...extra }, timeout: 60_000 }, (error, stdout, stderr) =>
      done({ code: error ? error.code : 0, out: stdout, err: stderr }),
    ),
  );
  const calls = readFileSync(env.FAKE_WRANGLER_LOG, "utf8").trim().split("\n").map((l) => JSON.parse(l));
  return { code, out, err, calls, commands: calls.map((c) => c.args.join(" ")) };
}

async function deploy(extra) {
  const result = await run(extra);
  assert.equal(result.code, 0, `${result.out}\n${result.err}`);
  return result;
}

const account = () => JSON.parse(readFileSync(env.FAKE_WRANGLER_STATE, "utf8"));
const toml = () => readFileSync(join(dir, "wrangler.toml"), "utf8");

test("not logged in, and no terminal to log in at: it says so and creates nothing", async () => {
  const { code, err, commands } = await run({ FAKE_LOGGED_IN: "0" });
  assert.notEqual(code, 0);
  assert.match(err, /not logged in: run `npx wrangler login`, or set CLOUDFLARE_API_TOKEN/);
  assert.deepEqual(commands, ["whoami --json"]);
});

test("a first deploy creates what is missing, sets the secrets, deploys and prints the URLs", async () => {
  const { out, calls, commands } = await deploy();
  assert.deepEqual(commands, [
    "whoami --json",
    "d1 list --json",
    `d1 create ${DATABASE}`,
    "queues list",
    `queues create ${QUEUE}`,
    `queues create ${DLQ}`,
    "d1 migrations apply DB --remote",
    "secret list",
    "secret bulk",
    "deploy",
  ]);
  const [db] = account().databases;
  assert.match(toml(), new RegExp(`^database_id = "${db.uuid}"$`, "m"), "the new id is in wrangler.toml");
  assert.equal(account().migrated.length, readdirSync(join(ROOT, "migrations")).length, "every migration");
  const uploaded = JSON.parse(calls.find((c) => c.args.join(" ") === "secret bulk").stdin);
  assert.deepEqual(Object.keys(uploaded).sort(), ["ADMIN_TOKEN", "GITHUB_WEBHOOK_SECRET", "STRIPE_WEBHOOK_SECRET"]);
  assert.equal(uploaded.STRIPE_WEBHOOK_SECRET, env.STRIPE_WEBHOOK_SECRET);
  assert.ok(uploaded.ADMIN_TOKEN.length >= 40, "a generated admin token");
  assert.ok(out.includes(uploaded.ADMIN_TOKEN), "the generated token is shown once");
  for (const secret of Object.values(uploaded)) {
    assert.ok(calls.every((c) => !c.args.join(" ").includes(secret)), "no secret on a command line");
  }
  const url = `https://${CONFIG.name}.example.workers.dev`;
  for (const source of ["stripe", "github"]) {
    assert.match(out, new RegExp(`${source} \\(${source}\\)\\s+${url}/webhooks/${source}\n`), `${source}'s URL`);
  }
});

test("a second deploy changes nothing that exists", async () => {
  const before = { account: account(), toml: toml() };
  // One queue per page of `queues list`: both are found on later pages.
  const { commands } = await deploy({ FAKE_QUEUE_PAGE_SIZE: "1" });
  assert.deepEqual(commands, [
    "whoami --json",
    "d1 list --json",
    "queues list",
    "queues list --page 2",
    "d1 migrations apply DB --remote",
    "secret list",
    "deploy",
  ]);
  assert.equal(toml(), before.toml);
  const now = account();
  assert.deepEqual(now.databases, before.account.databases);
  assert.deepEqual(now.queues, before.account.queues);
  assert.deepEqual(now.secrets, before.account.secrets);
  assert.deepEqual(now.migrated, before.account.migrated);
});

test("a failing secret list stops the deploy: no secret is replaced", async () => {
  const before = account().secrets;
  const { code, err, commands } = await run({ FAKE_FAIL: "secret list" });
  assert.notEqual(code, 0);
  assert.match(err, /`wrangler secret list` failed/);
  assert.ok(!commands.includes("secret bulk") && !commands.includes("deploy"), commands.join());
  assert.deepEqual(account().secrets, before);
});

test("a database made elsewhere is found by name, not created twice", async () => {
  const { databases } = account();
  const fresh = join(dir, "wrangler.toml");
  copyFileSync(join(ROOT, "wrangler.toml"), fresh);
  const { commands } = await deploy();
  assert.ok(!commands.some((c) => c.startsWith("d1 create")));
  assert.match(toml(), new RegExp(`^database_id = "${databases[0].uuid}"$`, "m"));
});

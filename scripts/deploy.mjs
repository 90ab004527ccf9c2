// `make deploy`: a first deploy in one command, and a no-op for what exists.
//
// 1. The D1 database: found by name (`wrangler d1 list --json`) or created
//    (`wrangler d1 create`); its id is written into wrangler.toml.
// 2. The queues the config names: each created unless `wrangler queues list`
//    shows it.
// 3. The D1 migrations, remotely (only those not applied yet).
// 4. The secrets the worker knows of that the deployed worker lacks: each
//    source's secret, ADMIN_TOKEN (a generated one offered) and the side
//    effects' EMAIL_API_KEY and NOTIFY_URL (optional). Asked for at the
//    terminal, or taken from the environment (`STRIPE_WEBHOOK_SECRET=… make
//    deploy`); uploaded after the deploy in one `wrangler secret bulk`, from
//    stdin: no secret touches the disk or the command line.
// 5. `wrangler deploy`, then the webhook URL to paste into each provider.
//
// `wrangler` is whichever is first on PATH (the Makefile puts the project's
// own first); the tests put a stand-in there.
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { createInterface } from "node:readline/promises";

import { unstable_readConfig } from "wrangler";

const CONFIG_PATH = "wrangler.toml";
const PLACEHOLDER_ID = /^0{8}-0{4}-0{4}-0{4}-0{12}$/;

/** Runs wrangler; its output is returned (and shown when `show`; its
 * errors are shown unless `quiet`). */
function wrangler(args, { input, show = false, quiet = false } = {}) {
  const result = spawnSync("wrangler", args, {
    encoding: "utf8",
    input,
    stdio: [input === undefined ? "inherit" : "pipe", "pipe", quiet ? "pipe" : "inherit"],
  });
  if (show && result.stdout) process.stdout.write(result.stdout);
  return { ok: result.status === 0, out: result.stdout ?? "" };
}

function must(args, options) {
  const result = wrangler(args, options);
  if (!result.ok) {
    console.error(`deploy: \`wrangler ${args.join(" ")}\` failed`);
    process.exit(1);
  }
  return result.out;
}

const config = unstable_readConfig({ config: CONFIG_PATH });

// 1. The database.
for (const db of config.d1_databases) {
  const listed = JSON.parse(must(["d1", "list", "--json"]) || "[]");
  const byId = listed.find((d) => d.uuid === db.database_id);
  if (byId) {
    console.log(`D1 ${db.database_name}: exists (${db.database_id})`);
    continue;
  }
  const byName = listed.find((d) => d.name === db.database_name);
  let id = byName?.uuid;
  if (id) {
    console.log(`D1 ${db.database_name}: exists (${id})`);
  } else {
    const created = must(["d1", "create", db.database_name]);
    id = created.match(/database_id"?\s*[=:]\s*"([0-9a-f-]{36})"/)?.[1];
    if (!id) {
      console.error(`deploy: no database_id in the output of \`wrangler d1 create\`:\n${created}`);
      process.exit(1);
    }
    console.log(`D1 ${db.database_name}: created (${id})`);
  }
  if (db.database_id && !PLACEHOLDER_ID.test(db.database_id)) {
    console.log(`  (wrangler.toml named ${db.database_id}, which this account does not have)`);
  }
  writeDatabaseId(db.database_name, id);
}

// 2. The queues.
const queues = new Set([
  ...(config.queues.producers ?? []).map((p) => p.queue),
  ...(config.queues.consumers ?? []).flatMap((c) => [c.queue, c.dead_letter_queue]),
]);
queues.delete(undefined);
const existing = queueNames(must(["queues", "list"]));
for (const queue of queues) {
  if (existing.has(queue)) {
    console.log(`queue ${queue}: exists`);
  } else {
    must(["queues", "create", queue]);
    console.log(`queue ${queue}: created`);
  }
}

// 3. The migrations.
for (const db of config.d1_databases) {
  must(["d1", "migrations", "apply", db.binding, "--remote"], { show: true });
}

// 4. The secrets: asked for now, uploaded once the worker exists.
const sources = Object.entries(config.vars.SOURCES ?? {});
const wanted = [
  ...sources.map(([name, source]) => ({
    name: source.secret ?? `${name.toUpperCase().replaceAll("-", "_")}_WEBHOOK_SECRET`,
    why: `the ${source.provider} signing secret of source "${name}"`,
  })),
  { name: "ADMIN_TOKEN", why: "the admin API and dashboard token", generate: true },
  { name: "EMAIL_API_KEY", why: "the email API key for receipts (optional)", optional: true },
  { name: "NOTIFY_URL", why: "the chat incoming-webhook URL (optional)", optional: true },
];
// Before the first deploy there is no worker, and so no secret.
const listedSecrets = wrangler(["secret", "list"], { quiet: true });
const present = new Set(listedSecrets.ok ? JSON.parse(listedSecrets.out || "[]").map((s) => s.name) : []);
const toUpload = {};
const ask = process.stdin.isTTY ? createInterface({ input: process.stdin, output: process.stdout }) : null;
for (const secret of wanted.filter((s) => !present.has(s.name))) {
  let value = process.env[secret.name];
  if (!value && ask) {
    const hint = secret.generate ? " [Enter: generate one]" : secret.optional ? " [Enter: skip]" : "";
    value = (await ask.question(`${secret.name}, ${secret.why}${hint}: `)).trim();
  }
  if (!value && secret.generate) {
    value = randomBytes(32).toString("base64url");
    console.log(`${secret.name}: generated; keep it, it is shown once: ${value}`);
  }
  if (value) {
    toUpload[secret.name] = value;
  } else if (!secret.optional) {
    console.log(`${secret.name}: not set; set it later with \`wrangler secret put ${secret.name}\``);
  }
}
ask?.close();

// 5. The deploy, the secrets, and where to point each provider.
const deployed = must(["deploy"], { show: true });
if (Object.keys(toUpload).length > 0) {
  must(["secret", "bulk"], { input: JSON.stringify(toUpload) });
  console.log(`secrets set: ${Object.keys(toUpload).join(", ")}`);
}
const url = deployed.match(/https:\/\/\S+\.workers\.dev/)?.[0] ?? "https://<your route>";
console.log("\nWebhook URLs to paste into each provider:");
for (const [name, source] of sources) {
  console.log(`  ${source.provider.padEnd(18)} ${url}/webhooks/${name}`);
}
console.log(`  dashboard          ${url}/admin`);

/** Writes `id` as the database_id of the [[d1_databases]] entry named `name`. */
function writeDatabaseId(name, id) {
  const toml = readFileSync(CONFIG_PATH, "utf8");
  const blocks = toml.split(/(?=^\[\[d1_databases\]\])/m);
  const updated = blocks
    .map((block) =>
      block.startsWith("[[d1_databases]]") && new RegExp(`^database_name\\s*=\\s*"${name}"`, "m").test(block)
        ? block.replace(/^database_id\s*=\s*".*"$/m, `database_id = "${id}"`)
        : block,
    )
    .join("");
  if (updated !== toml) writeFileSync(CONFIG_PATH, updated);
}

/** The names in `wrangler queues list`'s table. */
function queueNames(table) {
  const rows = table
    .split("\n")
    .filter((line) => line.startsWith("│"))
    .map((line) => line.split("│").slice(1, -1).map((cell) => cell.trim()));
  const column = rows[0]?.indexOf("name") ?? -1;
  return new Set(column < 0 ? [] : rows.slice(1).map((row) => row[column]));
}

// `make deploy`: a first deploy in one command, and a no-op for what exists.
//
// 0. Logged in: `wrangler whoami --json`, else `wrangler login` (a browser);
//    with several accounts, the one CLOUDFLARE_ACCOUNT_ID names, or asked.
// 1. The D1 database: found by name (`wrangler d1 list --json`) or created
//    (`wrangler d1 create`); its id is written into wrangler.toml.
// 2. The queues the config names: each created unless `wrangler queues list`
//    shows it.
// 3. The D1 migrations, remotely (only those not applied yet).
// 4. The secrets the worker knows of that the deployed worker lacks: each
//    source's secret, ADMIN_TOKEN (a generated one offered) and, on the first
//    deploy, the side effects' EMAIL_API_KEY and NOTIFY_URL, and the
//    operators' ALERT_URL (optional).
//    Asked for at the terminal (not echoed), or taken from the environment
//    (CI); uploaded in one `wrangler secret bulk` from stdin — no secret
//    touches the disk or a command line — before the deploy, so that a
//    failed deploy loses none (on a first deploy wrangler creates the worker
//    for them).
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
 * errors are shown unless `quiet`). `terminal`: wrangler has the terminal
 * (a login), and nothing is captured. */
function wrangler(args, { input, show = false, quiet = false, terminal = false } = {}) {
  const result = spawnSync("wrangler", args, {
    encoding: "utf8",
    input,
    stdio: terminal
      ? "inherit"
      : [input === undefined ? "inherit" : "pipe", "pipe", quiet ? "pipe" : "inherit"],
  });
  if (show && result.stdout) process.stdout.write(result.stdout);
  return { ok: result.status === 0, out: result.stdout ?? "", err: result.stderr ?? "" };
}

function must(args, options) {
  const result = wrangler(args, options);
  if (!result.ok) stop(`\`wrangler ${args.join(" ")}\` failed`);
  return result.out;
}

function stop(message) {
  console.error(`deploy: ${message}`);
  process.exit(1);
}

const tty = process.stdin.isTTY && process.stdout.isTTY;
const ask = tty ? createInterface({ input: process.stdin, output: process.stdout }) : null;

/** Asks at the terminal; `secret` input is not echoed. */
async function question(text, { secret = false } = {}) {
  if (!secret) return (await ask.question(text)).trim();
  const write = ask._writeToOutput;
  process.stdout.write(text);
  ask._writeToOutput = () => {};
  try {
    return (await ask.question("")).trim();
  } finally {
    ask._writeToOutput = write;
    process.stdout.write("\n");
  }
}

const config = unstable_readConfig({ config: CONFIG_PATH });

// 0. Logged in, to one account.
let whoami = wrangler(["whoami", "--json"], { quiet: true });
if (!whoami.ok) {
  if (!tty) stop("not logged in: run `npx wrangler login`, or set CLOUDFLARE_API_TOKEN");
  must(["login"], { terminal: true });
  whoami = wrangler(["whoami", "--json"], { quiet: true });
  if (!whoami.ok) stop("still not logged in");
}
const accounts = JSON.parse(whoami.out).accounts ?? [];
if (accounts.length > 1 && !process.env.CLOUDFLARE_ACCOUNT_ID) {
  if (!tty) stop(`${accounts.length} accounts: set CLOUDFLARE_ACCOUNT_ID to the one to deploy to`);
  accounts.forEach((a, i) => console.log(`  ${i + 1}. ${a.name} (${a.id})`));
  const pick = accounts[Number(await question("Deploy to which account? ")) - 1];
  if (!pick) stop("no such account");
  process.env.CLOUDFLARE_ACCOUNT_ID = pick.id;
}

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
const existing = new Set();
for (let page = 1; page <= 50; page++) {
  const names = queueNames(must(page === 1 ? ["queues", "list"] : ["queues", "list", "--page", String(page)]));
  names.forEach((name) => existing.add(name));
  if (names.size === 0 || [...queues].every((q) => existing.has(q))) break;
}
for (const queue of queues) {
  if (existing.has(queue)) {
    console.log(`queue ${queue}: exists`);
    continue;
  }
  const created = wrangler(["queues", "create", queue], { quiet: true });
  // 11009: the name is taken, by this account (a list that missed it).
  if (!created.ok && !/11009|already taken/.test(created.out + created.err)) {
    stop(`\`wrangler queues create ${queue}\` failed:\n${created.err}`);
  }
  console.log(`queue ${queue}: ${created.ok ? "created" : "exists"}`);
}

// 3. The migrations.
for (const db of config.d1_databases) {
  must(["d1", "migrations", "apply", db.binding, "--remote"], { show: true });
}

// 4. The secrets, then the deploy.
const sources = Object.entries(config.vars.SOURCES ?? {});
const listedSecrets = wrangler(["secret", "list"], { quiet: true });
const firstDeploy = !listedSecrets.ok && /Worker ".*" not found/.test(listedSecrets.err);
if (!listedSecrets.ok && !firstDeploy) stop(`\`wrangler secret list\` failed:\n${listedSecrets.err}`);
const present = new Set(firstDeploy ? [] : JSON.parse(listedSecrets.out || "[]").map((s) => s.name));
const wanted = new Map();
for (const [name, source] of sources) {
  const variable = source.secret ?? `${name.toUpperCase().replaceAll("-", "_")}_WEBHOOK_SECRET`;
  const why = wanted.get(variable)?.why ?? `the ${source.provider} signing secret of source "${name}"`;
  wanted.set(variable, { why });
}
wanted.set("ADMIN_TOKEN", { why: "the admin API and dashboard token", generate: true });
if (firstDeploy) {
  wanted.set("EMAIL_API_KEY", { why: "the email API key for receipts (optional)", optional: true });
  wanted.set("NOTIFY_URL", { why: "the chat incoming-webhook URL (optional)", optional: true });
  wanted.set("ALERT_URL", { why: "the operators' alerts incoming-webhook URL (optional; unset, alerts are logged)", optional: true });
}
const toUpload = {};
for (const [name, secret] of wanted) {
  if (present.has(name)) continue;
  let value = process.env[name];
  if (!value && ask) {
    const hint = secret.generate ? " [Enter: generate one]" : secret.optional ? " [Enter: skip]" : "";
    value = await question(`${name}, ${secret.why}${hint}: `, { secret: true });
  }
  if (!value && secret.generate) {
    value = randomBytes(32).toString("base64url");
    console.log(`${name}: generated; keep it, it is shown once: ${value}`);
  }
  if (value) {
    toUpload[name] = value;
  } else if (!secret.optional) {
    console.log(`${name}: not set; set it later with \`wrangler secret put ${name}\``);
  }
}
ask?.close();
if (Object.keys(toUpload).length > 0) {
  must(["secret", "bulk"], { input: JSON.stringify(toUpload) });
  console.log(`secrets set: ${Object.keys(toUpload).join(", ")}`);
}

// 5. The deploy, and where to point each provider.
const deployed = wrangler(["deploy"], { show: true });
if (!deployed.ok) {
  stop(
    "`wrangler deploy` failed. On a new account, register a workers.dev subdomain first " +
      "(dashboard → Workers & Pages), then run `make deploy` again: what exists stays.",
  );
}
const url = deployed.out.match(/https:\/\/\S+\.workers\.dev/)?.[0] ?? "https://<your route>";
console.log("\nWebhook URLs to paste into each provider:");
for (const [name, source] of sources) {
  console.log(`  ${`${name} (${source.provider})`.padEnd(28)} ${url}/webhooks/${name}`);
}
console.log(`  ${"dashboard".padEnd(28)} ${url}/admin`);

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
  if (!new RegExp(`^database_id = "${id}"$`, "m").test(updated)) {
    stop(`no database_id line for ${name} in ${CONFIG_PATH}: add \`database_id = "${id}"\``);
  }
  if (updated !== toml) writeFileSync(CONFIG_PATH, updated);
}

/** The names in `wrangler queues list`'s table (colours, if any, removed). */
function queueNames(table) {
  const rows = table
    .replace(/\x1b\[[0-9;]*m/g, "")
    .split("\n")
    .filter((line) => line.startsWith("│"))
    .map((line) => line.split("│").slice(1, -1).map((cell) => cell.trim()));
  const column = rows[0]?.indexOf("name") ?? -1;
  return new Set(column < 0 ? [] : rows.slice(1).map((row) => row[column]));
}

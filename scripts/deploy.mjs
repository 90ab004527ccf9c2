// `make deploy`: a first deploy in one command, and a no-op for what exists.
//
// 0. Logged in: `wrangler whoami --json`, else `wrangler login` (a browser);
//    with several accounts, the one CLOUDFLARE_ACCOUNT_ID names, or asked.
// 1. The D1 database: found by name (`wrangler d1 list --json`) or created
//    (`wrangler d1 create`); its id is written into wrangler.toml.
// 2. The D1 migrations, remotely (only those not applied yet). With
//    `--stepwise <file>` (make migrate STEPWISE=), that migration first, one
//    paragraph per request, then recorded as wrangler records it, so that
//    wrangler skips it. With `--migrations-only` (make migrate), stop here.
// 3. The queues the config names: each created unless `wrangler queues list`
//    shows it.
// 4. The secrets the worker knows of that the deployed worker lacks: each
//    source's secret, each destination's signing key, ADMIN_TOKEN (at least 32 bytes, no whitespace, or one
//    generated) and, on the first deploy, the side effects' EMAIL_API_KEY
//    and NOTIFY_URL, and the operators' ALERT_URL (optional).
//    Asked for at the terminal (not echoed), or taken from the environment
//    (CI); uploaded in one `wrangler secret bulk` from stdin — no secret
//    touches a command line or the output — before the deploy, so that a
//    failed deploy loses none (on a first deploy wrangler creates the worker
//    for them). A generated ADMIN_TOKEN is kept in .admin-token (mode 0600,
//    git-ignored), the one secret written to disk, and shown only at a
//    terminal.
// 5. `wrangler deploy`, then the webhook URL to paste into each provider.
//
// `wrangler` is whichever is first on PATH (the Makefile puts the project's
// own first); the tests put a stand-in there.
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { basename, join } from "node:path";
import { createInterface } from "node:readline/promises";

import { unstable_readConfig, unstable_splitSqlQuery } from "wrangler";

// needs: postgres
import { deployPostgres } from "./deploy-postgres.mjs";
import { secretVar } from "./secret-var.mjs";

const CONFIG_PATH = "wrangler.toml";
const PLACEHOLDER_ID = /^0{8}-0{4}-0{4}-0{4}-0{12}$/;
const TOKEN_FILE = ".admin-token";
const argv = process.argv.slice(2);
const migrationsOnly = argv.includes("--migrations-only");
// `--stepwise <file>`: a migration's path, or its name.
const stepwise = argv.includes("--stepwise") ? basename(argv[argv.indexOf("--stepwise") + 1] ?? "") : undefined;

/** Runs wrangler; its output is returned (and shown when `show`; its
 * errors are shown unless `quiet`). `terminal`: wrangler has the terminal
 * (a login), and nothing is captured. */
function wrangler(args, { input, show = false, quiet = false, terminal = false, env } = {}) {
  const result = spawnSync("wrangler", args, {
    encoding: "utf8",
    input,
    env,
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
const holdsStepwise = (db) => stepwise?.endsWith(".sql") && existsSync(join(db.migrations_dir ?? "migrations", stepwise));
if (stepwise !== undefined && !config.d1_databases.some(holdsStepwise)) stop(`--stepwise: no migration "${stepwise}"`);

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

// 2. The migrations.
for (const db of config.d1_databases) {
  if (holdsStepwise(db)) applyStepwise(db, stepwise);
  must(["d1", "migrations", "apply", db.binding, "--remote"], { show: true });
}
// needs: postgres
// 2b. Effects in Postgres (STORE = "postgres"): its migrations and the
// Hyperdrive config (scripts/deploy-postgres.mjs); make migrate too.
if (config.vars.STORE === "postgres") {
  await deployPostgres({ config, wrangler, must, stop, tableRows, writeTableField, question: ask ? question : undefined, migrationsOnly });
}
if (migrationsOnly) process.exit(0);

// 3. The queues.
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

// 4. The secrets, then the deploy.
const sources = Object.entries(config.vars.SOURCES ?? {});
const listedSecrets = wrangler(["secret", "list"], { quiet: true });
const firstDeploy = !listedSecrets.ok && /Worker ".*" not found/.test(listedSecrets.err);
if (!listedSecrets.ok && !firstDeploy) stop(`\`wrangler secret list\` failed:\n${listedSecrets.err}`);
const present = new Set(firstDeploy ? [] : JSON.parse(listedSecrets.out || "[]").map((s) => s.name));
const wanted = new Map();
for (const [name, source] of sources) {
  const variable = secretVar(name, source);
  const why = wanted.get(variable)?.why ?? `the ${source.provider} signing secret of source "${name}"`;
  wanted.set(variable, { why });
}
// Each destination's signing key, as the worker checks it (crates/engine/src/forward/).
for (const [name, destination] of Object.entries(typeof config.vars.DESTINATIONS === "object" ? config.vars.DESTINATIONS : {})) {
  wanted.set(destination.secret, {
    why: `the signing key of destination "${name}" (your backend verifies with it)`,
    // Several during a rotation, separated by commas or newlines.
    valid: (value) =>
      value
        .split(/[,\n]/)
        .map((key) => key.trim())
        .filter(Boolean)
        .every((key) => /^whsec_[A-Za-z0-9+/]+=*$/.test(key) && Buffer.from(key.slice(6), "base64").length >= 24),
    rule: 'must be whsec_ and the base64 of 24 or more random bytes: make one with `echo "whsec_$(openssl rand -base64 32)"`',
  });
}
// The worker refuses any other ADMIN_TOKEN as misconfigured (crates/engine/src/config/).
wanted.set("ADMIN_TOKEN", {
  why: "the admin API and dashboard token",
  generate: true,
  valid: (token) => Buffer.byteLength(token) >= 32 && !/\s/.test(token),
  rule:
    "must be at least 32 bytes with no whitespace, or the worker refuses it as misconfigured: " +
    "make one with `openssl rand -base64 32`, or leave it unset to have one generated",
});
if (firstDeploy) {
  wanted.set("EMAIL_API_KEY", { why: "the email API key (optional)", optional: true });
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
  if (value && secret.valid && !secret.valid(value)) stop(`${name} ${secret.rule}`);
  if (!value && secret.generate) {
    value = randomBytes(32).toString("base64url");
    keepToken(value);
    // At a person's terminal only: a CI runner may give the job a
    // terminal (docker run -t, some runners) and keep its log.
    const shown = tty && !process.env.CI ? `: ${value}` : "";
    console.log(`${name}: generated, kept in ${TOKEN_FILE} (readable by you only)${shown}`);
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
// needs: dashboard
console.log(`  ${"dashboard".padEnd(28)} ${url}/admin`);

/** Applies migration `name` of `db` remotely one paragraph (statements
 * between blank lines) per request, each one transaction, then records it
 * in the migrations table as `wrangler d1 migrations apply` does: only once
 * every paragraph succeeded. Those pending before it are applied first,
 * each whole with its record, as wrangler does. After a failure the file
 * is applied again from its start: it must be re-runnable (docs/deploy.md,
 * "A long migration"). */
function applyStepwise(db, name) {
  const dir = db.migrations_dir ?? "migrations";
  const table = db.migrations_table ?? "d1_migrations";
  // `--command=`: SQL that starts with a comment is not taken for a flag.
  const execute = (sql, flags = []) =>
    wrangler(["d1", "execute", db.binding, "--remote", ...flags, `--command=${sql}`], { show: flags.length === 0 });
  const record = (file) => `INSERT INTO ${table} (name) VALUES ('${file.replaceAll("'", "''")}');`;
  // The table as `wrangler d1 migrations apply` creates it, and what it holds.
  const listed = execute(
    `CREATE TABLE IF NOT EXISTS ${table}(id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT UNIQUE, ` +
      `applied_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP NOT NULL); SELECT name FROM ${table};`,
    ["--json"],
  );
  if (!listed.ok) stop(`could not read ${table} of ${db.binding}`);
  const applied = new Set(JSON.parse(listed.out).at(-1).results.map((row) => row.name));
  if (applied.has(name)) {
    console.log(`${name}: applied already`);
    return;
  }
  const pending = readdirSync(dir).filter((f) => f.endsWith(".sql") && !applied.has(f)).sort();
  for (const file of pending.slice(0, pending.indexOf(name))) {
    console.log(`${file}: applying whole, as wrangler does`);
    if (!execute(`${readFileSync(join(dir, file), "utf8")}\n${record(file)}`).ok) stop(`${file} failed`);
  }
  const text = readFileSync(join(dir, name), "utf8");
  const paragraphs = text.split(/\n\s*\n/).filter((p) => p.replace(/--.*$/gm, "").trim());
  // A statement cut by a blank line would run in halves: refuse them all.
  if (paragraphs.flatMap((p) => unstable_splitSqlQuery(p)).length !== unstable_splitSqlQuery(text).length) {
    stop(`${name}: a statement spans a blank line, so it cannot run a paragraph at a time`);
  }
  for (const [i, paragraph] of paragraphs.entries()) {
    console.log(`${name}: paragraph ${i + 1} of ${paragraphs.length}`);
    if (!execute(paragraph).ok) {
      stop(`${name}: paragraph ${i + 1} failed, and it is not recorded; once fixed, run this again`);
    }
  }
  if (!execute(record(name)).ok) stop(`${name}: applied, but not recorded in ${table}`);
}

/** Writes a generated admin token to TOKEN_FILE, created readable by its
 * owner only, and never over an earlier one. */
function keepToken(token) {
  try {
    writeFileSync(TOKEN_FILE, `${token}\n`, { mode: 0o600, flag: "wx" });
  } catch (error) {
    if (error.code !== "EEXIST") throw error;
    stop(`${TOKEN_FILE} holds an earlier token: deploy with ADMIN_TOKEN="$(cat ${TOKEN_FILE})", or remove it`);
  }
}

/** Writes `id` as the database_id of the [[d1_databases]] entry named `name`. */
function writeDatabaseId(name, id) {
  writeTableField("d1_databases", "database_name", name, "database_id", id);
}

/**
 * Sets `field = "value"` in the [[table]] entry whose `key` is `match` (its
 * lines up to the next table), or stops, saying which line to add.
 */
function writeTableField(table, key, match, field, value) {
  const toml = readFileSync(CONFIG_PATH, "utf8");
  const updated = toml
    .split(/(?=^\[)/m)
    .map((block) =>
      block.startsWith(`[[${table}]]`) && new RegExp(`^${key}\\s*=\\s*"${match}"`, "m").test(block)
        ? block.replace(new RegExp(`^${field}\\s*=\\s*".*"$`, "m"), `${field} = "${value}"`)
        : block,
    )
    .join("");
  if (!new RegExp(`^${field} = "${value}"$`, "m").test(updated)) {
    stop(`no ${field} line for ${match} in ${CONFIG_PATH}: add \`${field} = "${value}"\``);
  }
  if (updated !== toml) writeFileSync(CONFIG_PATH, updated);
}

/** The rows of a table wrangler prints (`queues list`, …) as objects, colours removed. */
function tableRows(text) {
  const rows = text
    .replace(/\x1b\[[0-9;]*m/g, "")
    .split("\n")
    .filter((line) => line.startsWith("│"))
    .map((line) => line.split("│").slice(1, -1).map((cell) => cell.trim()));
  const [header = [], ...body] = rows;
  return body.map((row) => Object.fromEntries(header.map((name, i) => [name, row[i]])));
}

/** The names in `wrangler queues list`'s table. */
function queueNames(table) {
  return new Set(tableRows(table).map((row) => row.name).filter((name) => name !== undefined));
}

#!/usr/bin/env node
// needs: stripe, github, demos
// A stand-in for `wrangler` on PATH, for the `make deploy` test: it records
// each call (arguments and stdin) in $FAKE_WRANGLER_LOG and answers like
// wrangler 4.86 (the shapes of `whoami --json`, `d1 list --json`,
// `d1 create`, `d1 execute --remote --command=`, `queues list`,
// `hyperdrive list`, `hyperdrive create`,
// `secret list`, `secret bulk`, `deploy`, and their errors), keeping the
// account's state in $FAKE_WRANGLER_STATE. $FAKE_LOGGED_IN=1: a session
// exists; $FAKE_FAIL: a command that fails; $FAKE_FAIL_SQL: a `d1 execute`
// whose SQL holds this fails.
import { randomUUID } from "node:crypto";
import { appendFileSync, existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";

const args = process.argv.slice(2);
// Only `secret bulk` reads its input; every other call leaves stdin alone.
const stdin = args.join(" ") === "secret bulk" ? readFileSync(0, "utf8") : "";
appendFileSync(process.env.FAKE_WRANGLER_LOG, `${JSON.stringify({ args, stdin })}\n`);
const STATE = process.env.FAKE_WRANGLER_STATE;
const state = existsSync(STATE)
  ? JSON.parse(readFileSync(STATE, "utf8"))
  : { databases: [], queues: [], secrets: [], migrated: [], worker: null };
const save = () => writeFileSync(STATE, JSON.stringify(state));
const fail = (message) => {
  console.error(`✘ [ERROR] ${message}`);
  process.exit(1);
};

// The command without its flags (and without `--page`'s value).
const command = args.filter((a, i) => !a.startsWith("--") && args[i - 1] !== "--page").join(" ");
const worker = () => readFileSync("wrangler.toml", "utf8").match(/^name\s*=\s*"(.*)"$/m)[1];
if (process.env.FAKE_FAIL === command) fail("A request to the Cloudflare API failed. [code: 10000]");
if (command === "whoami") {
  if (process.env.FAKE_LOGGED_IN !== "1") {
    console.log(JSON.stringify({ loggedIn: false }));
    process.exit(1);
  }
  console.log(JSON.stringify({ loggedIn: true, authType: "OAuth Token", email: "dev@example.com", accounts: [{ id: "0123456789abcdef0123456789abcdef", name: "Dev" }] }));
  process.exit(0);
}
if (process.env.FAKE_LOGGED_IN !== "1") {
  fail("In a non-interactive environment, it's necessary to set a CLOUDFLARE_API_TOKEN environment variable for wrangler to work.");
}
switch (true) {
  case command === "d1 list":
    console.log(JSON.stringify(state.databases.map((d) => ({ ...d, version: "production", num_tables: 0, file_size: 0 })), null, 2));
    break;
  case command.startsWith("d1 create "): {
    const name = args[2];
    if (state.databases.some((d) => d.name === name)) fail(`A database with that name already exists [code: 7502]`);
    const uuid = randomUUID();
    state.databases.push({ uuid, name, created_at: new Date().toISOString() });
    save();
    console.log(`✅ Successfully created DB '${name}' in region WEUR\nCreated your new D1 database.\n`);
    console.log(`To access your new D1 Database in your Worker, add the following snippet to your configuration file:`);
    console.log(`[[d1_databases]]\nbinding = "${name}"\ndatabase_name = "${name}"\ndatabase_id = "${uuid}"`);
    break;
  }
  case command === "queues list": {
    const size = Number(process.env.FAKE_QUEUE_PAGE_SIZE ?? 100);
    const page = args.includes("--page") ? Number(args[args.indexOf("--page") + 1]) : 1;
    const rows = [["id", "name", "created_on", "modified_on", "producers", "consumers"]].concat(
      state.queues.slice((page - 1) * size, page * size).map((q) => [q.id, q.name, q.created_on, q.created_on, "0", "0"]),
    );
    const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)) + 2);
    const line = (l, m, r) => l + widths.map((w) => "─".repeat(w)).join(m) + r;
    const row = (cells) => `│${cells.map((c, i) => ` ${c.padEnd(widths[i] - 1)}`).join("│")}│`;
    console.log([line("┌", "┬", "┐"), row(rows[0]), line("├", "┼", "┤"), ...rows.slice(1).map(row), line("└", "┴", "┘")].join("\n"));
    break;
  }
  case command.startsWith("queues create "): {
    const name = args[2];
    if (state.queues.some((q) => q.name === name)) fail(`Queue name '${name}' is already taken [code: 11009]`);
    state.queues.push({ id: randomUUID().replaceAll("-", ""), name, created_on: new Date().toISOString() });
    save();
    console.log(`🌀 Creating queue '${name}'\n✅ Created queue '${name}'`);
    break;
  }
  case command === "d1 migrations apply DB": {
    remoteDatabase();
    const pending = readdirSync("migrations").filter((m) => !state.migrated.includes(m));
    state.migrated.push(...pending);
    save();
    console.log(pending.length ? `✅ Applied ${pending.length} migrations! (${pending.join(", ")})` : "✅ No migrations to apply!");
    break;
  }
  case command === "d1 execute DB": {
    // Only what `make migrate STEPWISE=` sends: the migrations table read,
    // a record written, any other SQL taken as run.
    remoteDatabase();
    const sql = args.find((a) => a.startsWith("--command="))?.slice("--command=".length) ?? fail("expected --command=");
    if (process.env.FAKE_FAIL_SQL && sql.includes(process.env.FAKE_FAIL_SQL)) {
      fail("A request to the Cloudflare API (/d1/database/query) failed: SQLITE_ERROR [code: 7500]");
    }
    if (/SELECT name FROM d1_migrations/.test(sql)) {
      const names = state.migrated.map((name) => ({ name }));
      console.log(JSON.stringify([{ results: [], success: true }, { results: names, success: true }], null, 2));
      break;
    }
    for (const [, name] of sql.matchAll(/INSERT INTO d1_migrations \(name\) VALUES \('(.*)'\)/g)) {
      if (state.migrated.includes(name)) fail("UNIQUE constraint failed: d1_migrations.name: SQLITE_CONSTRAINT [code: 7500]");
      state.migrated.push(name);
    }
    save();
    console.log(`🌀 Executing on remote database DB (${remoteDatabase()}):\n🚣 Executed ${sql.split(";").length - 1} commands in 12.34ms`);
    break;
  }
  // needs: postgres
  case command === "hyperdrive list": {
    const rows = [["id", "name", "user", "host", "port", "scheme", "database", "caching"]].concat(
      (state.hyperdrives ?? []).map((h) => [h.id, h.name, h.user, h.host, h.port, "PostgreSQL", h.database, h.caching ? "enabled" : "disabled"]),
    );
    const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)) + 2);
    const line = (l, m, r) => l + widths.map((w) => "─".repeat(w)).join(m) + r;
    const row = (cells) => `│${cells.map((c, i) => ` ${c.padEnd(widths[i] - 1)}`).join("│")}│`;
    console.log(`📋 Listing Hyperdrive configs\n${[line("┌", "┬", "┐"), row(rows[0]), line("├", "┼", "┤"), ...rows.slice(1).map(row), line("└", "┴", "┘")].join("\n")}`);
    break;
  }
  // needs: postgres
  case command.startsWith("hyperdrive create "): {
    const name = args[2];
    const url = new URL(args.find((a) => a.startsWith("--connection-string="))?.slice("--connection-string=".length) ?? fail("Invalid connection string"));
    const id = randomUUID().replaceAll("-", "");
    const origin = { user: url.username, host: url.hostname, port: url.port || "5432", database: url.pathname.slice(1) };
    state.hyperdrives = [...(state.hyperdrives ?? []), { id, name, ...origin, caching: !args.includes("--caching-disabled") }];
    save();
    console.log(`🚧 Creating '${name}'\n✅ Created new Hyperdrive PostgreSQL config: ${id}`);
    console.log(`To access your new Hyperdrive Config in your Worker, add the following snippet to your configuration file:\n[[hyperdrive]]\nbinding = "HYPERDRIVE"\nid = "${id}"`);
    break;
  }
  case command === "secret list":
    if (!state.worker) {
      fail(`Worker "${worker()}" not found.\n\nIf this is a new Worker, run \`wrangler deploy\` first to create it.`);
    }
    console.log(JSON.stringify(state.secrets.map((name) => ({ name, type: "secret_text" })), null, "  "));
    break;
  case command === "secret bulk": {
    // On a worker that does not exist yet, wrangler creates a draft of it.
    state.worker ??= "draft";
    const secrets = JSON.parse(stdin);
    for (const name of Object.keys(secrets)) {
      if (!state.secrets.includes(name)) state.secrets.push(name);
      console.log(`✨ Successfully created secret for key: ${name}`);
    }
    save();
    break;
  }
  case command === "deploy": {
    const name = worker();
    state.worker = "deployed";
    save();
    console.log("Total Upload: 655.92 KiB / gzip: 252.01 KiB");
    console.log(`Uploaded ${name} (3.21 sec)`);
    console.log(`Deployed ${name} triggers (1.02 sec)`);
    console.log(`  https://${name}.example.workers.dev`);
    console.log("  schedule: * * * * *");
    console.log(`Current Version ID: ${randomUUID()}`);
    break;
  }
  default:
    fail(`the stand-in does not know \`wrangler ${args.join(" ")}\``);
}

/** The id of the database wrangler.toml names, which must exist; --remote only. */
function remoteDatabase() {
  if (!args.includes("--remote")) fail("expected --remote");
  const id = readFileSync("wrangler.toml", "utf8").match(/^database_id\s*=\s*"(.*)"$/m)?.[1];
  if (!state.databases.some((d) => d.uuid === id)) fail(`Couldn't find DB with ID ${id} [code: 7404]`);
  return id;
}

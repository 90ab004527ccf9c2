// `make deploy` (scripts/deploy.mjs) against a stand-in `wrangler` on PATH
// that answers like the real one: a first run creates the database (its id
// written into wrangler.toml), the migrations, the queues and the secrets,
// then deploys and prints the webhook URLs; a second run changes nothing.
// No secret is ever printed. `make migrate` stops after the migrations, and
// with STEPWISE runs one migration a paragraph per request, then records it.
// needs: stripe, github, demos
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFile, execFileSync } from "node:child_process";
import {
  chmodSync,
  chownSync,
  copyFileSync,
  cpSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

import { unstable_readConfig, unstable_splitSqlQuery } from "wrangler";

// needs: postgres
import { freshDatabase, pgctl } from "./support/postgres.mjs";

const ROOT = resolve(import.meta.dirname, "..");
// The names the project's own config gives (a generated copy has its own).
const CONFIG = unstable_readConfig({ config: join(ROOT, "wrangler.toml") });
const DATABASE = CONFIG.d1_databases[0].database_name;
const [QUEUE, DLQ] = [CONFIG.queues.consumers[0].queue, CONFIG.queues.consumers[0].dead_letter_queue];
const FORWARD_QUEUE = CONFIG.queues.consumers[1].queue;
let dir;
let env;

before(() => {
  dir = mkdtempSync(join(tmpdir(), "deploy-test-"));
  copyFileSync(join(ROOT, "wrangler.toml"), join(dir, "wrangler.toml"));
  // needs: postgres
  // These deploy D1 alone; those at the end, effects in Postgres.
  writeFileSync(join(dir, "wrangler.toml"), d1Only(readFileSync(join(ROOT, "wrangler.toml"), "utf8")));
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
  for (const name of ["ADMIN_TOKEN", "EMAIL_API_KEY", "NOTIFY_URL", "ALERT_URL", "CLOUDFLARE_ACCOUNT_ID", "CLOUDFLARE_API_TOKEN", "POSTGRES_URL", "POSTGRES_MIGRATIONS"]) {
    delete env[name];
  }
  // Never a database of the developer's: libpq's variables go too.
  for (const name of Object.keys(env).filter((name) => name.startsWith("PG"))) delete env[name];
});
after(() => rmSync(dir, { recursive: true, force: true }));

/** Runs `make deploy`'s script in the copy: its exit code, output and the
 * calls it made. `extra`: more environment; `flags`: the script's. */
async function run(extra = {}, flags = []) {
  rmSync(env.FAKE_WRANGLER_LOG, { force: true });
  const script = [join(ROOT, "scripts/deploy.mjs"), ...flags];
  const { code, out, err } = await new Promise((done) =>
    execFile("node", script, { cwd: dir, env: { ...env, ...extra }, timeout: 60_000 }, (error, stdout, stderr) =>
      done({ code: error ? error.code : 0, out: stdout, err: stderr }),
    ),
  );
  const calls = readFileSync(env.FAKE_WRANGLER_LOG, "utf8").trim().split("\n").map((l) => JSON.parse(l));
  return { code, out, err, calls, commands: calls.map((c) => c.args.join(" ")) };
}

async function deploy(extra, flags) {
  const result = await run(extra, flags);
  assert.equal(result.code, 0, `${result.out}\n${result.err}`);
  return result;
}

const account = () => JSON.parse(readFileSync(env.FAKE_WRANGLER_STATE, "utf8"));
/** Changes the stand-in account's state, as if done elsewhere. */
const edit = (change) => {
  const state = account();
  change(state);
  writeFileSync(env.FAKE_WRANGLER_STATE, JSON.stringify(state));
};
const toml = () => readFileSync(join(dir, "wrangler.toml"), "utf8");

test("not logged in, and no terminal to log in at: it says so and creates nothing", async () => {
  const { code, err, commands } = await run({ FAKE_LOGGED_IN: "0" });
  assert.notEqual(code, 0);
  assert.match(err, /not logged in: run `npx wrangler login`, or set CLOUDFLARE_API_TOKEN/);
  assert.deepEqual(commands, ["whoami --json"]);
});

test("a first deploy creates what is missing, sets the secrets, deploys and prints the URLs", async () => {
  const { out, err, calls, commands } = await deploy();
  assert.deepEqual(commands, [
    "whoami --json",
    "d1 list --json",
    `d1 create ${DATABASE}`,
    "d1 migrations apply DB --remote",
    "queues list",
    `queues create ${QUEUE}`,
    `queues create ${DLQ}`,
    `queues create ${FORWARD_QUEUE}`,
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
  // No terminal (CI): the token is in a file only its owner reads, not in the log.
  assert.ok(!out.includes(uploaded.ADMIN_TOKEN) && !err.includes(uploaded.ADMIN_TOKEN), "the token is not printed");
  assert.match(out, /ADMIN_TOKEN: generated, kept in \.admin-token \(readable by you only\)\n/);
  assert.equal(statSync(join(dir, ".admin-token")).mode & 0o777, 0o600);
  assert.equal(readFileSync(join(dir, ".admin-token"), "utf8"), `${uploaded.ADMIN_TOKEN}\n`);
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
  // One queue per page of `queues list`: all three are found on later pages.
  const { commands } = await deploy({ FAKE_QUEUE_PAGE_SIZE: "1" });
  assert.deepEqual(commands, [
    "whoami --json",
    "d1 list --json",
    "d1 migrations apply DB --remote",
    "queues list",
    "queues list --page 2",
    "queues list --page 3",
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

test("an ADMIN_TOKEN the worker would refuse stops the deploy before any secret is set", async () => {
  edit((state) => {
    state.secrets = state.secrets.filter((name) => name !== "ADMIN_TOKEN");
  });
  for (const token of ["31-bytes-is-one-byte-too-short!", `${"x".repeat(20)} ${"y".repeat(20)}`]) {
    const { code, out, err, commands } = await run({ ADMIN_TOKEN: token });
    assert.notEqual(code, 0);
    assert.match(err, /ADMIN_TOKEN must be at least 32 bytes with no whitespace, or the worker refuses it/);
    assert.ok(!out.includes(token) && !err.includes(token), "the token is not printed");
    assert.ok(!commands.includes("secret bulk") && !commands.includes("deploy"), commands.join());
  }
  assert.ok(!account().secrets.includes("ADMIN_TOKEN"));
});

test("a generated token never replaces the one in .admin-token", async () => {
  const kept = readFileSync(join(dir, ".admin-token"), "utf8");
  const { code, err, commands } = await run();
  assert.notEqual(code, 0);
  assert.match(err, /\.admin-token holds an earlier token: deploy with ADMIN_TOKEN="\$\(cat \.admin-token\)", or remove it/);
  assert.ok(!commands.includes("secret bulk"), commands.join());
  assert.equal(readFileSync(join(dir, ".admin-token"), "utf8"), kept);
  const { calls } = await deploy({ ADMIN_TOKEN: kept.trim() });
  assert.equal(JSON.parse(calls.find((c) => c.args.join(" ") === "secret bulk").stdin).ADMIN_TOKEN, kept.trim());
});

test("make migrate: the migrations, and nothing else", async () => {
  const { commands } = await deploy({}, ["--migrations-only"]);
  assert.deepEqual(commands, ["whoami --json", "d1 list --json", "d1 migrations apply DB --remote"]);
});

// The template's own history: a copy starts from one clean file.
// needs: everything
describe("make migrate STEPWISE=, on the template's 0008", () => {
  const STEPWISE = "0008_without_rowid.sql";
  const BEFORE_IT = "0007_outbox_alerts_index.sql";
  const migration = (name) => readFileSync(join(ROOT, "migrations", name), "utf8");
  const record = (name) => `INSERT INTO d1_migrations (name) VALUES ('${name}');`;
  /** The SQL of each `d1 execute` call, in order. */
  const executed = (calls) =>
    calls
      .filter((c) => c.args[1] === "execute")
      .map((c) => c.args.find((a) => a.startsWith("--command=")).slice("--command=".length));

  test("make migrate STEPWISE= runs it a table per request, then records it, and wrangler skips it", async () => {
    edit((state) => {
      state.migrated = state.migrated.filter((name) => name < BEFORE_IT);
    });
    const { out, calls, commands } = await deploy({}, ["--migrations-only", "--stepwise", `migrations/${STEPWISE}`]);
    assert.deepEqual(
      [commands[0], commands[1], commands.at(-1)],
      ["whoami --json", "d1 list --json", "d1 migrations apply DB --remote"],
    );
    const [read, earlier, ...rest] = executed(calls);
    assert.match(read, /SELECT name FROM d1_migrations;$/);
    // A migration pending before it goes whole with its record, as wrangler sends it.
    assert.equal(earlier, `${migration(BEFORE_IT)}\n${record(BEFORE_IT)}`);
    // Then each table's copy, drop and rename in one request, every statement
    // once and in order; the record last, alone.
    const parts = rest.slice(0, -1);
    assert.deepEqual(
      parts.map((p) => p.match(/DROP TABLE \w+/g)),
      [["DROP TABLE processed_events"], ["DROP TABLE orders"], ["DROP TABLE outbox"]],
    );
    assert.deepEqual(unstable_splitSqlQuery(parts.join("\n\n")), unstable_splitSqlQuery(migration(STEPWISE)));
    assert.equal(rest.at(-1), record(STEPWISE));
    // Recorded in order (and any later migration after them).
    const migrated = account().migrated;
    assert.deepEqual(migrated.slice(migrated.indexOf(BEFORE_IT), migrated.indexOf(BEFORE_IT) + 2), [BEFORE_IT, STEPWISE]);
    // Then wrangler skips it (and applies any later one).
    assert.doesNotMatch(out, new RegExp(`Applied .*${STEPWISE}`), "wrangler skips it");
    assert.equal(migrated.filter((name) => name === STEPWISE).length, 1);
  });

  test("a failing request stops STEPWISE before the record; run again, it completes", async () => {
    edit((state) => {
      state.migrated = state.migrated.filter((name) => name !== STEPWISE);
    });
    const flags = ["--migrations-only", "--stepwise", STEPWISE];
    const failed = await run({ FAKE_FAIL_SQL: "DROP TABLE orders" }, flags);
    assert.notEqual(failed.code, 0);
    assert.match(failed.err, /0008_without_rowid.sql: paragraph 2 failed, and it is not recorded; once fixed, run this again/);
    const sql = executed(failed.calls);
    assert.equal(sql.length, 3, "the read, the ledger's paragraph, the orders' that failed");
    assert.ok(!sql.includes(record(STEPWISE)) && !failed.commands.includes("d1 migrations apply DB --remote"));
    assert.ok(!account().migrated.includes(STEPWISE));
    const again = await deploy({}, flags);
    assert.equal(executed(again.calls).at(-1), record(STEPWISE));
    assert.ok(account().migrated.includes(STEPWISE));
  });
});

// needs: postgres
/** `text` without STORE and the [[hyperdrive]] binding (a Postgres copy's). */
function d1Only(text) {
  return text.replace(/^(# .*\n)*STORE = "postgres"\n/m, "").replace(/^(# .*\n)*\[\[hyperdrive\]\]\n(\w+ = .*\n)*/m, "");
}

// needs: postgres
describe("effects in Postgres: migrations-postgres/ applied, the Hyperdrive config created once", () => {
  const HYPERDRIVE = '[[hyperdrive]]\nbinding = "HYPERDRIVE"\nid = "00000000000000000000000000000000"\n';
  const NAME = `${CONFIG.name}-postgres`;
  const db = `deploy_${process.pid}`;
  let url;
  const migrated = () => pgctl(db, "psql", "-tA", "-c", "SELECT count(*) FROM webhook_migrations").trim();
  before(() => {
    const pg = freshDatabase();
    pg.query(`DROP DATABASE IF EXISTS ${db}`);
    pg.query(`CREATE DATABASE ${db}`);
    // The local cluster has no TLS; a real database's connection requires it.
    url = `${pg.url.replace(/\/[^/]+$/, `/${db}`)}?sslmode=disable`;
    cpSync(join(ROOT, "migrations-postgres"), join(dir, "migrations-postgres"), { recursive: true });
    mkdirSync(join(dir, "scripts"), { recursive: true });
    copyFileSync(join(ROOT, "scripts/postgres.sh"), join(dir, "scripts/postgres.sh"));
    const text = d1Only(toml()).replace(/^\[vars\]\n/m, '[vars]\nSTORE = "postgres"\n');
    writeFileSync(join(dir, "wrangler.toml"), `${text}\n${HYPERDRIVE}`);
    rmSync(env.FAKE_WRANGLER_STATE, { force: true });
    rmSync(join(dir, ".admin-token"), { force: true });
  });

  test("no config yet and no connection string: it stops before creating one", async () => {
    const { code, err, commands } = await run();
    assert.notEqual(code, 0);
    assert.match(err, new RegExp(`no Hyperdrive config ${NAME} yet: give your Postgres's connection string in POSTGRES_URL`));
    assert.ok(!commands.some((c) => c.startsWith("hyperdrive create")));
  });

  test("a password Postgres refuses stops it, and is never printed", async () => {
    const wrong = url.replace(/:[^:@/]*@/, ":not-the-password-9f3a@");
    const { code, out, err, commands } = await run({ POSTGRES_URL: wrong });
    assert.notEqual(code, 0);
    assert.match(err, /migrations-postgres\/ could not be applied/);
    assert.ok(!`${out}${err}`.includes("not-the-password-9f3a"), "the password is printed");
    assert.ok(!commands.some((c) => c.startsWith("hyperdrive create")));
  });

  test("a connection string that is no URL stops it, and is never printed", async () => {
    const { code, out, err } = await run({ POSTGRES_URL: "postgres://app:s3cr/et#x@127.0.0.1/db" });
    assert.notEqual(code, 0);
    assert.match(err, /percent-encode any \/ # \? @ : % in the user name or password/);
    assert.ok(!`${out}${err}`.includes("s3cr"), "the password is printed");
  });

  test("a URL without a database, or with a bare %, stops it before psql runs", async () => {
    for (const bad of [url.replace(/\/[^/?]+\?/, "/?"), url.replace(/:[^:@/]*@/, ":50%off@")]) {
      const { code, out, err } = await run({ POSTGRES_URL: bad });
      assert.notEqual(code, 0);
      assert.match(err, /POSTGRES_URL (must be postgres:\/\/user:password@host:port\/database|is not a URL)/);
      assert.ok(!`${out}${err}`.includes("50%off"));
    }
  });

  test("a first deploy applies migrations-postgres/, creates the config without caching, writes its id", async () => {
    const { out, err, calls } = await deploy({ POSTGRES_URL: url });
    const create = calls.filter((c) => c.args[0] === "hyperdrive" && c.args[1] === "create");
    assert.deepEqual(create.map((c) => c.args), [["hyperdrive", "create", NAME, `--connection-string=${url}`, "--caching-disabled"]]);
    const [config] = account().hyperdrives;
    assert.equal(config.caching, false);
    assert.match(toml(), new RegExp(`^id = "${config.id}"$`, "m"));
    assert.equal(migrated(), String(readdirSync(join(ROOT, "migrations-postgres")).length));
    assert.equal(pgctl(db, "psql", "-tA", "-c", "SELECT count(*) FROM processed_events").trim(), "0");
    assert.ok(!`${out}${err}`.includes(url), "the connection string is printed");
  });

  test("again: the config is found, never created twice, and no migration runs twice", async () => {
    const refused = await run();
    assert.notEqual(refused.code, 0);
    assert.match(refused.err, /migrations-postgres\/ needs POSTGRES_URL \(or POSTGRES_MIGRATIONS=skip/);
    assert.ok(!refused.commands.includes("deploy"));
    const skipped = await deploy({ POSTGRES_MIGRATIONS: "skip" });
    assert.match(skipped.out, /migrations-postgres\/ not applied \(give POSTGRES_URL/);
    const again = await deploy({ POSTGRES_URL: url });
    for (const { commands } of [refused, skipped, again]) assert.ok(!commands.some((c) => c.startsWith("hyperdrive create")));
    assert.equal(account().hyperdrives.length, 1);
    // A config that reaches another database is not migrated behind its back.
    const elsewhere = await run({ POSTGRES_URL: url.replace(`/${db}?`, "/another?") });
    assert.notEqual(elsewhere.code, 0);
    assert.match(elsewhere.err, /points at .*, not at POSTGRES_URL's database/);
    assert.equal(migrated(), String(readdirSync(join(ROOT, "migrations-postgres")).length));
  });
});

// needs: postgres
describe("make deploy's connection to Postgres: the server's certificate verified, the password bound to it", () => {
  const db = `deploy_tls_${process.pid}`;
  const certs = mkdtempSync(join(tmpdir(), "deploy-tls-"));
  let pg;
  let direct;
  let data;
  const sql = (text) => pgctl(db, "psql", "-tA", "-c", text);
  const migrate = (POSTGRES_URL) =>
    new Promise((done) =>
      execFile("node", ["scripts/deploy-postgres.mjs", "migrate"], { cwd: ROOT, env: { ...process.env, POSTGRES_URL } }, (error, out, err) =>
        done({ code: error ? error.code : 0, out, err }),
      ),
    );
  before(() => {
    pg = freshDatabase();
    pg.query(`DROP DATABASE IF EXISTS ${db}`);
    pg.query(`CREATE DATABASE ${db}`);
    direct = pg.direct.replace(/\/[^/]+$/, `/${db}`);
    // A certificate authority of the test's own, which no system trusts,
    // and the server's certificate for 127.0.0.1 signed by it.
    const openssl = (...args) => execFileSync("openssl", args, { cwd: certs, stdio: "ignore" });
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=deploy test CA");
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1");
    writeFileSync(join(certs, "san.ext"), "subjectAltName=IP:127.0.0.1\n");
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out", "server.crt", "-days", "2", "-extfile", "san.ext");
    data = pgctl(db, "dir").trim();
    for (const file of ["server.crt", "server.key"]) {
      copyFileSync(join(certs, file), join(data, `deploy-tls-${file}`));
      chmodSync(join(data, `deploy-tls-${file}`), 0o600);
      chownSync(join(data, `deploy-tls-${file}`), statSync(data).uid, statSync(data).gid);
    }
    sql("ALTER SYSTEM SET ssl_cert_file = 'deploy-tls-server.crt'");
    sql("ALTER SYSTEM SET ssl_key_file = 'deploy-tls-server.key'");
    sql("ALTER SYSTEM SET ssl = on");
    reload("on");
  });
  after(() => {
    for (const setting of ["ssl", "ssl_cert_file", "ssl_key_file"]) sql(`ALTER SYSTEM RESET ${setting}`);
    reload("off");
    for (const file of ["server.crt", "server.key"]) rmSync(join(data, `deploy-tls-${file}`), { force: true });
    // WITH (FORCE): the pooler may still hold a connection to it.
    pg.query(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`);
    rmSync(certs, { recursive: true, force: true });
  });
  /** Reloads the server's settings, and waits until `ssl` reads `state`. */
  function reload(state) {
    sql("SELECT pg_reload_conf()");
    for (let i = 0; i < 50 && sql("SHOW ssl").trim() !== state; i++) execFileSync("sleep", ["0.1"]);
    assert.equal(sql("SHOW ssl").trim(), state);
  }

  test("by default, a certificate no authority it trusts signed stops it, saying how to trust it", async () => {
    const { code, out, err } = await migrate(direct);
    assert.notEqual(code, 0);
    assert.match(out, /connecting with sslmode=verify-full, channel_binding=require/);
    assert.match(err, /certificate could not be verified .*add sslrootcert=<your provider's CA file> to POSTGRES_URL, or sslmode=require/);
    assert.ok(!`${out}${err}`.includes(":webhooks@"), "the password is printed");
  });

  test("with its authority, the certificate is verified and the exchange bound to the session", async () => {
    const { code, out, err } = await migrate(`${direct}?sslrootcert=${encodeURIComponent(join(certs, "ca.crt"))}`);
    assert.equal(code, 0, err);
    assert.match(out, /migrations-postgres\/ applied/);
    // The migrations' table, written over TLS with channel binding required.
    assert.ok(Number(sql("SELECT count(*) FROM webhook_migrations").trim()) > 0);
  });

  test("a server without TLS is named as such, and sslmode=disable still reaches it", async () => {
    const pooled = pg.url.replace(/\/[^/]+$/, `/${db}`);
    const refused = await migrate(pooled);
    assert.notEqual(refused.code, 0);
    assert.match(refused.err, /does not offer TLS: add sslmode=disable to POSTGRES_URL only for a database on a private network/);
    const plain = await migrate(`${pooled}?sslmode=disable`);
    assert.equal(plain.code, 0, plain.err);
  });
});

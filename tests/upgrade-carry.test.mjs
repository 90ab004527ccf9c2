// `make upgrade` carrying the template's files (scripts/upgrade-carry.mjs)
// into a real copy of an older template: a Stripe-only copy generated at the
// commit of 0.1.0's last landing, as `cargo generate` made it, with an app
// migration and an owner's edit committed, upgraded from this checkout with
// `node <checkout>/scripts/upgrade.mjs <checkout>`. Its files become this
// template's, the owner's edits merged in; a clash is left marked; an
// uncommitted edit stops it before anything changes. `make store` turns
// Postgres on in a D1 copy, and off again. No build:
// `make template-check`'s drill builds and tests an upgraded copy.
// needs: template
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { after, test } from "node:test";

import { readLock } from "../scripts/engine-files.mjs";
import { generateCopy } from "../scripts/upgrade-carry.mjs";

/** The commit of 0.1.0's last landing: the newest template a 0.1.0 copy can come from. */
const OLD = "a99330f";
const hasHistory = spawnSync("git", ["cat-file", "-e", `${OLD}^{commit}`]).status === 0;
const skip = !hasHistory && "no git history of 0.1.0's last landing here";
const ROOT = resolve(".");
const TOOLCHAIN = readFileSync("rust-toolchain.toml", "utf8").match(/^channel = "([^"]+)"$/m)[1];
const VERSION = readFileSync("crates/engine/Cargo.toml", "utf8").match(/^version = "(.*)"$/m)[1];
const ANSWERS = { name: "shopco", providers: ["stripe"], demos: true, dashboard: false, store: "d1", date: "2026-04-26" };
const work = mkdtempSync(join(tmpdir(), "upgrade-carry-"));
after(() => rmSync(work, { recursive: true, force: true }));
let made = 0;

const git = (dir, ...args) => execFileSync("git", ["-C", dir, ...args], { encoding: "utf8" });
const read = (dir, path) => readFileSync(join(dir, path), "utf8");
const upgrade = (dir) => spawnSync(process.execPath, [join(ROOT, "scripts/upgrade.mjs"), ROOT], { cwd: dir, encoding: "utf8", env: { ...process.env, FORCE: "" } });

/** A copy the template at `commit` (this checkout's files: `null`) generates, in git, with an app migration. */
function copyAt(commit) {
  const dir = join(work, `copy-${made++}`);
  mkdirSync(dir);
  generateCopy(ROOT, commit, ANSWERS, TOOLCHAIN, dir);
  writeFileSync(join(dir, "migrations/0003_invoices.sql"), "CREATE TABLE invoices (id TEXT PRIMARY KEY);\n");
  git(dir, "init", "-q");
  git(dir, "-c", "user.name=o", "-c", "user.email=o@example.com", "add", "-A");
  git(dir, "-c", "user.name=o", "-c", "user.email=o@example.com", "commit", "-q", "-m", "generated");
  return dir;
}
const commit = (dir, message) => {
  git(dir, "add", "-A");
  git(dir, "-c", "user.name=o", "-c", "user.email=o@example.com", "commit", "-q", "-m", message);
};
/** What this template generates for the same answers: what each untouched file must become. */
let fresh;
const today = (path) => {
  fresh ??= copyAt(null);
  return read(fresh, path);
};

test("a copy of 0.1.0's last landing: its template files become this template's, the owner's edit merged, the migration kept", { skip }, () => {
  const dir = copyAt(OLD);
  const mod = read(dir, "src/effects/mod.rs").replace("    (\"stripe\", \"customer.subscription.updated\"", "    // Ours: subscriptions follow the customer.\n$&");
  writeFileSync(join(dir, "src/effects/mod.rs"), mod);
  rmSync(join(dir, "docs/recipes.md"));
  commit(dir, "the owner's edits");

  const run = upgrade(dir);
  assert.equal(run.status, 0, run.stderr);
  assert.match(run.stdout, new RegExp(`webhook-engine 0\\.1\\.0 -> ${VERSION.replaceAll(".", "\\.")}`));
  assert.match(run.stdout, /CHANGELOG, after 0\.1\.0:/);
  assert.match(run.stdout, new RegExp(`## \\[${VERSION.replaceAll(".", "\\.")}\\]`), "the entries themselves");
  assert.match(run.stdout, /generated as: shopco, providers stripe, demos true, dashboard false, store d1 \(read from the copy/);
  assert.match(run.stdout, new RegExp(`template files: from commit ${OLD}`), "the commit it came from, found");
  assert.match(run.stdout, /merged with your changes: src\/effects\/mod\.rs/);
  assert.match(run.stdout, /kept as you have it: docs\/recipes\.md \(you removed it; the template changed it\)/);

  for (const path of ["src/lib.rs", "Makefile", "scripts/upgrade.mjs", "tests/operator.test.mjs", "tests/support/worker.mjs", "Cargo.toml"]) {
    assert.equal(read(dir, path), today(path), `${path}, as this template makes it`);
  }
  const merged = read(dir, "src/effects/mod.rs");
  assert.ok(merged.includes("// Ours: subscriptions follow the customer."), "the owner's line");
  assert.ok(merged.includes("pub const PERFORMERS"), "the template's change");
  assert.ok(!existsSync(join(dir, "docs/recipes.md")), "what the owner removed stays removed");
  assert.equal(read(dir, "migrations/0003_invoices.sql"), "CREATE TABLE invoices (id TEXT PRIMARY KEY);\n");
  const lock = readLock(dir);
  assert.equal(lock.engine.version, VERSION);
  assert.deepEqual(lock.copy, { name: "shopco", providers: ["stripe"], demos: true, dashboard: false, store: "d1" });

  // Once more, after committing: nothing left to carry.
  commit(dir, "upgraded");
  const again = upgrade(dir);
  assert.equal(again.status, 0, again.stderr);
  assert.match(again.stdout, /generated as: shopco, providers stripe, demos true, dashboard false, store d1\n/, "from template.lock now");
  assert.match(again.stdout, /\n    none changed\n/);
  assert.equal(git(dir, "status", "--porcelain"), "");

  // A checkout without the commit the copy's files came from is an older one.
  const recorded = readLock(dir);
  writeFileSync(join(dir, "template.lock"), JSON.stringify({ ...recorded, template: { ...recorded.template, commit: "1".repeat(40) } }, null, 2));
  commit(dir, "a template from elsewhere");
  const older = upgrade(dir);
  assert.equal(older.status, 1);
  assert.match(older.stderr, /the checkout does not hold 111111111111, the template commit this copy has \(template\.lock\).*FORCE=1/);
  assert.equal(git(dir, "status", "--porcelain"), "", "nothing changed");
});

test("an owner's edit where the template changed too is left between conflict markers, named; the rest is carried", { skip }, () => {
  const dir = copyAt(OLD);
  const lib = read(dir, "src/lib.rs").replace("/// What the engine runs with: your effects, and your own providers.", "/// Ours: the app, with its effects.");
  assert.notEqual(lib, read(dir, "src/lib.rs"));
  writeFileSync(join(dir, "src/lib.rs"), lib);
  commit(dir, "the owner's edit");
  const run = upgrade(dir);
  assert.equal(run.status, 1);
  assert.match(run.stdout, /CONFLICT: your changes and the template's overlap; left marked: src\/lib\.rs/);
  assert.match(run.stderr, /1 files hold conflict markers .*: src\/lib\.rs\. Resolve them/);
  const marked = read(dir, "src/lib.rs");
  assert.match(marked, /^<<<<<<< yours$/m);
  assert.match(marked, /^>>>>>>> template with webhook-engine /m);
  assert.ok(marked.includes("/// Ours: the app, with its effects."));
  assert.equal(read(dir, "Makefile"), today("Makefile"), "the rest, carried");
  assert.equal(readLock(dir).engine.version, VERSION);
});

test("an uncommitted edit to a file the upgrade changes stops it before anything changes", { skip }, () => {
  const dir = copyAt(OLD);
  writeFileSync(join(dir, "src/lib.rs"), `${read(dir, "src/lib.rs")}// not committed\n`);
  const engine = read(dir, "crates/engine/Cargo.toml");
  const run = upgrade(dir);
  assert.equal(run.status, 1);
  assert.match(run.stderr, /files the upgrade changes hold changes git has not committed \(or git ignores them\); commit, drop or move them first:\n M src\/lib\.rs/);
  assert.equal(read(dir, "crates/engine/Cargo.toml"), engine, "the engine, as it was");
  assert.equal(git(dir, "status", "--porcelain"), " M src/lib.rs\n", "nothing else changed");
});

test("make store: a D1 copy turns Postgres on (its files, feature, binding and migrations), then off again", { skip }, () => {
  const dir = copyAt(null);
  const store = (to) => spawnSync(process.execPath, [join(ROOT, "scripts/upgrade.mjs"), ROOT, "--store", to], { cwd: dir, encoding: "utf8", env: { ...process.env, FORCE: "" } });
  assert.match(store("mysql").stderr, /the one option is --store d1 or --store postgres/);

  const on = store("postgres");
  assert.equal(on.status, 0, on.stderr);
  assert.match(on.stdout, /store d1 -> postgres/);
  assert.match(on.stdout, /added: scripts\/postgres\.sh/);
  assert.match(on.stdout, /your own migrations are D1's: .*: 0003_invoices\.sql\n/);
  const postgres = join(work, `postgres-${made++}`);
  mkdirSync(postgres);
  generateCopy(ROOT, null, { ...ANSWERS, store: "postgres" }, TOOLCHAIN, postgres);
  for (const path of ["Makefile", "Cargo.toml", "wrangler.toml", "scripts/postgres.sh", "scripts/deploy-postgres.mjs", "docs/postgres.md", "tests/support/postgres.mjs"]) {
    assert.equal(read(dir, path), read(postgres, path), `${path}, as a Postgres copy has it`);
  }
  assert.deepEqual(readdirSync(join(dir, "migrations-postgres")), readdirSync(join(postgres, "migrations-postgres")), "migrations-postgres/, as a Postgres copy starts it");
  assert.equal(readLock(dir).copy.store, "postgres");
  commit(dir, "on Postgres");

  const off = store("d1");
  assert.equal(off.status, 0, off.stderr);
  assert.match(off.stdout, /store postgres -> d1/);
  assert.match(off.stdout, /migrations-postgres\/ stays/);
  for (const path of ["Makefile", "Cargo.toml", "wrangler.toml"]) assert.equal(read(dir, path), today(path), `${path}, as a D1 copy has it`);
  assert.ok(!existsSync(join(dir, "scripts/postgres.sh")));
  assert.ok(existsSync(join(dir, "migrations-postgres")), "the Postgres database's history, kept");
  assert.equal(readLock(dir).copy.store, "d1");
});

test("from a checkout that is no git clone, the engine comes alone and the plan says why; make store refuses", { skip }, () => {
  const dir = copyAt(OLD);
  const bare = join(work, `bare-${made++}`);
  mkdirSync(bare);
  execFileSync("sh", ["-c", 'git -C "$1" archive HEAD | tar -x -C "$2"', "archive", ROOT, bare]);
  const run = spawnSync(process.execPath, [join(ROOT, "scripts/upgrade.mjs"), bare], { cwd: dir, encoding: "utf8", env: { ...process.env, FORCE: "" } });
  assert.equal(run.status, 0, run.stderr);
  assert.match(run.stdout, /template files \(src\/, tests\/, scripts\/, docs\/, …\): not carried: .* is not a git checkout of the template/);
  assert.equal(readLock(dir).engine.version, VERSION, "the engine, upgraded");
  assert.equal(git(dir, "status", "--porcelain", "--", "src", "docs", "Makefile"), "", "no template file touched");
  commit(dir, "the engine alone");
  const store = spawnSync(process.execPath, [join(ROOT, "scripts/upgrade.mjs"), bare, "--store", "postgres"], { cwd: dir, encoding: "utf8", env: { ...process.env, FORCE: "" } });
  assert.equal(store.status, 1);
  assert.match(store.stderr, /switching the store makes the copy's files again, and .* is not a git checkout/);
});

test("a symlink where the upgrade writes stops it before anything changes", { skip }, () => {
  const dir = copyAt(OLD);
  const elsewhere = join(work, `elsewhere-${made++}.md`);
  const original = read(dir, "docs/extend.md");
  writeFileSync(elsewhere, original);
  rmSync(join(dir, "docs/extend.md"));
  execFileSync("ln", ["-s", elsewhere, join(dir, "docs/extend.md")]);
  commit(dir, "a shared doc");
  const engine = read(dir, "crates/engine/Cargo.toml");
  const run = upgrade(dir);
  assert.equal(run.status, 1);
  assert.match(run.stderr, /would write through a symlink, or where a folder is .*: docs\/extend\.md/);
  assert.equal(read(dir, "crates/engine/Cargo.toml"), engine);
  assert.equal(readFileSync(elsewhere, "utf8"), original, "the file it points at, untouched");
});

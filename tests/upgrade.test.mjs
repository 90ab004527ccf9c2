// `make upgrade ENGINE=<path>` (scripts/upgrade.mjs) on a copy: the engine's
// code replaced whole, its new migrations appended after the copy's own,
// numbered in sequence, none renamed; a second run changes nothing; a bad
// ENGINE, uncommitted edits to the engine, a copy outside git (without
// FORCE=1) or a migration that differs from the engine's change nothing.
// No build: `make template-check`'s upgrade drill builds and tests an
// upgraded copy.
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { after, test } from "node:test";

import { LOCK, readLock, writeLock } from "../scripts/engine-files.mjs";

const SCRIPT = resolve("scripts/upgrade.mjs");
const work = mkdtempSync(join(tmpdir(), "upgrade-"));
after(() => rmSync(work, { recursive: true, force: true }));
let made = 0;

/** A copy: this checkout's engine and migrations, one of the owner's, and the record of its engine (as generation writes it). */
function copy() {
  const dir = join(work, `copy-${made++}`);
  cpSync("crates/engine", join(dir, "crates/engine"), { recursive: true });
  cpSync("migrations", join(dir, "migrations"), { recursive: true });
  const last = readdirSync(join(dir, "migrations")).sort().at(-1);
  writeFileSync(join(dir, "migrations", `${String(Number(last.slice(0, 4)) + 1).padStart(4, "0")}_invoices.sql`), "CREATE TABLE invoices (id TEXT PRIMARY KEY);\n");
  writeLock(dir, readFileSync("crates/engine/Cargo.toml", "utf8").match(/^version = "(.*)"$/m)[1]);
  return dir;
}

/** A newer engine: one new migration, one changed file, one file gone. */
function newer() {
  const dir = join(work, `engine-${made++}`);
  cpSync("crates/engine", dir, { recursive: true });
  const engine = readdirSync(join(dir, "migrations")).sort();
  const number = String(engine.length + 1).padStart(4, "0");
  writeFileSync(join(dir, "migrations", `${number}_engine_drill.sql`), "CREATE TABLE IF NOT EXISTS engine_drill (x INTEGER);\n");
  writeFileSync(join(dir, "src", "clock.rs"), `${readFileSync(join(dir, "src", "clock.rs"), "utf8")}// newer\n`);
  writeFileSync(join(dir, "GONE.md"), "");
  return dir;
}

// The engine's own files (crates/engine/migrations) are in migrations/ under
// their names, unchanged and in the engine's order: what `make upgrade`
// relies on to append only the files a copy lacks.
test("migrations/ holds every engine migration, unchanged, in the engine's order", () => {
  const ENGINE = "crates/engine/migrations";
  const engine = readdirSync(ENGINE).sort();
  assert.ok(engine.length > 0);
  const named = (file) => file.slice(5);
  const here = readdirSync("migrations").sort().filter((file) => engine.some((e) => named(e) === named(file)));
  assert.deepEqual(here.map(named), engine.map(named));
  for (const [i, file] of here.entries()) assert.equal(readFileSync(`migrations/${file}`, "utf8"), readFileSync(`${ENGINE}/${engine[i]}`, "utf8"), file);
});

/** `make upgrade`, in `cwd`: FORCE=1 unless `env` says otherwise (the copies here are not git work trees). */
const upgrade = (cwd, engine, env = { FORCE: "1" }) => spawnSync("node", [SCRIPT, engine], { cwd, encoding: "utf8", env: { ...process.env, FORCE: "", ...env } });
const git = (dir, ...args) => execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@example.com", ...args], { cwd: dir, stdio: "pipe" });
/** The copy, committed to a new git repository. */
function committed(dir) {
  git(dir, "init", "-q");
  git(dir, "add", ".");
  git(dir, "commit", "-q", "-m", "copy");
  return dir;
}
const list = (dir) => readdirSync(join(dir, "migrations")).sort();
/** Every file under `dir` but git's own, with its content's digest. */
const tree = (dir) =>
  execFileSync("find", [".", "-type", "f", "-not", "-path", "./.git/*"], { cwd: dir, encoding: "utf8" })
    .split("\n")
    .filter(Boolean)
    .sort()
    .map((file) => `${file} ${createHash("sha256").update(readFileSync(join(dir, file))).digest("hex")}`)
    .join("\n");

test("the new engine's code replaces crates/engine whole, its new migration lands after the owner's", () => {
  const dir = copy();
  const engine = newer();
  rmSync(join(engine, "GONE.md"));
  writeFileSync(join(dir, "crates/engine/GONE.md"), "an old engine's file");
  const before = list(dir);
  const run = upgrade(dir, engine);
  assert.equal(run.status, 0, run.stderr);
  assert.equal(tree(join(dir, "crates/engine")), tree(engine));
  assert.match(readFileSync(join(dir, "crates/engine/src/clock.rs"), "utf8"), /\/\/ newer\n$/);
  const now = list(dir);
  const next = String(Number(before.at(-1).slice(0, 4)) + 1).padStart(4, "0");
  assert.deepEqual(now, [...before, `${next}_engine_drill.sql`]);
  assert.equal(readFileSync(join(dir, "migrations", now.at(-1)), "utf8"), readFileSync(join(engine, "migrations", readdirSync(join(engine, "migrations")).sort().at(-1)), "utf8"));
  assert.match(run.stdout, new RegExp(`new migrations: migrations/${next}_engine_drill\\.sql`));

  // Again: nothing new.
  const again = upgrade(dir, engine);
  assert.equal(again.status, 0, again.stderr);
  assert.deepEqual(list(dir), now);
  assert.match(again.stdout, /no new migration/);
});

test("a checkout's root is an engine too (its crates/engine)", () => {
  const dir = copy();
  const checkout = join(work, `checkout-${made++}`);
  mkdirSync(join(checkout, "crates"), { recursive: true });
  cpSync(newer(), join(checkout, "crates/engine"), { recursive: true });
  const run = upgrade(dir, checkout);
  assert.equal(run.status, 0, run.stderr);
  assert.ok(list(dir).at(-1).endsWith("_engine_drill.sql"));
});

test("this checkout's own engine migrations are all there: upgrading to itself adds none", () => {
  const dir = copy();
  const run = upgrade(dir, resolve("crates/engine"));
  assert.equal(run.status, 0, run.stderr);
  assert.match(run.stdout, /no new migration/);
});

test("an ENGINE that is no engine, or no version, changes nothing", () => {
  const dir = copy();
  const before = tree(dir);
  for (const [engine, why] of [
    [join(work), /holds no webhook-engine/],
    ["not-a-version", /neither a directory nor a version/],
    ["", /say which engine/],
    [resolve(dir, "crates/engine"), /this copy's own crates\/engine/],
  ]) {
    const run = upgrade(dir, engine);
    assert.equal(run.status, 1, engine);
    assert.match(run.stderr, why);
    assert.equal(tree(dir), before);
  }
  const nowhere = upgrade(work, newer());
  assert.equal(nowhere.status, 1);
  assert.match(nowhere.stderr, /run it in a copy's root/);
});

test("edits to crates/engine that git has not committed, or files it ignores there, stop it, before anything changes", () => {
  for (const edit of [
    (dir) => writeFileSync(join(dir, "crates/engine/src/clock.rs"), "// mine\n"),
    (dir) => writeFileSync(join(dir, "crates/engine/src/mine.rs"), "// mine\n"),
  ]) {
    const dir = committed(copy());
    edit(dir);
    const before = tree(dir);
    const run = upgrade(dir, newer(), {});
    assert.equal(run.status, 1);
    assert.match(run.stderr, /changes git has not committed/);
    assert.equal(tree(dir), before);
  }
});

test("files git ignores in crates/engine stop it unless FORCE=1: it would delete them", () => {
  const dir = copy();
  writeFileSync(join(dir, ".gitignore"), "*.local\n");
  committed(dir);
  writeFileSync(join(dir, "crates/engine/src/notes.local"), "mine\n");
  const before = tree(dir);
  const run = upgrade(dir, newer(), {});
  assert.equal(run.status, 1);
  assert.match(run.stderr, /files git ignores/);
  assert.equal(tree(dir), before);
  const forced = upgrade(dir, newer(), { FORCE: "1" });
  assert.equal(forced.status, 0, forced.stderr);
  assert.ok(!existsSync(join(dir, "crates/engine/src/notes.local")));
});

test("in a git work tree with the engine committed, it upgrades without FORCE", () => {
  const dir = committed(copy());
  const run = upgrade(dir, newer(), {});
  assert.equal(run.status, 0, run.stderr);
  assert.ok(list(dir).at(-1).endsWith("_engine_drill.sql"));
});

test("outside git, it refuses without FORCE=1: nothing can tell the engine holds no edits", () => {
  const dir = copy();
  const before = tree(dir);
  const run = upgrade(dir, newer(), {});
  assert.equal(run.status, 1);
  assert.match(run.stderr, /not a git work tree/);
  assert.equal(tree(dir), before);
});

test("the copy's own engine through a symlink is refused, and the engine stays", () => {
  const dir = copy();
  const link = join(work, `link-${made++}`);
  symlinkSync(dir, link);
  const before = tree(dir);
  const run = upgrade(dir, link);
  assert.equal(run.status, 1);
  assert.match(run.stderr, /this copy's own crates\/engine/);
  assert.equal(tree(dir), before);
});

test("a migration the copy holds that differs from the engine's, or an engine migration not named NNNN_engine_, changes nothing", () => {
  const dir = copy();
  const engine = newer();
  const schema = readdirSync(join(engine, "migrations")).sort()[0];
  writeFileSync(join(engine, "migrations", schema), `${readFileSync(join(engine, "migrations", schema), "utf8")}-- edited\n`);
  const before = tree(dir);
  const edited = upgrade(dir, engine);
  assert.equal(edited.status, 1);
  assert.match(edited.stderr, /differs from the engine's/);
  assert.equal(tree(dir), before);

  const misnamed = newer();
  writeFileSync(join(misnamed, "migrations", "0099_indexes.sql"), "SELECT 1;\n");
  const run = upgrade(dir, misnamed);
  assert.equal(run.status, 1);
  assert.match(run.stderr, /must be named NNNN_engine_/);
  assert.equal(tree(dir), before);
});

test("the app's worker dependency follows the engine's, in either form, whichever form the engine's manifest has", () => {
  const wanted = readFileSync("crates/engine/Cargo.toml", "utf8").match(/^worker = \{ version = "([^"]+)"/m)[1];
  // As crates.io serves a published engine: cargo rewrites its manifest.
  const published = newer();
  const manifest = readFileSync(join(published, "Cargo.toml"), "utf8").replace(/^worker = \{ version = "([^"]+)", features = (\[[^\]]*\]) \}$/m, "[dependencies.worker]\nversion = \"$1\"\nfeatures = $2\n\n[dependencies]");
  assert.match(manifest, /^\[dependencies\.worker\]$/m);
  writeFileSync(join(published, "Cargo.toml"), manifest);
  for (const [line, engine] of [
    ['worker = "0.0.1"', newer()],
    ['worker = { version = "0.0.1", features = ["d1"] }', newer()],
    ['worker = "0.0.1"', published],
  ]) {
    const dir = copy();
    writeFileSync(join(dir, "Cargo.toml"), `[package]\nname = "acme"\n\n[dependencies]\n${line}\n\n[dev-dependencies]\nhex = "0.4"\n`);
    const run = upgrade(dir, engine);
    assert.equal(run.status, 0, run.stderr);
    const after = readFileSync(join(dir, "Cargo.toml"), "utf8");
    assert.ok(after.includes(line.replace('"0.0.1"', `"${wanted}"`)), `${line}: ${after}`);
    assert.match(run.stdout, new RegExp(`worker 0\\.0\\.1 -> ${wanted.replaceAll(".", "\\.")}`));
  }
});

test("every engine migration is named NNNN_engine_<what>.sql", () => {
  for (const dir of ["crates/engine/migrations", "crates/engine/migrations-postgres"]) {
    for (const file of readdirSync(dir)) assert.match(file, /^\d{4}_engine_[a-z0-9_]+\.sql$/);
  }
});

// needs: postgres, template
test("migrations-postgres/ holds each of the engine's Postgres migrations as the engine ships it, after the template's own", () => {
  const ours = readdirSync("migrations-postgres").sort();
  let last = "";
  for (const file of readdirSync("crates/engine/migrations-postgres").sort()) {
    const mine = ours.find((o) => o.slice(5) === file.slice(5));
    assert.ok(mine, `migrations-postgres/ has no NNNN_${file.slice(5)}`);
    assert.ok(mine > last, `${mine} comes after ${last}`);
    last = mine;
    assert.equal(readFileSync(`migrations-postgres/${mine}`, "utf8"), readFileSync(`crates/engine/migrations-postgres/${file}`, "utf8"), file);
  }
});

// needs: postgres
test("a copy with migrations-postgres/ gets the engine's new Postgres migration after its own; one without gets none", () => {
  const dir = copy();
  const pad = (n) => String(n).padStart(4, "0");
  const engineFiles = readdirSync("crates/engine/migrations-postgres").sort();
  cpSync("crates/engine/migrations-postgres", join(dir, "migrations-postgres"), { recursive: true });
  const own = `${pad(engineFiles.length + 1)}_invoices.sql`;
  writeFileSync(join(dir, "migrations-postgres", own), "CREATE TABLE invoices (id TEXT PRIMARY KEY);\n");
  const engine = newer();
  writeFileSync(join(engine, "migrations-postgres", `${pad(engineFiles.length + 1)}_engine_drill.sql`), "CREATE TABLE IF NOT EXISTS engine_drill (x BIGINT);\n");
  const run = upgrade(dir, engine);
  assert.equal(run.status, 0, run.stderr);
  const added = `${pad(engineFiles.length + 2)}_engine_drill.sql`;
  assert.deepEqual(readdirSync(join(dir, "migrations-postgres")).sort(), [...engineFiles, own, added]);
  assert.match(run.stdout, new RegExp(`migrations-postgres/${added}`));
  // A D1 copy: no folder made for it.
  const d1 = copy();
  assert.equal(upgrade(d1, engine).status, 0);
  assert.ok(!existsSync(join(d1, "migrations-postgres")));
});

/** `engine` at `version`, with a CHANGELOG holding these entries (newest first). */
function versioned(engine, version, entries = []) {
  const toml = join(engine, "Cargo.toml");
  writeFileSync(toml, readFileSync(toml, "utf8").replace(/^version = ".*"$/m, `version = "${version}"`));
  writeFileSync(join(engine, "CHANGELOG.md"), `# Changelog\n\n${entries.map((v) => `## [${v}] - 2027-01-01\n\n### What an owner must do\n\n- the step of ${v}\n`).join("\n")}`);
  return engine;
}
const versionOf = (dir) => readFileSync(join(dir, "crates/engine/Cargo.toml"), "utf8").match(/^version = "(.*)"$/m)[1];

test("the plan comes first: the versions, the CHANGELOG entries between them, the files and migrations", () => {
  const dir = copy();
  const ours = versionOf(dir);
  const [major, minor] = ours.split(".").map(Number);
  const next = `${major}.${minor + 1}.0`;
  const engine = versioned(newer(), `${major}.${minor + 2}.0`, [`${major}.${minor + 2}.0`, next, ours]);
  const run = upgrade(dir, engine);
  assert.equal(run.status, 0, run.stderr);
  const plan = run.stdout.slice(0, run.stdout.indexOf("make upgrade: webhook-engine"));
  assert.match(plan, new RegExp(`^make upgrade: the plan\\n  webhook-engine ${ours} -> ${major}\\.${minor + 2}\\.0, from `));
  // Replaced: the clock, the manifest, the changelog; added: a file, a migration.
  assert.match(plan, /crates\/engine: 3 files replaced, 2 added, 0 removed/);
  assert.match(plan, /added: GONE\.md/);
  assert.match(plan, /migrations appended: migrations\/\d{4}_engine_drill\.sql/);
  // Both newer entries, whole, and not the copy's own version's.
  assert.match(plan, new RegExp(`the step of ${major}\\.${minor + 2}\\.0[^]*the step of ${next}`));
  assert.doesNotMatch(plan, new RegExp(`the step of ${ours.replaceAll(".", "\\.")}\\b`));
});

test("a downgrade is refused, changing nothing; FORCE=1 takes it", () => {
  const dir = copy();
  const before = tree(dir);
  const engine = versioned(newer(), "0.0.1");
  const run = upgrade(dir, engine, { FORCE: "" });
  assert.equal(run.status, 1);
  assert.match(run.stderr, new RegExp(`webhook-engine ${versionOf(dir).replaceAll(".", "\\.")} -> 0\\.0\\.1 is a downgrade.*FORCE=1`));
  assert.equal(tree(dir), before);
  const forced = upgrade(dir, engine);
  assert.equal(forced.status, 0, forced.stderr);
  assert.match(forced.stdout, /-> 0\.0\.1 \(a downgrade\)/);
  assert.equal(versionOf(dir), "0.0.1");
});

test("two migrations of the copy's that share a number are refused, changing nothing", () => {
  const dir = copy();
  const last = list(dir).at(-1);
  writeFileSync(join(dir, "migrations", `${last.slice(0, 4)}_receipts.sql`), "CREATE TABLE receipts (id TEXT PRIMARY KEY);\n");
  committed(dir);
  const before = tree(dir);
  const run = upgrade(dir, newer(), { FORCE: "" });
  assert.equal(run.status, 1);
  assert.match(run.stderr, new RegExp(`migrations/ has migrations that share a number.*${last.slice(0, 4)}_invoices\\.sql and ${last.slice(0, 4)}_receipts\\.sql`));
  assert.equal(tree(dir), before);
});

test("given a checkout with a newer engine, its own program runs it; an equal or older one's never does", () => {
  const dir = copy();
  const checkout = join(work, `checkout-${made++}`);
  mkdirSync(join(checkout, "crates"), { recursive: true });
  cpSync(newer(), join(checkout, "crates/engine"), { recursive: true });
  mkdirSync(join(checkout, "scripts"));
  writeFileSync(join(checkout, "scripts/upgrade.mjs"), 'console.log(`the newer program, for ${process.argv[2]}`);\n');
  const [major, minor] = versionOf(dir).split(".").map(Number);
  for (const [version, runs] of [[`${major}.${minor + 1}.0`, true], [versionOf(dir), false], ["0.0.1", false]]) {
    versioned(join(checkout, "crates/engine"), version);
    const run = upgrade(dir, checkout, { FORCE: "" });
    assert.equal(/the newer program, for /.test(run.stdout), runs, `${version}: ${run.stdout}${run.stderr}`);
  }
  assert.ok(!list(dir).at(-1).endsWith("_engine_drill.sql"), "no run changed the copy: the newer program did nothing, the others refused (not in git)");
});

test("an engine edit git holds is refused: the lock says what the copy was given; FORCE=1 replaces it, and the lock records the new engine", () => {
  const dir = copy();
  writeLock(dir, versionOf(dir), { name: "drill" });
  writeFileSync(join(dir, "crates/engine/src/clock.rs"), `${readFileSync(join(dir, "crates/engine/src/clock.rs"), "utf8")}// a fix of the owner's\n`);
  committed(dir);
  const before = tree(dir);
  const engine = newer();
  const run = upgrade(dir, engine, { FORCE: "" });
  assert.equal(run.status, 1);
  assert.match(run.stderr, /crates\/engine differs from the webhook-engine [\d.]+ this copy was given \(template\.lock\), even if git holds the change: src\/clock\.rs\. .*FORCE=1/);
  assert.equal(tree(dir), before);
  const forced = upgrade(dir, engine);
  assert.equal(forced.status, 0, forced.stderr);
  const lock = readLock(dir);
  assert.deepEqual(lock.copy, { name: "drill" }, "what it was generated as, kept");
  assert.equal(lock.engine.files["src/clock.rs"], createHash("sha256").update(readFileSync(join(engine, "src/clock.rs"))).digest("hex"));
  assert.ok(lock.engine.files["GONE.md"] !== undefined, "every file of the new engine");
  // Recorded, so the next upgrade takes it without FORCE.
  git(dir, "add", ".");
  git(dir, "commit", "-q", "-m", "upgraded");
  assert.equal(upgrade(dir, newer(), { FORCE: "" }).status, 0);
});

// A copy made before template.lock existed: known by the releases.json the
// incoming engine carries. Its engine comes from the first release's commit.
const FIRST_RELEASE = "f510abb";
const hasHistory = spawnSync("git", ["cat-file", "-e", `${FIRST_RELEASE}^{commit}`]).status === 0;
test("a copy without a lock: the engine of a past release upgrades; an edited one is refused", { skip: !hasHistory && "no git history of the first release here" }, () => {
  const legacy = (edit) => {
    const dir = join(work, `legacy-${made++}`);
    mkdirSync(dir);
    execFileSync("sh", ["-c", `git archive ${FIRST_RELEASE} crates/engine migrations | tar -x -C "${dir}"`]);
    if (edit) writeFileSync(join(dir, "crates/engine/src/clock.rs"), "// edited\n");
    return committed(dir);
  };
  const clean = legacy(false);
  const run = upgrade(clean, resolve("."), { FORCE: "" });
  assert.equal(run.status, 0, run.stderr);
  assert.match(run.stdout, /webhook-engine 0\.1\.0 -> /);
  assert.ok(existsSync(join(clean, LOCK)), "the lock, written");
  const edited = legacy(true);
  const refused = upgrade(edited, resolve("."), { FORCE: "" });
  assert.equal(refused.status, 1);
  assert.match(refused.stderr, /crates\/engine is no webhook-engine 0\.1\.0 the template shipped \(this copy has no template\.lock\): src\/clock\.rs\./);
});

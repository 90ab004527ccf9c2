// `make upgrade ENGINE=<path or version>`: brings a newer engine into this
// copy, and from a checkout of the template its files too, merged with the
// owner's changes (scripts/upgrade-carry.mjs). The newest program does it: given
// a checkout whose engine is newer, this runs that checkout's
// scripts/upgrade.mjs instead of itself. First it prints its plan
// (scripts/upgrade-plan.mjs): the versions, the CHANGELOG entries between
// them (what the owner must do), the files and the migrations.
//
// 1. Its code: crates/engine is replaced whole by ENGINE, a directory (an
//    engine, or a checkout that holds one in crates/engine), or a version
//    of the published `webhook-engine` crate, fetched by cargo. The app's
//    `worker` dependency follows the engine's version of it.
// 2. Its migrations: each file of the engine's migrations/ (all named
//    `NNNN_engine_…`) that this copy's migrations/ lacks, by name after the
//    number, is appended after the last one, numbered in sequence; the same
//    for migrations-postgres/ in a copy that has one. No file is renamed or
//    edited, so a database that applied them keeps its history.
// 3. The template's files (src/, tests/, scripts/, docs/, Makefile, …),
//    when ENGINE is a checkout of the template: each made as the copy's
//    template made it and as the checkout makes it, and merged with the
//    copy's own (git merge-file). An overlap is left marked, named, and the
//    upgrade exits 1; a file it changes must hold no uncommitted change.
//
// Everything is checked before anything changes. It refuses if
// crates/engine holds changes git has not committed (the engine is not
// yours to edit: they would be lost), or if this is not a git work tree
// (nothing can tell; FORCE=1 replaces it anyway), or if a migration the
// copy holds differs from the engine's file of that name. Without FORCE=1
// it also refuses a downgrade, two migrations of one folder that share a
// number, and an engine that is not the one template.lock records, even
// committed (scripts/engine-files.mjs). The new code is copied beside the
// old one first, then swapped in; template.lock and Cargo.lock follow.
// Then `make test` proves the copy, and `make deploy` applies the
// migrations.
import { execFileSync, spawnSync } from "node:child_process";
import { chmodSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, realpathSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, sep } from "node:path";
import { fileURLToPath } from "node:url";

import { engineFiles, engineGitDigest, readLock, RELEASES, standing, writeLock } from "./engine-files.mjs";
import { HOOK, prepareCarry } from "./upgrade-carry.mjs";
import { compare, entriesBetween, fileChanges, numberClashes, planText, retiredUses, semver } from "./upgrade-plan.mjs";

const HERE = "crates/engine";
const NAME = "webhook-engine";
const ENGINE_MIGRATION = /^\d{4}_engine_[a-z0-9_]+\.sql$/;

const fail = (why) => {
  console.error(`make upgrade: ${why}`);
  process.exit(1);
};
const read = (path) => (existsSync(path) ? readFileSync(path, "utf8") : "");
const manifest = (dir) => read(join(dir, "Cargo.toml"));
const field = (toml, key) => toml.match(new RegExp(`^${key} = "([^"]*)"`, "m"))?.[1];
const isEngine = (dir) => field(manifest(dir), "name") === NAME;
/** The line of a manifest that asks for `worker` (`worker = "x"` or `worker = { version = "x", … }`). */
const WORKER_LINE = /^worker = (?:"([^"]+)"|\{[^}\n]*\bversion = "([^"]+)"[^}\n]*\})$/m;
/** The `worker` version a manifest asks for: in either form, or as cargo writes a published one (`[dependencies.worker]`). */
const workerVersion = (toml) =>
  toml.match(WORKER_LINE)?.slice(1).find(Boolean) ?? toml.match(/^\[dependencies\.worker\]\n(?:[^[\n][^\n]*\n|\n)*?version = "([^"]+)"/m)?.[1];

/** The directory that holds the engine ENGINE names. */
function source(engine) {
  let found;
  if (existsSync(engine)) {
    const dir = isEngine(engine) ? engine : join(engine, HERE);
    if (!isEngine(dir)) fail(`${engine} holds no ${NAME} (neither its Cargo.toml nor ${HERE}/Cargo.toml names it)`);
    return realpathSync(dir);
  }
  if (!/^\d+\.\d+\.\d+([-+][0-9A-Za-z.-]+)?$/.test(engine)) fail(`ENGINE=${engine} is neither a directory nor a version (x.y.z)`);
  // A throwaway package that depends on exactly that version: cargo fetches
  // it from the registry and says where its sources are.
  const scratch = mkdtempSync(join(tmpdir(), "engine-"));
  try {
    mkdirSync(join(scratch, "src"));
    writeFileSync(join(scratch, "src", "lib.rs"), "");
    writeFileSync(
      join(scratch, "Cargo.toml"),
      `[package]\nname = "fetch-engine"\nversion = "0.0.0"\nedition = "2021"\n\n[dependencies]\n${NAME} = { version = "=${engine}", default-features = false }\n`,
    );
    const metadata = JSON.parse(execFileSync("cargo", ["metadata", "--format-version", "1", "--manifest-path", join(scratch, "Cargo.toml")], { encoding: "utf8" }));
    found = metadata.packages.find((p) => p.name === NAME && p.version === engine);
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
  if (!found) fail(`cargo found no ${NAME} ${engine}`);
  return realpathSync(dirname(found.manifest_path));
}

/** What git says of crates/engine: `null` outside a git work tree. */
function gitStatus() {
  try {
    execFileSync("git", ["rev-parse", "--is-inside-work-tree"], { stdio: "ignore" });
  } catch {
    return null;
  }
  const lines = execFileSync("git", ["status", "--porcelain", "--ignored", "--", HERE], { encoding: "utf8" }).split("\n").filter(Boolean);
  return { changed: lines.filter((l) => !l.startsWith("!! ")), ignored: lines.filter((l) => l.startsWith("!! ")) };
}

/** The engine's files under `dir` (scripts/engine-files.mjs); a symlink stops the upgrade. */
function files(dir) {
  try {
    return engineFiles(dir);
  } catch (e) {
    fail(e.message);
  }
}
const same = (a, b) => a.size === b.size && [...a].every(([path, bytes]) => b.get(path)?.equals(bytes));

/** The carry's plan from a template checkout (scripts/upgrade-carry.mjs), each file it changes checked first. */
function carryFrom(root) {
  let carry;
  try {
    const say = (line) => console.log(`make upgrade: ${line}`);
    carry = prepareCarry(root, { engine: current, lock: readLock(), label: `template with ${NAME} ${after}`, say, store, force });
  } catch (e) {
    fail(`making the copy's template files from ${root} failed, nothing changed: ${e.message}`);
  }
  if (carry.older && !force) fail(`${carry.why}. Carrying from it would take the template back; update the checkout (git pull), or FORCE=1 to carry anyway (the base then found anew)`);
  if (carry.forcedOlder) forced(`carrying from a checkout that does not hold, or descend from, the template commit template.lock records`);
  if (carry.why) {
    if (store) fail(`switching the store makes the copy's files again, and ${carry.why}`);
    return carry;
  }
  const touched = carry.plan.filter((c) => c.action !== "kept").map((c) => c.path);
  // Each path must be a file (or nothing) under real folders: never through a symlink, never onto a folder.
  const odd = touched.filter((path) => {
    const parts = path.split("/");
    return parts.some((_, i) => {
      const at = parts.slice(0, i + 1).join("/");
      if (!lstatExists(at)) return false;
      const stat = lstatSync(at);
      return stat.isSymbolicLink() || (i < parts.length - 1 ? !stat.isDirectory() : !stat.isFile());
    });
  });
  if (odd.length) fail(`the upgrade would write through a symlink, or where a folder is (or a file where it needs a folder): ${odd.join(", ")}. Make each a plain file, or move it, first`);
  const inGit = touched.length > 0 && gitStatus() !== null;
  if (touched.length && !inGit) {
    if (!force) fail("not a git work tree: nothing can tell your changes from the template's, or undo a merge. Commit the copy to git, or FORCE=1 to carry anyway");
    forced("not a git work tree: the template's files are merged into yours with nothing to undo them");
  }
  const status = inGit
    ? execFileSync("git", ["--literal-pathspecs", "status", "--porcelain", "--ignored", "--untracked-files=all", "--", ...touched], { encoding: "utf8" }).trimEnd()
    : "";
  if (status) fail(`files the upgrade changes hold changes git has not committed (or git ignores them); commit, drop or move them first:\n${status}`);
  return carry;
}
const lstatExists = (path) => {
  try {
    lstatSync(path);
    return true;
  } catch {
    return false;
  }
};

/**
 * After `make store`: a copy now on Postgres starts migrations-postgres/ as
 * a generated one does, unless it kept one; the owner's own D1 migrations
 * are theirs to write again. A copy back on D1 keeps migrations-postgres/.
 */
function switched({ was, answers, postgres, given }) {
  console.log(`make upgrade: the store: ${was} -> ${answers.store}`);
  if (answers.store === "d1") {
    if (existsSync("migrations-postgres")) console.log("make upgrade: migrations-postgres/ stays, your Postgres database's history; remove it once you no longer need it");
    return;
  }
  if (!lstatExists("migrations-postgres")) {
    try {
      mkdirSync("migrations-postgres");
      for (const [file, bytes] of postgres) writeFileSync(join("migrations-postgres", file), bytes);
    } catch (e) {
      fail(`starting migrations-postgres/ failed (${e.message}): remove it, then run make store again`);
    }
    console.log(`make upgrade: migrations-postgres/: ${[...postgres.keys()].sort().join(", ")}`);
  } else if (!existsSync(join("migrations-postgres", "0001_engine_schema.sql"))) {
    console.log("make upgrade: migrations-postgres/ was there already, and is kept as it is: it must hold the engine's Postgres migrations (a Postgres copy's start with 0001_engine_schema.sql)");
  }
  const gave = new Set([...given].map((file) => file.slice(5)));
  const own = readdirSync("migrations").filter((file) => /^\d{4}_.*\.sql$/.test(file) && !ENGINE_MIGRATION.test(file) && !gave.has(file.slice(5)));
  if (own.length) {
    console.log(`make upgrade: your own migrations are D1's: write each again for Postgres in migrations-postgres/, numbered after its last file, and read their tables in Postgres in your tests (recipe (a) in docs/recipes.md shows both): ${own.join(", ")}`);
  }
}

const [engine, option, store] = process.argv.slice(2);
if (!engine) fail("say which engine: make upgrade ENGINE=<path or version>");
// `--store d1|postgres` (make store): the copy's files as if generated with that store.
if (option !== undefined && (option !== "--store" || !/^(d1|postgres)$/.test(store ?? ""))) fail("the one option is --store d1 or --store postgres (make store STORE=…)");
if (!existsSync("migrations") || !isEngine(HERE)) fail(`run it in a copy's root (its ${HERE}/ and migrations/)`);
if (lstatSync(HERE).isSymbolicLink() || existsSync(join(HERE, ".git"))) {
  fail(`${HERE} is a symlink or a git checkout of its own: upgrade it where it lives`);
}
const here = realpathSync(HERE);
const from = source(engine);
const within = (a, b) => a === b || a.startsWith(b + sep);
if (within(from, here) || within(here, from)) fail(`ENGINE is, or holds, this copy's own ${HERE}`);
if (!existsSync(join(from, "src", "lib.rs"))) fail(`${from} has no src/lib.rs`);
const force = process.env.FORCE === "1";
const before = field(manifest(HERE), "version");
const after = field(manifest(from), "version");
if (!semver(before) || !semver(after)) fail(`an engine's version is not x.y.z: ${before} here, ${after} in ENGINE`);

// The newest program does every upgrade: that of a checkout (ENGINE names
// its root) whose engine is newer than this copy's. Never an older or an
// equal one's: an equal version may be an older clone of it.
const theirProgram = join(engine, "scripts", "upgrade.mjs");
const ours = realpathSync(fileURLToPath(import.meta.url));
const checkout = existsSync(theirProgram) && existsSync(join(engine, HERE)) && realpathSync(join(engine, HERE)) === from;
if (!process.env.UPGRADE_DELEGATED && checkout && compare(after, before) > 0 && realpathSync(theirProgram) !== ours) {
  console.log(`make upgrade: running ${realpathSync(theirProgram)}, the incoming checkout's program`);
  const run = spawnSync(process.execPath, [realpathSync(theirProgram), ...process.argv.slice(2)], { stdio: "inherit", env: { ...process.env, UPGRADE_DELEGATED: "1" } });
  if (run.error) fail(`the incoming checkout's program did not start: ${run.error.message}`);
  process.exit(run.status ?? 1);
}
/** What FORCE=1 overrode, said as it is taken. */
const forced = (what) => console.error(`make upgrade: FORCE=1: ${what}`);
if (compare(after, before) < 0) {
  if (!force) fail(`${NAME} ${before} -> ${after} is a downgrade: an older engine may not read what this one wrote. FORCE=1 to take it anyway`);
  forced(`taking a downgrade, ${before} -> ${after}`);
}

// What will change, all checked first.
const incoming = files(from);
const current = files(here);
const replace = !same(current, incoming);
if (replace) {
  const status = gitStatus();
  if (status === null && !force) {
    fail(`not a git work tree: nothing can tell whether ${HERE} holds edits of yours. Commit the copy to git, or FORCE=1 to replace it anyway`);
  }
  if (status?.changed.length) fail(`${HERE} has changes git has not committed; commit or drop them first:\n${status.changed.join("\n")}`);
  if (status === null) forced(`not a git work tree: ${HERE} is replaced, edits or not`);
  if (status?.ignored.length && !force) fail(`${HERE} holds files git ignores, which it would delete; move them, or FORCE=1:\n${status.ignored.join("\n")}`);
  if (status?.ignored.length) forced(`deleting files git ignores in ${HERE}: ${status.ignored.join(", ")}`);
  // Committed or not, an edit to the engine is lost by the upgrade: the
  // engine must be the one the copy was given (template.lock), or, in a
  // copy older than that record, one the template shipped (releases.json).
  const releases = incoming.has(RELEASES) ? JSON.parse(incoming.get(RELEASES).toString()) : null;
  const given = standing(current, before, readLock(), releases);
  if (!given.known && !force) {
    const which = given.edited.length ? `: ${given.edited.join(", ")}` : "";
    if (readLock()) fail(`${HERE} differs from the ${NAME} ${before} this copy was given (template.lock), even if git holds the change${which}. The upgrade would lose it: move it into src/ (docs/extend.md), or FORCE=1 to replace it anyway`);
    if (given.unknownVersion) fail(`this copy has no template.lock, and the incoming engine knows no ${NAME} ${before}: nothing can tell whether ${HERE} holds edits of yours. FORCE=1 to replace it anyway`);
    fail(`${HERE} is no ${NAME} ${before} the template shipped (this copy has no template.lock)${which}. The upgrade would lose the change: move it into src/ (docs/extend.md), or FORCE=1 to replace it anyway`);
  }
  if (!given.known) forced(`replacing ${HERE}, which is not the engine this copy was given${given.edited.length ? `: ${given.edited.join(", ")}` : ""}`);
}
const named = (file) => file.slice(5);
// D1's (migrations/), and Postgres's (migrations-postgres/) in a copy
// whose effects commit there: the engine keeps each in a folder of that name.
const added = [];
for (const dir of ["migrations", "migrations-postgres"].filter((dir) => existsSync(dir))) {
  const theirs = [...incoming.keys()].filter((path) => path.startsWith(`${dir}${sep}`) && path.endsWith(".sql")).map((path) => path.slice(dir.length + 1)).sort();
  const odd = theirs.filter((file) => !ENGINE_MIGRATION.test(file));
  if (odd.length) fail(`the engine's ${dir} must be named NNNN_engine_<what>.sql: ${odd.join(", ")}`);
  const ours = readdirSync(dir).filter((file) => /^\d{4}_.*\.sql$/.test(file)).sort();
  const clashes = numberClashes(ours);
  const clash = clashes.map((c) => c.join(" and ")).join("; ");
  if (clashes.length && !force) {
    fail(`${dir}/ has migrations that share a number, so which runs first is up to their names: ${clash}. Renumber yours if no database has applied them; if one has, FORCE=1 (each such upgrade says so)`);
  }
  if (clashes.length) forced(`${dir}/ has migrations that share a number: ${clash}`);
  let last = ours.length ? Number(ours.at(-1).slice(0, 4)) : 0;
  for (const file of theirs) {
    const mine = ours.find((o) => named(o) === named(file));
    const text = incoming.get(join(dir, file));
    if (mine && !readFileSync(join(dir, mine)).equals(text)) {
      fail(`${dir}/${mine} differs from the engine's ${file}: an applied migration is never edited. Keep yours and ask why the engine's changed`);
    }
    if (!mine) {
      last += 1;
      added.push([join(dir, `${String(last).padStart(4, "0")}_${named(file)}`), text]);
    }
  }
}
// 3. The template's files (scripts/upgrade-carry.mjs), from a checkout of
// the template: each merged with the owner's changes since generation.
// A copy cargo generate made has these; a bare engine with migrations has nothing else to carry.
const generated = ["Cargo.toml", "wrangler.toml", join("src", "lib.rs")].every((path) => existsSync(path));
const carry = generated && checkout && existsSync(join(engine, HOOK, "choose.mjs")) ? carryFrom(realpathSync(engine)) : null;
if (store && !carry) fail(`switching the store makes the copy's files again: ENGINE must be a checkout of the template (its ${HOOK}/), and this a copy cargo generate made`);
const carried = carry?.plan ?? [];
const onDisk = read("Cargo.toml");
const appManifest = carried.find((c) => c.path === "Cargo.toml" && c.bytes)?.bytes.toString() ?? onDisk;
const ourWorker = appManifest.match(WORKER_LINE)?.slice(1).find(Boolean);
const theirWorker = workerVersion(incoming.get("Cargo.toml").toString());
// The app's `worker` line, its version the engine's: the same line, only the version changed.
const bumped = ourWorker && theirWorker && ourWorker !== theirWorker
  ? appManifest.replace(WORKER_LINE, (line) => line.replace(`"${ourWorker}"`, `"${theirWorker}"`))
  : appManifest;

const changelog = read(join(from, "CHANGELOG.md"));
console.log(
  planText({
    name: NAME,
    before,
    after,
    from,
    changes: fileChanges(current, incoming),
    migrations: added.map(([path]) => path),
    worker: bumped !== appManifest ? { from: ourWorker, to: theirWorker } : null,
    entries: entriesBetween(changelog, before, after),
    carry,
  }),
);

// 0. The template's files and Cargo.toml, each written beside its place
// first (`<file>.upgrade-<pid>`), so that a failed write changes nothing;
// they are renamed in after the engine.
const STAGED = `.upgrade-${process.pid}`;
const writes = [
  ...carried.filter((c) => !["kept", "remove"].includes(c.action) && c.path !== "Cargo.toml"),
  ...(bumped !== onDisk ? [{ path: "Cargo.toml", bytes: Buffer.from(bumped), exec: false }] : []),
];
try {
  for (const { path, bytes, exec } of writes) {
    mkdirSync(dirname(path) || ".", { recursive: true });
    writeFileSync(path + STAGED, bytes, { mode: exec ? 0o755 : 0o644 });
    chmodSync(path + STAGED, exec ? 0o755 : 0o644);
  }
} catch (e) {
  for (const { path } of writes) rmSync(path + STAGED, { force: true });
  fail(`writing the template's files failed, nothing changed: ${e.message}`);
}

// 1. The code, whole (what the new engine no longer has goes too): copied
// beside the old one, then swapped in, so a failed copy leaves it as it was.
if (replace) {
  const next = join(dirname(HERE), ".engine-next");
  const old = join(dirname(HERE), ".engine-old");
  rmSync(next, { recursive: true, force: true });
  rmSync(old, { recursive: true, force: true });
  try {
    for (const [path, bytes] of incoming) {
      mkdirSync(dirname(join(next, path)), { recursive: true });
      writeFileSync(join(next, path), bytes);
    }
  } catch (e) {
    rmSync(next, { recursive: true, force: true });
    for (const { path } of writes) rmSync(path + STAGED, { force: true });
    fail(`copying the new engine failed, nothing changed: ${e.message}`);
  }
  renameSync(HERE, old);
  try {
    renameSync(next, HERE);
  } catch (e) {
    renameSync(old, HERE);
    rmSync(next, { recursive: true, force: true });
    for (const { path } of writes) rmSync(path + STAGED, { force: true });
    fail(`swapping the new engine in failed, nothing changed: ${e.message}`);
  }
}

// 2. The engine's migrations this copy lacks, after its last one; the
// app's worker version.
for (const [path, text] of added) writeFileSync(path, text);
// 3. The template's files and Cargo.toml, renamed in; what the template
// removed, removed.
for (const { path } of writes) renameSync(path + STAGED, path);
for (const { path, action } of carried) if (action === "remove") rmSync(path, { force: true });
if (carry?.plan && carry.was !== carry.answers.store) switched(carry);
// The record of the engine this copy now has: what the next upgrade
// checks. With the template's files carried: what the copy was generated
// as, and the template they now are (the next upgrade's base): its
// engine, and its commit when the checkout's files were that commit's.
// Without: the engine its template files came with, if not yet recorded.
const generatedAs = carry?.plan && (({ name, providers, demos, dashboard, store }) => ({ name, providers, demos, dashboard, store }))(carry.answers);
const template = readLock()?.template;
if (carry?.plan) writeLock(".", after, generatedAs, { engine: engineGitDigest(incoming), ...(carry.head ? { commit: carry.head } : {}) });
else writeLock(".", after, undefined, template?.engine ? template : { ...template, engine: engineGitDigest(current) });
if (bumped !== appManifest) console.log(`make upgrade: worker ${ourWorker} -> ${theirWorker} in Cargo.toml, as the engine uses`);
if (replace) {
  const old = join(dirname(HERE), ".engine-old");
  try {
    rmSync(old, { recursive: true, force: true });
  } catch (e) {
    console.error(`make upgrade: the old engine is left in ${old} (${e.message}); delete it`);
  }
}

// Cargo.lock follows the new engine (its version, its dependencies), as a
// build would leave it, so that a --locked build still runs.
if (existsSync("Cargo.lock") && existsSync("Cargo.toml")) {
  console.log("make upgrade: updating Cargo.lock (cargo metadata)");
  const locked = spawnSync("cargo", ["metadata", "--format-version", "1"], { encoding: "utf8", stdio: ["ignore", "ignore", "inherit"], timeout: 300_000 });
  if (locked.error || locked.status !== 0) console.error(`make upgrade: Cargo.lock not updated (${locked.error?.message ?? `cargo exited ${locked.status}`}); run cargo update -p ${NAME}`);
}

console.log(replace ? `make upgrade: ${NAME} ${before} -> ${after} (from ${from})` : `make upgrade: ${HERE} is already that engine (${after})`);
console.log(added.length ? `make upgrade: new migrations: ${added.map(([path]) => path).join(", ")}` : "make upgrade: no new migration");
const rust = existsSync("src") ? readdirSync("src", { recursive: true }).filter((file) => file.endsWith(".rs")) : [];
const uses = retiredUses(new Map(rust.map((file) => [`src/${file}`, readFileSync(join("src", file), "utf8")])), before, after);
for (const { path, line, say } of uses) console.log(`make upgrade: check ${path}:${line}: ${say}`);
const conflicts = carried.filter((c) => c.action === "conflict").map((c) => c.path);
if (conflicts.length) {
  console.error(`make upgrade: ${conflicts.length} files hold conflict markers (<<<<<<< yours … >>>>>>> template): ${conflicts.join(", ")}. Resolve them, then \`make test\``);
  process.exit(1);
}
console.log("make upgrade: next, `make test`; `make deploy` applies the new migrations (`make dev` applies them locally)");

// `make upgrade ENGINE=<path or version>`: brings a newer engine into this
// copy, without touching src/ (your app).
//
// 1. Its code: crates/engine is replaced whole by ENGINE, a directory (an
//    engine, or a checkout that holds one in crates/engine), or a version
//    of the published `webhook-engine` crate, fetched by cargo.
// 2. Its migrations: each file of the engine's migrations/ that this copy's
//    migrations/ lacks (by name, after the number) is appended after the
//    last one, numbered in sequence. No file is renamed or edited, so a
//    database that applied them keeps its history.
//
// Refuses, changing nothing, if crates/engine holds changes git has not
// committed (the engine is not yours to edit: they would be lost). Then
// `make test` proves the copy, and `make deploy` applies the migrations.
import { execFileSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";

const HERE = "crates/engine";
const NAME = "webhook-engine";

const fail = (why) => {
  console.error(`make upgrade: ${why}`);
  process.exit(1);
};
const manifest = (dir) => (existsSync(join(dir, "Cargo.toml")) ? readFileSync(join(dir, "Cargo.toml"), "utf8") : "");
const field = (toml, key) => toml.match(new RegExp(`^${key} = "([^"]*)"`, "m"))?.[1];
const isEngine = (dir) => field(manifest(dir), "name") === NAME;

/** The directory that holds the engine ENGINE names. */
function source(engine) {
  if (existsSync(engine)) {
    const dir = isEngine(engine) ? engine : join(engine, HERE);
    if (!isEngine(dir)) fail(`${engine} holds no ${NAME} (neither its Cargo.toml nor ${HERE}/Cargo.toml names it)`);
    return resolve(dir);
  }
  if (!/^\d+\.\d+\.\d+([-+][0-9A-Za-z.-]+)?$/.test(engine)) fail(`ENGINE=${engine} is neither a directory nor a version (x.y.z)`);
  // A throwaway package that depends on exactly that version: cargo fetches
  // it from the registry and says where its sources are.
  const scratch = mkdtempSync(join(tmpdir(), "engine-"));
  mkdirSync(join(scratch, "src"));
  writeFileSync(join(scratch, "src", "lib.rs"), "");
  writeFileSync(
    join(scratch, "Cargo.toml"),
    `[package]\nname = "fetch-engine"\nversion = "0.0.0"\nedition = "2021"\n\n[dependencies]\n${NAME} = { version = "=${engine}", default-features = false }\n`,
  );
  const metadata = JSON.parse(execFileSync("cargo", ["metadata", "--format-version", "1", "--manifest-path", join(scratch, "Cargo.toml")], { encoding: "utf8" }));
  rmSync(scratch, { recursive: true, force: true });
  const found = metadata.packages.find((p) => p.name === NAME && p.version === engine);
  if (!found) fail(`cargo found no ${NAME} ${engine}`);
  return dirname(found.manifest_path);
}

/** Changes to crates/engine that git holds uncommitted, if this is a git work tree. */
function uncommitted() {
  try {
    return execFileSync("git", ["status", "--porcelain", "--", HERE], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim();
  } catch {
    return "";
  }
}

const engine = process.argv[2];
if (!engine) fail("say which engine: make upgrade ENGINE=<path or version>");
if (!existsSync("migrations") || !isEngine(HERE)) fail(`run it in a copy's root (its ${HERE}/ and migrations/)`);
const from = source(engine);
if (from === resolve(HERE)) fail(`ENGINE is this copy's own ${HERE}`);
if (!existsSync(join(from, "src", "lib.rs"))) fail(`${from} has no src/lib.rs`);
const changed = uncommitted();
if (changed) fail(`${HERE} has changes git has not committed; commit or drop them first:\n${changed}`);

// 1. The code, whole: what the new engine no longer has goes too.
const before = field(manifest(HERE), "version");
rmSync(HERE, { recursive: true, force: true });
cpSync(from, HERE, { recursive: true, filter: (path) => !/^(target|\.git|Cargo\.lock|\.cargo_vcs_info\.json|Cargo\.toml\.orig)$/.test(relative(from, path)) });
const after = field(manifest(HERE), "version");

// 2. The engine's migrations this copy lacks, after its last one.
const named = (file) => file.slice(5);
const ours = readdirSync("migrations").filter((file) => /^\d{4}_.*\.sql$/.test(file)).sort();
const theirs = existsSync(join(HERE, "migrations")) ? readdirSync(join(HERE, "migrations")).filter((file) => file.endsWith(".sql")).sort() : [];
let last = ours.length ? Number(ours.at(-1).slice(0, 4)) : 0;
const added = [];
for (const file of theirs.filter((f) => !ours.some((o) => named(o) === named(f)))) {
  last += 1;
  const to = `${String(last).padStart(4, "0")}_${named(file)}`;
  cpSync(join(HERE, "migrations", file), join("migrations", to));
  added.push(to);
}

console.log(`make upgrade: ${NAME} ${before} -> ${after} (from ${from})`);
console.log(added.length ? `make upgrade: new migrations: ${added.map((f) => `migrations/${f}`).join(", ")}` : "make upgrade: no new migration");
console.log("make upgrade: next, `make test`; `make deploy` applies the new migrations (`make dev` applies them locally)");

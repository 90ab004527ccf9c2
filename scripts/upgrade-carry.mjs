// The template's files a copy holds besides the engine (src/, tests/,
// scripts/, docs/, the Makefile, wrangler.toml, Cargo.toml, the npm and
// toolchain pins), carried by `make upgrade` the way git merges a branch:
// the copy as the template made it (the base), the copy as the incoming
// template makes it (theirs), and the copy as it is (ours). A file the
// owner never touched becomes theirs; one the template never changed stays
// ours; one both changed is merged, and a clash is left between conflict
// markers for the owner. Both base and theirs are generated here the way
// `cargo generate` made the copy (the template's post hook), with the
// answers template.lock records.
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative } from "node:path";

import { blobId, gitDigest } from "./engine-files.mjs";

/** What a copy holds that the carry leaves alone: the engine and the migrations (the upgrade's own steps), the records, and what builds and runs make. */
export const NOT_CARRIED = /^(crates\/engine\/|migrations(-postgres)?\/|template\.lock$|Cargo\.lock$|node_modules\/|target\/|build\/|\.wrangler\/|\.git\/|\.dev\.vars(?!\.example$)|\.admin-token$|tests\/artifacts\/)/;
/** The demo effects' files: a copy generated with them holds at least one, or their migration. */
const DEMO = /^src\/effects\/(orders|subscriptions|stars)\.rs$|^migrations\/\d{4}_[a-z_]*demo/;

/** Where the template keeps the generator: rename.mjs, choose.mjs and their helpers, which no copy holds. */
export const HOOK = ["scripts", "template"].join("/");

const git = (dir, args, input) => execFileSync("git", ["-C", dir, ...args], { encoding: "utf8", input, maxBuffer: 1 << 28 });

/** Every file under `dir` but what NOT_CARRIED names, as `path -> { bytes, exec }`. */
export function treeFiles(dir) {
  const out = new Map();
  const walk = (at) => {
    for (const entry of readdirSync(at, { withFileTypes: true })) {
      const path = join(at, entry.name);
      const rel = relative(dir, path);
      if (NOT_CARRIED.test(entry.isDirectory() ? `${rel}/` : rel)) continue;
      if (entry.isDirectory()) walk(path);
      else if (entry.isFile()) out.set(rel, { bytes: readFileSync(path), exec: (statSync(path).mode & 0o100) !== 0 });
    }
  };
  walk(dir);
  return out;
}

/**
 * What the copy was generated as: template.lock's `copy`, or, for a copy
 * older than that record, read from its files (its Cargo features, its
 * [vars.SOURCES], its demo files). `inferred` says which.
 */
export function answersOf(root, lock) {
  const cargo = readFileSync(join(root, "Cargo.toml"), "utf8");
  const date = readFileSync(join(root, "wrangler.toml"), "utf8").match(/^compatibility_date = "(\d{4}-\d{2}-\d{2})"$/m)?.[1];
  const copy = lock?.copy;
  if (copy?.providers) return { ...copy, date, inferred: false };
  const features = cargo.match(/^default = \[([^\]]*)\]/m)?.[1].match(/"[^"]+"/g)?.map((f) => f.slice(1, -1)) ?? [];
  const wrangler = readFileSync(join(root, "wrangler.toml"), "utf8");
  const sources = wrangler.split(/^\[vars\.SOURCES\]$/m)[1]?.split(/^\[/m)[0] ?? "";
  const providers = [...new Set([...sources.matchAll(/provider = "([a-z-]+)"/g)].map((m) => m[1]))];
  const files = [...listFiles(join(root, "src")).map((f) => `src/${f}`), ...listFiles(join(root, "migrations")).map((f) => `migrations/${f}`)];
  return {
    name: copy?.name ?? cargo.match(/^name = "([^"]+)"$/m)?.[1],
    providers,
    demos: files.some((f) => DEMO.test(f)),
    dashboard: features.includes("dashboard"),
    store: features.includes("postgres") ? "postgres" : "d1",
    date,
    inferred: true,
  };
}
const listFiles = (dir) => (existsSync(dir) ? readdirSync(dir, { recursive: true }).filter((f) => statSync(join(dir, f)).isFile()) : []);

/**
 * The copy `answers` makes from the template files in `dir`, in place, as
 * hook.rhai does: rename.mjs, choose.mjs, `cargo fmt`, and the template's
 * own files gone. `toolchain` is the copy's, so no other is installed.
 */
function generateIn(dir, answers, toolchain) {
  const run = (cmd, args) => {
    const done = spawnSync(cmd, args, { cwd: dir, encoding: "utf8", env: { ...process.env, ...(toolchain ? { RUSTUP_TOOLCHAIN: toolchain } : {}) } });
    if (done.error || done.status !== 0) throw new Error(`${cmd} ${args.join(" ")}: ${done.error?.message ?? done.stderr.trim().split("\n").slice(-3).join(" ")}`);
  };
  const { name, providers, demos, dashboard, store, date } = answers;
  run(process.execPath, [join(HOOK, "rename.mjs"), name, date]);
  run(process.execPath, [join(HOOK, "choose.mjs"), providers.join(","), String(demos), String(dashboard), name, store]);
  run("cargo", ["fmt", "--all"]);
  rmSync(join(dir, HOOK), { recursive: true, force: true });
  rmSync(join(dir, "cargo-generate.toml"), { force: true });
}

/** Makes in `dir` (empty) the copy the template at `commit` of `checkout` makes (its files as they stand when `commit` is null). */
export function generateCopy(checkout, commit, answers, toolchain, dir) {
  if (commit) {
    execFileSync("sh", ["-c", 'git -C "$1" archive "$2" | tar -x -C "$3"', "archive", checkout, commit, dir]);
  } else {
    // Its tracked files as they stand: never a stray untracked one.
    const paths = git(checkout, ["ls-files", "-z", "--cached"]).split("\0").filter((p) => p && existsSync(join(checkout, p)));
    for (const path of paths) {
      mkdirSync(dirname(join(dir, path)), { recursive: true });
      writeFileSync(join(dir, path), readFileSync(join(checkout, path)), { mode: statSync(join(checkout, path)).mode });
    }
  }
  generateIn(dir, answers, toolchain);
}

/**
 * The carried files of the copy `generateCopy` makes. Its migrations, which
 * are not carried, when asked: `keep.postgres` (a map) gets those of its
 * migrations-postgres/, names and bytes; `keep.migrations` (a set) the names
 * in its migrations/.
 */
export function generateAt(checkout, commit, answers, toolchain, keep = {}) {
  const dir = mkdtempSync(join(tmpdir(), "upgrade-copy-"));
  try {
    generateCopy(checkout, commit, answers, toolchain, dir);
    const folder = (name) => (existsSync(join(dir, name)) ? readdirSync(join(dir, name)) : []);
    for (const file of folder("migrations-postgres")) keep.postgres?.set(file, readFileSync(join(dir, "migrations-postgres", file)));
    for (const file of folder("migrations")) keep.migrations?.add(file);
    return treeFiles(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * The commits of `checkout` whose crates/engine is the one the copy's
 * template files came with, newest first: `digest` (template.lock's,
 * engineGitDigest) if one matches, else the engine `engine` holds (a map
 * of path to bytes), or failing that the nearest to it. Only commits whose
 * template could generate a copy count. `exact` says whether they match.
 */
export function engineCommits(checkout, { engine, digest }) {
  const commits = git(checkout, ["rev-list", "HEAD"]).split("\n").filter(Boolean);
  const ask = (suffix) => git(checkout, ["cat-file", "--batch-check"], commits.map((c) => `${c}:${suffix}`).join("\n") + "\n").split("\n");
  const trees = ask("crates/engine");
  const hooks = ask(`${HOOK}/choose.mjs`);
  const ours = new Map([...engine].map(([path, bytes]) => [path, blobId(bytes)]));
  const known = new Map();
  const candidates = [];
  commits.forEach((commit, i) => {
    const [tree, type] = trees[i].split(" ");
    if (type !== "tree" || !hooks[i].includes(" blob ")) return;
    if (!known.has(tree)) {
      // `<mode> blob <id>\t<path>`, NUL-separated: paths as they are.
      const ids = new Map(git(checkout, ["ls-tree", "-r", "-z", tree]).split("\0").filter(Boolean).map((entry) => entry.split("\t")).map(([meta, path]) => [path, meta.split(" ")[2]]));
      const differ = [...new Set([...ids.keys(), ...ours.keys()])].filter((path) => ids.get(path) !== ours.get(path)).length;
      known.set(tree, { digest: gitDigest(ids), differ });
    }
    candidates.push({ commit, ...known.get(tree) });
  });
  const recorded = candidates.filter((c) => digest && c.digest === digest);
  if (recorded.length) return { commits: recorded.map((c) => c.commit), exact: true };
  const best = Math.min(...candidates.map((c) => c.differ));
  return { commits: candidates.filter((c) => c.differ === best).map((c) => c.commit), exact: best === 0 };
}

const sameFiles = (a, b) => a.size === b.size && [...a].every(([path, { bytes }]) => b.get(path)?.bytes.equals(bytes));

/** How many of `generated`'s files the copy (`ours`) holds byte for byte. */
const likeness = (generated, ours) => [...generated].filter(([path, { bytes }]) => ours(path)?.equals(bytes)).length;

/**
 * The template commit the copy was generated from: `recorded` (template.lock
 * says, from the last upgrade) if `checkout` has it and HEAD descends from
 * it; else, of the commits with the engine its files came with
 * (engineCommits), the one whose generated copy matches the most of the
 * copy's files. Of equals, the oldest: a change both the copy and the
 * checkout hold then merges as one, where a base too new would undo it.
 * `{ commit, files, score }`, or `{ why }` when none can be told.
 */
export function findBase(checkout, { engine, digest, ours, answers, toolchain, recorded, say }) {
  if (recorded) {
    if (spawnSync("git", ["-C", checkout, "cat-file", "-e", `${recorded}^{commit}`]).status !== 0) {
      return { why: `the checkout does not hold ${recorded.slice(0, 12)}, the template commit this copy has (template.lock): it is older, or another repository`, older: true };
    }
    if (spawnSync("git", ["-C", checkout, "merge-base", "--is-ancestor", recorded, "HEAD"]).status !== 0) {
      return { why: `the checkout's HEAD does not descend from ${recorded.slice(0, 12)}, the template commit this copy has (template.lock): it is older, or another branch`, older: true };
    }
    const files = generateAt(checkout, recorded, answers, toolchain);
    return { commit: recorded, files, score: likeness(files, ours) };
  }
  const { commits, exact } = engineCommits(checkout, { engine, digest });
  if (!commits.length) return { why: `no commit of ${checkout} has a template that generates copies` };
  // Commits that differ only in what no copy holds make the same copy: one each.
  const seen = new Set();
  const distinct = commits.filter((commit) => {
    const key = git(checkout, ["ls-tree", commit]).split("\n").filter((l) => !/\t(BENCHMARKS|RELIABILITY)\.md$/.test(l)).join("\n");
    return !seen.has(key) && seen.add(key);
  });
  const tried = distinct.slice(0, 40);
  say(`finding the template commit this copy came from: ${tried.length} candidates with ${exact ? "its template's engine" : "the engine nearest its own"}`);
  let best = null;
  for (const commit of tried) {
    let files;
    try {
      files = generateAt(checkout, commit, answers, toolchain);
    } catch {
      continue;
    }
    const score = likeness(files, ours);
    // Newest first: an equal score that makes other files replaces, so the
    // oldest of equals stays (of those making the same files, the newest).
    if (!best || score > best.score || (score === best.score && !sameFiles(files, best.files))) best = { commit, files, score };
    // Every file as that commit made it: the base (an older equal makes the same files).
    if (score === files.size) break;
  }
  return best ?? { why: "no candidate commit generated a copy" };
}

/**
 * Each carried file's fate, from base, theirs and ours (maps, or for ours
 * a function of a path to bytes or undefined): `{ path, action, bytes, exec }`,
 * action one of add, replace, remove, merge, conflict (merged with
 * markers), kept (both changed a file one side removed, or a binary file).
 * `merge(ours, base, theirs)` gives `{ bytes, conflicts }`.
 */
export function carryPlan(base, theirs, ours, merge) {
  const mode = (path) => (statSync(path).mode & 0o100) !== 0;
  const eq = (x, y) => (x && y ? x.equals(y) : x === y);
  const out = [];
  const paths = [...new Set([...base.keys(), ...theirs.keys()])].sort();
  for (const path of paths) {
    const b = base.get(path)?.bytes;
    const t = theirs.get(path);
    const o = ours(path);
    if (eq(o, t?.bytes) || eq(b, t?.bytes)) continue;
    if (eq(o, b)) {
      out.push(t ? { path, action: b ? "replace" : "add", ...t } : { path, action: "remove" });
      continue;
    }
    if (!o) {
      out.push({ path, action: "kept", why: "you removed it; the template changed it" });
      continue;
    }
    if (!t) {
      out.push({ path, action: "kept", why: "you changed it; the template removed it" });
      continue;
    }
    if ([o, b ?? Buffer.alloc(0), t.bytes].some((x) => x.includes(0))) {
      out.push({ path, action: "kept", why: "a binary file both changed" });
      continue;
    }
    const merged = merge(o, b ?? Buffer.alloc(0), t.bytes);
    out.push({ path, action: merged.conflicts ? "conflict" : "merge", bytes: merged.bytes, exec: mode(path) });
  }
  return out;
}

/** git merge-file on three texts: the merge, and how many conflicts it left marked. */
export function mergeFile(labels) {
  return (ours, base, theirs) => {
    const dir = mkdtempSync(join(tmpdir(), "upgrade-merge-"));
    try {
      const [o, b, t] = ["ours", "base", "theirs"].map((name, i) => {
        writeFileSync(join(dir, name), [ours, base, theirs][i]);
        return join(dir, name);
      });
      const done = spawnSync("git", ["merge-file", "-p", "-L", labels[0], "-L", labels[1], "-L", labels[2], o, b, t], { maxBuffer: 1 << 26 });
      if (done.status < 0 || done.status === null || done.status > 127) throw new Error(`git merge-file failed: ${done.stderr}`);
      return { bytes: done.stdout, conflicts: done.status };
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  };
}

/**
 * The carry for the copy in the current directory from the template
 * checkout `checkout`: `{ answers, was, base, plan, head, dirty, postgres,
 * given }`, or `{ why }` when it cannot be made (`older`: HEAD does not
 * descend from the commit template.lock records; FORCE=1 searches anew).
 * `was` is the store before; on a switch, `postgres` the
 * migrations-postgres/ files a copy on Postgres starts with, and `given`
 * the names of the D1 migrations the template gave the copy. `base` is the
 * commit the copy came from; `head` the checkout's, when its files are
 * that commit's (`dirty` when they are not), for template.lock.
 */
export function prepareCarry(checkout, { engine, lock, label, say, store, force }) {
  // Its own repository's root: not a folder inside another one.
  const inside = spawnSync("git", ["-C", checkout, "rev-parse", "--show-prefix"], { encoding: "utf8" });
  if (inside.status !== 0 || inside.stdout.trim() !== "") {
    const said = inside.stderr?.trim().split("\n")[0];
    return { why: `${checkout} is not a git checkout of the template${said ? ` (git: ${said})` : ""}, so the commit your copy came from cannot be found` };
  }
  if (git(checkout, ["rev-parse", "--is-shallow-repository"]).trim() === "true") return { why: `${checkout} is a shallow clone: fetch its history first (git -C ${checkout} fetch --unshallow)` };
  const answers = answersOf(".", lock);
  // `store`: the copy as if generated with that store instead (make store).
  const wanted = { ...answers, store: store ?? answers.store };
  const toolchain = existsSync("rust-toolchain.toml") ? readFileSync("rust-toolchain.toml", "utf8").match(/^channel = "([^"]+)"$/m)?.[1] : undefined;
  const ours = (path) => (existsSync(path) && statSync(path).isFile() ? readFileSync(path) : undefined);
  const recorded = lock?.template?.commit;
  let base = findBase(checkout, { engine, digest: lock?.template?.engine, ours, answers, toolchain, recorded, say });
  const forcedOlder = Boolean(base.older && force);
  if (forcedOlder) base = findBase(checkout, { engine, digest: lock?.template?.engine, ours, answers, toolchain, recorded: null, say });
  if (base.why) return base;
  const postgres = new Map();
  const theirs = generateAt(checkout, null, wanted, toolchain, { postgres });
  const from = `template ${base.commit.slice(0, 12)}`;
  const plan = carryPlan(base.files, theirs, ours, mergeFile(["yours", from, label]));
  const dirty = git(checkout, ["status", "--porcelain", "--untracked-files=no"]).trim() !== "";
  const head = dirty ? null : git(checkout, ["rev-parse", "HEAD"]).trim();
  // On a switch: which of the copy's D1 migrations its template gave it (the rest are the owner's).
  const given = new Set();
  if (wanted.store !== answers.store) generateAt(checkout, base.commit, answers, toolchain, { migrations: given });
  return { answers: wanted, was: answers.store, base: base.commit, score: base.score, size: base.files.size, plan, head, dirty, postgres, given, forcedOlder };
}

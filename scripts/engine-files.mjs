// The engine's files as `make upgrade` knows them, and the record a copy
// keeps of them (template.lock): the engine's version and each file's
// SHA-256, written when the copy is generated and at each upgrade. An
// engine whose files no longer match its record was edited, even if git
// holds the edit, and an upgrade would lose it. Copies made before the
// record existed are known by releases.json, which the engine carries: the
// files of every engine a copy could have been generated with.
import { createHash } from "node:crypto";
import { existsSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";

export const ENGINE = "crates/engine";
export const LOCK = "template.lock";
/** Past engines, by version (written from the template's git history). */
export const RELEASES = "releases.json";

/** Every file under `dir`, relative, with its bytes; what cargo adds to a package is left out, and a symlink is an error. */
export function engineFiles(dir) {
  const out = new Map();
  const walk = (at) => {
    for (const entry of readdirSync(at, { withFileTypes: true })) {
      const path = join(at, entry.name);
      const rel = relative(dir, path);
      if (/^(target|\.git|Cargo\.lock|\.cargo_vcs_info\.json|Cargo\.toml\.orig|\.cargo-ok)$/.test(rel)) continue;
      if (entry.isSymbolicLink()) throw new Error(`${path} is a symlink: an engine holds files only`);
      if (entry.isDirectory()) walk(path);
      else out.set(rel, readFileSync(path));
    }
  };
  walk(dir);
  return out;
}

export const sha256 = (bytes) => createHash("sha256").update(bytes).digest("hex");

/** `{ path: sha256 }` of a file map, in path order. */
export function hashes(files) {
  return Object.fromEntries([...files].sort(([a], [b]) => (a < b ? -1 : 1)).map(([path, bytes]) => [path, sha256(bytes)]));
}

/** git's id of a blob of these bytes. */
export const blobId = (bytes) => createHash("sha1").update(`blob ${bytes.length}\0`).update(bytes).digest("hex");

/**
 * One digest for an engine as git holds it: its paths and their git blob
 * ids (a `path -> id` map), so that a commit's crates/engine can be told
 * from `git ls-tree` alone. template.lock keeps the one the copy's template
 * files came with.
 */
export const gitDigest = (ids) => sha256([...ids].sort(([a], [b]) => (a < b ? -1 : 1)).map(([path, id]) => `${path} ${id}\n`).join(""));
export const engineGitDigest = (files) => gitDigest(new Map([...files].map(([path, bytes]) => [path, blobId(bytes)])));

/** One digest for a whole engine: its paths and their hashes. */
export function treeDigest(hashed) {
  return sha256(Object.entries(hashed).map(([path, hash]) => `${path} ${hash}\n`).join(""));
}

/** The copy's record: `{ engine: { version, files } }`, or `null` if it has none. */
export function readLock(root = ".") {
  const path = join(root, LOCK);
  return existsSync(path) ? JSON.parse(readFileSync(path, "utf8")) : null;
}

/**
 * Records the engine now in `root`'s crates/engine, at `version`, and what
 * the copy was generated as (`copy`: its name and answers), for an upgrade
 * to make its files again, and the template commit its files last came
 * from (`template`: `{ commit }`), when an upgrade knows it; each kept
 * from the record before when not given.
 */
export function writeLock(root, version, copy = readLock(root)?.copy, template = readLock(root)?.template) {
  const lock = {
    about: "What make upgrade knows of this copy: what it was generated as, and the engine it was given. Written by the template; commit it, never edit it.",
    ...(copy ? { copy } : {}),
    ...(template ? { template } : {}),
    engine: { version, files: hashes(engineFiles(join(root, ENGINE))) },
  };
  writeFileSync(join(root, LOCK), `${JSON.stringify(lock, null, 2)}\n`);
}

/**
 * How the engine `files` (a map of path to bytes) stands against what
 * `version` shipped: `{ known: true }` when it is that engine, unedited;
 * else `{ known: false, edited }`, the paths that differ. `recorded` is
 * the copy's lock (or `null`); `releases` the incoming engine's
 * releases.json (or `null`), for a copy without a lock.
 */
export function standing(files, version, recorded, releases) {
  const ours = hashes(files);
  if (recorded) {
    const theirs = recorded.engine.files;
    const paths = new Set([...Object.keys(ours), ...Object.keys(theirs)]);
    const edited = [...paths].filter((path) => ours[path] !== theirs[path]).sort();
    return { known: edited.length === 0, edited };
  }
  const release = releases?.versions?.[version];
  if (!release) return { known: false, edited: [], unknownVersion: true };
  if (release.trees.includes(treeDigest(ours))) return { known: true, edited: [] };
  const edited = Object.keys(ours).filter((path) => !release.files[path]?.includes(ours[path]));
  return { known: false, edited: edited.sort() };
}

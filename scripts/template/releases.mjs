// node scripts/template/releases.mjs <from> <to>: writes
// crates/engine/releases.json, the files of every engine main held from
// <from> to <to> (git revisions), by version: what `make upgrade` checks a
// copy made before template.lock existed against (scripts/engine-files.mjs).
// Run once, for the commits before copies got their lock; a copy made
// since has its own record.
import { execFileSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";

import { ENGINE, RELEASES, sha256, treeDigest } from "../engine-files.mjs";

const [from, to] = process.argv.slice(2);
if (!from || !to) {
  console.error("usage: node scripts/template/releases.mjs <from> <to>");
  process.exit(2);
}
const git = (...args) => execFileSync("git", args, { encoding: "buffer", maxBuffer: 64 * 1024 * 1024 });
const blobs = new Map();
const blobHash = (id) => {
  if (!blobs.has(id)) blobs.set(id, sha256(git("cat-file", "blob", id)));
  return blobs.get(id);
};

const versions = {};
const commits = git("rev-list", "--reverse", `${from}^..${to}`).toString().split("\n").filter(Boolean);
for (const commit of commits) {
  const listed = git("ls-tree", "-r", "-z", commit, `${ENGINE}/`).toString().split("\0").filter(Boolean);
  if (!listed.length) continue;
  const files = {};
  for (const line of listed) {
    const [meta, path] = line.split("\t");
    const [, type, id] = meta.split(" ");
    if (type === "blob") files[path.slice(ENGINE.length + 1)] = blobHash(id);
  }
  const sorted = Object.fromEntries(Object.entries(files).sort(([a], [b]) => (a < b ? -1 : 1)));
  const version = git("show", `${commit}:${ENGINE}/Cargo.toml`).toString().match(/^version = "(.*)"$/m)[1];
  const release = (versions[version] ??= { trees: [], files: {} });
  const digest = treeDigest(sorted);
  if (release.trees.includes(digest)) continue;
  release.trees.push(digest);
  for (const [path, hash] of Object.entries(sorted)) {
    const known = (release.files[path] ??= []);
    if (!known.includes(hash)) known.push(hash);
  }
}
const about = `Every engine main held from ${from} to ${to}, by version: its whole tree's digest, and each file's known hashes. make upgrade checks a copy without template.lock against it.`;
writeFileSync(join(ENGINE, RELEASES), `${JSON.stringify({ about, versions }, null, 1)}\n`);
console.log(Object.entries(versions).map(([v, r]) => `${v}: ${r.trees.length} engines`).join("; "));

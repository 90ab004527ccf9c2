// What a copy's docs name that the copy does not have, in README.md and
// docs/*.md: a relative link or image (inline, reference-style or HTML),
// and its #anchor among the target's headings; a path in a code span or a
// command (`src/…`, `tests/…`, `bench/`, a glob such as
// `tests/edges-*.test.mjs`); a file named alone (`stars.rs`); a `make`
// target; a row of a listing. `node refs.mjs` in a copy prints them and
// fails if there are any. BENCHMARKS.md and RELIABILITY.md are the
// template's own records, which the copy's README calls so: not checked.
import { existsSync, readFileSync, readdirSync, statSync } from "node:fs";
import { dirname, join, normalize, relative } from "node:path";

import { RECIPES } from "./recipes.mjs";

/** The template's top-level folders: a path starting with one must exist. */
const FOLDERS = ["src", "crates", "tests", "docs", "scripts", "migrations", "migrations-postgres", "bench", "fuzz", "soak", "cli", ".github"];
const SKIP = new Set(["node_modules", "target", "build", ".git", ".wrangler"]);
/** What a run makes, so no checkout has it before one. */
const OUTPUTS = new Set(["tests/artifacts/"]);
const EXTENSIONS = /\.(rs|mjs|js|sql|sh|md|toml|json|yml|png)$/;

const walk = (dir, root = dir) =>
  readdirSync(dir).flatMap((entry) => {
    if (SKIP.has(entry)) return [];
    const path = join(dir, entry);
    return statSync(path).isDirectory() ? [`${relative(root, path)}/`, ...walk(path, root)] : [relative(root, path)];
  });

/** Whether `pattern` (a path, perhaps with `*`, perhaps ending in `/`) names something in `paths`. */
function found(paths, pattern) {
  const clean = normalize(pattern).replace(/^\.\//, "");
  if (!clean.includes("*")) return paths.includes(clean) || paths.includes(`${clean}/`) || paths.includes(clean.replace(/\/$/, ""));
  const re = new RegExp(`^${clean.split("*").map((part) => part.replace(/[.+?^${}()|[\]\\]/g, "\\$&")).join("[^/]*")}$`);
  return paths.some((path) => re.test(path));
}

/** GitHub's anchor for a heading. */
const slug = (heading) =>
  heading
    .toLowerCase()
    .replace(/[^\p{L}\p{N} _-]/gu, "")
    .replace(/ /g, "-");

/** The anchors of a Markdown file's headings (outside fences). */
function anchors(text) {
  let fenced = false;
  const out = new Set();
  for (const line of text.split("\n")) {
    if (line.trimStart().startsWith("```")) fenced = !fenced;
    const heading = !fenced && line.match(/^#{1,6} (.*)$/);
    if (heading) out.add(slug(heading[1]));
  }
  return out;
}

/** `"file:line: what"` for each reference in the docs of `dir` to something it lacks. */
export function danglingRefs(dir, made = () => false) {
  const paths = walk(dir);
  const names = new Set(paths.filter((p) => !p.endsWith("/")).map((p) => p.split("/").at(-1)));
  const makefile = existsSync(join(dir, "Makefile")) ? readFileSync(join(dir, "Makefile"), "utf8") : "";
  const targets = new Set([...makefile.matchAll(/^([a-z][a-z0-9-]*):/gm)].map((m) => m[1]));
  const docs = ["README.md", ...paths.filter((p) => /^docs\/[^/]+\.md$/.test(p))].filter((p) => existsSync(join(dir, p)));
  const skipped = (path) => /[<>]|NNNN/.test(path) || made(path) || OUTPUTS.has(path);
  const left = [];
  for (const doc of docs) {
    const text = readFileSync(join(dir, doc), "utf8");
    let fenced = false;
    text.split("\n").forEach((line, i) => {
      const at = (what) => left.push(`${doc}:${i + 1}: ${what}`);
      /** A path as written in a command or a span: checked if it is one. */
      const token = (word) => {
        const path = word.replace(/^["'(]+|["'),:;.]+$/g, "");
        if (!path || skipped(path)) return;
        if (path.includes("/")) {
          if (FOLDERS.includes(path.split("/")[0]) && !found(paths, path)) at(`names ${path}`);
        } else if (EXTENSIONS.test(path) && !/^[A-Z]+\.md$/.test(path) && !path.includes("*") && !names.has(path)) {
          at(`names ${path}`);
        }
      };
      if (line.trimStart().startsWith("```")) {
        fenced = !fenced;
        return;
      }
      if (fenced) {
        const command = line.replace(/(^|\s)#.*$/, "");
        for (const [, make] of command.matchAll(/(?:^|[\s;&|(])make ([a-z][a-z0-9-]*)/g)) if (targets.size && !targets.has(make)) at(`names make ${make}`);
        // A listing's first column (paths, perhaps two), or a command's words.
        const column = line.match(/^([A-Za-z0-9_.\/-]+(?:, [A-Za-z0-9_.\/-]+)*)(?:\s{2,}|$)/)?.[1];
        for (const word of column ? column.split(", ") : command.split(/\s+/)) if (word.includes("/")) token(word);
        return;
      }
      const links = [
        ...[...line.matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1]),
        ...[...line.matchAll(/^\s*\[[^\]]+\]:\s*(\S+)/g)].map((m) => m[1]),
        ...[...line.matchAll(/\b(?:src|href)="([^"]+)"/g)].map((m) => m[1]),
      ];
      for (const target of links) {
        if (/^(https?:|mailto:)/.test(target)) continue;
        const [file, anchor] = target.split("#");
        const path = file ? join(dirname(doc), file) : doc;
        if (file && !found(paths, path)) {
          at(`links to ${target}`);
        } else if (anchor && path.endsWith(".md") && existsSync(join(dir, path)) && !anchors(readFileSync(join(dir, path), "utf8")).has(anchor)) {
          at(`links to ${target}: no such heading`);
        }
      }
      for (const [, make] of line.matchAll(/`make ([a-z][a-z0-9-]*)/g)) if (targets.size && !targets.has(make)) at(`names make ${make}`);
      for (const [, span] of line.matchAll(/`([^`]+)`/g)) for (const word of span.split(/\s+/)) token(word);
    });
  }
  return left;
}

const steps = RECIPES.flatMap((recipe) => recipe.steps);
const writes = new Set(steps.map((step) => step.write).filter(Boolean));
const migrations = new RegExp(`^migrations(-postgres)?/\\d{4}_(${steps.map((step) => step.migration).filter(Boolean).join("|")})\\.sql$`);

/** Whether `path` is a file the recipes tell a person to make. */
export const recipeMade = (path) => writes.has(path) || migrations.test(path);

if (import.meta.url === `file://${process.argv[1]}`) {
  const left = danglingRefs(process.cwd(), recipeMade);
  for (const where of left) console.error(`a doc names what this copy lacks: ${where}`);
  process.exit(left.length ? 1 : 0);
}

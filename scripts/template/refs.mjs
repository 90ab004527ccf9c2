// What a copy names that the copy does not have.
//
// - Its docs: every Markdown file (README.md, docs/, the template's
//   BENCHMARKS.md and RELIABILITY.md, any other) but the engine's (crates/: it is
//   vendored whole, `make upgrade` replaces it, and its paths are the
//   crate's own), and .dev.vars.example. In them: a relative link or image
//   (inline, reference-style or HTML), and its #anchor among the target's
//   headings; a section named in words (`README, "Use it as a gateway"`); a
//   path in a code span or a command (`src/…`, `tests/…`, `bench/`, a glob
//   such as `tests/edges-*.test.mjs`); a file named alone (`stars.rs`); a
//   root record named in words (`BENCHMARKS.md has the figures`); a `make`
//   target; a row of a listing.
// - Its scripts (scripts/*.sh, *.mjs, *.cjs), Makefile and workflows
//   (.github/workflows/*.yml): a path under one of the template's
//   top-level folders, a `make` target, a section named in words. A path
//   built at run time (`migrations/${file}`, `$DIR/…`) is not one.
//
// `storeWordsLeft` finds what a copy's docs and comments say of the store
// it does not use. `node refs.mjs` in a copy prints both and fails if there
// is any.
import { existsSync, readFileSync, readdirSync, statSync } from "node:fs";
import { dirname, join, normalize, relative } from "node:path";

import { RECIPES } from "./recipes.mjs";

/** The template's top-level folders: a path starting with one must exist. */
const FOLDERS = ["src", "crates", "tests", "docs", "scripts", "migrations", "migrations-postgres", "bench", "fuzz", "soak", "cli", ".github"];
const SKIP = new Set(["node_modules", "target", "build", ".git", ".wrangler"]);
/** What a run makes, so no checkout has it before one. */
const OUTPUTS = new Set(["tests/artifacts/", "tests/artifacts"]);
const EXTENSIONS = /\.(rs|mjs|js|sql|sh|md|toml|json|yml|png)$/;

/** Every file and folder (`folder/`) of a checkout, relative to it, without builds, packages and state. */
export const walk = (dir, root = dir) =>
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

/** A section named in words: `README, "Use it as a gateway"`, `docs/deploy.md, "A long migration"`. */
const SECTION = /\b(README(?:\.md)?|[\w./-]+\.md)(?:'s)?[,:]? "([^"]+)"/g;

/** A root record named in words (`BENCHMARKS.md has the figures`), outside a link to elsewhere. */
function records(paths, line, at) {
  // A link's target is checked as a link; its text, elsewhere (`[the template's BENCHMARKS.md](https://…)`), is not one.
  const words = line.replace(/\[[^\]]*\]\((https?:|mailto:)[^)]*\)/g, "").replace(/\]\([^)]*\)/g, "]");
  // "the template's BENCHMARKS.md" names the template's, which a copy need not hold.
  for (const [, name] of words.matchAll(/(?<![\w/.-]|template's )([A-Z][A-Z0-9_-]*\.md)\b/g)) if (!paths.includes(name)) at(`names ${name}`);
}

/** What the checks share about a copy: its files, their names, its `make` targets. */
function inventory(dir) {
  const paths = walk(dir);
  const makefile = existsSync(join(dir, "Makefile")) ? readFileSync(join(dir, "Makefile"), "utf8") : "";
  return {
    paths,
    names: new Set(paths.filter((p) => !p.endsWith("/")).map((p) => p.split("/").at(-1))),
    targets: new Set([...makefile.matchAll(/^([a-z][a-z0-9-]*):/gm)].map((m) => m[1])),
  };
}

/** Checks a section named in `line` of `from`: `at` is told of one the copy lacks. */
function sections(dir, paths, from, line, at) {
  for (const [, file, heading] of line.matchAll(SECTION)) {
    const path = file.startsWith("README") ? "README.md" : file.includes("/") ? file : join(dirname(from), file);
    const target = found(paths, path) ? path : found(paths, file) ? file : null;
    if (!target) at(`names ${file}`);
    // The words may be a heading's first ones ("Use it as a gateway", of "Use it as a gateway, with no Rust").
    else if (![...anchors(readFileSync(join(dir, target), "utf8"))].some((anchor) => anchor.startsWith(slug(heading)))) {
      at(`names ${file}, "${heading}": no such heading`);
    }
  }
}

/** `"file:line: what"` for each reference in the docs of `dir` to something it lacks. */
export function danglingRefs(dir, made = () => false) {
  const { paths, names, targets } = inventory(dir);
  const docs = paths.filter((p) => p.endsWith(".md") && !p.startsWith("crates/"));
  if (existsSync(join(dir, ".dev.vars.example"))) docs.push(".dev.vars.example");
  const skipped = (path) => /[<>]|NNNN/.test(path) || made(path) || OUTPUTS.has(path);
  // The template's records (BENCHMARKS.md, RELIABILITY.md) quote what a run
  // printed or read at the time: a test's file:line, workerd's sources, a
  // file since moved into the engine. Their links, sections and make
  // targets are checked; the files their spans and fences name are not.
  const record = (doc) => /^[A-Z]+\.md$/.test(doc) && doc !== "README.md";
  const left = [];
  for (const doc of docs) {
    const text = readFileSync(join(dir, doc), "utf8");
    // .dev.vars.example is comments: its words are checked as a command's.
    let fenced = false;
    // A section on switching stores names what the switch brings.
    let switching = false;
    text.split("\n").forEach((line, i) => {
      const at = (what) => left.push(`${doc}:${i + 1}: ${what}`);
      if (/^## /.test(line)) switching = /^## Switch stores/.test(line);
      /** A path as written in a command or a span: checked if it is one. */
      const token = (word) => {
        if (record(doc) || switching) return;
        const path = word.replace(/^["'(]+|["'),:;.]+$/g, "");
        if (!path || skipped(path)) return;
        if (path.includes("/")) {
          if (FOLDERS.includes(path.split("/")[0]) && !found(paths, path)) at(`names ${path}`);
        } else if (EXTENSIONS.test(path) && !path.includes("*") && !names.has(path)) {
          at(`names ${path}`);
        }
      };
      if (doc === ".dev.vars.example") {
        for (const [, make] of line.matchAll(/[`(]make ([a-z][a-z0-9-]*)/g)) if (targets.size && !targets.has(make)) at(`names make ${make}`);
        for (const word of line.split(/[\s`]+/)) if (word.includes("/")) token(word);
        sections(dir, paths, doc, line, at);
        records(paths, line, at);
        return;
      }
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
      sections(dir, paths, doc, line, at);
      records(paths, line, at);
    });
  }
  return [...left, ...scriptRefs(dir, { paths, targets }, made)];
}

/** A path under a top-level folder, as a script writes it: after a space, a quote, `(`, `=`, `:` or `,`. */
const SCRIPT_PATH = new RegExp(`(?<=^|[\\s"'\`(=:,])((?:${FOLDERS.map((f) => f.replace(".", "\\.")).join("|")})/[A-Za-z0-9_.*/-]*)(.?)`, "g");

/**
 * `"file:line: what"` for each path under the template's top-level folders,
 * `make` target or named section that the scripts, the Makefile or the
 * workflows of `dir` name and `dir` lacks.
 */
export function scriptRefs(dir, { paths, targets } = inventory(dir), made = () => false) {
  const files = paths.filter(
    (p) => /^scripts\/[^/]+\.(sh|mjs|cjs)$/.test(p) || ["Makefile", ".ci/run"].includes(p) || /^\.github\/workflows\/[^/]+\.ya?ml$/.test(p),
  );
  // Where a root record (BENCHMARKS.md) may be named in a comment: these, the TOML files and the tests.
  const commented = [...files, ...paths.filter((p) => /^[^/]+\.toml$/.test(p) || /^tests\/.*\.mjs$/.test(p))];
  const left = [];
  for (const file of files) {
    readFileSync(join(dir, file), "utf8")
      .split("\n")
      .forEach((line, i) => {
        const at = (what) => left.push(`${file}:${i + 1}: ${what}`);
        for (const [, raw, next] of line.matchAll(SCRIPT_PATH)) {
          // Built at run time (`migrations/${file}`, `tests/$(NAME)`, `docs/<page>`): not one path.
          if (/[$<{[]/.test(next) || /\$|\*\*/.test(raw)) continue;
          const path = raw.replace(/[.,:;]+$/, "");
          // A top-level folder alone: a script may handle one a copy lacks (`existsSync("migrations-postgres")`).
          if (/^[^/]+\/?$/.test(path)) continue;
          if (made(path) || OUTPUTS.has(path) || found(paths, path)) continue;
          at(`names ${path}`);
        }
        // A `make` command: in a code span or parentheses, a recipe's, or a script's own line.
        for (const [, make] of line.matchAll(/(?:(?:^\s*|[`(])make|\$\(MAKE\)) ([a-z][a-z0-9-]*)\b/g)) {
          if (targets.size && !targets.has(make)) at(`names make ${make}`);
        }
        sections(dir, paths, file, line, at);
      });
  }
  for (const file of commented) {
    readFileSync(join(dir, file), "utf8")
      .split("\n")
      .forEach((line, i) => /^\s*(#|\/\/|\*)/.test(line) && records(paths, line, (what) => left.push(`${file}:${i + 1}: ${what}`)));
  }
  return left;
}

/**
 * What a store copy's words say of the store it does not use: in a
 * Postgres copy (`store` "postgres"), a D1-only instruction in its docs
 * (every Markdown file but the engine's), .dev.vars.example and the
 * comments of src/ (`wrangler d1 migrations create`, "the same D1 batch",
 * an effect's tables "under `migrations/`"); in a D1 copy, any word of
 * Postgres or Hyperdrive there, but on a line naming one of the engine's
 * files (`crates/engine/…`: vendored whole, Postgres store and all), or
 * in a section on switching stores (`## Switch stores…`), which is about
 * the other one. `"file:line: words"` for each.
 */
export function storeWordsLeft(dir, store) {
  const WORDS = {
    postgres: [/wrangler d1 migrations create/i, /\bD1 batch/i, /\bsame D1 transaction as the ledger/i, /the ledger records it as handled/i, /tables?\b[^.]*\bunder `migrations\/`/i, /applied to \*\*D1\*\*/i],
    d1: [/postgres/i, /hyperdrive/i],
  }[store];
  if (!WORDS) throw new Error(`storeWordsLeft: store is d1 or postgres, not ${store}`);
  const paths = walk(dir);
  const docs = paths.filter((p) => (p.endsWith(".md") && !p.startsWith("crates/")) || p === ".dev.vars.example");
  const code = paths.filter((p) => /^src\/.*\.rs$/.test(p));
  const left = [];
  for (const file of [...docs, ...code]) {
    const lines = readFileSync(join(dir, file), "utf8").split("\n");
    let switching = false;
    // A paragraph's words may run over lines: each line is read with the next.
    lines.forEach((line, i) => {
      if (/^## /.test(line)) switching = /^## Switch stores/.test(line);
      if (switching) return;
      if (code.includes(file) && !/^\s*\/\//.test(line)) return;
      if (store === "d1" && line.includes("crates/engine/")) return;
      const next = code.includes(file) && !/^\s*\/\//.test(lines[i + 1] ?? "") ? "" : (lines[i + 1] ?? "");
      const both = `${line} ${next.replace(/^\s*(\/\/[!/]?)?\s*/, "")}`;
      const words = WORDS.find((re) => re.test(both) && !re.test(next));
      if (words) left.push(`${file}:${i + 1}: ${both.match(words)[0]}`);
    });
  }
  return left;
}

/** A copy's store, as its wrangler.toml says: "postgres" or "d1". */
export const storeOf = (dir) =>
  existsSync(join(dir, "wrangler.toml")) && /^STORE = "postgres"$/m.test(readFileSync(join(dir, "wrangler.toml"), "utf8")) ? "postgres" : "d1";

const steps = RECIPES.flatMap((recipe) => recipe.steps);
const writes = new Set(steps.map((step) => step.write).filter(Boolean));
const migrations = new RegExp(`^migrations(-postgres)?/\\d{4}_(${steps.map((step) => step.migration).filter(Boolean).join("|")})\\.sql$`);

/** Whether `path` is a file the recipes tell a person to make. */
export const recipeMade = (path) => writes.has(path) || migrations.test(path);

if (import.meta.url === `file://${process.argv[1]}`) {
  const dir = process.cwd();
  const left = danglingRefs(dir, recipeMade);
  for (const where of left) console.error(`this copy names what it lacks: ${where}`);
  const words = storeWordsLeft(dir, storeOf(dir));
  for (const where of words) console.error(`this copy's words are of the other store: ${where}`);
  process.exit(left.length || words.length ? 1 : 0);
}

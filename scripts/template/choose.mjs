// Keeps only what `cargo generate` was told to: `node choose.mjs
// <providers> <demos> <dashboard> <name> [store]` (run by hook.rhai in the
// new copy).
//
// - Providers: each unchosen one's cargo feature (the engine's, which
//   crates/engine keeps whole), CLI signer, source, local secret and tests
//   go (a test item under its `// needs:` line).
// - `demos=false`: the demo effects, their tables, and every test that
//   names them go.
// - Any copy but all defaults starts its migrations clean: the engine's
//   (crates/engine/migrations), then the kept demos' (template/migrations/).
// - `dashboard=false`: the dashboard's feature and tests go (the engine keeps its modules).
// - `store=d1` (the default): everything about the Postgres store goes,
//   unless every other answer is a default too.
//   `store=postgres`: effects commit in Postgres (postgres.mjs); the rest
//   marked `needs: d1` goes.
//
// All four at their defaults leave the copy as the template is, but for the
// template's own records (BENCHMARKS.md, RELIABILITY.md), which no copy keeps.
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";

import { cutItems, fileNeedsMissing, pruneCfg, pruneDocNeeds, pruneNeeds } from "./prune.mjs";
import { makePostgresCopy } from "./postgres.mjs";
import { copyReadme } from "./readme.mjs";
import { ENGINE, engineFiles, engineGitDigest, writeLock } from "../engine-files.mjs";
import { secretVar } from "../secret-var.mjs";
import { SOURCES } from "./sources.mjs";

const [list, demosArg, dashboardArg, name, store = "d1"] = process.argv.slice(2);
const ALL = Object.keys(SOURCES);
const chosen = [...new Set((list ?? "").split(",").map((p) => p.trim()).filter(Boolean))];
const unknown = chosen.filter((p) => !ALL.includes(p));
const bad = !/^(true|false)$/.test(demosArg) || !/^(true|false)$/.test(dashboardArg) || !/^(d1|postgres)$/.test(store);
if (!chosen.length || unknown.length || bad) {
  console.error(`choose: providers is a comma list of ${ALL.join(", ")}${unknown.length ? ` (not: ${unknown.join(", ")})` : ""}; demos and dashboard are true or false; store is d1 or postgres`);
  process.exit(2);
}
// The demo effects are Stripe's and GitHub's: without either, there is none to keep.
const demos = demosArg === "true" && (chosen.includes("stripe") || chosen.includes("github"));
const dashboard = dashboardArg === "true";
// All defaults copy the template whole, its Postgres option with it.
const everything = chosen.length === ALL.length && demos && dashboard && store === "d1";

// What the copy leaves out: provider names, cargo features, and the
// `demos`/`dashboard` parts; each is a name `needs:` lines may list.
const keptFeatures = new Set(chosen.map((p) => SOURCES[p].feature));
const removedFeatures = new Set(ALL.map((p) => SOURCES[p].feature).filter((f) => !keptFeatures.has(f)));
if (!dashboard) removedFeatures.add("dashboard");
if (!everything && store === "d1") removedFeatures.add("postgres");
const missing = new Set([...ALL.filter((p) => !chosen.includes(p)), ...removedFeatures]);
if (!demos) missing.add("demos");
// The benchmarks, the soak and the long fuzz measure the template itself;
// `template` marks what checks the template's own files.
if (!everything) missing.add("everything");
missing.add("template");
// The store: a D1 copy has nothing of Postgres's; a Postgres copy builds
// it by default, so the template's separate postgres build goes.
if (store === "postgres") missing.add("d1");
else if (!everything) missing.add("postgres");

const read = (file) => readFileSync(file, "utf8");
const write = (file, text) => writeFileSync(file, text.replace(/\n{3,}/g, "\n\n"));
const files = (dir) =>
  readdirSync(dir).flatMap((entry) => {
    const path = join(dir, entry);
    return statSync(path).isDirectory() ? files(path) : [path];
  });

// 1. Files that need something left out go whole; the rest lose the items
//    that do.
for (const dir of ["src", "cli", "tests", "fuzz", "scripts", "migrations", "migrations-postgres"]) {
  if (!existsSync(dir)) continue;
  for (const file of files(dir)) {
    if (!/\.(rs|mjs|cjs|js|sql|sh)$/.test(file) || file.startsWith("scripts/template") || !existsSync(file)) continue;
    const text = read(file);
    if (fileNeedsMissing(text, missing, file)) {
      rmSync(file);
      continue;
    }
    let pruned = pruneNeeds(text, missing, file);
    if (file.endsWith(".rs")) {
      const { text: cfgPruned, mods } = pruneCfg(pruned, removedFeatures);
      pruned = cfgPruned;
      for (const mod of mods) rmSync(join(dirname(file), `${mod}.rs`), { force: true });
    }
    if (pruned !== text) write(file, pruned);
  }
}
// The docs lose the blocks (`<!-- needs: … -->`) about what went, and the
// dashboard's screenshots go with it.
if (!dashboard) for (const file of files("docs").filter((file) => /\/dashboard[^/]*\.png$/.test(file))) rmSync(file);
for (const file of files("docs").filter((file) => file.endsWith(".md"))) {
  const text = read(file);
  const pruned = pruneDocNeeds(text, missing);
  if (pruned === null) rmSync(file);
  else if (pruned !== text) write(file, pruned);
}
for (const dir of ["tests/property_fuzz", "fuzz"]) {
  if (existsSync(dir) && !readdirSync(dir).some((f) => /\.(rs|mjs)$/.test(f))) rmSync(dir, { recursive: true });
}
if (!everything) {
  for (const path of ["bench", "soak"]) rmSync(path, { recursive: true, force: true });
  const scripts = JSON.parse(read("package.json"));
  delete scripts.scripts?.bench;
  writeFileSync("package.json", `${JSON.stringify(scripts, null, 2)}\n`);
}
// BENCHMARKS.md and RELIABILITY.md are the template's own records (how its
// figures were taken, `make template-check` included): a copy drops them,
// and its docs link to the template's, online (the engine's `repository`).
{
  for (const record of ["BENCHMARKS.md", "RELIABILITY.md"]) rmSync(record, { force: true });
  const repo = read("crates/engine/Cargo.toml").match(/^repository = "(.*)"$/m)[1];
  // "the template's", or "The template's" where a sentence starts.
  const online = (record, anchor, at, text) =>
    `[${/(^|[.!?]\s+)$/.test(text.slice(0, at)) ? "The" : "the"} template's ${record}](${repo}/blob/main/${record}${anchor ?? ""})`;
  for (const file of files("docs").filter((file) => file.endsWith(".md"))) {
    const text = read(file);
    const linked = text
      .replace(/\[(BENCHMARKS\.md|RELIABILITY\.md)\]\(\.\.\/\1(#[^)]*)?\)/g, (_, record, anchor, at, all) => online(record, anchor, at, all))
      .replace(/(?<![[/'\w])(BENCHMARKS\.md|RELIABILITY\.md)(?![\]\w])/g, (_, record, at, all) => online(record, undefined, at, all));
    if (linked !== text) write(file, linked);
  }
}

// 2. The CLI's signers, the demo effects.
const unchosen = ALL.filter((p) => !chosen.includes(p));
const names = (ps) => ps.map((p) => p.replace(/[-]/g, "\\-")).join("|");
if (unchosen.length) {
  for (const file of ["cli/src/fixtures.rs", "cli/src/signers.rs"]) {
    let cli = cutItems(read(file), new RegExp(`^ {4}"(${names(unchosen)})",$`));
    cli = cutItems(cli, new RegExp(`^\\s+"(${names(unchosen)})"( \\| "(${names(unchosen)})")* =>`), { comments: true });
    cli = cli.replace(/^(\s+)"([a-z-]+)" \| "([a-z-]+)" =>/gm, (all, pad, a, b) =>
      unchosen.includes(a) ? `${pad}"${b}" =>` : unchosen.includes(b) ? `${pad}"${a}" =>` : all,
    );
    cli = cutItems(cli, new RegExp(`^\\s+fn (${unchosen.map((p) => p.replace("-", "_")).join("|")})_`));
    write(file, cli);
  }
}
// A demo effect whose file went (no demos, or not its provider) leaves no line.
const named = [...read("src/effects/mod.rs").matchAll(/^mod ([a-z_0-9]+);$/gm)].map((match) => match[1]);
const gone = named.filter((effect) => !existsSync(`src/effects/${effect}.rs`));
if (gone.length) {
  const effects = "src/effects/mod.rs";
  const names = gone.join("|");
  // Its `mod` line, its lines in EFFECTS, and its performers' in PERFORMERS.
  write(effects, cutItems(read(effects), new RegExp(`^(mod (${names});|\\s+\\(("[a-z]+", "[a-z_.]+", )?(${names})::)`)));
}
// A copy starts its history clean: the engine's migrations (the schema the
// template's history ends with), then the kept demos' tables, numbered from
// 0001 under their own names (`make upgrade` finds the engine's by name).
if (!everything) {
  for (const file of readdirSync("migrations")) rmSync(join("migrations", file));
  const from = (dir) => readdirSync(dir).sort().map((file) => [file, read(join(dir, file))]);
  const clean = [...from("crates/engine/migrations"), ...from("scripts/template/migrations")];
  const kept = clean.filter(([file, sql]) => !fileNeedsMissing(sql, missing, file));
  kept.forEach(([file, sql], i) => write(join("migrations", `${String(i + 1).padStart(4, "0")}_${file.slice(5)}`), pruneNeeds(sql, missing, file)));
}

// 3. Cargo.toml: the features, their optional dependencies, the defaults.
let cargo = pruneNeeds(read("Cargo.toml"), missing, "Cargo.toml");
for (const feature of removedFeatures) {
  cargo = cargo.replace(new RegExp(`(^#[^\\n]*\\n)*^${feature} = \\[[^\\]]*\\]\\n`, "m"), "");
  cargo = cargo.replace(new RegExp(`"${feature}", |, "${feature}"`), "");
}
for (const [, dep] of cargo.matchAll(/^([a-z0-9-]+) = \{[^}\n]*optional = true[^}\n]*\}$/gm)) {
  if (!cargo.includes(`"dep:${dep}"`)) cargo = cargo.replace(new RegExp(`(^#[^\\n]*\\n)*^${dep} = [^\\n]*\\n`, "m"), "");
}
if (store === "postgres") {
  cargo = cargo
    .replace(/^(default = \[[^\]]*)\]$/m, '$1, "postgres"]')
    .replace(/^(# Effects in Postgres through Hyperdrive \(docs\/postgres\.md\)); off by default\.$/m, "$1: this copy's store.");
}
write("Cargo.toml", cargo);
// Cargo.lock without what the copy no longer depends on, as its first build
// would leave it: `--workspace` only drops packages, and changes no locked
// version. Offline, from what cargo has fetched; should that fail, the first
// build does it.
try {
  execFileSync("cargo", ["update", "--workspace", "--offline", "--quiet"], { stdio: "pipe" });
} catch (e) {
  console.error(`choose: Cargo.lock is left for the first build to prune (${String(e.stderr ?? e.message).trim()})`);
}

// 4. The sources and their secrets: one per chosen provider.
if (!everything) {
  const firstFeature = SOURCES[chosen[0]].feature;
  let wrangler = read("wrangler.toml");
  const table = chosen.map((p) => SOURCES[p].source).join("\n");
  wrangler = wrangler.replace(/^# Webhook sources:[^]*?\n\n/m, `# Webhook sources: POST /webhooks/{name}. Each names its provider; its secret\n# is the secret {NAME}_WEBHOOK_SECRET (upper-cased, - as _) unless \`secret\`\n# names another variable. docs/providers.md lists each provider's headers.\n[vars.SOURCES]\n${table}\n\n`);
  const features = [...keptFeatures, "admin", ...(dashboard ? ["dashboard"] : []), ...(store === "postgres" ? ["postgres"] : [])].join(",");
  wrangler = wrangler.replace(/WORKER_FEATURES=[a-z,-]+/, `WORKER_FEATURES=${features}`);
  write("wrangler.toml", wrangler);
  // The source's name: the first word of its `name = { … }` line.
  const sourceName = (p) => SOURCES[p].source.match(/^([a-z0-9_-]+) = /m)[1];
  const secrets = chosen.map((p) => `${secretVar(sourceName(p))}=${SOURCES[p].localSecret}`).join("\n");
  write(".dev.vars.example", read(".dev.vars.example").replace(/^([A-Z_]+_WEBHOOK_SECRET=.*\n)+/m, `${secrets}\n`));
  write("Makefile", read("Makefile").replace(/^MINIMAL := .*$/m, `MINIMAL := ${firstFeature}`));
}

// 5. The Makefile's targets whose files went, and the copy's README.
// CI's script runs what the copy has: make test, not the template's copies.
write(".ci/run", pruneNeeds(read(".ci/run"), missing, ".ci/run"));
let makefile = pruneNeeds(read("Makefile"), missing, "Makefile");
for (const [, target] of read("Makefile").matchAll(/^# needs: .*\n(?:##.*\n)*([a-z-]+):/gm)) {
  if (new RegExp(`^${target}:`, "m").test(makefile)) continue;
  // Gone from the list of phony targets and from what `make test` runs.
  makefile = makefile.replace(/^(\.PHONY:|test:).*$/gm, (line) => line.replace(new RegExp(` ${target}(?= |$)`), ""));
}
// `make dev STORE=…` is the template's: a copy's dev.mjs reads its store
// from wrangler.toml, and a Postgres copy's build is the postgres build.
if (!everything) makefile = makefile
  .replace(/^## STORE=postgres: .*\n/m, store === "postgres" ? "## Effects commit in a local Postgres cluster (scripts/postgres.sh).\n" : "")
  .replace(/^\tif \[ "\$\(STORE\)" = postgres \];.*\n/gm, "")
  .replace(/\$\(if \$\(filter postgres,\$\(STORE\)\),WORKER_FEATURES=\$\(POSTGRES\)\) /g, "")
  .replace(/ \$\(if \$\(STORE\),--store \$\(STORE\)\)/g, "");
if (missing.has("postgres")) makefile = makefile.replace(/^\t.*--features postgres.*\n|^\t\$\(STOP_TEST_CLUSTER\)\n/gm, "").replace(/ --with-postgres/g, "");
// A Postgres copy's own `cargo test` runs its effects on Postgres already.
if (store === "postgres") makefile = makefile.replace(/^\tcargo test --lib --features postgres effects::\n/m, "");
write("Makefile", makefile);
if (store === "postgres") makePostgresCopy();
else if (missing.has("postgres")) rmSync("migrations-postgres", { recursive: true, force: true });
copyReadme({ name, providers: chosen, demos, dashboard, store });
// What the copy was generated as, and the engine it is given, for make
// upgrade to check it against.
const version = read("crates/engine/Cargo.toml").match(/^version = "(.*)"$/m)[1];
// The template's files came with this engine: the first upgrade finds their commit by it.
writeLock(".", version, { name, providers: chosen, demos, dashboard, store }, { engine: engineGitDigest(engineFiles(ENGINE)) });
console.log(`chose: ${chosen.join(", ")}; demos ${demos}; dashboard ${dashboard}; store ${store}`);

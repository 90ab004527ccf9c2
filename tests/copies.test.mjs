// What `cargo generate` leaves for each provider chosen alone, with and
// without the demos (and two mixes, with the dashboard): no unchosen provider's or
// demo's name in src/, tests/, cli/, wrangler.toml, migrations/ or the
// README, no `needs:` marker, no doc naming a file or `make` target the copy
// lacks, and a clean migration history. The copies are
// made as hook.rhai makes them, without cargo-generate; `make
// template-check` builds and tests three of them whole.
// needs: template
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";

import { engineFiles, readLock, standing } from "../scripts/engine-files.mjs";
import { leftNames } from "../scripts/template/names.mjs";
import { danglingRefs, recipeMade, storeWordsLeft } from "../scripts/template/refs.mjs";
import { SOURCES } from "../scripts/template/sources.mjs";
import { syntaxErrors } from "../scripts/template/syntax.mjs";

const FILES = execFileSync("git", ["ls-files", "-z", "--cached", "--others", "--exclude-standard"], { encoding: "utf8" })
  .split("\0")
  .filter((file) => file && !file.startsWith("node_modules/"));

/** A copy generated with these answers, in a fresh directory. */
function generate(providers, demos, dashboard, store = "d1") {
  const dir = mkdtempSync(join(tmpdir(), "copy-"));
  // Deleted files not yet committed are listed, and skipped.
  for (const file of FILES.filter((file) => existsSync(file))) {
    mkdirSync(dirname(join(dir, file)), { recursive: true });
    copyFileSync(file, join(dir, file));
  }
  const node = (script, ...args) => execFileSync("node", [`scripts/template/${script}`, ...args], { cwd: dir, stdio: "pipe" });
  node("rename.mjs", "acme-hooks", "2026-01-01");
  node("choose.mjs", providers, String(demos), String(dashboard), "acme-hooks", store);
  // As hook.rhai ends.
  rmSync(join(dir, "scripts/template"), { recursive: true });
  rmSync(join(dir, "cargo-generate.toml"));
  return dir;
}

const NEEDS = /^\s*(\/\/|#|--|<!--) needs( one of)?: /m;
const markersLeft = (dir, path) =>
  readdirSync(join(dir, path), { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile() && NEEDS.test(readFileSync(join(entry.parentPath, entry.name), "utf8")))
    .map((entry) => join(entry.parentPath, entry.name).slice(dir.length + 1));

// Every value of every choice: each provider alone and all of them, demos
// and dashboard on and off, both stores (and all defaults, the template whole).
const ALL = Object.keys(SOURCES).join(",");
const COMBINATIONS = [
  ...Object.keys(SOURCES).flatMap((provider) => [[provider, true, false], [provider, false, false]]),
  ["stripe,github", true, true],
  ["standard-webhooks,hmac,twilio", false, true],
  ["stripe", true, false, "postgres"],
  ["stripe", false, false, "postgres"],
  ["github,hmac", false, true, "postgres"],
  [ALL, true, true],
  [ALL, false, false],
  [ALL, true, true, "postgres"],
  [ALL, false, false, "postgres"],
];
// Texts already parsed, across copies: each distinct file is checked once.
const parsed = new Set();

for (const [providers, demos, dashboard, store = "d1"] of COMBINATIONS) {
  const label = providers === ALL ? "all providers" : `providers=${providers}`;
  test(`${label} demos=${demos} dashboard=${dashboard} store=${store}: it parses, and nothing unchosen is left`, async () => {
    const dir = generate(providers, demos, dashboard, store);
    try {
      assert.deepEqual(await syntaxErrors(dir, parsed), [], "every file parses, and no needs: marker is left");
      assert.deepEqual(leftNames(dir, providers.split(","), demos).map(([, where]) => where), []);
      const places = ["src", "tests", "cli", "scripts", "migrations", "docs", ...(store === "postgres" ? ["migrations-postgres"] : [])];
      assert.deepEqual(places.flatMap((path) => markersLeft(dir, path)), []);
      assert.deepEqual(danglingRefs(dir, recipeMade), [], "its docs name only what it has");
      // The record of the engine it was given, which make upgrade checks.
      const lock = readLock(dir);
      assert.deepEqual(lock.copy, { name: "acme-hooks", providers: providers.split(","), demos: demos && /stripe|github/.test(providers), dashboard, store });
      assert.equal(lock.engine.version, readFileSync(join(dir, "crates/engine/Cargo.toml"), "utf8").match(/^version = "(.*)"$/m)[1]);
      assert.ok(standing(engineFiles(join(dir, "crates/engine")), lock.engine.version, lock, null).known, "template.lock matches crates/engine");
      // Its Cargo.lock is what its first build would leave.
      execFileSync("cargo", ["metadata", "--format-version", "1", "--locked", "--offline"], { cwd: dir, stdio: "pipe" });
      // All defaults keep the template whole, its history and Postgres option with it.
      const whole = providers === ALL && demos && dashboard && store === "d1";
      if (!whole) assert.deepEqual(storeWordsLeft(dir, store), [], "its words are of its own store only");
      // Its setup still installs all it needs on a fresh machine (make
      // test-copies runs where the template's make test installed them).
      const setup = readFileSync(join(dir, "scripts/setup.sh"), "utf8");
      const installs = [
        /rustup toolchain install "\$TOOLCHAIN"/,
        /rustup target add wasm32-unknown-unknown/,
        /cargo install worker-build/,
        /cargo install wasm-bindgen-cli/,
        /npm ci/,
        ...(store === "postgres" ? [/apt_install postgresql/] : []),
        ...(dashboard ? [/apt_install chromium/] : []),
      ];
      for (const step of installs) assert.match(setup, step, "scripts/setup.sh installs it");
      const migrations = readdirSync(join(dir, "migrations")).sort();
      if (!whole) assert.equal(migrations[0], "0001_engine_schema.sql");
      assert.deepEqual(migrations.map((file) => file.slice(0, 4)), migrations.map((_, i) => String(i + 1).padStart(4, "0")));
      const kept = (name) => migrations.some((file) => file.includes(name));
      if (!whole) assert.equal(kept("stripe_demos"), demos && providers.includes("stripe"));
      if (!whole) assert.equal(kept("github_demos"), demos && providers.includes("github"));
      // Its store: Postgres's tables, build and binding, or nothing of Postgres
      // (but `make store`, which switches it).
      const text = (file) => readFileSync(join(dir, file), "utf8");
      // Every effect module it names is there.
      for (const [, mod] of text("src/effects/mod.rs").matchAll(/^mod ([a-z_0-9]+);$/gm)) {
        assert.ok(existsSync(join(dir, "src/effects", `${mod}.rs`)), `src/effects/mod.rs names ${mod}, whose file is gone`);
      }
      assert.match(text("Makefile"), STORE_TARGET);
      if (store === "postgres") {
        // Every engine migration, and the demos' tables where kept, in the
        // template's order, numbered from 0001.
        const tables = readdirSync(join(dir, "migrations-postgres")).sort();
        const demoTables = demos && providers.includes("stripe");
        const names = readdirSync("migrations-postgres").sort().map((file) => file.slice(5)).filter((name) => demoTables || name !== "demo_effects.sql");
        assert.deepEqual(tables, names.map((name, i) => `${String(i + 1).padStart(4, "0")}_${name}`));
        for (const engine of readdirSync("crates/engine/migrations-postgres")) assert.ok(tables.some((t) => t.slice(5) === engine.slice(5)), `${engine} is in migrations-postgres/`);
        if (demoTables && !providers.split(",").includes("github")) assert.doesNotMatch(text("migrations-postgres/0002_demo_effects.sql"), /repo_stars/);
        assert.match(text("Cargo.toml"), /^default = \[.*"postgres"\]$/m);
        assert.match(text("wrangler.toml"), /^STORE = "postgres"$/m);
        assert.match(text("wrangler.toml"), /^\[\[hyperdrive\]\]\nbinding = "HYPERDRIVE"\nid = "0{32}"$/m);
        assert.doesNotMatch(text("Makefile").replace(STORE_TARGET, ""), /build-postgres|STORE/);
        assert.match(text("README.md"), /wrangler hyperdrive create acme-hooks-postgres/);
      } else if (!whole) {
        for (const gone of ["migrations-postgres", "scripts/postgres.sh", "scripts/hyperdrive-guard.cjs", "scripts/deploy-postgres.mjs", "docs/postgres.md"]) {
          assert.ok(!existsSync(join(dir, gone)), `${gone} is left`);
        }
        for (const file of ["Makefile", "Cargo.toml", "wrangler.toml", "scripts/dev.mjs", "scripts/deploy.mjs", "scripts/setup.sh", "README.md"]) {
          assert.doesNotMatch(text(file), /postgres|hyperdrive/i, file);
        }
      }
      // Its queues are its own: two copies in one account never share one.
      const queues = [...readFileSync(join(dir, "wrangler.toml"), "utf8").matchAll(/^queue = "([^"]+)"$/gm)].map((m) => m[1]);
      assert.deepEqual([...new Set(queues)].sort(), ["acme-hooks-forward", "acme-hooks-outbox", "acme-hooks-outbox-dlq"]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
}

/** `make store`, with its comment: the one place a copy's Makefile names a store it does not use. */
const STORE_TARGET = /^(## .*\n)+store:\n\t.*--store "\$\(STORE\)"\n/m;

test("the template's own docs name only files and make targets it has", () => {
  assert.deepEqual(danglingRefs(process.cwd(), recipeMade), []);
});

test("docs/recipes.md is the recipes the copies are given", () => {
  execFileSync("node", ["scripts/template/recipes-doc.mjs"], { stdio: "pipe" });
});

test("the docs check finds a file, a make target or a heading a copy lacks", () => {
  const dir = mkdtempSync(join(tmpdir(), "refs-"));
  try {
    mkdirSync(join(dir, "docs"));
    const doc = [
      "# Here",
      "See `src/effects/stars.rs`, `bench/`, `make soak`, [there](other.md), [here](#nowhere), [ok](#here).",
      "```sh",
      "node soak/run.mjs && make profile",
      "```",
    ].join("\n");
    writeFileSync(join(dir, "docs/a.md"), doc);
    writeFileSync(join(dir, "Makefile"), "test:\n\techo\n");
    const left = danglingRefs(dir, recipeMade).map((where) => where.replace(/^docs\/a\.md:\d+: /, ""));
    assert.deepEqual(left, [
      "links to other.md",
      "links to #nowhere: no such heading",
      "names make soak",
      "names src/effects/stars.rs",
      "names bench/",
      "names make profile",
      "names soak/run.mjs",
    ]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

// The checks of scripts/template/refs.mjs on planted files: what a copy's
// docs, .dev.vars.example, scripts, Makefile and workflows name that it
// lacks, and a store copy's words of the other store. Each planted fault is
// found; what only looks like one (a path built at run time, an output, a
// link elsewhere) is not. tests/copies.test.mjs runs both on every copy.
// needs: template
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";

import { danglingRefs, recipeMade, scriptRefs, storeOf, storeWordsLeft } from "../scripts/template/refs.mjs";

/** A directory holding `files` (path → text); `check` runs on it, then it goes. */
function planted(files, check) {
  const dir = mkdtempSync(join(tmpdir(), "refs-"));
  try {
    for (const [path, text] of Object.entries(files)) {
      mkdirSync(dirname(join(dir, path)), { recursive: true });
      writeFileSync(join(dir, path), text);
    }
    return check(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const MAKEFILE = "test:\n\tnode --test tests/\n\nsink:\n\tnode scripts/sink.mjs\n";

test("every Markdown file but the engine's, and .dev.vars.example, is checked", () => {
  const left = planted(
    {
      Makefile: MAKEFILE,
      "README.md": "# Here\n\n## Use it as a gateway, with no Rust\n\nSee [the records](BENCHMARKS.md) and `make soak`.\n",
      "RELIABILITY.md": "# Faults\n\nRun `make fuzz`. Quoted: `tests/old.rs:12`.\n",
      "docs/a.md": "# A\n\nBENCHMARKS.md has the figures; [online](https://example.com/BENCHMARKS.md) is elsewhere.\n",
      "docs/b.md": '# B\n\nSee README, "Use it as a gateway" and docs/a.md, "Nowhere".\n',
      "crates/engine/README.md": "# Engine\n\nIts schema is in `migrations/`, see `src/gone.rs`.\n",
      "src/lib.rs": "",
      "tests/support/x.mjs": "",
      "scripts/sink.mjs": "",
      ".dev.vars.example": '# Forwarding (README, "Nothing like it"): a sink (make sink), `make bench`.\n# Or see tests/gone.test.mjs.\nA=1\n',
    },
    (dir) => danglingRefs(dir, recipeMade),
  );
  assert.deepEqual(left, [
    "README.md:5: links to BENCHMARKS.md",
    "README.md:5: names make soak",
    "RELIABILITY.md:3: names make fuzz",
    "docs/a.md:3: names BENCHMARKS.md",
    'docs/b.md:3: names docs/a.md, "Nowhere": no such heading',
    ".dev.vars.example:1: names make bench",
    '.dev.vars.example:1: names README, "Nothing like it": no such heading',
    ".dev.vars.example:2: names tests/gone.test.mjs",
  ]);
});

test("scripts, the Makefile and the workflows name only files under the top-level folders a copy has", () => {
  const left = planted(
    {
      Makefile: `${MAKEFILE}\nbench:\n\tnode bench/run.mjs\n\t$(MAKE) costs\n`,
      "scripts/a.sh": [
        "#!/bin/sh",
        "# Runs tests/gone.test.mjs, then `make profile`.",
        'for file in migrations/*.sql; do echo "$file"; done',
        'ls "$ROOT/migrations/0001_x.sql" tests/support/x.mjs target/debug/selftest .wrangler/state',
        "",
      ].join("\n"),
      "scripts/b.mjs": [
        "// A sink to try (README, \"Use it as a gateway\").",
        'const path = `migrations/${name}`;',
        'if (existsSync("migrations-postgres")) read("migrations-postgres/");',
        'console.log("make one with `openssl rand -base64 32`");',
        'run("node", ["soak/run.mjs"]);',
        "",
      ].join("\n"),
      ".github/workflows/ci.yml": "jobs:\n  test:\n    steps:\n      - run: node scripts/missing.mjs && make test\n",
      "tests/support/x.mjs": "",
      "scripts/sink.mjs": "",
      "migrations/0001_x.sql": "",
      "README.md": "# Here\n",
    },
    (dir) => scriptRefs(dir),
  );
  assert.deepEqual(left, [
    ".github/workflows/ci.yml:4: names scripts/missing.mjs",
    "Makefile:8: names bench/run.mjs",
    "Makefile:9: names make costs",
    "scripts/a.sh:2: names tests/gone.test.mjs",
    "scripts/a.sh:2: names make profile",
    'scripts/b.mjs:1: names README, "Use it as a gateway": no such heading',
    "scripts/b.mjs:5: names soak/run.mjs",
  ]);
});

test("CI's script names only make targets the copy has; comments name only records it holds", () => {
  const left = planted(
    {
      Makefile: MAKEFILE,
      ".ci/run": "#!/bin/sh\nset -eu\nmake test\nmake test-copies\n",
      "wrangler.toml": "# 16 ms (BENCHMARKS.md); the template's RELIABILITY.md says more.\nname = \"x\"\n",
      "tests/a.test.mjs": '// Measured in BENCHMARKS.md.\nwrite("GONE.md", "");\n',
      "scripts/sink.mjs": "",
    },
    (dir) => scriptRefs(dir),
  );
  assert.deepEqual(left, [".ci/run:4: names make test-copies", "tests/a.test.mjs:1: names BENCHMARKS.md", "wrangler.toml:1: names BENCHMARKS.md"]);
});

test("a Postgres copy's docs and comments give no D1-only instruction", () => {
  const left = planted(
    {
      "wrangler.toml": '[vars]\nSTORE = "postgres"\n',
      "docs/extend.md": [
        "# Extend it",
        "",
        "- Its tables in a new file under `migrations/`, numbered after the last",
        "  one: `npx wrangler d1",
        "  migrations create DB <what>` makes it.",
        "- It runs in the same D1 batch as the ledger row.",
        "- With effects in Postgres: its tables go under `migrations-postgres/`.",
        "",
      ].join("\n"),
      "README.md": "# Here\n\nEvents are applied to **D1** in one transaction.\n",
      "src/effects/mod.rs": [
        "//! Its tables in a new file under `migrations/`.",
        "const SQL: &str = \"one D1 batch\"; // code, not a comment",
        "",
      ].join("\n"),
    },
    (dir) => {
      assert.equal(storeOf(dir), "postgres");
      return storeWordsLeft(dir, storeOf(dir));
    },
  );
  assert.deepEqual(left, [
    "README.md:3: applied to **D1**",
    "docs/extend.md:3: tables in a new file under `migrations/`",
    "docs/extend.md:4: wrangler d1 migrations create",
    "docs/extend.md:6: D1 batch",
    "src/effects/mod.rs:1: tables in a new file under `migrations/`",
  ]);
});

test("a D1 copy's docs say nothing of Postgres, but of the engine's own files", () => {
  const left = planted(
    {
      "wrangler.toml": "[vars]\n",
      "docs/layout.md": "# Layout\n\n- `crates/engine/src/postgres/`: the Postgres store\n- `migrations-postgres/`: your tables in Postgres\n",
      ".dev.vars.example": "# Hyperdrive's local address\nA=1\n",
      "src/lib.rs": "// Effects commit in D1.\n",
    },
    (dir) => {
      assert.equal(storeOf(dir), "d1");
      return storeWordsLeft(dir, "d1");
    },
  );
  assert.deepEqual(left, [".dev.vars.example:1: Hyperdrive", "docs/layout.md:4: postgres"]);
});

// The upgrade's plan (scripts/upgrade-plan.mjs): versions compared as
// numbers, the CHANGELOG entries between two versions, migrations that
// share a number.
import assert from "node:assert/strict";
import { test } from "node:test";

import { compare, entriesBetween, numberClashes, retiredUses, semver } from "../scripts/upgrade-plan.mjs";

test("versions compare by number, not by text", () => {
  assert.equal(compare("0.10.0", "0.9.9"), 1);
  assert.equal(compare("0.2.0", "0.2.0"), 0);
  assert.equal(compare("1.0.0-rc.1", "0.9.0"), 1);
  assert.equal(compare("0.1.9", "0.2.0"), -1);
  assert.equal(compare("0.3.0-rc.1", "0.3.0"), -1);
  assert.equal(compare("0.3.0-rc.10", "0.3.0-rc.9"), 1);
  assert.equal(compare("0.3.0+build", "0.3.0"), 0);
  assert.equal(semver("0.2"), null);
  assert.throws(() => compare("x", "0.1.0"), /not a version: x/);
});

test("the entries after `from` up to `to`, newest first, each whole", () => {
  const changelog = "# Changelog\n\nIntro.\n\n## [0.4.0] - later\n\nfour\n\n## [0.3.0] - 2027-01-02\n\n### What an owner must do\n\n- three\n\n## [0.2.0] - 2027-01-01\n\ntwo\n";
  assert.deepEqual(entriesBetween(changelog, "0.2.0", "0.3.0"), [{ version: "0.3.0", text: "## [0.3.0] - 2027-01-02\n\n### What an owner must do\n\n- three" }]);
  assert.deepEqual(entriesBetween(changelog, "0.1.0", "0.4.0").map((e) => e.version), ["0.4.0", "0.3.0", "0.2.0"]);
  assert.deepEqual(entriesBetween(changelog, "0.3.0", "0.2.0"), []);
  assert.deepEqual(entriesBetween("", "0.1.0", "0.2.0"), []);
  // No preamble, and link definitions at the end: each entry whole, and only itself.
  const bare = "## [0.2.0] - x\n\ntwo\n\n## [0.1.0] - y\n\none\n\n[0.2.0]: https://example.com/a\n[0.1.0]: https://example.com/b\n";
  assert.deepEqual(entriesBetween(bare, "0.0.1", "0.2.0"), [
    { version: "0.2.0", text: "## [0.2.0] - x\n\ntwo" },
    { version: "0.1.0", text: "## [0.1.0] - y\n\none" },
  ]);
});

test("migrations that share a number are found, each group once", () => {
  assert.deepEqual(numberClashes(["0001_a.sql", "0002_b.sql", "0002_c.sql", "0003_d.sql"]), [["0002_b.sql", "0002_c.sql"]]);
  assert.deepEqual(numberClashes(["0001_a.sql", "0002_b.sql"]), []);
});

test("an owner's SQL that a release retired is named by file and line, once it is crossed", () => {
  const files = new Map([
    ["src/effects/accounts.rs", 'const LOCK: &str = "SELECT balance FROM accounts\n     WHERE id = ?1 for update";\n'],
    ["src/effects/shipments.rs", "/// Waits for updates from the carrier.\nconst ADD: &str = \"UPDATE shipments SET n = n + 1\";\n"],
  ]);
  const found = retiredUses(files, "0.2.0", "0.3.0");
  assert.deepEqual(found.map(({ path, line }) => `${path}:${line}`), ["src/effects/accounts.rs:2"]);
  assert.match(found[0].say, /for_update\(\)/);
  assert.deepEqual(retiredUses(files, "0.3.0", "0.4.0"), [], "already past it");
  assert.deepEqual(retiredUses(files, "0.1.0", "0.2.0"), [], "not reached yet");
});

// The generator's pruning (scripts/template/prune.mjs) as a unit: each
// `needs:` mark cuts its item alone, in every language a copy holds, and
// what is left of a shell script still parses (`bash -n`).
// needs: template
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { test } from "node:test";

import { fileNeedsMissing, pruneDocNeeds, pruneNeeds } from "../scripts/template/prune.mjs";

const MISSING = new Set(["postgres", "gone"]);
const lines = (...text) => `${text.join("\n")}\n`;
/** The script pruned as a copy without postgres, checked to parse. */
function shell(text) {
  const pruned = pruneNeeds(text, MISSING, "scripts/x.sh");
  execFileSync("bash", ["-n"], { input: pruned });
  return pruned;
}

test("a marked case arm goes alone, last in its case or not", () => {
  const last = lines(
    'for arg in "$@"; do',
    '    case "$arg" in',
    "    --with-browser) BROWSER=true ;;",
    "    # needs: postgres",
    "    --with-postgres) POSTGRES=true ;;",
    "    esac",
    "done",
  );
  assert.equal(shell(last), lines('for arg in "$@"; do', '    case "$arg" in', "    --with-browser) BROWSER=true ;;", "    esac", "done"));
  const first = lines('case "$1" in', "# needs: postgres", "start) start ;;", "stop) stop ;;", "esac");
  assert.equal(shell(first), lines('case "$1" in', "stop) stop ;;", "esac"));
});

test("a marked arm over several lines goes to its ;; and no further", () => {
  const text = lines(
    'case "$1" in',
    "# needs: postgres",
    "start)",
    "    mkdir -p x",
    "    start",
    "    ;;",
    "stop) stop ;;",
    "esac",
  );
  assert.equal(shell(text), lines('case "$1" in', "stop) stop ;;", "esac"));
  // The last arm may end at esac without ;;.
  const open = lines('case "$1" in', "stop) stop ;;", "# needs: postgres", "*)", "    start", "esac");
  assert.equal(shell(open), lines('case "$1" in', "stop) stop ;;", "esac"));
});

test("a marked line right above fi, done or esac goes, and the closer stays", () => {
  for (const [opener, closer] of [
    ["if true; then", "fi"],
    ["for x in a b; do", "done"],
    ["while false; do", "done"],
  ]) {
    const text = lines(opener, "    echo kept", "    # needs: postgres", "    echo gone", closer, "echo after");
    assert.equal(shell(text), lines(opener, "    echo kept", closer, "echo after"), opener);
  }
  const arm = lines('case "$1" in', "a) echo a ;;", "# needs: postgres", "b) echo b ;;", "esac", "echo after");
  assert.equal(shell(arm), lines('case "$1" in', "a) echo a ;;", "esac", "echo after"));
});

test("a cut that would leave a block empty is refused, naming the file", () => {
  for (const [opener, closer] of [
    ["if true; then", "fi"],
    ["for x in a b; do", "done"],
    ["else", "fi"],
    ["start() {", "}"],
  ]) {
    const text = lines(...(opener === "else" ? ["if true; then", "    echo a"] : []), opener, "    # needs: postgres", "    echo gone", closer);
    assert.throws(() => pruneNeeds(text, MISSING, "scripts/x.sh"), /scripts\/x\.sh: .*leaves an empty block/, opener);
    // Kept, the same text stays as it was, without its marker.
    assert.doesNotMatch(pruneNeeds(text, new Set(), "scripts/x.sh"), /needs/);
  }
});

test("a command that holds a parenthesis is a command, not an arm", () => {
  const text = lines('case "$1" in', "a)", "    # needs: postgres", '    echo "step 2) start"', "    echo kept", "    ;;", "esac");
  assert.equal(shell(text), lines('case "$1" in', "a)", "    echo kept", "    ;;", "esac"));
});

test("a marked arm that holds a case of its own goes whole, and nothing after it", () => {
  const text = lines(
    'case "$1" in',
    "# needs: postgres",
    "a)",
    '    case "$2" in',
    "    x) echo x ;;",
    "    esac",
    "    ;;",
    "b) echo b ;;",
    "esac",
  );
  assert.equal(shell(text), lines('case "$1" in', "b) echo b ;;", "esac"));
});

test("a marked case ends at its esac, piped or not; one left open is an error", () => {
  const piped = lines("set -eu", "# needs: postgres", 'case "$1" in', "a) echo a ;;", "esac | sort", "echo kept");
  assert.equal(shell(piped), lines("set -eu", "echo kept"));
  const open = lines("set -eu", "# needs: postgres", 'case "$1" in', "a) echo a ;;", "echo kept");
  assert.throws(() => pruneNeeds(open, MISSING, "scripts/x.sh"), /no esac closes the case/);
});

test("a script without .sh is shell by its #! line", () => {
  const ci = lines("#!/bin/sh", "set -eu", "make test", "# needs: template", "# The copies.", "make test-copies");
  assert.equal(pruneNeeds(ci, new Set(["template"]), ".ci/run"), lines("#!/bin/sh", "set -eu", "make test"));
  const empty = lines("#!/bin/sh", "if true; then", "    # needs: template", "    make x", "fi");
  assert.throws(() => pruneNeeds(empty, new Set(["template"]), ".ci/run"), /leaves an empty block/);
});

test("two marks in a row: each cuts its own item, or stays without its marker", () => {
  const text = lines(
    "set -eu",
    "# needs: postgres",
    "A=1",
    "# needs: kept",
    "B=2",
    "# needs: gone",
    "if true; then",
    "    C=3",
    "fi",
    "# needs: postgres",
    "# needs: kept",
    "D=4",
    "E=5",
  );
  assert.equal(shell(text), lines("set -eu", "B=2", "E=5"));
});

test("a whole block marked goes whole: if, for, case, function", () => {
  const text = lines(
    "set -eu",
    "# needs: postgres",
    "if [ -n x ]; then",
    "    echo a",
    "elif [ -n y ]; then",
    "    echo b",
    "else",
    "    echo c",
    "fi",
    "# needs: postgres",
    'case "$1" in',
    "a) echo a ;;",
    "esac",
    "# needs: postgres",
    "start() {",
    "    echo start",
    "}",
    "echo kept",
  );
  assert.equal(shell(text), lines("set -eu", "echo kept"));
});

test("-- is an option in shell and a comment in SQL", () => {
  // A shell arm whose pattern starts with -- is the item, not a comment.
  const text = lines('case "$1" in', "# needs: postgres", "--with-postgres) P=1 ;;", "--other) O=1 ;;", "esac");
  assert.equal(shell(text), lines('case "$1" in', "--other) O=1 ;;", "esac"));
  const sql = lines("CREATE TABLE a (id INTEGER);", "-- needs: postgres", "-- its index", "CREATE INDEX b ON a (id);", "SELECT 1;");
  assert.equal(pruneNeeds(sql, MISSING, "migrations/0001_x.sql"), lines("CREATE TABLE a (id INTEGER);", "SELECT 1;"));
  assert.ok(fileNeedsMissing("-- needs: postgres\nSELECT 1;\n", MISSING, "m.sql"));
  assert.ok(!fileNeedsMissing("-- needs: postgres\nSELECT 1;\n", MISSING, "m.sh"));
});

test("Rust, JavaScript and the Makefile: the item under the mark, with its attributes", () => {
  const rust = lines(
    "use a::b;",
    "// needs: postgres",
    "#[derive(Debug)]",
    "struct Gone {",
    "    a: u8,",
    "}",
    "struct Kept;",
  );
  assert.equal(pruneNeeds(rust, MISSING, "src/a.rs"), lines("use a::b;", "struct Kept;"));
  const js = lines("import a from \"a\";", "// needs: gone", 'test("gone", () => {', "  a();", "});", 'test("kept", () => {});');
  assert.equal(pruneNeeds(js, MISSING, "tests/a.test.mjs"), lines("import a from \"a\";", 'test("kept", () => {});'));
  const makefile = lines(
    "test: setup build",
    "",
    "# needs: postgres",
    "## The Postgres build.",
    "build-postgres:",
    "\tsh scripts/build.sh",
    "\tcp -r build x",
    "",
    "build:",
    "\tsh scripts/build.sh",
  );
  assert.equal(pruneNeeds(makefile, MISSING, "Makefile"), lines("test: setup build", "", "build:", "\tsh scripts/build.sh"));
});

test("the opening comment's mark decides the whole file, in its own language", () => {
  assert.ok(fileNeedsMissing("#!/bin/sh\n# A script.\n# needs: postgres\nset -eu\n", MISSING, "scripts/postgres.sh"));
  assert.ok(!fileNeedsMissing("#!/bin/sh\nset -eu\n# needs: postgres\nA=1\n", MISSING, "scripts/setup.sh"));
  assert.equal(pruneNeeds("// A file.\n// needs: kept\nconst a = 1;\n", MISSING, "a.mjs"), "// A file.\nconst a = 1;\n");
});

test("Markdown: two marked sections in a row go each with its own marker", () => {
  const page = "# Page\n\nKept.\n\n<!-- needs: template -->\n## One\n\nFirst.\n\n<!-- needs: postgres -->\n## Two\n\nSecond.\n\n## Three\n\nThird.\n";
  assert.equal(pruneDocNeeds(page, new Set(["template"])), "# Page\n\nKept.\n\n## Two\n\nSecond.\n\n## Three\n\nThird.\n");
  assert.equal(pruneDocNeeds(page, new Set(["postgres"])), "# Page\n\nKept.\n\n## One\n\nFirst.\n\n## Three\n\nThird.\n");
  assert.equal(pruneDocNeeds(page, new Set(["template", "postgres"])), "# Page\n\nKept.\n\n## Three\n\nThird.\n");
});

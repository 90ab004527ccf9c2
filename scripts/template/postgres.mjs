// What makes a copy with `store=postgres` (choose.mjs) a Postgres copy:
// the `postgres` feature built by default, `STORE = "postgres"` and the
// Hyperdrive binding in wrangler.toml (`make deploy` creates the config
// and writes its id), and its tables in migrations-postgres/ only: the
// engine's, then the kept demos'. D1 keeps the engine's own tables, and
// the demos' too, which the D1 tests of the engine's machinery drive.
import { readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const LOCAL_URL = "postgresql://webhooks:webhooks@127.0.0.1:5433/webhooks";

const read = (file) => readFileSync(file, "utf8");

/** Rewrites `file` with `edit`, which must change it: a template that moved on fails here. */
function rewrite(file, edit) {
  const text = read(file);
  const edited = edit(text);
  if (edited === text) throw new Error(`postgres copy: ${file} has nothing to change (has the template changed?)`);
  writeFileSync(file, edited);
}

export function makePostgresCopy() {
  rewrite("wrangler.toml", (toml) =>
    toml
      .replace(
        /^\[vars\]\n/m,
        `[vars]\n# Where the effects commit: "postgres" (through the Hyperdrive binding\n# below; docs/postgres.md), or "d1".\nSTORE = "postgres"\n`,
      )
      .replace(
        /^# The ledger and the business tables\. /m,
        "# The engine's own tables: a copy of the ledger, the outbox's and\n# forwarding's rows, the counters (your tables are in Postgres).\n# ",
      )
      .replace(
        /^(migrations_dir = "migrations"\n)/m,
        `$1
# Your Postgres, through Hyperdrive: the ledger, your tables and the outbox
# rows commit there in one transaction. \`make deploy\` asks for its
# connection string, creates the Hyperdrive config (caching disabled) and
# writes its id here (the zeros stand for "not created yet"). Locally,
# \`make dev\` runs the cluster of scripts/postgres.sh at this address.
[[hyperdrive]]
binding = "HYPERDRIVE"
id = "00000000000000000000000000000000"
localConnectionString = "${LOCAL_URL}"
`,
      ),
  );
  // The deploy workflow: the Hyperdrive config made, then Postgres's
  // migrations (the repository secret POSTGRES_URL) before the deploy.
  rewrite(".github/workflows/deploy.yml", (yml) =>
    yml
      .replace(
        /^(\s+)if grep -q '\^database_id = "0{8}-0{4}-0{4}-0{4}-0{12}"' wrangler\.toml; then$/m,
        `$1if grep -q '^database_id = "00000000-0000-0000-0000-000000000000"' wrangler.toml ||\n$1    grep -q '^id = "00000000000000000000000000000000"' wrangler.toml; then`,
      )
      .replace(
        /^( {6}- if: steps\.created\.outputs\.yes == 'true'\n {8}uses: cloudflare\/wrangler-action@v3)$/m,
        `      - if: steps.created.outputs.yes == 'true'\n        env:\n          POSTGRES_URL: \${{ secrets.POSTGRES_URL }}\n        run: node scripts/deploy-postgres.mjs migrate\n$1`,
      ),
  );
  // The build is the postgres build.
  rewrite("tests/support/postgres.mjs", (text) =>
    text.replace(/^export const POSTGRES_BUILD = ".*";$/m, 'export const POSTGRES_BUILD = "build/index.js";'),
  );
  // A migration the choice left without a statement (the demos' tables,
  // none kept) goes; the rest are numbered from 0001 again, under their
  // own names (make upgrade finds the engine's by name), as migrations/ is.
  const statements = (text) => text.split("\n").some((line) => line.trim() && !line.trim().startsWith("--"));
  const kept = readdirSync("migrations-postgres").sort().filter((file) => {
    const path = join("migrations-postgres", file);
    if (statements(read(path))) return true;
    rmSync(path);
    return false;
  });
  kept.forEach((file, i) => {
    const numbered = `${String(i + 1).padStart(4, "0")}_${file.slice(5)}`;
    if (numbered !== file) renameSync(join("migrations-postgres", file), join("migrations-postgres", numbered));
  });
}

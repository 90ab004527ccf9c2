// The README of a generated copy: about the copy (its name, sources, secrets,
// the three commands) and the "Make it yours" recipes that apply to it, in
// short, with their steps and code in the copy's docs/recipes.md — written
// from the same steps `make template-check` applies and tests.
import { readFileSync, readdirSync, writeFileSync } from "node:fs";

import { secretVar } from "../secret-var.mjs";
import { forCopy, RECIPES } from "./recipes.mjs";

/** The language of a step's code block, by the file it goes in. */
function language(step) {
  const file = step.write ?? step.insert ?? "";
  if (file.endsWith(".rs")) return "rust";
  if (file.endsWith(".mjs")) return "js";
  return file === "Cargo.toml" ? "toml" : "sql";
}

/** One step of a recipe, as the README tells it; `number` names its migration's file. */
function stepText(step, number) {
  if (!step.say) return "";
  const code = step.write || step.migration || step.insert ? step.text : null;
  return `- ${step.say.replaceAll("NNNN", number(step))}\n${code ? `\n\`\`\`${language(step)}\n${code.trimEnd()}\n\`\`\`\n` : ""}`;
}

/**
 * The number a recipe's migration takes, the recipe applied alone after the
 * last migration of its folder; `template`: the template's own page, which
 * keeps `NNNN`.
 */
function migrationNumbers(template) {
  return (step) => (template ? "NNNN" : String(nextMigrationNumber(step.dir)).padStart(4, "0"));
}

/** The number the next migration in `dir` of this checkout takes: one after the last. */
function nextMigrationNumber(dir = "migrations") {
  const last = readdirSync(dir).filter((f) => /^\d{4}_/.test(f)).sort().at(-1) ?? "0000";
  return Number(last.slice(0, 4)) + 1;
}

/** The recipes that apply to a copy, as Markdown sections under `level`. */
function recipesText(copy, level, template) {
  const recipes = RECIPES.filter((r) => r.applies(copy));
  const number = migrationNumbers(template);
  const steps = (r) => r.steps.filter(forCopy(copy));
  return recipes
    .map((r) => `${level} ${r.title}\n\n${r.intro}\n\n${steps(r).map((s) => stepText(s, number)).join("\n")}${r.outro ? `\n${r.outro}\n` : ""}`)
    .join("\n");
}

/** The files a recipe touches in `copy`, for the README's short form. */
function filesOf(recipe, copy, number) {
  const files = recipe.steps
    .filter(forCopy(copy))
    .map((s) => s.write ?? s.insert ?? s.replace ?? s.cut ?? s.delete ?? `${s.dir ?? "migrations"}/${number(s)}_${s.migration}.sql`);
  return [...new Set(files)].map((f) => `\`${f}\``).join(", ");
}

/** The recipes' page: a copy's (numbered from its migrations), or the template's with all of them (`NNNN`). */
export function recipesPage(copy, intro, { template = false } = {}) {
  return `# Make it yours: recipes\n\n${intro}\n\n${recipesText(copy, "##", template)}`;
}

/** The sources the copy's wrangler.toml declares: [name, provider]. */
function declaredSources() {
  const table = readFileSync("wrangler.toml", "utf8").split("[vars.SOURCES]\n")[1].split("\n\n")[0];
  return [...table.matchAll(/^([a-z0-9_-]+) = \{ provider = "([a-z-]+)"(?:.*\bsecret = "([A-Z0-9_]+)")?/gm)].map((m) => [m[1], m[2], m[3]]);
}

// A Postgres copy: where its tables are, and what make deploy does for it.
const postgresTables = (demos) => `
Effects commit in your Postgres, through Hyperdrive: the event's ledger
row, your writes and its outbox rows, in one transaction. Your tables are
in \`migrations-postgres/\`. D1 keeps the engine's own tables${demos ? " (and the\ndemos', for the tests that run the engine on D1)" : ""}.
[docs/postgres.md](docs/postgres.md) says why, and what a failure answers.
`;
const postgresDeploy = (name) => `It logs you in, creates the D1 database and applies its migrations. Then
it asks for your Postgres connection string (or takes \`POSTGRES_URL\`),
applies \`migrations-postgres/\` with psql, and creates the Hyperdrive
config as this command would, its id written into \`wrangler.toml\`:

\`\`\`sh
npx wrangler hyperdrive create ${name}-postgres --connection-string="postgres://user:password@host:5432/db" --caching-disabled
\`\`\`

Then it creates the queues and secrets, and deploys. It asks for each
source's secret. The deploy workflow needs the repository secret
\`POSTGRES_URL\` too.
`;

export function copyReadme({ name, providers, demos, dashboard, store }) {
  const copy = { providers, demos, dashboard, store };
  const applies = RECIPES.filter((r) => r.applies(copy));
  const number = migrationNumbers(false);
  const recipes = applies.map((r) => `- ${r.title}:\n  ${filesOf(r, copy, number)}.`);
  writeFileSync(
    "docs/recipes.md",
    recipesPage(copy, "The recipes of this copy's README, step by step, with their code. Each was applied to a\ncopy like this one and its tests run before the template was released."),
  );
  const rows = declaredSources().map(([source, provider, setting]) => {
    const secret = secretVar(source, { secret: setting });
    return `| \`${source}\` | ${provider} | \`POST /webhooks/${source}\` | \`${secret}\` |`;
  });

  const postgres = store === "postgres";
  const text = `# ${name}

A webhook endpoint on Cloudflare Workers, in Rust. Each event it receives
has one effect, however many times and however concurrently it arrives.
It was generated from the idempotent-webhooks template.

## Sources

| Source | Provider | Path | Secret |
|---|---|---|---|
${rows.join("\n")}

Sources are declared under \`[vars.SOURCES]\` in \`wrangler.toml\`. Local
secrets are in \`.dev.vars\` (copied from \`.dev.vars.example\`).
${postgres ? postgresTables(demos) : ""}${demos ? "\nThe demo effects in `src/effects/` show the shapes an effect takes.\nReplace them with yours.\n" : "\nA verified event writes its ledger row and nothing else, until you add an\neffect (`src/effects/`, below).\n"}
## Run it

\`\`\`sh
make dev    # http://localhost:8787, with local D1, Durable Objects and Queues${postgres ? "\n            # and a local Postgres for the effects (sh scripts/postgres.sh psql)" : ""}
make test   # every check, end to end in the local runtime
\`\`\`

Both install what they need first${postgres ? " (Debian's `postgresql` too)" : ""}. No Cloudflare account is needed.
\`make dev PORT=8788\` serves on another port.

\`cargo test\` runs your effects' tests alone, in ${postgres ? "about 3 s" : "about a second"} after an
edit: each effect applied with its ledger row to a real ${postgres ? "Postgres (the copy's\ntest cluster, started on the first run)" : "SQLite, as D1 runs\nit"}, made from your migrations. \`make unit\` (every host test) takes
${postgres ? "5" : "2"} s; the first build, under a minute ([Test your effect](docs/extend.md#test-your-effect)).
The build's warning that the \`target_features\` section is missing is
harmless: \`strip = true\` drops it with the function names (56 KB gzipped).
${dashboard ? "\nThe dashboard is at <http://localhost:8787/admin> (token: `ADMIN_TOKEN` in\n`.dev.vars`).\n" : ""}
## Deploy

\`\`\`sh
make deploy
\`\`\`

${postgres ? postgresDeploy(name) : "It logs you in, creates the D1 database, queues and secrets, applies the\nmigrations and deploys. It asks for each source's secret.\n"}
## Make it yours

${recipes.join("\n")}

Step by step, with the code: [docs/recipes.md](docs/recipes.md).

## Upgrade

\`src/\` is your app. The engine (\`crates/engine/\`, the crate
\`webhook-engine\`) is not yours to edit: a newer one comes in whole, with
its migrations after yours.

\`\`\`sh
make upgrade ENGINE=<checkout of the template, or version>
make test
\`\`\`

How: [docs/upgrades.md](docs/upgrades.md).

## More

- [docs/](docs/): the guarantees, every reply, configuration, providers,
  operating it, deploying, extending it, and the layout of the code.
- [docs/performance.md](docs/performance.md): the template's speed, size
  and costs, in short, and where its full figures are.
`;
  writeFileSync("README.md", text);
}

// Renames a generated copy after its project: `node rename.mjs <name> <today>`
// (run by hook.rhai). The worker, the Cargo package (and so the crate the
// tests import), the npm package, the D1 database and the queues take the
// name; compatibility_date becomes today — or, if that is later, the newest
// date the locked local runtime (workerd) supports, which refuses any later
// one. Each replacement must match, so a template whose files changed shape
// fails here rather than half renamed. The template's own check
// (`make template-check`) is removed from the copy.
import { readFileSync, rmSync, writeFileSync } from "node:fs";

const [name, today] = process.argv.slice(2);
// Queue names stop at 63 characters, and the longest is `<name>-outbox-dlq`.
if (!/^[a-z][a-z0-9-]{0,51}$/.test(name ?? "") || !/^\d{4}-\d{2}-\d{2}$/.test(today ?? "")) {
  console.error("usage: node rename.mjs <name: up to 52 lowercase letters, digits, -> <today: YYYY-MM-DD>");
  process.exit(2);
}
const crate = name.replaceAll("-", "_");
const workerd = readFileSync("package-lock.json", "utf8").match(
  /"node_modules\/workerd": \{\s*"version": "1\.(\d{4})(\d{2})(\d{2})\./,
);
if (!workerd) {
  console.error("rename: no workerd version in package-lock.json");
  process.exit(1);
}
const supported = `${workerd[1]}-${workerd[2]}-${workerd[3]}`;
const date = today < supported ? today : supported;

const RENAMES = {
  "Cargo.toml": [[/^name = "idempotent-webhooks"$/m, `name = "${name}"`]],
  "Cargo.lock": [[/^name = "idempotent-webhooks"$/m, `name = "${name}"`]],
  "package.json": [[/"name": "idempotent-webhooks-worker"/, `"name": "${name}-worker"`]],
  "package-lock.json": [[/"name": "idempotent-webhooks-worker"/g, `"name": "${name}-worker"`]],
  "wrangler.toml": [
    [/^name = "idempotent-webhooks"$/m, `name = "${name}"`],
    [/^compatibility_date = "\d{4}-\d{2}-\d{2}"$/m, `compatibility_date = "${date}"`],
    [/^database_name = "idempotent-webhooks"$/m, `database_name = "${name}"`],
    [/"webhook-outbox-dlq"/g, `"${name}-outbox-dlq"`],
    [/"webhook-outbox"/g, `"${name}-outbox"`],
    [/"webhook-forward"/g, `"${name}-forward"`],
  ],
  "tests/property_fuzz/main.rs": [[/\bidempotent_webhooks::/g, `${crate}::`]],
  "tests/property_fuzz/requests.rs": [[/\bidempotent_webhooks::/g, `${crate}::`]],
  Makefile: [
    [/ template-check\b/, ""],
    [/^## cargo generate from this checkout[^]*?template-check\.sh\n\n/m, ""],
  ],
};

for (const [file, replacements] of Object.entries(RENAMES)) {
  let text = readFileSync(file, "utf8");
  for (const [pattern, replacement] of replacements) {
    if (!pattern.test(text)) {
      console.error(`rename: ${file} has no ${pattern}`);
      process.exit(1);
    }
    pattern.lastIndex = 0;
    text = text.replace(pattern, replacement);
  }
  writeFileSync(file, text);
}
// Cargo keeps its lockfile's packages sorted by name then version: moved to
// its new name's place, the root package leaves the copy's tree clean.
const SEPARATOR = "\n[[package]]\n";
const [head, ...packages] = readFileSync("Cargo.lock", "utf8").split(SEPARATOR);
const id = (block) => {
  const [, name, version] = block.match(/^name = "(.*)"\nversion = "(.*)"$/m);
  return { name, version: version.split(/[.+-]/).map((part) => (/^\d+$/.test(part) ? Number(part) : part)) };
};
const byId = (a, b) => {
  const [x, y] = [id(a), id(b)];
  if (x.name !== y.name) return x.name < y.name ? -1 : 1;
  for (let i = 0; i < Math.max(x.version.length, y.version.length); i++) {
    if (x.version[i] !== y.version[i]) return (x.version[i] ?? -1) < (y.version[i] ?? -1) ? -1 : 1;
  }
  return 0;
};
writeFileSync("Cargo.lock", [head, ...packages.sort(byId)].join(SEPARATOR));
rmSync("scripts/template-check.sh");
console.log(`renamed to ${name}; compatibility_date ${date}`);

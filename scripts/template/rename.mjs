// Renames a generated copy after its project: `node rename.mjs <name> <date>`
// (run by hook.rhai). The worker, the Cargo package (and so the crate the
// tests import), the npm package, the D1 database and the queues take the
// name; compatibility_date becomes <date>. Each replacement must match, so a
// template whose files changed shape fails here rather than half renamed.
import { readFileSync, writeFileSync } from "node:fs";

const [name, date] = process.argv.slice(2);
if (!/^[a-z][a-z0-9-]{0,62}$/.test(name ?? "") || !/^\d{4}-\d{2}-\d{2}$/.test(date ?? "")) {
  console.error("usage: node rename.mjs <name: lowercase letters, digits, -> <date: YYYY-MM-DD>");
  process.exit(2);
}
const crate = name.replaceAll("-", "_");

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
  ],
  "tests/property_fuzz/main.rs": [[/\bidempotent_webhooks::/g, `${crate}::`]],
  "tests/property_fuzz/requests.rs": [[/\bidempotent_webhooks::/g, `${crate}::`]],
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
console.log(`renamed to ${name}; compatibility_date ${date}`);

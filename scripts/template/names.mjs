// What a generated copy left behind that it did not choose: every line of
// src/, tests/, cli/, wrangler.toml, migrations/ or the README that names an
// unchosen provider or, without the demos, a demo. A word inside another
// ("start") is no name; the generic HMAC provider's names are `"hmac"` and
// "generic hmac", not the algorithm's; the Standard Webhooks provider's is
// standard-webhooks (or _), not the spec's. `node names.mjs <providers> <demos>`
// in a copy prints them and fails if there are any.
import { existsSync, readFileSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";

import { SOURCES } from "./sources.mjs";

const PLACES = ["src", "tests", "cli/src", "wrangler.toml", "migrations", "README.md"];
const DEMO_NAMES = ["orders", "repo_stars", "stars", "subscriptions", "receipt"];

const files = (path) =>
  !existsSync(path) ? [] : statSync(path).isDirectory() ? readdirSync(path).flatMap((entry) => files(join(path, entry))) : [path];

/** The unchosen names' patterns: `providers` a list, `demos` a boolean. */
function unchosen(providers, demos) {
  const words = Object.keys(SOURCES).filter((p) => !providers.includes(p));
  // svix is served by the standard-webhooks module, which keeps its name.
  const named = words.filter((p) => !(p === "standard-webhooks" && providers.includes("svix")));
  // As choose.mjs: the demos are Stripe's and GitHub's.
  if (!demos || !providers.some((p) => p === "stripe" || p === "github")) named.push(...DEMO_NAMES);
  // "Standard Webhooks", the spec, is also how forwarding signs: only the
  // provider's own name, with - or _, is the provider's.
  const pattern = (word) =>
    word === "hmac" ? '"hmac"|generic[-_ ]hmac' : word === "standard-webhooks" ? "\\bstandard[-_]webhooks\\b" : `\\b${word.replace(/-/g, "[-_ ]")}\\b`;
  return named.map((word) => [word, new RegExp(pattern(word), "i")]);
}

/** `[word, "file:line: text"]` for each line of `dir` naming what was not chosen. */
export function leftNames(dir, providers, demos) {
  const patterns = unchosen(providers, demos);
  const left = [];
  for (const file of PLACES.flatMap((place) => files(join(dir, place)))) {
    readFileSync(file, "utf8")
      .split("\n")
      .forEach((line, i) => {
        for (const [word, pattern] of patterns) if (pattern.test(line)) left.push([word, `${file.slice(dir.length + 1)}:${i + 1}: ${line.trim()}`]);
      });
  }
  return left;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const [list, demos] = process.argv.slice(2);
  const left = leftNames(process.cwd(), list.split(",").map((p) => p.trim()), demos === "true");
  for (const [word, where] of left) console.error(`'${word}' is not chosen, but is left: ${where}`);
  process.exit(left.length ? 1 : 0);
}

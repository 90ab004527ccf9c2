// Applies a "Make it yours" recipe to the copy in the current directory, as
// its README tells a person to: `node apply-recipe.mjs <a|b|c>`. Every step
// must find what it edits, so a recipe the code has outgrown fails here.
import { existsSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";

import { forCopy, RECIPES } from "./recipes.mjs";

const recipe = RECIPES.find((r) => r.id === process.argv[2]);
if (!recipe) {
  console.error(`usage: node apply-recipe.mjs <${RECIPES.map((r) => r.id).join("|")}>`);
  process.exit(2);
}
const fail = (why) => {
  console.error(`recipe ${recipe.id}: ${why}`);
  process.exit(1);
};
const read = (path) => (existsSync(path) ? readFileSync(path, "utf8") : fail(`${path} is missing`));

/** The next migration's file name in `dir`: one more than the last one's number. */
export function nextMigration(name, dir = "migrations") {
  const last = readdirSync(dir).sort().at(-1);
  const number = String(Number(last.slice(0, 4)) + 1).padStart(4, "0");
  return `${dir}/${number}_${name}.sql`;
}

// The copy's store, as its wrangler.toml says.
const store = /^STORE = "postgres"$/m.test(read("wrangler.toml")) ? "postgres" : "d1";
for (const step of recipe.steps.filter(forCopy({ store }))) {
  if (step.write) {
    if (existsSync(step.write)) fail(`${step.write} exists already`);
    writeFileSync(step.write, step.text);
  } else if (step.migration) {
    writeFileSync(nextMigration(step.migration, step.dir), step.text);
  } else if (step.delete) {
    read(step.delete);
    rmSync(step.delete);
  } else if (step.insert) {
    const text = read(step.insert);
    const match = text.match(step.after);
    if (!match) fail(`${step.insert} has no ${step.after}`);
    const at = step.before ? match.index : match.index + match[0].length + 1;
    writeFileSync(step.insert, text.slice(0, at) + step.text + text.slice(at));
  } else if (step.replace || step.cut) {
    const path = step.replace ?? step.cut;
    const text = read(path);
    if (!step.pattern.test(text)) fail(`${path} has no ${step.pattern}`);
    step.pattern.lastIndex = 0;
    writeFileSync(path, text.replace(step.pattern, step.text ?? ""));
  }
}
console.log(`recipe ${recipe.id} applied: ${recipe.title}`);

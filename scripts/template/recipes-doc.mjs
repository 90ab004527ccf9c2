// docs/recipes.md is the "Make it yours" recipes as a copy with every
// provider and the demos shows them (scripts/template/recipes.mjs, which
// `make template-check` applies and tests). `node recipes-doc.mjs` checks
// the page is up to date; `--write` rewrites it.
import { readFileSync, writeFileSync } from "node:fs";

import { recipesText } from "./readme.mjs";
import { SOURCES } from "./sources.mjs";

const PAGE = "docs/recipes.md";
const text = `# Make it yours: recipes

Each generated copy's README has the recipes that apply to it; these are
all three. \`make template-check\` applies each to generated copies, as
written here, and runs their tests.

${recipesText({ providers: Object.keys(SOURCES), demos: true, dashboard: true }, "##")}`;

if (process.argv[2] === "--write") {
  writeFileSync(PAGE, text);
} else if (readFileSync(PAGE, "utf8") !== text) {
  console.error(`${PAGE} is not the recipes of scripts/template/recipes.mjs: run node scripts/template/recipes-doc.mjs --write`);
  process.exit(1);
}

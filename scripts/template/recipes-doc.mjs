// docs/recipes.md is the "Make it yours" recipes as a copy with every
// provider and the demos shows them (scripts/template/recipes.mjs, which
// `make template-check` applies and tests). `node recipes-doc.mjs` checks
// the page is up to date; `--write` rewrites it.
import { readFileSync, writeFileSync } from "node:fs";

import { recipesPage } from "./readme.mjs";
import { SOURCES } from "./sources.mjs";

const PAGE = "docs/recipes.md";
const text = recipesPage(
  { providers: Object.keys(SOURCES), demos: true, dashboard: true },
  "Each generated copy's README lists the recipes that apply to it; these are\nall three. `make template-check` applies each to generated copies, as\nwritten here, and runs their tests. A copy's page numbers each new migration.",
  { template: true },
);

if (process.argv[2] === "--write") {
  writeFileSync(PAGE, text);
} else if (readFileSync(PAGE, "utf8") !== text) {
  console.error(`${PAGE} is not the recipes of scripts/template/recipes.mjs: run node scripts/template/recipes-doc.mjs --write`);
  process.exit(1);
}

// Checks that the GitHub workflows parse and do what the README says: CI
// runs the README's test command on push and pull request, and the deploy
// applies the D1 migrations before deploying, on push to main.
import { readFileSync } from "node:fs";
import assert from "node:assert/strict";
import { parse } from "yaml";

const load = (name) => parse(readFileSync(`.github/workflows/${name}`, "utf8"));
const runs = (job) => job.steps.map((s) => s.run ?? "").join("\n");

const ci = load("ci.yml");
assert.deepEqual(ci.on.push.branches, ["main"], "ci.yml runs on push to main");
assert.ok("pull_request" in ci.on, "ci.yml runs on pull requests");
assert.match(runs(ci.jobs.test), /^make test$/m, "ci.yml runs the README's test command");
assert.match(readFileSync("README.md", "utf8"), /^make test\b/m, "the README's test command is make test");

const deploy = load("deploy.yml");
assert.deepEqual(deploy.on.push.branches, ["main"], "deploy.yml runs on push to main");
const action = deploy.jobs.deploy.steps.find((s) => s.uses?.startsWith("cloudflare/wrangler-action@"));
assert.ok(action, "deploy.yml deploys with Cloudflare's wrangler action");
assert.match(action.with.preCommands, /d1 migrations apply DB --remote/, "migrations before the deploy");
assert.equal(action.with.command, "deploy");
for (const secret of ["CLOUDFLARE_API_TOKEN", "CLOUDFLARE_ACCOUNT_ID"]) {
  assert.match(JSON.stringify(action.with), new RegExp(`secrets\\.${secret}`), `deploy.yml uses ${secret}`);
}
console.log("workflows: ci.yml and deploy.yml parse and check out");

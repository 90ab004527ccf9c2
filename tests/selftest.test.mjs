// The self-test CLI's `storm`, run against the local worker: it must pass on
// an idempotent endpoint and fail when its deliveries are not accepted.
// needs: stripe, github, demos
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";

import { startWorker } from "./support/worker.mjs";

const TOKEN = "selftest-admin-token-0123456789abcdef";
let w;
let url;
before(async () => {
  w = await startWorker({ ADMIN_TOKEN: TOKEN }, { port: 0 });
  url = (await w.mf.ready).origin;
});
after(() => w.dispose());

/** Runs the CLI without blocking this process: Miniflare's log pipe must keep draining. */
function selftest(...args) {
  return new Promise((resolve) => {
    execFile("target/debug/selftest", args, { timeout: 60_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? error.code : 0, out: stdout + stderr });
    });
  });
}

test("storm: 50 concurrent copies of a Stripe checkout, exactly one of each", async () => {
  const { code, out } = await selftest("storm", "stripe", "--url", url, "--secret", "whsec_test_current", "--admin-token", TOKEN, "--side-effects", "1");
  assert.equal(code, 0, out);
  assert.match(out, /responses \(\d+ ms\): 200 duplicate x49, 200 processed x1/);
  assert.match(out, /ledger rows: 1 {3}effect committed: yes/);
  assert.match(out, /outbox rows: 1 \(expected 1\) {3}side effects performed: 1/);
  assert.match(out, /deliveries recorded by the inbox: 50/);
  assert.match(out, /PASS: exactly one of each/);
});

test("storm: a GitHub delivery, keyed by its unsigned delivery id", async () => {
  const { code, out } = await selftest("storm", "github", "--url", url, "--secret", "gh_test_secret", "--copies", "20", "--admin-token", TOKEN);
  assert.equal(code, 0, out);
  assert.match(out, /200 duplicate x19, 200 processed x1/);
});

test("storm: a wrong secret fails the check", async () => {
  const { code, out } = await selftest("storm", "stripe", "--url", url, "--secret", "whsec_wrong", "--copies", "5", "--admin-token", TOKEN);
  assert.equal(code, 1, out);
  assert.match(out, /401 bad_signature x5/);
  assert.match(out, /FAIL/);
});

test("sign prints the headers and a curl line that the worker accepts", async () => {
  const { code, out } = await selftest("sign", "stripe", "--url", url, "--secret", "whsec_test_current");
  assert.equal(code, 0, out);
  assert.match(out, /^stripe-signature: t=\d+,v1=[0-9a-f]{64}$/m);
  const curl = out.split("\n").find((line) => line.startsWith("curl "));
  const reply = await new Promise((resolve) => execFile("sh", ["-c", curl], (_, stdout, stderr) => resolve(stdout + stderr)));
  assert.match(reply, /"outcome":"processed"/);
});

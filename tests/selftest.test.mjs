// The self-test CLI's `storm`, run against the local worker on every source
// wrangler.toml declares: it must pass on an idempotent endpoint and fail
// when its deliveries are not accepted.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";

import { TEST_SECRETS } from "./support/events.mjs";
import { FIRST, FIRST_PROVIDER, SOURCES, SOURCE_SECRETS } from "./support/sources.mjs";
import { startWorker } from "./support/worker.mjs";

const TOKEN = "selftest-admin-token-0123456789abcdef";
let w;
let url;
before(async () => {
  w = await startWorker({ ...SOURCE_SECRETS, ADMIN_TOKEN: TOKEN }, { port: 0 });
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
/** `selftest <command>` for source `name`, with its provider and test secret. */
const run = (command, name, provider, ...args) =>
  selftest(command, provider, "--source", name, "--url", url, "--secret", TEST_SECRETS[provider], ...args);

for (const [name, { provider }] of SOURCES) {
  test(`storm: 20 concurrent copies to ${name} (${provider}), exactly one of each`, async () => {
    const { code, out } = await run("storm", name, provider, "--copies", "20", "--admin-token", TOKEN);
    assert.equal(code, 0, out);
    assert.match(out, /responses \(\d+ ms\): 200 duplicate x19, 200 processed x1/);
    assert.match(out, /ledger rows: 1 {3}effect committed: yes/);
    assert.match(out, /deliveries recorded by the inbox: 20/);
    assert.match(out, /PASS: exactly one of each/);
  });
}

test('storm with REPLY_AFTER = "record": one reply accepted, then the effect waited for', async () => {
  const recording = await startWorker({ ...SOURCE_SECRETS, ADMIN_TOKEN: TOKEN, REPLY_AFTER: "record" }, { port: 0 });
  try {
    const origin = (await recording.mf.ready).origin;
    const { code, out } = await selftest("storm", FIRST_PROVIDER, "--source", FIRST, "--url", origin, "--secret", TEST_SECRETS[FIRST_PROVIDER], "--copies", "20", "--admin-token", TOKEN);
    assert.equal(code, 0, out);
    assert.match(out, /responses \(\d+ ms\): 200 accepted \(record\) x1, 200 duplicate x19/);
    assert.match(out, /ledger rows: 1 {3}effect committed: yes/);
    assert.match(out, /PASS: exactly one of each/);
  } finally {
    await recording.dispose();
  }
});

// needs: stripe, demos
test("storm: a Stripe checkout's side effect, performed once", async () => {
  const { code, out } = await run("storm", "stripe", "stripe", "--admin-token", TOKEN, "--side-effects", "1");
  assert.equal(code, 0, out);
  assert.match(out, /responses \(\d+ ms\): 200 duplicate x49, 200 processed x1/);
  assert.match(out, /outbox rows: 1 \(expected 1\) {3}side effects performed: 1/);
});

test("storm: a wrong secret fails the check", async () => {
  const { code, out } = await selftest("storm", FIRST_PROVIDER, "--source", FIRST, "--url", url, "--secret", "whsec_d3Jvbmctc2VjcmV0LWZvci10ZXN0cw==", "--copies", "5", "--admin-token", TOKEN);
  assert.equal(code, 1, out);
  assert.match(out, /401 bad_signature x5/);
  assert.match(out, /FAIL/);
});

test("sign prints the headers and a curl line that the worker accepts", async () => {
  const { code, out } = await run("sign", FIRST, FIRST_PROVIDER);
  assert.equal(code, 0, out);
  const curl = out.split("\n").find((line) => line.startsWith("curl "));
  const reply = await new Promise((resolve) => execFile("sh", ["-c", curl], (_, stdout, stderr) => resolve(stdout + stderr)));
  assert.match(reply, /"outcome":"processed"/);
});

// needs: stripe
test("sign: Stripe's header, as Stripe sends it", async () => {
  const { out } = await run("sign", "stripe", "stripe");
  assert.match(out, /^stripe-signature: t=\d+,v1=[0-9a-f]{64}$/m);
});

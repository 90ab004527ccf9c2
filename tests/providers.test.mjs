// End to end, each provider's specifics: the built worker in workerd, with
// a source per provider kept (named for it), a second source of one, and
// two misconfigured ones. Signatures are made here with Node's crypto,
// independently of the worker's Rust code (tests/support/events.mjs).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
// needs: standard-webhooks
import { generateKeyPairSync, sign } from "node:crypto";

import { EVENTS, TEST_SECRETS, forgedSecret } from "./support/events.mjs";
import { SIGNATURES, now, uniqueId } from "./support/sign.mjs";
import { secretVar } from "./support/sources.mjs";
import { startWorker } from "./support/worker.mjs";

const SOURCES = {
  // needs: stripe
  stripe: { provider: "stripe" },
  // needs: stripe
  "stripe-connect": { provider: "stripe", secret: "STRIPE_CONNECT_SECRET" },
  // needs: github
  github: { provider: "github" },
  // needs: standard-webhooks
  "standard-webhooks": { provider: "standard-webhooks" },
  // needs: svix
  svix: { provider: "svix" },
  // needs: shopify
  shopify: { provider: "shopify" },
  // needs: slack
  slack: { provider: "slack" },
  // needs: linear
  linear: { provider: "linear" },
  // needs: paddle
  paddle: { provider: "paddle" },
  // needs: twilio
  twilio: { provider: "twilio" },
  // needs: hmac
  acme: {
    provider: "hmac",
    header: "X-Acme-Signature",
    prefix: "sha256=",
    encoding: "hex",
    signed: "{timestamp}.{body}",
    timestamp_header: "X-Acme-Timestamp",
    key: "json:/id",
    event_type: "json:/type",
  },
};
/** Each kept provider's own source (a second one names its secret): [name, provider]. */
const KEPT = Object.entries(SOURCES)
  .filter(([, source]) => !source.secret)
  .map(([name, { provider }]) => [name, provider]);
// needs: standard-webhooks
const ED = generateKeyPairSync("ed25519");
// needs: standard-webhooks
const ED_PUBLIC = `whpk_${ED.publicKey.export({ format: "der", type: "spki" }).subarray(-32).toString("base64")}`;
const SECRETS = Object.fromEntries(KEPT.map(([name, provider]) => [secretVar(name, SOURCES[name]), TEST_SECRETS[provider]]));

let w;
before(async () => {
  w = await startWorker({
    SOURCES: {
      ...SOURCES,
      // A secret its provider refuses, and a provider nobody built.
      broken: { provider: KEPT[0][1], secret: "BROKEN_SECRET" },
      mystery: { provider: "carrier-pigeon" },
    },
    ...SECRETS,
    // needs: standard-webhooks
    STANDARD_WEBHOOKS_WEBHOOK_SECRET: `${TEST_SECRETS["standard-webhooks"]},${ED_PUBLIC}`,
    // needs: stripe
    STRIPE_CONNECT_SECRET: "whsec_connect_e2e",
    BROKEN_SECRET: "",
  });
});
after(() => w.dispose());

const eventOf = (name, secret) => EVENTS[SOURCES[name].provider](secret ?? TEST_SECRETS[SOURCES[name].provider], name);
const post = (name, event) => w.post(`/webhooks/${name}`, event.body, event.headers);
const ledgerRows = (source, id) =>
  w.scalar("SELECT count(*) FROM processed_events WHERE source = ? AND event_id = ?", source, id);

// Where wrangler.toml declares every chosen provider, tests/guarantees.test.mjs
// does this; the template (and its all-defaults copy) declares two.
// needs: everything
describe("every provider", () => {
  for (const [name, provider] of KEPT) {
    test(`${name} (${provider}): 20 concurrent copies make one ledger row`, async () => {
      const event = eventOf(name);
      const replies = await Promise.all(Array.from({ length: 20 }, () => post(name, event).then(async (r) => ({ status: r.status, body: await r.json() }))));
      assert.ok(replies.every((r) => r.status === 200), JSON.stringify(replies[0]));
      assert.equal(replies.filter((r) => r.body.outcome === "processed").length, 1);
      assert.ok(replies.every((r) => r.body.key === `${name}:${event.id}`));
      assert.equal(await ledgerRows(name, event.id), 1);
    });

    test(`${name}: a bad signature is 401 and writes nothing`, async () => {
      const forged = eventOf(name, forgedSecret(provider));
      const res = await post(name, forged);
      assert.equal(res.status, 401);
      assert.equal((await res.json()).error, "bad_signature");
      assert.equal(await ledgerRows(name, forged.id), 0);
    });
  }
});

describe("provider specifics", () => {
  // needs: standard-webhooks
  test("Standard Webhooks v1a: an ed25519 signature under a whpk_ key", async () => {
    const id = uniqueId("msg");
    const body = JSON.stringify({ type: "invoice.paid" });
    const ts = String(now());
    const signature = sign(null, Buffer.from(`${id}.${ts}.${body}`), ED.privateKey).toString("base64");
    const headers = { "webhook-id": id, "webhook-timestamp": ts, "webhook-signature": `v1a,${signature}` };
    const res = await w.post("/webhooks/standard-webhooks", body, headers);
    assert.deepEqual(await res.json(), { outcome: "processed", key: `standard-webhooks:${id}` });
    const forged = sign(null, Buffer.from(`${id}.${ts}.{}`), ED.privateKey).toString("base64");
    const bad = await w.post("/webhooks/standard-webhooks", body, { ...headers, "webhook-signature": `v1a,${forged}` });
    assert.equal(bad.status, 401);
  });

  // needs: standard-webhooks
  test("Standard Webhooks: a stale timestamp is 401", async () => {
    const id = uniqueId("msg");
    const ts = String(now() - 301);
    const body = "{}";
    const key = Buffer.from(TEST_SECRETS["standard-webhooks"].slice("whsec_".length), "base64");
    const headers = { "webhook-id": id, "webhook-timestamp": ts, "webhook-signature": SIGNATURES.standardWebhooks(key, id, ts, body) };
    const res = await w.post("/webhooks/standard-webhooks", body, headers);
    assert.equal(res.status, 401);
    assert.equal((await res.json()).error, "timestamp_outside_window");
  });

  // needs: slack
  test("Slack url_verification is answered with its challenge, and is not an event", async () => {
    const body = JSON.stringify({ token: "x", challenge: "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P", type: "url_verification" });
    const ts = String(now());
    const before = await w.scalar("SELECT count(*) FROM processed_events WHERE source = 'slack'");
    const res = await w.post("/webhooks/slack", body, {
      "x-slack-request-timestamp": ts,
      "x-slack-signature": SIGNATURES.slack(TEST_SECRETS.slack, ts, body),
    });
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), { challenge: "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P" });
    assert.equal(await w.scalar("SELECT count(*) FROM processed_events WHERE source = 'slack'"), before);
    // Unsigned, it is refused like any request.
    const unsigned = await w.post("/webhooks/slack", body, { "x-slack-request-timestamp": ts });
    assert.equal(unsigned.status, 401);
  });

  // needs: twilio
  test("Twilio: a tampered form parameter is 401", async () => {
    const event = eventOf("twilio");
    const res = await w.post("/webhooks/twilio", event.body.replace("delivered", "failed"), event.headers);
    assert.equal(res.status, 401);
  });

  // needs: stripe
  test("two sources of one provider have their own secrets and their own key space", async () => {
    const body = JSON.stringify({ id: uniqueId("evt"), type: "invoice.created", created: 1, data: { object: {} } });
    const signed = (secret) => ({ "stripe-signature": SIGNATURES.stripe(secret, now(), body) });
    assert.equal((await w.post("/webhooks/stripe-connect", body, signed(TEST_SECRETS.stripe))).status, 401);
    const viaConnect = await w.post("/webhooks/stripe-connect", body, signed("whsec_connect_e2e"));
    assert.equal((await viaConnect.json()).outcome, "processed");
    const viaMain = await w.post("/webhooks/stripe", body, signed(TEST_SECRETS.stripe));
    assert.equal((await viaMain.json()).outcome, "processed", "the same id on another source is another event");
  });

  test("a misconfigured source is a 500 that names the problem in the log, never a panic", async () => {
    for (const source of ["broken", "mystery"]) {
      const res = await w.post(`/webhooks/${source}`, "{}", { "webhook-id": "x" });
      assert.equal(res.status, 500, source);
      assert.deepEqual(await res.json(), { error: "misconfigured" });
    }
    // The worker still serves the sources that are fine.
    const [name] = KEPT[0];
    assert.equal((await post(name, eventOf(name))).status, 200);
  });

  test("source names outside [a-z0-9_-] are unknown", async () => {
    for (const name of ["__proto__", "Billing", "a%20b"]) {
      const res = await w.post(`/webhooks/${name}`, "{}");
      assert.equal(res.status, 404, name);
    }
  });
});

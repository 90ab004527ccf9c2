// End to end, for every provider: the built worker in workerd verifies,
// dedupes 20 concurrent copies into one ledger row, and refuses a bad
// signature without writing anything. Signatures are made here with Node's
// crypto, independently of the worker's Rust code.
// needs: everything
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { generateKeyPairSync, sign } from "node:crypto";

import { startWorker } from "./support/worker.mjs";
import { SIGNATURES, now, uniqueId } from "./support/sign.mjs";

const STD_KEY = Buffer.from("standard-webhooks-test-key-32by!");
const STD_SECRET = `whsec_${STD_KEY.toString("base64")}`;
const ED = generateKeyPairSync("ed25519");
const ED_PUBLIC = `whpk_${ED.publicKey.export({ format: "der", type: "spki" }).subarray(-32).toString("base64")}`;

const SECRETS = {
  STD_WEBHOOK_SECRET: `${STD_SECRET},${ED_PUBLIC}`,
  CLERK_WEBHOOK_SECRET: STD_SECRET,
  SHOP_WEBHOOK_SECRET: "shpss_e2e",
  SLACK_WEBHOOK_SECRET: "slack-e2e-signing-secret",
  LINEAR_WEBHOOK_SECRET: "lin_wh_e2e",
  PADDLE_WEBHOOK_SECRET: "pdl_ntfset_e2e",
  TWILIO_WEBHOOK_SECRET: "twilio-auth-token-e2e",
  ACME_WEBHOOK_SECRET: "acme-e2e",
  STRIPE_CONNECT_WEBHOOK_SECRET: "whsec_connect_e2e",
};

const SOURCES = {
  stripe: { provider: "stripe" },
  github: { provider: "github" },
  "stripe-connect": { provider: "stripe" },
  std: { provider: "standard-webhooks" },
  clerk: { provider: "svix" },
  shop: { provider: "shopify" },
  slack: { provider: "slack" },
  linear: { provider: "linear" },
  paddle: { provider: "paddle" },
  twilio: { provider: "twilio" },
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
  broken: { provider: "svix", secret: "BROKEN_SECRET" },
  mystery: { provider: "carrier-pigeon" },
};

/** Each provider's signer: a fresh event → { body, headers, id }, signed with `secret`. */
const SIGNERS = {
  std: (secret = STD_KEY) => standardWebhooks("webhook", secret),
  clerk: (secret = STD_KEY) => standardWebhooks("svix", secret),
  shop(secret = SECRETS.SHOP_WEBHOOK_SECRET) {
    const id = uniqueId("shop-evt");
    const body = JSON.stringify({ id: 820982911946154508, email: "jon@example.com" });
    return {
      id,
      body,
      headers: {
        "content-type": "application/json",
        "x-shopify-hmac-sha256": SIGNATURES.shopify(secret, body),
        "x-shopify-event-id": id,
        "x-shopify-topic": "orders/create",
      },
    };
  },
  slack(secret = SECRETS.SLACK_WEBHOOK_SECRET) {
    const id = uniqueId("Ev");
    const body = JSON.stringify({ type: "event_callback", event_id: id, event: { type: "app_mention", text: "hi" } });
    const ts = String(now());
    return {
      id,
      body,
      headers: {
        "content-type": "application/json",
        "x-slack-request-timestamp": ts,
        "x-slack-signature": SIGNATURES.slack(secret, ts, body),
      },
    };
  },
  linear(secret = SECRETS.LINEAR_WEBHOOK_SECRET) {
    const id = uniqueId("linear-delivery");
    const body = JSON.stringify({ action: "create", type: "Issue", data: { id: "i1" }, webhookTimestamp: Date.now() });
    return {
      id,
      body,
      headers: { "content-type": "application/json", "linear-delivery": id, "linear-signature": SIGNATURES.linear(secret, body) },
    };
  },
  paddle(secret = SECRETS.PADDLE_WEBHOOK_SECRET) {
    const id = uniqueId("evt_paddle");
    const body = JSON.stringify({ event_id: id, event_type: "transaction.completed", data: {} });
    const ts = now();
    return {
      id,
      body,
      headers: { "content-type": "application/json", "paddle-signature": SIGNATURES.paddle(secret, ts, body) },
    };
  },
  twilio(secret = SECRETS.TWILIO_WEBHOOK_SECRET) {
    const id = uniqueId("idem");
    const params = { MessageSid: "SM123", MessageStatus: "delivered", To: "+15551234567" };
    const body = new URLSearchParams(params).toString();
    const url = "http://localhost/webhooks/twilio";
    return {
      id,
      body,
      headers: {
        "content-type": "application/x-www-form-urlencoded",
        "i-twilio-idempotency-token": id,
        "x-twilio-signature": SIGNATURES.twilio(secret, url, Object.entries(params)),
      },
    };
  },
  acme(secret = SECRETS.ACME_WEBHOOK_SECRET) {
    const id = uniqueId("acme");
    const body = JSON.stringify({ id, type: "thing.happened" });
    const ts = String(now());
    return {
      id,
      body,
      headers: {
        "content-type": "application/json",
        "x-acme-timestamp": ts,
        "x-acme-signature": SIGNATURES.acme(secret, ts, body),
      },
    };
  },
};

function standardWebhooks(prefix, secret) {
  const id = uniqueId("msg");
  const body = JSON.stringify({ type: "user.created", data: { id: "user_1" } });
  const ts = String(now());
  return {
    id,
    body,
    headers: {
      "content-type": "application/json",
      [`${prefix}-id`]: id,
      [`${prefix}-timestamp`]: ts,
      [`${prefix}-signature`]: SIGNATURES.standardWebhooks(secret, id, ts, body),
    },
  };
}

let w;
before(async () => {
  w = await startWorker({ SOURCES, ...SECRETS, BROKEN_SECRET: "whsec_not*base64" });
});
after(() => w.dispose());

const ledgerRows = (source, id) =>
  w.scalar("SELECT count(*) FROM processed_events WHERE source = ? AND event_id = ?", source, id);

describe("every provider", () => {
  for (const [source, signer] of Object.entries(SIGNERS)) {
    test(`${source} (${SOURCES[source].provider}): 20 concurrent copies make one ledger row`, async () => {
      const event = signer();
      const replies = await Promise.all(
        Array.from({ length: 20 }, () => w.post(`/webhooks/${source}`, event.body, event.headers).then(async (r) => ({ status: r.status, body: await r.json() }))),
      );
      assert.ok(replies.every((r) => r.status === 200), JSON.stringify(replies[0]));
      assert.equal(replies.filter((r) => r.body.outcome === "processed").length, 1);
      assert.ok(replies.every((r) => r.body.key === `${source}:${event.id}`));
      assert.equal(await ledgerRows(source, event.id), 1);
    });

    test(`${source}: a bad signature is 401 and writes nothing`, async () => {
      const forged = signer(Buffer.from("not-the-secret"));
      const res = await w.post(`/webhooks/${source}`, forged.body, forged.headers);
      assert.equal(res.status, 401);
      assert.equal((await res.json()).error, "bad_signature");
      assert.equal(await ledgerRows(source, forged.id), 0);
    });
  }
});

describe("provider specifics", () => {
  test("Standard Webhooks v1a: an ed25519 signature under a whpk_ key", async () => {
    const id = uniqueId("msg");
    const body = JSON.stringify({ type: "invoice.paid" });
    const ts = String(now());
    const signature = sign(null, Buffer.from(`${id}.${ts}.${body}`), ED.privateKey).toString("base64");
    const headers = { "webhook-id": id, "webhook-timestamp": ts, "webhook-signature": `v1a,${signature}` };
    const res = await w.post("/webhooks/std", body, headers);
    assert.deepEqual(await res.json(), { outcome: "processed", key: `std:${id}` });
    const forged = sign(null, Buffer.from(`${id}.${ts}.{}`), ED.privateKey).toString("base64");
    const bad = await w.post("/webhooks/std", body, { ...headers, "webhook-signature": `v1a,${forged}` });
    assert.equal(bad.status, 401);
  });

  test("Standard Webhooks: a stale timestamp is 401", async () => {
    const id = uniqueId("msg");
    const ts = String(now() - 301);
    const body = "{}";
    const headers = { "webhook-id": id, "webhook-timestamp": ts, "webhook-signature": SIGNATURES.standardWebhooks(STD_KEY, id, ts, body) };
    const res = await w.post("/webhooks/std", body, headers);
    assert.equal(res.status, 401);
    assert.equal((await res.json()).error, "timestamp_outside_window");
  });

  test("Slack url_verification is answered with its challenge, and is not an event", async () => {
    const body = JSON.stringify({ token: "x", challenge: "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P", type: "url_verification" });
    const ts = String(now());
    const before = await w.scalar("SELECT count(*) FROM processed_events WHERE source = 'slack'");
    const res = await w.post("/webhooks/slack", body, {
      "x-slack-request-timestamp": ts,
      "x-slack-signature": SIGNATURES.slack(SECRETS.SLACK_WEBHOOK_SECRET, ts, body),
    });
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), { challenge: "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P" });
    assert.equal(await w.scalar("SELECT count(*) FROM processed_events WHERE source = 'slack'"), before);
    // Unsigned, it is refused like any request.
    const unsigned = await w.post("/webhooks/slack", body, { "x-slack-request-timestamp": ts });
    assert.equal(unsigned.status, 401);
  });

  test("Twilio: a tampered form parameter is 401", async () => {
    const event = SIGNERS.twilio();
    const res = await w.post("/webhooks/twilio", event.body.replace("delivered", "failed"), event.headers);
    assert.equal(res.status, 401);
  });

  test("two sources of one provider have their own secrets and their own key space", async () => {
    const body = JSON.stringify({ id: uniqueId("evt"), type: "invoice.created", created: 1, data: { object: {} } });
    const signed = (secret) => {
      const t = now();
      return { "stripe-signature": SIGNATURES.stripe(secret, t, body) };
    };
    const connectSecret = SECRETS.STRIPE_CONNECT_WEBHOOK_SECRET;
    assert.equal((await w.post("/webhooks/stripe-connect", body, signed("whsec_test_current"))).status, 401);
    const viaConnect = await w.post("/webhooks/stripe-connect", body, signed(connectSecret));
    assert.equal((await viaConnect.json()).outcome, "processed");
    const viaMain = await w.post("/webhooks/stripe", body, signed("whsec_test_current"));
    assert.equal((await viaMain.json()).outcome, "processed", "the same id on another source is another event");
  });

  test("a misconfigured source is a 500 that names the problem in the log, never a panic", async () => {
    for (const source of ["broken", "mystery"]) {
      const res = await w.post(`/webhooks/${source}`, "{}", { "webhook-id": "x" });
      assert.equal(res.status, 500, source);
      assert.deepEqual(await res.json(), { error: "misconfigured" });
    }
    // The worker still serves the sources that are fine.
    const event = SIGNERS.shop();
    assert.equal((await w.post("/webhooks/shop", event.body, event.headers)).status, 200);
  });

  test("source names outside [a-z0-9_-] are unknown", async () => {
    for (const name of ["__proto__", "Stripe", "a%20b"]) {
      const res = await w.post(`/webhooks/${name}`, "{}");
      assert.equal(res.status, 404, name);
    }
  });
});

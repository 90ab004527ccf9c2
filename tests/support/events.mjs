// A signed event of each provider, made with Node's crypto (independently of
// the worker's Rust code): `EVENTS[provider](secret, source)` → { id, body,
// headers }. Each is of a type no demo effect handles, so it writes its
// ledger row alone; given a `size`, its body is padded to exactly that many
// bytes. `TEST_SECRETS[provider]` is a secret in the form the
// provider's sources take. A maker with `signs(source)` signs only for the
// sources that says yes to.
import { SIGNATURES, now, uniqueId } from "./sign.mjs";

const json = { "content-type": "application/json" };
/** `fields` as JSON, or padded in a `pad` field to exactly `size` bytes. */
const jsonBody = (fields, size) => {
  if (!size) return JSON.stringify(fields);
  const base = Buffer.byteLength(JSON.stringify({ ...fields, pad: "" }));
  return JSON.stringify({ ...fields, pad: "x".repeat(Math.max(0, size - base)) });
};
/** A `whsec_` secret's key bytes. */
const whsecKey = (secret) => (secret.startsWith("whsec_") ? Buffer.from(secret.slice(6), "base64") : Buffer.from(secret));

// needs one of: standard-webhooks, svix
function standardWebhooks(prefix, secret, size) {
  const id = uniqueId("msg");
  const body = jsonBody({ type: "user.created", data: { id } }, size);
  const ts = String(now());
  const signature = SIGNATURES.standardWebhooks(whsecKey(secret), id, ts, body);
  return { id, body, headers: { ...json, [`${prefix}-id`]: id, [`${prefix}-timestamp`]: ts, [`${prefix}-signature`]: signature } };
}

export const TEST_SECRETS = {
  // needs: stripe
  stripe: "whsec_e2e_stripe_secret",
  // needs: github
  github: "e2e_github_secret",
  // needs: standard-webhooks
  "standard-webhooks": "whsec_ZTJlLXN0YW5kYXJkLXdlYmhvb2tzLWtleS0zMmJ5ISE=",
  // needs: svix
  svix: "whsec_ZTJlLXN2aXgtc2lnbmluZy1rZXktMzItYnl0ZXMhISE=",
  // needs: shopify
  shopify: "e2e_shopify_secret",
  // needs: slack
  slack: "e2e_slack_signing_secret",
  // needs: linear
  linear: "e2e_linear_secret",
  // needs: paddle
  paddle: "e2e_paddle_secret",
  // needs: twilio
  twilio: "e2e_twilio_auth_token",
  // needs: hmac
  hmac: "e2e_acme_secret",
};

/** A wrong secret in the form `provider`'s take (a whsec_ one decodes): a forged signature. */
export const forgedSecret = (provider) => (TEST_SECRETS[provider].startsWith("whsec_") ? "whsec_Zm9yZ2VkLWtleS1mb3ItdGVzdHM=" : "forged-secret");

export const EVENTS = {
  // needs: stripe
  stripe(secret, source, size) {
    const id = uniqueId("evt");
    const body = jsonBody({ id, object: "event", type: "invoice.created", created: now(), data: { object: {} } }, size);
    return { id, body, headers: { ...json, "stripe-signature": SIGNATURES.stripe(secret, now(), body) } };
  },
  // needs: github
  github(secret, source, size) {
    // GitHub signs the body, not the delivery id: distinct events have distinct bodies.
    const id = uniqueId("delivery");
    const body = jsonBody({ zen: "Keep it logically awesome.", hook_id: id }, size);
    return { id, body, headers: { ...json, "x-github-delivery": id, "x-github-event": "ping", "x-hub-signature-256": SIGNATURES.github(secret, body) } };
  },
  // needs: standard-webhooks
  "standard-webhooks": (secret, source, size) => standardWebhooks("webhook", secret, size),
  // needs: svix
  svix: (secret, source, size) => standardWebhooks("svix", secret, size),
  // needs: shopify
  shopify(secret, source, size) {
    const id = uniqueId("shop-evt");
    const body = jsonBody({ id, email: "jon@example.com" }, size);
    return { id, body, headers: { ...json, "x-shopify-hmac-sha256": SIGNATURES.shopify(secret, body), "x-shopify-event-id": id, "x-shopify-topic": "customers/create" } };
  },
  // needs: slack
  slack(secret, source, size) {
    const id = uniqueId("Ev");
    const body = jsonBody({ type: "event_callback", event_id: id, event: { type: "app_mention", text: "hi" } }, size);
    const ts = String(now());
    return { id, body, headers: { ...json, "x-slack-request-timestamp": ts, "x-slack-signature": SIGNATURES.slack(secret, ts, body) } };
  },
  // needs: linear
  linear(secret, source, size) {
    const id = uniqueId("linear-delivery");
    const body = jsonBody({ action: "create", type: "Issue", data: { id }, webhookTimestamp: Date.now() }, size);
    return { id, body, headers: { ...json, "linear-delivery": id, "linear-signature": SIGNATURES.linear(secret, body) } };
  },
  // needs: paddle
  paddle(secret, source, size) {
    const id = uniqueId("evt_paddle");
    const body = jsonBody({ event_id: id, event_type: "transaction.completed", data: {} }, size);
    return { id, body, headers: { ...json, "paddle-signature": SIGNATURES.paddle(secret, now(), body) } };
  },
  // needs: twilio
  twilio(secret, source, size) {
    const id = uniqueId("idem");
    const params = { MessageSid: `SM${id}`, MessageStatus: "delivered" };
    if (size) params.Pad = "x".repeat(Math.max(0, size - new URLSearchParams({ ...params, Pad: "" }).toString().length));
    const body = new URLSearchParams(params).toString();
    const url = `http://localhost/webhooks/${source}`;
    const signature = SIGNATURES.twilio(secret, url, Object.entries(params));
    return { id, body, headers: { "content-type": "application/x-www-form-urlencoded", "i-twilio-idempotency-token": id, "x-twilio-signature": signature } };
  },
  // needs: hmac
  hmac(secret, source, size) {
    // As the copy's `acme` source is configured (scripts/template/sources.mjs).
    const id = uniqueId("acme");
    const body = jsonBody({ id, type: "thing.happened" }, size);
    const ts = String(now());
    return { id, body, headers: { ...json, "x-acme-timestamp": ts, "x-acme-signature": SIGNATURES.acme(secret, ts, body) } };
  },
};

// needs: hmac
/** It signs for one shape of generic HMAC source only: the `acme` one. */
EVENTS.hmac.signs = (source) => source.header === "X-Acme-Signature";

/**
 * The header holding an event's id where the signature does not cover it:
 * the same signed body under a fresh id there must still be a duplicate.
 */
export const UNSIGNED_ID = {
  // needs: github
  github: "x-github-delivery",
  // needs: shopify
  shopify: "x-shopify-event-id",
  // needs: linear
  linear: "linear-delivery",
  // needs: twilio
  twilio: "i-twilio-idempotency-token",
};

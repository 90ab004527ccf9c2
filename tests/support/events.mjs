// A signed event of each provider, made with Node's crypto (independently of
// the worker's Rust code): `EVENTS[provider](secret, source)` → { id, body,
// headers }. Each is of a type no demo effect handles, so it writes its
// ledger row alone. `TEST_SECRETS[provider]` is a secret in the form the
// provider's sources take. A maker with `signs(source)` signs only for the
// sources that says yes to.
import { SIGNATURES, now, uniqueId } from "./sign.mjs";

const json = { "content-type": "application/json" };
/** A `whsec_` secret's key bytes. */
const whsecKey = (secret) => (secret.startsWith("whsec_") ? Buffer.from(secret.slice(6), "base64") : Buffer.from(secret));

// needs one of: standard-webhooks, svix
function standardWebhooks(prefix, secret) {
  const id = uniqueId("msg");
  const body = JSON.stringify({ type: "user.created", data: { id } });
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
  stripe(secret) {
    const id = uniqueId("evt");
    const body = JSON.stringify({ id, object: "event", type: "invoice.created", created: now(), data: { object: {} } });
    return { id, body, headers: { ...json, "stripe-signature": SIGNATURES.stripe(secret, now(), body) } };
  },
  // needs: github
  github(secret) {
    // GitHub signs the body, not the delivery id: distinct events have distinct bodies.
    const id = uniqueId("delivery");
    const body = JSON.stringify({ zen: "Keep it logically awesome.", hook_id: id });
    return { id, body, headers: { ...json, "x-github-delivery": id, "x-github-event": "ping", "x-hub-signature-256": SIGNATURES.github(secret, body) } };
  },
  // needs: standard-webhooks
  "standard-webhooks": (secret) => standardWebhooks("webhook", secret),
  // needs: svix
  svix: (secret) => standardWebhooks("svix", secret),
  // needs: shopify
  shopify(secret) {
    const id = uniqueId("shop-evt");
    const body = JSON.stringify({ id, email: "jon@example.com" });
    return { id, body, headers: { ...json, "x-shopify-hmac-sha256": SIGNATURES.shopify(secret, body), "x-shopify-event-id": id, "x-shopify-topic": "customers/create" } };
  },
  // needs: slack
  slack(secret) {
    const id = uniqueId("Ev");
    const body = JSON.stringify({ type: "event_callback", event_id: id, event: { type: "app_mention", text: "hi" } });
    const ts = String(now());
    return { id, body, headers: { ...json, "x-slack-request-timestamp": ts, "x-slack-signature": SIGNATURES.slack(secret, ts, body) } };
  },
  // needs: linear
  linear(secret) {
    const id = uniqueId("linear-delivery");
    const body = JSON.stringify({ action: "create", type: "Issue", data: { id }, webhookTimestamp: Date.now() });
    return { id, body, headers: { ...json, "linear-delivery": id, "linear-signature": SIGNATURES.linear(secret, body) } };
  },
  // needs: paddle
  paddle(secret) {
    const id = uniqueId("evt_paddle");
    const body = JSON.stringify({ event_id: id, event_type: "transaction.completed", data: {} });
    return { id, body, headers: { ...json, "paddle-signature": SIGNATURES.paddle(secret, now(), body) } };
  },
  // needs: twilio
  twilio(secret, source) {
    const id = uniqueId("idem");
    const params = { MessageSid: `SM${id}`, MessageStatus: "delivered" };
    const body = new URLSearchParams(params).toString();
    const url = `http://localhost/webhooks/${source}`;
    const signature = SIGNATURES.twilio(secret, url, Object.entries(params));
    return { id, body, headers: { "content-type": "application/x-www-form-urlencoded", "i-twilio-idempotency-token": id, "x-twilio-signature": signature } };
  },
  // needs: hmac
  hmac(secret) {
    // As the copy's `acme` source is configured (scripts/template/sources.mjs).
    const id = uniqueId("acme");
    const body = JSON.stringify({ id, type: "thing.happened" });
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

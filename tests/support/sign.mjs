// Signs test deliveries the way the providers do, with Node's crypto — an
// implementation independent of the worker's Rust code.
import { createHmac } from "node:crypto";

const hmac = (algorithm, key, content, encoding) => createHmac(algorithm, key).update(content).digest(encoding);
const byName = ([a], [b]) => (a < b ? -1 : a > b ? 1 : 0);

/** Unix seconds now. */
export const now = () => Math.floor(Date.now() / 1000);

/**
 * The one table of signature schemes: each returns the value of the
 * provider's signature header. Every test, the fuzzer and the benchmark
 * sign through it.
 */
export const SIGNATURES = {
  // needs: stripe
  stripe: (secret, t, body) => `t=${t},v1=${hmac("sha256", secret, `${t}.${body}`, "hex")}`,
  // needs: github
  github: (secret, body) => `sha256=${hmac("sha256", secret, body, "hex")}`,
  // needs one of: standard-webhooks, svix
  /** Standard Webhooks, under any header names: `key` is the secret's decoded bytes. */
  standardWebhooks: (key, id, ts, body) => `v1,${hmac("sha256", key, `${id}.${ts}.${body}`, "base64")}`,
  // needs: shopify
  shopify: (secret, body) => hmac("sha256", secret, body, "base64"),
  // needs: slack
  slack: (secret, ts, body) => `v0=${hmac("sha256", secret, `v0:${ts}:${body}`, "hex")}`,
  // needs: linear
  linear: (secret, body) => hmac("sha256", secret, body, "hex"),
  // needs: paddle
  paddle: (secret, ts, body) => `ts=${ts};h1=${hmac("sha256", secret, `${ts}:${body}`, "hex")}`,
  // needs: twilio
  /** The URL Twilio called, then the form's `[name, value]` pairs sorted by name. */
  twilio: (token, url, pairs = []) =>
    hmac("sha1", token, url + [...pairs].sort(byName).map(([n, v]) => n + v).join(""), "base64"),
  // needs: hmac
  /** The generic `hmac` provider as configured for `acme` in the tests. */
  acme: (secret, ts, body) => `sha256=${hmac("sha256", secret, `${ts}.${body}`, "hex")}`,
};

// needs: stripe
/** Headers for a Stripe delivery of `body`, signed at `t` (unix seconds). */
export function stripeHeaders(body, secret, t = now()) {
  return {
    "content-type": "application/json",
    "stripe-signature": SIGNATURES.stripe(secret, t, body),
  };
}

// needs: github
/** Headers for a GitHub delivery of `body`. */
export function githubHeaders(body, secret, { delivery, event }) {
  return {
    "content-type": "application/json",
    "x-github-delivery": delivery,
    "x-github-event": event,
    "x-hub-signature-256": SIGNATURES.github(secret, body),
  };
}

let counter = 0;
/** A fresh id, unique within the test run. */
export const uniqueId = (prefix) => `${prefix}_${Date.now().toString(36)}${(counter++).toString(36)}`;

// needs: stripe, demos
export function checkoutCompleted({
  id = uniqueId("evt"),
  session = uniqueId("cs"),
  paymentIntent = uniqueId("pi"),
  amount = 2000,
  email = "buyer@example.com",
  paymentStatus = "paid",
  type = "checkout.session.completed",
  currency = "eur",
} = {}) {
  return JSON.stringify({
    id,
    object: "event",
    type,
    created: Math.floor(Date.now() / 1000),
    data: {
      object: {
        id: session,
        object: "checkout.session",
        amount_total: amount,
        currency,
        customer_details: { email },
        payment_intent: paymentIntent,
        payment_status: paymentStatus,
      },
    },
  });
}

// needs: stripe, demos
export function paymentIntentSucceeded({ id = uniqueId("evt"), paymentIntent }) {
  return JSON.stringify({
    id,
    object: "event",
    type: "payment_intent.succeeded",
    created: Math.floor(Date.now() / 1000),
    data: { object: { id: paymentIntent, object: "payment_intent", amount: 2000 } },
  });
}

// needs: stripe, demos
export function subscriptionEvent({ id = uniqueId("evt"), type, created, subscription, status }) {
  return JSON.stringify({
    id,
    object: "event",
    type,
    created,
    data: { object: { id: subscription, object: "subscription", customer: "cus_1", status } },
  });
}

// needs: github, demos
/**
 * A GitHub star event. Like GitHub's, it names who starred and when, so two
 * distinct stars have distinct bodies (the worker fences on the body, since
 * GitHub does not sign the delivery id).
 */
export function starEvent({ action = "created", repo, sender = uniqueId("user") }) {
  const starred_at = action === "created" ? new Date().toISOString() : null;
  return JSON.stringify({ action, starred_at, repository: { full_name: repo }, sender: { login: sender } });
}

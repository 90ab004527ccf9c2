// Each provider a copy may choose: its cargo feature, the source a copy
// declares for it in wrangler.toml, and that source's secret for `make dev`
// (.dev.vars.example, under the variable scripts/secret-var.mjs names). The
// tests sign with their own secrets (tests/support/events.mjs).
export const SOURCES = {
  stripe: {
    feature: "stripe",
    source: 'stripe = { provider = "stripe" }',
    localSecret: "whsec_local_stripe_secret",
  },
  github: {
    feature: "github",
    source: 'github = { provider = "github" }',
    localSecret: "local_github_secret",
  },
  "standard-webhooks": {
    feature: "standard-webhooks",
    source: 'standard-webhooks = { provider = "standard-webhooks" }',
    localSecret: "whsec_bG9jYWwtc3RhbmRhcmQtd2ViaG9va3Mta2V5IQ==",
  },
  svix: {
    feature: "standard-webhooks",
    source: 'svix = { provider = "svix" }',
    localSecret: "whsec_bG9jYWwtc3ZpeC1zaWduaW5nLWtleS0xNmI=",
  },
  shopify: {
    feature: "shopify",
    source: 'shopify = { provider = "shopify" }',
    localSecret: "local_shopify_secret",
  },
  slack: {
    feature: "slack",
    source: 'slack = { provider = "slack" }',
    localSecret: "local_slack_signing_secret",
  },
  linear: {
    feature: "linear",
    source: 'linear = { provider = "linear" }',
    localSecret: "local_linear_secret",
  },
  paddle: {
    feature: "paddle",
    source: 'paddle = { provider = "paddle" }',
    localSecret: "local_paddle_secret",
  },
  twilio: {
    feature: "twilio",
    source: 'twilio = { provider = "twilio" }',
    localSecret: "local_twilio_auth_token",
  },
  hmac: {
    feature: "generic-hmac",
    source:
      '# A generic HMAC sender: its signature header, what it signs, and where\n# its event id and type are. Add one line like it per sender.\nacme = { provider = "hmac", header = "X-Acme-Signature", prefix = "sha256=", encoding = "hex", signed = "{timestamp}.{body}", timestamp_header = "X-Acme-Timestamp", key = "json:/id", event_type = "json:/type" }',
    localSecret: "local_acme_secret",
  },
};

// The "Make it yours" recipes: each is the steps a person takes by hand, as
// data, so that the copy's README shows them (readme.mjs) and
// `make template-check` applies them to generated copies and runs the
// copies' tests (apply-recipe.mjs). A step writes a file, adds a line after
// another, or deletes a file or lines; a step with a `store` is for a copy
// whose effects commit there (`d1` or `postgres`), and a migration's `dir`
// is migrations-postgres/ for Postgres's.

const INVOICES_RS = `//! Stripe \`invoice.paid\` → \`invoices\`, and one email to the customer.

use serde::Deserialize;

use webhook_engine::effects::{parse, Effect, PlanError, Statement, StripeEvent};
use webhook_engine::event::VerifiedEvent;
use webhook_engine::outbox::Email;

#[derive(Deserialize)]
struct Invoice {
    id: String,
    customer_email: Option<String>,
    amount_paid: i64,
    currency: String,
}

const MARK_PAID: &str = "INSERT INTO invoices (id, status, amount_paid, currency, updated_at) \\
     VALUES (?1, 'paid', ?2, ?3, ?4) \\
     ON CONFLICT (id) DO UPDATE SET status = 'paid', amount_paid = excluded.amount_paid, \\
       currency = excluded.currency, updated_at = excluded.updated_at";

/// \`invoice.paid\`: the invoice is paid, and its customer gets one email,
/// keyed by the invoice (two events about it send one).
pub fn paid(event: &VerifiedEvent, now: i64) -> Result<Effect, PlanError> {
    let invoice = parse::<StripeEvent<Invoice>>(&event.body)?.data.object;
    let email = invoice.customer_email.as_ref().map(|to| {
        let text = format!("Invoice {} is paid. Thank you!", invoice.id);
        Email::new(to.as_str(), "Payment received", text)
    });
    let writes = vec![Statement::new(
        MARK_PAID,
        vec![
            invoice.id.as_str().into(),
            invoice.amount_paid.into(),
            invoice.currency.as_str().into(),
            now.into(),
        ],
    )];
    let receipt = email.map(|email| email.send().about("invoice", &invoice.id));
    Ok(Effect::new(writes).with(receipt))
}

/// \`cargo test\` runs these in seconds: the effect applied with its ledger
/// row to a real database made from this copy's migrations.
#[cfg(test)]
mod tests {
    use crate::effects::EFFECTS;
    use webhook_engine::testing::{self, row, Applied, TestDb};

    const PAID: &str = r#"{"id":"evt_1","type":"invoice.paid","created":1700000000,"data":{"object":
        {"id":"in_1","customer_email":"ann@example.com","amount_paid":4200,"currency":"eur"}}}"#;

    #[test]
    fn a_paid_invoice_is_written_once() {
        let mut db = TestDb::new();
        let event = testing::event("stripe", &[], PAID);
        assert_eq!(db.apply(EFFECTS, &event), Applied::Now);
        let copy = db.apply(EFFECTS, &event);
        assert_eq!(copy, Applied::Earlier, "a copy writes nothing");
        let sql = "SELECT id, status, amount_paid, currency FROM invoices";
        assert_eq!(db.rows(sql, vec![]), [row!["in_1", "paid", 4200, "eur"]]);
    }
}
`;

const INVOICES_SQL = `-- invoice.paid (src/effects/invoices.rs): one row per invoice.
CREATE TABLE invoices (
    id          TEXT PRIMARY KEY,
    status      TEXT    NOT NULL,
    amount_paid INTEGER NOT NULL, -- minor units (cents)
    currency    TEXT    NOT NULL,
    updated_at  INTEGER NOT NULL
) WITHOUT ROWID;
`;

// Its table in a copy whose effects commit in Postgres.
const INVOICES_PG_SQL = `-- invoice.paid (src/effects/invoices.rs): one row per invoice.
CREATE TABLE invoices (
    id          TEXT PRIMARY KEY,
    status      TEXT   NOT NULL,
    amount_paid BIGINT NOT NULL, -- minor units (cents)
    currency    TEXT   NOT NULL,
    updated_at  BIGINT NOT NULL
);
`;
// Its test, on Postgres, and on D1.
const INVOICES_PG_TEST = `// invoice.paid: 20 concurrent copies, one row in Postgres, one email.
// tests/support/ has the worker with its effects in a fresh database of a
// local Postgres (freshDatabase, migrations-postgres/ applied;
// startPostgresWorker) and the signers (stripeHeaders).
import { after, before, test } from "node:test";
import assert from "node:assert/strict";

import { freshDatabase, startPostgresWorker } from "./support/postgres.mjs";
import { eventually } from "./support/worker.mjs";
import { stripeHeaders, uniqueId } from "./support/sign.mjs";

let pg;
let w;
before(async () => {
  pg = freshDatabase();
  w = await startPostgresWorker(pg, { STRIPE_WEBHOOK_SECRET: "whsec_recipe", EMAIL_API_URL: "http://email.test" });
});
after(() => w?.dispose());

test("invoice.paid: one invoice row and one email, however many copies", async () => {
  const id = uniqueId("evt");
  const invoice = uniqueId("in");
  const object = { id: invoice, customer_email: "payer@example.com", amount_paid: 1999, currency: "usd" };
  const body = JSON.stringify({ id, type: "invoice.paid", created: 1, data: { object } });
  const send = () => w.post("/webhooks/stripe", body, stripeHeaders(body, "whsec_recipe")).then((r) => r.json());
  const replies = await Promise.all(Array.from({ length: 20 }, send));
  assert.equal(replies.filter((r) => r.outcome === "processed").length, 1);
  assert.deepEqual(pg.query(\`SELECT amount_paid FROM invoices WHERE id = '\${invoice}'\`), [["1999"]]);
  await eventually(() => w.target.to("http://email.test/").some((c) => c.body.includes(invoice)), 10_000, "the email");
  await new Promise((r) => setTimeout(r, 1_500)); // a second email would land meanwhile
  assert.equal(w.target.to("http://email.test/").filter((c) => c.body.includes(invoice)).length, 1);
});
`;
const INVOICES_TEST = `// invoice.paid: 20 concurrent copies, one row, one email. tests/support/
// has the worker (startWorker: the built wasm in the local runtime, with
// real D1, Durable Objects and Queues, and a fake target for every call)
// and the signers (stripeHeaders).
import { after, before, test } from "node:test";
import assert from "node:assert/strict";

import { eventually, startWorker } from "./support/worker.mjs";
import { stripeHeaders, uniqueId } from "./support/sign.mjs";

let w;
before(async () => {
  w = await startWorker({ STRIPE_WEBHOOK_SECRET: "whsec_recipe", EMAIL_API_URL: "http://email.test" });
});
after(() => w.dispose());

test("invoice.paid: one invoice row and one email, however many copies", async () => {
  const id = uniqueId("evt");
  const invoice = uniqueId("in");
  const object = { id: invoice, customer_email: "payer@example.com", amount_paid: 1999, currency: "usd" };
  const body = JSON.stringify({ id, type: "invoice.paid", created: 1, data: { object } });
  const send = () => w.post("/webhooks/stripe", body, stripeHeaders(body, "whsec_recipe")).then((r) => r.json());
  const replies = await Promise.all(Array.from({ length: 20 }, send));
  assert.equal(replies.filter((r) => r.outcome === "processed").length, 1);
  assert.equal(await w.scalar("SELECT amount_paid FROM invoices WHERE id = ?", invoice), 1999);
  await eventually(() => w.target.to("http://email.test/").some((c) => c.body.includes(invoice)), 10_000, "the email");
  await new Promise((r) => setTimeout(r, 1_500)); // a second email would land meanwhile
  assert.equal(w.target.to("http://email.test/").filter((c) => c.body.includes(invoice)).length, 1);
});
`;

const PROVIDER_RS = `//! Acme Pay: \`x-acme-pay-signature\` is \`sha256=\` and the hex HMAC-SHA256 of
//! the body; the event id is \`x-acme-pay-event-id\` (the same on every
//! retry), the type \`x-acme-pay-event-type\`.

use webhook_engine::providers::{
    hex_tag, required_header, verdict, ConfigError, EventIdentity, Identity, Provider, RawRequest,
    Rejection, SourceConfig, Verified, VerifyContext,
};

pub struct AcmePay;

pub fn build(_: &SourceConfig) -> Result<Box<dyn Provider>, ConfigError> {
    Ok(Box::new(AcmePay))
}

impl Provider for AcmePay {
    fn name(&self) -> &'static str {
        "acme-pay"
    }

    fn verify(&self, req: &RawRequest, ctx: &VerifyContext) -> Result<Verified, Rejection> {
        let header = required_header(req, "x-acme-pay-signature");
        let tag = hex_tag(header.ok_or(Rejection::MissingSignature)?, "sha256=")?;
        let signed_by = ctx.secrets.any_signed(&[&req.body], &[tag]);
        verdict("HMAC-SHA256 of the body", signed_by, None, ctx)
    }

    fn identify(&self, req: &RawRequest) -> Result<Identity, Rejection> {
        let id = required_header(req, "x-acme-pay-event-id").ok_or(Rejection::MissingEventId)?;
        let kind = required_header(req, "x-acme-pay-event-type").unwrap_or("event");
        Ok(Identity::Event(EventIdentity::new(id, kind)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use webhook_engine::providers::testing;
    use webhook_engine::signature::{Secrets, Tag};

    #[test]
    fn a_signed_body_verifies_and_a_changed_one_does_not() {
        let secrets = Secrets::parse("acme-pay-secret").unwrap();
        let tag = Tag::sha256(b"acme-pay-secret", &[b"{}".as_slice()]).to_hex();
        let signature = format!("sha256={tag}");
        let headers = [
            ("x-acme-pay-signature", Some(signature.as_str())),
            ("x-acme-pay-event-id", Some("ap_1")),
        ];
        let ctx = testing::context(&secrets, 0);
        let signed = testing::request(&headers, "{}");
        assert!(AcmePay.verify(&signed, &ctx).is_ok());
        assert_eq!(
            AcmePay.verify(&testing::request(&headers, "{ }"), &ctx),
            Err(Rejection::BadSignature)
        );
        let Ok(Identity::Event(event)) = AcmePay.identify(&signed) else {
            panic!("not an event");
        };
        assert_eq!(event.id, "ap_1");
    }
}
`;

/** Whether `step` is for `copy` (its store `d1` unless it says `postgres`). */
export const forCopy = (copy) => (step) => !step.store || step.store === (copy.store ?? "d1");

export const RECIPES = [
  {
    id: "a",
    title: "An effect: Stripe's `invoice.paid` upserts an invoice and sends one email",
    intro:
      "Four files: the effect and its test, its line in the table, its table, its end-to-end test.\n" +
      "`cargo test` runs the effect's test in seconds, against a real database made from your migrations.\n" +
      "It runs in the same transaction as the event's ledger row, so it happens once.\n" +
      "The email is written as intent in that transaction, and sent once through the outbox.",
    applies: (copy) => copy.providers.includes("stripe"),
    steps: [
      { write: "src/effects/invoices.rs", text: INVOICES_RS, say: "The effect, in a new file `src/effects/invoices.rs`:" },
      { insert: "src/effects/mod.rs", after: /^use webhook_engine::effects::Effects;$/m, before: true, text: "mod invoices;\n\n", say: "Its `mod` line in `src/effects/mod.rs`, above the `use` lines:" },
      { insert: "src/effects/mod.rs", after: /^ {4}\/\/ \(provider, event type, planner\): one line per effect\.$/m, text: '    ("stripe", "invoice.paid", invoices::paid),\n', say: "Its line in `EFFECTS`, in the same file:" },
      { migration: "invoices", store: "d1", text: INVOICES_SQL, say: "Its table, in a new migration `migrations/NNNN_invoices.sql`, numbered after the last one (`npx wrangler d1 migrations create DB invoices` makes it; `make dev` and `make deploy` apply it):" },
      { migration: "invoices", dir: "migrations-postgres", store: "postgres", text: INVOICES_PG_SQL, say: "Its table, in a new migration `migrations-postgres/NNNN_invoices.sql`, numbered after the last one (`make dev` applies it to the local cluster, `make deploy` to your database):" },
      { write: "tests/invoices.test.mjs", store: "d1", text: INVOICES_TEST, say: "Its test, in a new file `tests/invoices.test.mjs` (`make test` runs it):" },
      { write: "tests/invoices.test.mjs", store: "postgres", text: INVOICES_PG_TEST, say: "Its test, in a new file `tests/invoices.test.mjs`, against a local Postgres (`make test` runs it):" },
    ],
    outro:
      "The email goes to `EMAIL_API_URL` (Resend's API shape) with the secret `EMAIL_API_KEY`,\n" +
      "from `EMAIL_FROM`. Locally, with neither set, it is logged as skipped (`SIDE_EFFECTS=log`).",
  },
  {
    id: "b",
    title: "A provider of your own",
    intro:
      "Two files: the provider, and its lines in `src/lib.rs`. The engine is not touched.\n" +
      "A provider without its line is dead code, which `make lint` names.",
    applies: () => true,
    steps: [
      { write: "src/acme_pay.rs", text: PROVIDER_RS, say: "The provider, in a new file `src/acme_pay.rs` (`verify` runs before anything reads the body):" },
      { insert: "src/lib.rs", after: /^pub mod effects;$/m, before: true, text: "mod acme_pay;\n", say: "Its `mod` line in `src/lib.rs`:" },
      { insert: "src/lib.rs", after: /^ {4}\/\/ \(name, constructor\): one line per provider of your own\.$/m, text: '    ("acme-pay", acme_pay::build),\n', say: "Its line in `PROVIDERS`, in the same file (the `provider` name a source gives, and its constructor):" },
    ],
    outro:
      "Then declare a source for it under `[vars.SOURCES]` in `wrangler.toml`:\n" +
      '`acme-pay = { provider = "acme-pay" }`, with its secret `ACME_PAY_WEBHOOK_SECRET` in `.dev.vars`.',
  },
  {
    id: "c",
    title: "Remove a demo effect",
    intro:
      "The subscriptions demo, for example: its file, its test, its lines in the table,\n" +
      "and a migration that drops its table.",
    applies: (copy) => copy.demos && copy.providers.includes("stripe"),
    steps: [
      { delete: "src/effects/subscriptions.rs", say: "Delete `src/effects/subscriptions.rs` and `tests/subscriptions.test.mjs`." },
      { delete: "tests/subscriptions.test.mjs" },
      { cut: "src/effects/mod.rs", pattern: /^mod subscriptions;\n|^ {4}\("stripe", "customer\.subscription\.[a-z]+", subscriptions::set_state\),\n/gm, say: "In `src/effects/mod.rs`, delete `mod subscriptions;` and the two lines of `EFFECTS` that name `subscriptions::set_state`." },
      { migration: "drop_subscriptions", text: "-- The subscriptions demo is gone.\nDROP TABLE IF EXISTS subscriptions;\n", say: "Drop its table in a new migration `migrations/NNNN_drop_subscriptions.sql`, numbered after the last one:" },
      { migration: "drop_subscriptions", dir: "migrations-postgres", store: "postgres", text: "-- The subscriptions demo is gone.\nDROP TABLE IF EXISTS subscriptions;\n", say: "And in Postgres, in a new migration `migrations-postgres/NNNN_drop_subscriptions.sql`:" },
    ],
  },
];

//! Stripe `customer.created` → your CRM learns of the customer: a side
//! effect of your own, with no write of its own (the ledger row records
//! that the event was handled).
//!
//! The engine performs an [`Email`](webhook_engine::outbox::Email) or an
//! [`HttpCall`](webhook_engine::outbox::HttpCall) itself. A call of another
//! shape (your CRM's own API, its own auth) is yours: a payload, a
//! performer, and the performer's line in `PERFORMERS`. The outbox runs
//! it as it runs the engine's: once per key, retried, dead-lettered and
//! alerted on, with the key sent as `Idempotency-Key`.
// needs: stripe, demos

use serde::{Deserialize, Serialize};

use webhook_engine::effects::{parse, Effect, PlanError, StripeEvent};
use webhook_engine::event::VerifiedEvent;
use webhook_engine::outbox::{Perform, PerformFuture, SideEffect};

/// The name the performer is registered under (`PERFORMERS`); the outbox
/// row says `app:crm_contact`.
pub const CRM_CONTACT: &str = "crm_contact";

/// What the CRM is told: the row's payload, and the body of the call.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct Contact {
    pub customer: String,
    pub email: Option<String>,
    pub name: Option<String>,
}

/// The parts of a Stripe Customer the contact needs.
#[derive(Deserialize)]
struct Customer {
    id: String,
    email: Option<String>,
    name: Option<String>,
}

/// `customer.created`: one contact in the CRM, keyed by the customer (two
/// events about one customer make one call).
pub fn created(event: &VerifiedEvent, _: i64) -> Result<Effect, PlanError> {
    let customer = parse::<StripeEvent<Customer>>(&event.body)?.data.object;
    let contact = Contact {
        customer: customer.id,
        email: customer.email,
        name: customer.name,
    };
    let side_effect =
        SideEffect::custom(CRM_CONTACT, &contact).about("customer", &contact.customer);
    Ok(Effect::default().with([side_effect]))
}

/// Performs a `crm_contact` row: `POST {CRM_URL}/contacts`, bearer
/// `CRM_API_KEY`. Unset `CRM_URL` is skipped where `SIDE_EFFECTS = "log"`
/// (local runs), and a failure elsewhere.
pub fn crm_contact<'a>(call: &'a Perform<'a>) -> PerformFuture<'a> {
    Box::pin(async move {
        let Some(url) = call.var("CRM_URL") else {
            return call.unconfigured("CRM_URL");
        };
        let contact: Contact = call.payload()?;
        let url = format!("{}/contacts", url.trim_end_matches('/'));
        let key = call.var("CRM_API_KEY");
        call.post_json(&url, &contact, key.as_deref()).await
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use webhook_engine::effects::plan_with;

    const BODY: &str =
        r#"{"created":1,"data":{"object":{"id":"cus_1","email":"a@b.c","name":null}}}"#;

    #[test]
    fn a_new_customer_is_one_contact_keyed_by_the_customer() {
        let event = VerifiedEvent::example("stripe", "customer.created", BODY);
        let effect = created(&event, 2).unwrap();
        assert!(effect.writes().is_empty());
        let [contact] = effect.side_effects() else {
            panic!("one side effect");
        };
        let expected = Contact {
            customer: "cus_1".into(),
            email: Some("a@b.c".into()),
            name: None,
        };
        assert_eq!(
            serde_json::from_str::<Contact>(contact.payload()).unwrap(),
            expected
        );
        // Another event about the same customer: the same key, one call.
        let effects: &webhook_engine::effects::Effects = &[("stripe", "customer.created", created)];
        let first = plan_with(effects, &event, 2).unwrap();
        let mut again = event.clone();
        again.id = "evt_2".into();
        assert_eq!(
            first.outbox_keys,
            plan_with(effects, &again, 3).unwrap().outbox_keys
        );
    }

    #[test]
    fn a_customer_without_an_id_is_refused() {
        let event = VerifiedEvent::example("stripe", "customer.created", r#"{"data":{}}"#);
        assert!(created(&event, 2).is_err());
    }
}

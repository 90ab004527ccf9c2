//! Stripe subscription events → `subscriptions`, newest state wins.
//!
//! Stripe does not deliver in order: an `updated` from before a `deleted` may
//! arrive after it. Each row remembers the `created` time of the event that
//! set it, and the upsert only overwrites a row with an event at least as new.
//! At an equal second, a cancellation wins: it is the terminal state.
// needs: stripe, demos

use serde::Deserialize;

use webhook_engine::effects::{parse, Effect, PlanError, Statement, StripeEvent};
use webhook_engine::event::VerifiedEvent;

#[derive(Deserialize)]
struct Subscription {
    id: String,
    customer: Option<String>,
    status: String,
}

const SET_IF_NEWER: &str = "INSERT INTO subscriptions \
     (id, customer_id, status, event_created, event_id, updated_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
     ON CONFLICT (id) DO UPDATE SET \
       customer_id = excluded.customer_id, status = excluded.status, \
       event_created = excluded.event_created, event_id = excluded.event_id, \
       updated_at = excluded.updated_at \
     WHERE excluded.event_created > subscriptions.event_created \
        OR (excluded.event_created = subscriptions.event_created AND excluded.status = 'canceled')";

/// `customer.subscription.updated` or `…deleted`: the subscription's state,
/// unless a newer event set it already.
pub fn set_state(event: &VerifiedEvent, now: i64) -> Result<Effect, PlanError> {
    let stripe: StripeEvent<Subscription> = parse(&event.body)?;
    let sub = stripe.data.object;
    let writes = vec![Statement::new(
        SET_IF_NEWER,
        vec![
            sub.id.into(),
            sub.customer.into(),
            sub.status.into(),
            stripe.created.into(),
            event.id.as_str().into(),
            now.into(),
        ],
    )];
    Ok(Effect::new(writes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use webhook_engine::effects::Value;
    use webhook_engine::event::VerifiedEvent;

    #[test]
    fn carries_the_event_time_as_the_version() {
        let body = r#"{"created":1700,"data":{"object":{"id":"sub_1","customer":"cus_1","status":"active"}}}"#;
        let mut event = VerifiedEvent::example("stripe", "customer.subscription.updated", body);
        event.id = "evt_9".into();
        let effect = set_state(&event, 5).unwrap();
        let plan = effect.writes();
        assert_eq!(
            plan[0].params,
            vec![
                "sub_1".into(),
                "cus_1".into(),
                "active".into(),
                Value::Int(1700),
                "evt_9".into(),
                Value::Int(5)
            ]
        );
    }

    #[test]
    fn an_event_without_created_is_a_plan_error() {
        let body = r#"{"data":{"object":{"id":"sub_1","status":"active"}}}"#;
        let event = VerifiedEvent::example("stripe", "customer.subscription.updated", body);
        assert!(set_state(&event, 5).is_err());
    }
}

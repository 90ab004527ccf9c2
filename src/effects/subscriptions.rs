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
    use crate::effects::EFFECTS;
    use webhook_engine::effects::Value;
    use webhook_engine::testing::{self, row, Applied, TestDb};

    /// A subscription event as Stripe sends it, `created` at `at` (s).
    fn event(id: &str, kind: &str, at: i64, status: &str) -> VerifiedEvent {
        let body = format!(
            r#"{{"id":"{id}","type":"customer.subscription.{kind}","created":{at},
            "data":{{"object":{{"id":"sub_1","customer":"cus_1","status":"{status}"}}}}}}"#
        );
        testing::event("stripe", &[], &body)
    }

    fn state(db: &mut TestDb) -> Vec<Vec<Value>> {
        let sql = "SELECT status, event_created, event_id FROM subscriptions";
        db.rows(sql, vec![])
    }

    #[test]
    fn the_newest_event_sets_the_state_whatever_the_order_it_arrives_in() {
        let mut db = TestDb::new();
        let newer = event("evt_2", "updated", 200, "past_due");
        let older = event("evt_1", "updated", 100, "active");
        assert_eq!(db.apply(EFFECTS, &newer), Applied::Now);
        assert_eq!(db.apply(EFFECTS, &older), Applied::Now);
        assert_eq!(state(&mut db), [row!["past_due", 200, "evt_2"]]);
        // A copy of the newer one changes nothing.
        assert_eq!(db.apply(EFFECTS, &newer), Applied::Earlier);
        assert_eq!(state(&mut db), [row!["past_due", 200, "evt_2"]]);
    }

    #[test]
    fn a_late_update_does_not_undo_a_cancellation() {
        let mut db = TestDb::new();
        db.apply(EFFECTS, &event("evt_1", "deleted", 200, "canceled"));
        db.apply(EFFECTS, &event("evt_2", "updated", 100, "active"));
        assert_eq!(state(&mut db), [row!["canceled", 200, "evt_1"]]);
    }

    #[test]
    fn at_an_equal_second_a_cancellation_wins() {
        let deleted = event("evt_1", "deleted", 300, "canceled");
        let updated = event("evt_2", "updated", 300, "active");
        for order in [[&deleted, &updated], [&updated, &deleted]] {
            let mut db = TestDb::new();
            for event in order {
                db.apply(EFFECTS, event);
            }
            assert_eq!(state(&mut db), [row!["canceled", 300, "evt_1"]]);
        }
    }

    #[test]
    fn an_event_without_created_is_a_plan_error() {
        let body = r#"{"data":{"object":{"id":"sub_1","status":"active"}}}"#;
        let event = VerifiedEvent::example("stripe", "customer.subscription.updated", body);
        assert!(set_state(&event, 5).is_err());
    }
}

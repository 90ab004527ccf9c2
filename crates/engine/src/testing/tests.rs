//! The harness against the engine's own migrations and a table of the
//! test's: what an owner sees when their effect's SQL is wrong.

use super::*;
use crate::effects::{Effect, PlanError, Statement};

const REFUNDS: &str = "CREATE TABLE refunds \
     (charge_id TEXT PRIMARY KEY, amount BIGINT NOT NULL, currency TEXT)";

const REFUND: &str = r#"{"id":"evt_r1","type":"charge.refunded","data":{"object":{"id":"ch_1","amount_refunded":500,"currency":"eur"}}}"#;

fn refund(sql: &'static str, params: usize) -> Result<Effect, PlanError> {
    let values: Vec<Value> = vec!["ch_1".into(), 500.into(), "eur".into()];
    Ok(Effect::new(vec![Statement::new(
        sql,
        values[..params].to_vec(),
    )]))
}

fn refunded(_: &VerifiedEvent, _: i64) -> Result<Effect, PlanError> {
    refund(
        "INSERT INTO refunds (charge_id, amount, currency) VALUES (?1, ?2, ?3)",
        3,
    )
}

fn misspelled(_: &VerifiedEvent, _: i64) -> Result<Effect, PlanError> {
    refund(
        "INSERT INTO refunds (charge_id, amount, curency) VALUES (?1, ?2, ?3)",
        3,
    )
}

fn too_few_values(_: &VerifiedEvent, _: i64) -> Result<Effect, PlanError> {
    refund(
        "INSERT INTO refunds (charge_id, amount, currency) VALUES (?1, ?2, ?3)",
        2,
    )
}

fn locked(_: &VerifiedEvent, _: i64) -> Result<Effect, PlanError> {
    // `::` is Postgres's alone: SQLite would refuse the statement it skips.
    let lock = Statement::new(
        "SELECT amount FROM refunds WHERE charge_id = ?1::text",
        vec!["ch_1".into()],
    );
    let write = Statement::new(
        "UPDATE refunds SET amount = amount + 1 WHERE charge_id = ?1",
        vec!["ch_1".into()],
    );
    Ok(Effect::new(vec![lock.for_update(), write]))
}

fn huge(_: &VerifiedEvent, _: i64) -> Result<Effect, PlanError> {
    let sql = "INSERT INTO refunds (charge_id, amount) VALUES (?1, ?2)";
    Ok(Effect::new(vec![Statement::new(
        sql,
        vec!["ch_1".into(), (1i64 << 53).into()],
    )]))
}

fn marked_write(_: &VerifiedEvent, _: i64) -> Result<Effect, PlanError> {
    let write = Statement::new("UPDATE refunds SET amount = 0", vec![]);
    Ok(Effect::new(vec![write.for_update()]))
}

fn table(
    planner: crate::effects::Planner,
) -> [(&'static str, &'static str, crate::effects::Planner); 1] {
    [("stripe", "charge.refunded", planner)]
}

/// Each backend this build has.
fn each(test: impl Fn(TestDb)) {
    test(TestDb::sqlite());
    #[cfg(feature = "postgres")]
    test(TestDb::postgres());
}

fn with_refunds(mut db: TestDb) -> TestDb {
    db.execute(REFUNDS);
    db
}

#[test]
fn an_event_is_made_by_its_providers_own_reading() {
    let event = event("stripe", &[], REFUND);
    assert_eq!(
        (event.id.as_str(), event.kind.as_str()),
        ("evt_r1", "charge.refunded")
    );
    assert_eq!(event.fence, None, "Stripe signs the id");
    let headers = [("X-GitHub-Event", "star"), ("X-GitHub-Delivery", "d-1")];
    let star = event_of_github(&headers);
    assert_eq!(
        (star.id.as_str(), star.kind.as_str()),
        ("d-1", "star.created")
    );
    assert!(star.fence.is_some(), "GitHub does not sign the delivery id");
}

fn event_of_github(headers: &[(&str, &str)]) -> VerifiedEvent {
    event("github", headers, r#"{"action":"created"}"#)
}

#[test]
fn an_effect_commits_once_with_its_ledger_row() {
    each(|db| {
        let mut db = with_refunds(db);
        let event = event("stripe", &[], REFUND);
        assert_eq!(db.apply(&table(refunded), &event), Applied::Now);
        assert_eq!(db.apply(&table(refunded), &event), Applied::Earlier);
        let rows = db.rows("SELECT charge_id, amount, currency FROM refunds", vec![]);
        assert_eq!(rows, [row!["ch_1", 500, "eur"]], "{}", db.store());
        let ledger = db.rows("SELECT event_id, type FROM processed_events", vec![]);
        assert_eq!(
            ledger,
            [row!["evt_r1", "charge.refunded"]],
            "{}",
            db.store()
        );
        if db.store() == "Postgres" {
            // As the worker leaves it: the ledger row to hand off to D1.
            let handed = db.rows("SELECT kind, event_id FROM webhook_outbox", vec![]);
            assert_eq!(handed, [row!["ledger", "evt_r1"]]);
        }
    });
}

#[test]
fn a_write_marked_as_a_row_lock_is_refused_on_both_stores() {
    each(|db| {
        let mut db = with_refunds(db);
        let failed = db.try_apply(&table(marked_write), &event("stripe", &[], REFUND));
        let failed = failed.unwrap_err();
        assert!(failed.error.contains("only a SELECT"), "{failed}");
    });
}

#[test]
fn a_misspelled_column_names_the_effect_the_statement_and_the_column_and_writes_nothing() {
    each(|db| {
        let mut db = with_refunds(db);
        let event = event("stripe", &[], REFUND);
        let failed = db.try_apply(&table(misspelled), &event).unwrap_err();
        assert_eq!(failed.effect, "stripe `charge.refunded`");
        assert!(
            failed
                .sql
                .as_deref()
                .unwrap()
                .contains("curency) VALUES (?1"),
            "{failed}"
        );
        assert!(failed.error.contains("curency"), "{failed}");
        let said = failed.to_string();
        assert!(
            said.starts_with("the effect of stripe `charge.refunded` failed on "),
            "{said}"
        );
        let ledger = db.rows("SELECT count(*) FROM processed_events", vec![]);
        assert_eq!(ledger, [row![0]], "the ledger row rolled back with it");
    });
}

#[test]
fn fewer_values_than_placeholders_is_the_statements_failure() {
    each(|db| {
        let mut db = with_refunds(db);
        let failed = db.try_apply(&table(too_few_values), &event("stripe", &[], REFUND));
        let failed = failed.unwrap_err();
        assert!(
            failed
                .sql
                .as_deref()
                .unwrap()
                .starts_with("INSERT INTO refunds"),
            "{failed}"
        );
        if db.store() == "Postgres" {
            assert!(
                failed.error.ends_with("it uses ?3 but binds 2 values"),
                "{failed}"
            );
        }
    });
}

fn counted(_: &VerifiedEvent, _: i64) -> Result<Effect, PlanError> {
    let count = Statement::new("SELECT count(*) FROM refunds", vec![]);
    Ok(Effect::new(vec![count.for_update()]))
}

/// Postgres refuses `FOR UPDATE` with an aggregate: proof that the lock is
/// sent there, and left out on D1.
#[test]
fn a_lock_reaches_postgres_alone() {
    each(|db| {
        let mut db = with_refunds(db);
        let applied = db.try_apply(&table(counted), &event("stripe", &[], REFUND));
        match db.store() {
            "Postgres" => assert!(applied.unwrap_err().error.starts_with("0A000 "), "sent"),
            _ => assert_eq!(applied, Ok(Applied::Now)),
        }
    });
}

fn gap(_: &VerifiedEvent, _: i64) -> Result<Effect, PlanError> {
    let sql = "INSERT INTO refunds (charge_id, amount) VALUES (?1, ?3)";
    Ok(Effect::new(vec![Statement::new(
        sql,
        vec!["ch_1".into(), "unused".into(), 500.into()],
    )]))
}

/// A value the statement does not use is bound on both stores alike.
#[test]
fn a_value_the_statement_does_not_use_is_no_error() {
    each(|db| {
        let mut db = with_refunds(db);
        db.apply(&table(gap), &event("stripe", &[], REFUND));
        let rows = db.rows("SELECT amount FROM refunds", vec![]);
        assert_eq!(rows, [row![500]], "{}", db.store());
    });
}

#[test]
fn a_row_lock_runs_on_postgres_and_is_left_out_on_d1() {
    each(|db| {
        let mut db = with_refunds(db);
        db.execute("INSERT INTO refunds (charge_id, amount) VALUES ('ch_1', 1)");
        db.apply(&table(locked), &event("stripe", &[], REFUND));
        let rows = db.rows("SELECT amount FROM refunds", vec![]);
        assert_eq!(rows, [row![2]], "{}", db.store());
    });
}

#[test]
fn an_integer_d1_would_round_is_refused_on_d1() {
    let mut db = with_refunds(TestDb::sqlite());
    let failed = db
        .try_apply(&table(huge), &event("stripe", &[], REFUND))
        .unwrap_err();
    assert!(failed.error.contains("parameter ?2 of"), "{failed}");
    assert!(failed.error.contains("beyond ±(2^53 - 1)"), "{failed}");
}

#[test]
#[should_panic(expected = "EFFECTS has no line for stripe `charge.refunded`")]
fn an_event_without_an_effect_is_named() {
    TestDb::sqlite().apply(&[], &event("stripe", &[], REFUND));
}

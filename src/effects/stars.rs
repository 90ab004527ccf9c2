//! GitHub `star` → `repo_stars.stars` moves by one.
//!
//! An increment is not idempotent: run twice, it counts twice. It is here on
//! purpose, to show the ledger row in the same batch making it exactly-once.

use serde::Deserialize;

use super::{parse, PlanError, Statement};

/// The parts of a `star` event the counter and the chat message need.
#[derive(Deserialize)]
pub struct StarEvent {
    pub repository: Repository,
    pub sender: Option<Sender>,
}

#[derive(Deserialize)]
pub struct Repository {
    pub full_name: String,
}

#[derive(Deserialize)]
pub struct Sender {
    pub login: String,
}

impl StarEvent {
    pub fn from_event(body: &str) -> Result<Self, PlanError> {
        parse(body)
    }
}

const ADD_STARS: &str = "INSERT INTO repo_stars (repo, stars) VALUES (?1, ?2) \
     ON CONFLICT (repo) DO UPDATE SET stars = repo_stars.stars + excluded.stars";

/// `delta` is +1 for `created`, -1 for `deleted`.
pub fn count(star: &StarEvent, delta: i64) -> Vec<Statement> {
    vec![Statement {
        sql: ADD_STARS,
        params: vec![star.repository.full_name.as_str().into(), delta.into()],
    }]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::Value;

    #[test]
    fn moves_the_named_repository_by_delta() {
        let body = r#"{"action":"deleted","repository":{"full_name":"octo/cat"}}"#;
        let plan = count(&StarEvent::from_event(body).unwrap(), -1);
        assert_eq!(plan[0].params, vec!["octo/cat".into(), Value::Int(-1)]);
    }

    #[test]
    fn a_star_without_repository_is_a_plan_error() {
        assert!(StarEvent::from_event(r#"{"action":"created"}"#).is_err());
    }
}

//! GitHub `star` → `repo_stars.stars` moves by one.
//!
//! An increment is not idempotent: run twice, it counts twice. It is here on
//! purpose, to show the ledger row in the same batch making it exactly-once.

use serde::Deserialize;

use super::{parse, PlanError, Statement};

#[derive(Deserialize)]
struct StarEvent {
    repository: Repository,
}

#[derive(Deserialize)]
struct Repository {
    full_name: String,
}

const ADD_STARS: &str = "INSERT INTO repo_stars (repo, stars) VALUES (?1, ?2) \
     ON CONFLICT (repo) DO UPDATE SET stars = repo_stars.stars + excluded.stars";

/// `delta` is +1 for `created`, -1 for `deleted`.
pub fn count(body: &str, delta: i64) -> Result<Vec<Statement>, PlanError> {
    let event: StarEvent = parse(body)?;
    Ok(vec![Statement {
        sql: ADD_STARS,
        params: vec![event.repository.full_name.into(), delta.into()],
    }])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::Value;

    #[test]
    fn moves_the_named_repository_by_delta() {
        let body = r#"{"action":"deleted","repository":{"full_name":"octo/cat"}}"#;
        let plan = count(body, -1).unwrap();
        assert_eq!(plan[0].params, vec!["octo/cat".into(), Value::Int(-1)]);
    }

    #[test]
    fn a_star_without_repository_is_a_plan_error() {
        assert!(count(r#"{"action":"created"}"#, 1).is_err());
    }
}

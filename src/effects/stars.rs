//! GitHub `star` → `repo_stars.stars` moves by one.
//!
//! An increment is not idempotent: run twice, it counts twice. It is here on
//! purpose, to show the ledger row in the same batch making it exactly-once.
//!
//! GitHub does not sign `X-GitHub-Event`, the header that says this is a
//! star: anyone holding a signed `issue_comment` body could resend it
//! labelled `star`. So the body must have a star's own shape — `starred_at`,
//! a time when starred, `null` when unstarred — before the counter moves.
// needs: github, demos

use serde::Deserialize;

use webhook_engine::effects::{parse, Effect, PlanError, Statement};
use webhook_engine::event::VerifiedEvent;
use webhook_engine::outbox::ChatMessage;

/// `star.created`: one more, and a word in the chat channel.
pub fn created(event: &VerifiedEvent, _: i64) -> Result<Effect, PlanError> {
    let star = StarEvent::from_event(&event.body, true)?;
    Ok(Effect::new(count(&star, 1)).with([message(&star).post()]))
}

/// `star.deleted`: one fewer.
pub fn deleted(event: &VerifiedEvent, _: i64) -> Result<Effect, PlanError> {
    let star = StarEvent::from_event(&event.body, false)?;
    Ok(Effect::new(count(&star, -1)))
}

/// What the chat channel is told.
fn message(star: &StarEvent) -> ChatMessage {
    let who = star.sender.as_ref().map_or("Someone", |s| s.login.as_str());
    ChatMessage::new(format!("{who} starred {}", star.repository.full_name))
}

/// The parts of a `star` event the counter and the chat message need.
#[derive(Deserialize)]
struct StarEvent {
    repository: Repository,
    sender: Option<Sender>,
    /// Present in every star event, and only there: a time when starred,
    /// `null` when not. Required (no default when absent, unlike a plain
    /// `Option`), so that a body of another type is refused.
    #[serde(deserialize_with = "Option::deserialize")]
    starred_at: Option<String>,
}

#[derive(Deserialize)]
struct Repository {
    full_name: String,
}

#[derive(Deserialize)]
struct Sender {
    login: String,
}

impl StarEvent {
    /// Reads a `star.created` (`starred` true) or `star.deleted` body, and
    /// refuses one that lacks a star's shape.
    fn from_event(body: &str, starred: bool) -> Result<Self, PlanError> {
        let star: StarEvent = parse(body)?;
        if star.starred_at.is_some() != starred {
            return Err(PlanError::NotA(
                "a star event: starred_at must be a time when starred, null when not",
            ));
        }
        Ok(star)
    }
}

const ADD_STARS: &str = "INSERT INTO repo_stars (repo, stars) VALUES (?1, ?2) \
     ON CONFLICT (repo) DO UPDATE SET stars = repo_stars.stars + excluded.stars";

/// `delta` is +1 for `created`, -1 for `deleted`.
fn count(star: &StarEvent, delta: i64) -> Vec<Statement> {
    vec![Statement::new(
        ADD_STARS,
        vec![star.repository.full_name.as_str().into(), delta.into()],
    )]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::EFFECTS;
    use webhook_engine::testing::{self, row, Applied, TestDb};

    /// A star delivery as GitHub sends it: its id and type in headers.
    fn star(delivery: &str, action: &str, starred_at: &str) -> VerifiedEvent {
        let body = format!(
            r#"{{"action":"{action}","starred_at":{starred_at},"repository":{{"full_name":"octo/cat"}},"sender":{{"login":"mona"}}}}"#
        );
        let headers = [("X-GitHub-Event", "star"), ("X-GitHub-Delivery", delivery)];
        testing::event("github", &headers, &body)
    }

    #[test]
    fn each_star_counts_once_however_often_it_arrives() {
        let mut db = TestDb::new();
        let first = star("d-1", "created", r#""2026-01-01T00:00:00Z""#);
        assert_eq!(db.apply(EFFECTS, &first), Applied::Now);
        assert_eq!(db.apply(EFFECTS, &first), Applied::Earlier);
        db.apply(
            EFFECTS,
            &star("d-2", "created", r#""2026-01-02T00:00:00Z""#),
        );
        db.apply(EFFECTS, &star("d-3", "deleted", "null"));
        let stars = db.rows("SELECT repo, stars FROM repo_stars", vec![]);
        assert_eq!(stars, [row!["octo/cat", 1]]);
    }

    #[test]
    fn a_signed_body_resent_under_a_fresh_delivery_id_counts_once() {
        let mut db = TestDb::new();
        let body = star("d-1", "created", r#""2026-01-01T00:00:00Z""#);
        db.apply(EFFECTS, &body);
        let resent = star("d-forged", "created", r#""2026-01-01T00:00:00Z""#);
        let replayed = Applied::Replayed { of: "d-1".into() };
        assert_eq!(db.apply(EFFECTS, &resent), replayed);
        let stars = db.rows("SELECT stars FROM repo_stars", vec![]);
        assert_eq!(stars, [row![1]]);
    }

    #[test]
    fn the_message_names_who_and_what() {
        let body = r#"{"action":"created","starred_at":"2026-01-01T00:00:00Z","repository":{"full_name":"octo/cat"},"sender":{"login":"mona"}}"#;
        let side_effect = message(&StarEvent::from_event(body, true).unwrap()).post();
        assert_eq!(side_effect.payload(), r#"{"text":"mona starred octo/cat"}"#);
    }

    #[test]
    fn a_star_without_repository_is_a_plan_error() {
        let body = r#"{"action":"created","starred_at":"2026-01-01T00:00:00Z"}"#;
        assert!(StarEvent::from_event(body, true).is_err());
    }

    #[test]
    fn a_body_without_a_stars_shape_is_a_plan_error() {
        let comment =
            r#"{"action":"created","comment":{"body":"hi"},"repository":{"full_name":"o/r"}}"#;
        assert!(StarEvent::from_event(comment, true).is_err());
        let created = r#"{"starred_at":"2026-01-01T00:00:00Z","repository":{"full_name":"o/r"}}"#;
        let deleted = r#"{"starred_at":null,"repository":{"full_name":"o/r"}}"#;
        assert!(StarEvent::from_event(created, true).is_ok());
        assert!(StarEvent::from_event(deleted, false).is_ok());
        assert!(StarEvent::from_event(created, false).is_err());
        assert!(StarEvent::from_event(deleted, true).is_err());
        let number = r#"{"starred_at":5,"repository":{"full_name":"o/r"}}"#;
        assert!(StarEvent::from_event(number, false).is_err());
    }
}

//! `notify_chat`: tell a chat channel about a new GitHub star, through a
//! Slack-style incoming webhook: `POST {NOTIFY_URL}` with `{"text": …}`.

use serde::{Deserialize, Serialize};
use worker::Env;

use super::{post_json, Performed, SideEffect};
use crate::config;
use crate::effects::{parse, PlanError};

pub const ACTION: &str = "notify_chat";

#[derive(Deserialize)]
struct StarEvent {
    repository: Repository,
    sender: Option<Sender>,
}

#[derive(Deserialize)]
struct Repository {
    full_name: String,
}

#[derive(Deserialize)]
struct Sender {
    login: String,
}

/// Stored as the row's payload and posted as is.
#[derive(Serialize)]
struct Message {
    text: String,
}

pub fn intent(body: &str) -> Result<SideEffect, PlanError> {
    let event: StarEvent = parse(body)?;
    let who = event
        .sender
        .map_or_else(|| "Someone".to_string(), |s| s.login);
    let message = Message {
        text: format!("{who} starred {}", event.repository.full_name),
    };
    Ok(SideEffect::new(ACTION, &message))
}

/// The URL is a secret of its own (Slack's carry a token): it never appears
/// in an error or a log line.
pub async fn perform(payload: &str, key: &str, env: &Env) -> Result<Performed, String> {
    let Some(url) = config::optional(env, "NOTIFY_URL") else {
        return Ok(Performed::Skipped("NOTIFY_URL is not set"));
    };
    post_json(&url, payload, key, None).await?;
    Ok(Performed::Sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_who_and_what() {
        let body = r#"{"action":"created","repository":{"full_name":"octo/cat"},"sender":{"login":"mona"}}"#;
        let side_effect = intent(body).unwrap();
        assert_eq!(side_effect.action, ACTION);
        assert_eq!(side_effect.payload, r#"{"text":"mona starred octo/cat"}"#);
    }
}

//! `notify_chat`: tell a chat channel about a new GitHub star, through a
//! Slack-style incoming webhook: `POST {NOTIFY_URL}` with `{"text": …}`.

use serde::{Deserialize, Serialize};

use super::{post_json, unconfigured, Action, Call, Performed, SideEffect};
use crate::config;
use crate::effects::stars::StarEvent;

/// A Slack-style incoming webhook's body, stored as the row's payload
/// (also the operators' alerts', see `notify_operator`).
#[derive(Serialize, Deserialize)]
pub(super) struct Message {
    pub(super) text: String,
}

pub fn intent(star: &StarEvent) -> SideEffect {
    let who = star.sender.as_ref().map_or("Someone", |s| s.login.as_str());
    let message = Message {
        text: format!("{who} starred {}", star.repository.full_name),
    };
    SideEffect::new(Action::NotifyChat, &message)
}

/// The URL is a secret of its own (Slack's carry a token): it never appears
/// in an error or a log line.
pub async fn perform(payload: &str, call: &Call<'_>) -> Result<Performed, String> {
    let Some(url) = config::optional(call.env, "NOTIFY_URL") else {
        return unconfigured(call.env, "NOTIFY_URL is not set");
    };
    post_json(&url, payload, call, None).await?;
    Ok(Performed::Sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_who_and_what() {
        let body = r#"{"action":"created","starred_at":"2026-01-01T00:00:00Z","repository":{"full_name":"octo/cat"},"sender":{"login":"mona"}}"#;
        let side_effect = intent(&StarEvent::from_event(body, true).unwrap());
        assert_eq!(side_effect.action, Action::NotifyChat);
        assert_eq!(side_effect.payload, r#"{"text":"mona starred octo/cat"}"#);
    }
}

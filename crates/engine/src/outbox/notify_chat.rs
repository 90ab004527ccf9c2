//! `notify_chat`: a message to a chat channel through an incoming webhook:
//! `POST {NOTIFY_URL}` with `{"text": …}`.

use serde::{Deserialize, Serialize};

use super::{post_json, unconfigured, Action, Call, CallError, Performed, SideEffect};
use crate::config;

/// A chat incoming webhook's body: what an effect writes, and what
/// the row stores (also the operators' alerts', see `notify_operator`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ChatMessage {
    /// The message, as the channel shows it.
    pub text: String,
}

impl ChatMessage {
    /// A message of `text`.
    pub fn new(text: impl Into<String>) -> Self {
        ChatMessage { text: text.into() }
    }

    /// The side effect that posts it once, keyed by the event.
    pub fn post(&self) -> SideEffect {
        SideEffect::new(Action::NotifyChat, self)
    }
}

/// The URL is a secret of its own (chat webhooks' carry a token): it never appears
/// in an error or a log line.
pub async fn perform(payload: &str, call: &Call<'_>) -> Result<Performed, CallError> {
    let Some(url) = config::optional(call.env, "NOTIFY_URL") else {
        return unconfigured(call, "NOTIFY_URL");
    };
    post_json(&url, payload, call, None).await?;
    Ok(Performed::Sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_stored_as_a_chat_webhook_reads_it() {
        let side_effect = ChatMessage::new("hi").post();
        assert_eq!(side_effect.action, Action::NotifyChat.name());
        assert_eq!(side_effect.payload, r#"{"text":"hi"}"#);
    }
}

//! What the worker sends an inbox with each delivery, and how the inbox
//! reads it back: the one format both sides of [`super::client`] share.

use crate::config::ReplyAfter;
use crate::event::VerifiedEvent;
use crate::fault::Fault;
use crate::providers::Verified;

/// What the worker sends an inbox with each delivery: the event's fields in
/// the query string, its body as the request body, exactly as signed. Not
/// inside JSON: a body escaped into a JSON string is copied and escaped
/// again on one side and unescaped on the other, which for a 1 MiB body
/// costs milliseconds (see BENCHMARKS.md).
pub struct Handoff {
    pub event: VerifiedEvent,
    /// How this delivery was verified; `None` from a worker of an older
    /// release, during a deploy.
    pub verified: Option<Verified>,
    pub fault: Option<Fault>,
    /// When the inbox answers a first delivery.
    pub reply_after: ReplyAfter,
}

impl Handoff {
    /// The query string carrying everything but the body.
    pub(super) fn query(&self) -> String {
        let event = &self.event;
        let mut query = form_urlencoded::Serializer::new(String::new());
        query
            .append_pair("source", &event.source)
            .append_pair("provider", &event.provider)
            .append_pair("id", &event.id)
            .append_pair("type", &event.kind)
            .append_pair("received_at", &event.received_at.to_string());
        if let Some(fence) = &event.fence {
            query.append_pair("fence", fence);
        }
        if let Some(forward) = &event.forward {
            query.append_pair("forward", forward);
        }
        if let Some(verified) = &self.verified {
            query
                .append_pair("scheme", &verified.scheme)
                .append_pair("secret", &verified.secret.to_string());
            if let Some(at) = verified.signed_at {
                query.append_pair("signed_at", &at.to_string());
            }
        }
        if let Some(fault) = self.fault {
            query.append_pair("fault", &fault.name());
        }
        if self.reply_after != ReplyAfter::Effect {
            query.append_pair("reply_after", self.reply_after.name());
        }
        query.finish()
    }

    /// Reads back what [`Handoff::query`] wrote, with the body.
    pub(super) fn from_parts(query: &str, body: String) -> std::result::Result<Handoff, String> {
        let (mut source, mut provider, mut id, mut kind, mut received_at) =
            (None, None, None, None, None);
        let (mut fence, mut fault, mut forward) = (None, None, None);
        let mut reply_after = ReplyAfter::Effect;
        let (mut scheme, mut secret, mut signed_at) = (None, None, None);
        for (name, value) in form_urlencoded::parse(query.as_bytes()) {
            let value = value.into_owned();
            match name.as_ref() {
                "source" => source = Some(value),
                "provider" => provider = Some(value),
                "id" => id = Some(value),
                "type" => kind = Some(value),
                "received_at" => received_at = value.parse().ok(),
                "fence" => fence = Some(value),
                "forward" => forward = Some(value),
                "scheme" => scheme = Some(value),
                "secret" => secret = Some(value.parse().map_err(|_| "handoff: bad secret")?),
                "signed_at" => {
                    signed_at = Some(value.parse().map_err(|_| "handoff: bad signed_at")?)
                }
                "fault" => fault = Some(Fault::parse(&value).ok_or("handoff: unknown fault")?),
                // A mode this release does not know: the safe one.
                "reply_after" => reply_after = ReplyAfter::from_name(&value).unwrap_or_default(),
                _ => {}
            }
        }
        let missing = |field: &str| format!("handoff: no {field}");
        Ok(Handoff {
            event: VerifiedEvent {
                source: source.ok_or_else(|| missing("source"))?,
                provider: provider.ok_or_else(|| missing("provider"))?,
                id: id.ok_or_else(|| missing("id"))?,
                kind: kind.ok_or_else(|| missing("type"))?,
                body,
                fence,
                received_at: received_at.ok_or_else(|| missing("received_at"))?,
                forward,
            },
            verified: match (scheme, secret, signed_at) {
                (Some(scheme), Some(secret), signed_at) => Some(Verified {
                    scheme,
                    secret,
                    signed_at,
                }),
                (None, None, None) => None,
                _ => return Err("handoff: a verification without its scheme or secret".into()),
            },
            fault,
            reply_after,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: &str, fence: Option<&str>) -> VerifiedEvent {
        VerifiedEvent {
            source: "acme-eu".into(),
            provider: "example".into(),
            id: id.into(),
            kind: "order.paid & more".into(),
            body: "{\"id\":\"x\",\"note\":\"a \\\"quoted\\\" é\"}".into(),
            fence: fence.map(Into::into),
            received_at: 1_796_000_000_123,
            forward: Some(
                r#"{"to":["a b","c"],"headers":[["content-type","application/json; charset=utf-8"],["x-a","b&c=d"]]}"#.into(),
            ),
        }
    }

    #[test]
    fn a_handoff_reads_back_exactly_whatever_its_fields_hold() {
        let verified = |signed_at| {
            Some(Verified {
                scheme: "x-acme-signature: HMAC-SHA256 (hex) of timestamp.body & more".into(),
                secret: 1,
                signed_at,
            })
        };
        for (id, fence, verified, fault) in [
            ("evt_1", None, None, None),
            (
                "id with spaces, = & ? # % + and ünïcödé",
                Some("cd".repeat(32)),
                verified(Some(1_796_000_000)),
                None,
            ),
            (
                "evt_2",
                None,
                verified(None),
                Some(Fault::D1DownUntil(1_796_000_000_000)),
            ),
        ] {
            let reply_after = match fault {
                Some(_) => ReplyAfter::Record,
                None => ReplyAfter::Effect,
            };
            let sent = Handoff {
                event: event(id, fence.as_deref()),
                verified,
                fault,
                reply_after,
            };
            let read = Handoff::from_parts(&sent.query(), sent.event.body.clone()).unwrap();
            assert_eq!(read.event, sent.event);
            assert_eq!(read.verified, sent.verified);
            assert_eq!(read.fault, sent.fault);
            assert_eq!(read.reply_after, sent.reply_after);
        }
    }

    #[test]
    fn a_handoff_missing_a_field_or_naming_an_unknown_fault_is_an_error() {
        let full = Handoff {
            event: event("evt_1", None),
            verified: None,
            fault: None,
            reply_after: ReplyAfter::Effect,
        }
        .query();
        for field in ["source", "provider", "id", "type", "received_at"] {
            let query: String = full
                .split('&')
                .filter(|pair| !pair.starts_with(&format!("{field}=")))
                .collect::<Vec<_>>()
                .join("&");
            let error = Handoff::from_parts(&query, String::new()).err().unwrap();
            assert!(error.contains("handoff: no "), "{field}: {error}");
        }
        let bad_fault = format!("{full}&fault=no-such-fault");
        assert!(Handoff::from_parts(&bad_fault, String::new()).is_err());
        let later_mode = format!("{full}&reply_after=never");
        let read = Handoff::from_parts(&later_mode, String::new()).unwrap();
        assert_eq!(read.reply_after, ReplyAfter::Effect);
        for half in ["scheme=x", "secret=1", "signed_at=1", "scheme=x&secret=-1"] {
            let query = format!("{full}&{half}");
            assert!(
                Handoff::from_parts(&query, String::new()).is_err(),
                "{half}"
            );
        }
        // A field of a later release is ignored: during a deploy, an inbox
        // may be older than the worker that calls it.
        let later = format!("{full}&added_by_a_later_release=1");
        assert!(Handoff::from_parts(&later, String::new()).is_ok());
    }
}

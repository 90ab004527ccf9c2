//! A source configured without code, for any provider that signs with
//! HMAC-SHA256:
//!
//! ```toml
//! acme = { provider = "hmac", header = "X-Acme-Signature", prefix = "sha256=",
//!          encoding = "hex", signed = "{timestamp}.{body}",
//!          timestamp_header = "X-Acme-Timestamp", key = "json:/id", event_type = "json:/type" }
//! ```
//!
//! `signed` is `{body}` (default) or `{timestamp}.{body}`, which also applies
//! the timestamp window; `key` and `event_type` are `header:<name>` or
//! `json:<JSON pointer>`.
//!
//! Every such source's provider is `hmac`: an effect for one of them names
//! `"hmac"` in `effects::EFFECTS` and tells the sources apart by
//! `event.source`, the name in their URL (`acme`).

use super::{
    required_header, verdict, ConfigError, EventIdentity, Identity, Provider, RawRequest,
    Rejection, SourceConfig, Verified, VerifyContext,
};
use crate::signature::base64_decode;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Encoding {
    Hex,
    Base64,
}

/// Where a value is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Location {
    Header(String),
    Json(String),
}

impl Location {
    fn parse(setting: &str, what: &str) -> Result<Self, ConfigError> {
        if let Some(name) = setting.strip_prefix("header:") {
            Ok(Location::Header(name.trim().to_ascii_lowercase()))
        } else if let Some(pointer) = setting.strip_prefix("json:") {
            Ok(Location::Json(pointer.trim().to_string()))
        } else {
            Err(ConfigError(format!(
                "{what} must be header:<name> or json:<pointer>"
            )))
        }
    }

    /// The value as text; numbers are accepted and printed.
    fn read(&self, req: &RawRequest, body: &Option<serde_json::Value>) -> Option<String> {
        match self {
            Location::Header(name) => required_header(req, name).map(str::to_string),
            Location::Json(pointer) => match body.as_ref()?.pointer(pointer)? {
                serde_json::Value::String(text) => Some(text.clone()),
                serde_json::Value::Number(number) => Some(number.to_string()),
                _ => None,
            },
        }
        .filter(|value| !value.is_empty())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenericHmac {
    header: String,
    prefix: String,
    encoding: Encoding,
    /// `Some(header)` when the signed content is `{timestamp}.{body}`.
    timestamp_header: Option<String>,
    key: Location,
    event_type: Option<Location>,
}

pub fn build(config: &SourceConfig) -> Result<Box<dyn Provider>, ConfigError> {
    Ok(Box::new(GenericHmac::from_config(config)?))
}

impl GenericHmac {
    pub fn from_config(config: &SourceConfig) -> Result<Self, ConfigError> {
        let missing = |what: &str| ConfigError(format!("an hmac source needs `{what}`"));
        let header = config.header.as_deref().ok_or_else(|| missing("header"))?;
        let encoding = match config.encoding.as_deref().unwrap_or("hex") {
            "hex" => Encoding::Hex,
            "base64" => Encoding::Base64,
            _ => return Err(ConfigError("encoding must be hex or base64".into())),
        };
        let timestamp_header = match config.signed.as_deref().unwrap_or("{body}") {
            "{body}" => None,
            "{timestamp}.{body}" => Some(
                config
                    .timestamp_header
                    .as_deref()
                    .ok_or_else(|| missing("timestamp_header"))?
                    .to_ascii_lowercase(),
            ),
            _ => {
                return Err(ConfigError(
                    "signed must be {body} or {timestamp}.{body}".into(),
                ))
            }
        };
        Ok(GenericHmac {
            header: header.to_ascii_lowercase(),
            prefix: config.prefix.clone().unwrap_or_default(),
            encoding,
            timestamp_header,
            key: Location::parse(config.key.as_deref().ok_or_else(|| missing("key"))?, "key")?,
            event_type: config
                .event_type
                .as_deref()
                .map(|s| Location::parse(s, "event_type"))
                .transpose()?,
        })
    }
}

impl Provider for GenericHmac {
    fn name(&self) -> &'static str {
        "hmac"
    }

    /// A key read from the body is signed; a header key is not, and then
    /// the body is the fence.
    fn replay_fence(&self, req: &RawRequest) -> Option<String> {
        match self.key {
            Location::Json(_) => None,
            Location::Header(_) => Some(crate::event::sha256_hex(&req.body)),
        }
    }

    fn verify(&self, req: &RawRequest, ctx: &VerifyContext) -> Result<Verified, Rejection> {
        let header = required_header(req, &self.header).ok_or(Rejection::MissingSignature)?;
        let encoded = header
            .strip_prefix(self.prefix.as_str())
            .ok_or(Rejection::MalformedSignature)?;
        let candidate = match self.encoding {
            Encoding::Hex => hex::decode(encoded).ok(),
            Encoding::Base64 => base64_decode(encoded),
        }
        .filter(|tag| tag.len() == 32)
        .ok_or(Rejection::MalformedSignature)?;

        let timestamp = match &self.timestamp_header {
            Some(name) => {
                let text = required_header(req, name).ok_or(Rejection::MissingSignature)?;
                let seconds: u64 = text.parse().map_err(|_| Rejection::MalformedSignature)?;
                Some((text, seconds))
            }
            None => None,
        };
        let signed_by = match timestamp {
            Some((text, _)) => ctx
                .secrets
                .any_signed(&[text.as_bytes(), b".", &req.body], &[candidate]),
            None => ctx.secrets.any_signed(&[&req.body], &[candidate]),
        };
        let scheme = format!(
            "{}: HMAC-SHA256 ({}) of {}",
            self.header,
            match self.encoding {
                Encoding::Hex => "hex",
                Encoding::Base64 => "base64",
            },
            if timestamp.is_some() {
                "timestamp.body"
            } else {
                "the body"
            }
        );
        verdict(
            &scheme,
            signed_by,
            timestamp.map(|(_, seconds)| seconds),
            ctx,
        )
    }

    fn identify(&self, req: &RawRequest) -> Result<Identity, Rejection> {
        let reads_json = matches!(self.key, Location::Json(_))
            || matches!(self.event_type, Some(Location::Json(_)));
        let body = if reads_json { Some(req.json()?) } else { None };
        let id = self.key.read(req, &body).ok_or(Rejection::MissingEventId)?;
        let kind = self
            .event_type
            .as_ref()
            .and_then(|location| location.read(req, &body))
            .unwrap_or_else(|| "event".into());
        Ok(Identity::Event(EventIdentity { id, kind }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::testing;
    use crate::signature::Secrets;

    const BODY: &str = r#"{"id":"a-1","kind":"thing.happened"}"#;
    // Computed independently with Python's hmac and base64 modules.
    const HEX_TS: &str = "096856d792a8af6776d72f0b5d91e9716422d910149db8d7d7a7155beb3b514d"; // over "1700000000." + BODY
    const B64: &str = "I53PZBEDVUqs9kZwZjmhbYkQwDkbitJ/DmIAcrwUHcY="; // over BODY

    fn config(json: &str) -> SourceConfig {
        serde_json::from_str(json).unwrap()
    }

    fn timestamped() -> GenericHmac {
        GenericHmac::from_config(&config(
            r#"{"provider":"hmac","header":"X-Acme-Signature","prefix":"sha256=","signed":"{timestamp}.{body}","timestamp_header":"X-Acme-Timestamp","key":"json:/id","event_type":"json:/kind"}"#,
        ))
        .unwrap()
    }

    fn request(headers: &[(&str, &str)]) -> RawRequest {
        let headers: Vec<_> = headers.iter().map(|&(n, v)| (n, Some(v))).collect();
        testing::request(&headers, BODY)
    }

    fn verify(provider: &GenericHmac, req: &RawRequest, now: u64) -> Result<(), Rejection> {
        let secrets = Secrets::split("old_one_secret, acme_secret");
        provider
            .verify(req, &testing::context(&secrets, now))
            .map(drop)
    }

    #[test]
    fn hex_with_prefix_over_timestamp_and_body() {
        let provider = timestamped();
        let sig = format!("sha256={HEX_TS}");
        let good = request(&[
            ("X-Acme-Signature", &sig),
            ("X-Acme-Timestamp", "1700000000"),
        ]);
        assert_eq!(verify(&provider, &good, 1_700_000_000), Ok(()));
        assert_eq!(
            verify(&provider, &good, 1_700_000_301),
            Err(Rejection::TimestampOutsideWindow)
        );
        let other_ts = request(&[
            ("X-Acme-Signature", &sig),
            ("X-Acme-Timestamp", "1700000001"),
        ]);
        assert_eq!(
            verify(&provider, &other_ts, 1_700_000_000),
            Err(Rejection::BadSignature)
        );
        let no_prefix = request(&[
            ("X-Acme-Signature", HEX_TS),
            ("X-Acme-Timestamp", "1700000000"),
        ]);
        assert_eq!(
            verify(&provider, &no_prefix, 1_700_000_000),
            Err(Rejection::MalformedSignature)
        );
        let no_ts = request(&[("X-Acme-Signature", &sig)]);
        assert_eq!(
            verify(&provider, &no_ts, 1_700_000_000),
            Err(Rejection::MissingSignature)
        );
        let event = provider.identify(&good).unwrap().expect_event();
        assert_eq!(
            event,
            EventIdentity {
                id: "a-1".into(),
                kind: "thing.happened".into()
            }
        );
    }

    #[test]
    fn base64_over_the_body_keyed_by_a_header() {
        let provider = GenericHmac::from_config(&config(
            r#"{"provider":"hmac","header":"X-Sig","encoding":"base64","key":"header:X-Delivery"}"#,
        ))
        .unwrap();
        let good = request(&[("X-Sig", B64), ("X-Delivery", "d-9")]);
        assert_eq!(verify(&provider, &good, 0), Ok(()));
        assert_eq!(
            verify(&provider, &request(&[("X-Sig", HEX_TS)]), 0),
            Err(Rejection::MalformedSignature)
        );
        assert_eq!(
            verify(&provider, &request(&[]), 0),
            Err(Rejection::MissingSignature)
        );
        let event = provider.identify(&good).unwrap().expect_event();
        assert_eq!(
            event,
            EventIdentity {
                id: "d-9".into(),
                kind: "event".into()
            }
        );
        assert_eq!(
            provider.identify(&request(&[("X-Sig", B64)])),
            Err(Rejection::MissingEventId)
        );
    }

    #[test]
    fn bad_settings_are_named() {
        for (json, says) in [
            (r#"{"provider":"hmac","key":"json:/id"}"#, "needs `header`"),
            (r#"{"provider":"hmac","header":"x"}"#, "needs `key`"),
            (
                r#"{"provider":"hmac","header":"x","key":"body:/id"}"#,
                "key must be",
            ),
            (
                r#"{"provider":"hmac","header":"x","key":"json:/id","encoding":"b32"}"#,
                "encoding must be",
            ),
            (
                r#"{"provider":"hmac","header":"x","key":"json:/id","signed":"{body}{ts}"}"#,
                "signed must be",
            ),
            (
                r#"{"provider":"hmac","header":"x","key":"json:/id","signed":"{timestamp}.{body}"}"#,
                "needs `timestamp_header`",
            ),
        ] {
            let error = GenericHmac::from_config(&config(json)).unwrap_err();
            assert!(error.0.contains(says), "{json}: {}", error.0);
        }
    }
}

//! Pieces several providers share: tag decoding, the verdict (signature,
//! then time window), and reading an id from JSON or a header. Built into
//! every build, whichever providers it holds.

use super::{EventIdentity, Identity, RawRequest, Rejection, Verified, VerifyContext};
use crate::signature::within_window;

/// A hex HMAC-SHA256 tag, after `prefix` (`sha256=`, `v0=`, or none):
/// anything else — a wrong prefix, bad hex, a wrong length — is malformed.
pub fn hex_tag(header: &str, prefix: &str) -> Result<Vec<u8>, Rejection> {
    header
        .strip_prefix(prefix)
        .and_then(|h| hex::decode(h).ok())
        .filter(|tag| tag.len() == 32)
        .ok_or(Rejection::MalformedSignature)
}

/// The verdict on a request signed under `scheme`: the signature first —
/// nothing about a forged request is trusted, its timestamp included — then
/// the window, for schemes that sign a time. `signed_by` is the position of
/// the secret that matched, if one did.
pub fn verdict(
    scheme: &str,
    signed_by: Option<usize>,
    signed_at: Option<u64>,
    ctx: &VerifyContext,
) -> Result<Verified, Rejection> {
    let secret = signed_by.ok_or(Rejection::BadSignature)?;
    match signed_at {
        Some(at) if !within_window(at, ctx.now, ctx.tolerance) => {
            Err(Rejection::TimestampOutsideWindow)
        }
        _ => Ok(Verified {
            scheme: scheme.to_string(),
            secret,
            signed_at,
        }),
    }
}

/// Reads an event's id and type from a JSON body, at top-level fields.
/// Shared by the providers whose body carries both.
pub fn json_identity(
    req: &RawRequest,
    id_field: &str,
    type_field: &str,
) -> Result<EventIdentity, Rejection> {
    let value: serde_json::Value = req.json()?;
    let id = value
        .get(id_field)
        .and_then(serde_json::Value::as_str)
        .filter(|id| !id.is_empty())
        .ok_or(Rejection::MissingEventId)?;
    let kind = value
        .get(type_field)
        .and_then(serde_json::Value::as_str)
        .unwrap_or("event");
    Ok(EventIdentity {
        id: id.to_string(),
        kind: kind.to_string(),
    })
}

/// The event identity from headers, after checking the body is JSON.
pub fn header_identity(
    req: &RawRequest,
    id_header: &str,
    kind: Option<&str>,
) -> Result<Identity, Rejection> {
    let id = required_header(req, id_header).ok_or(Rejection::MissingEventId)?;
    req.json::<serde::de::IgnoredAny>()?;
    Ok(Identity::Event(EventIdentity {
        id: id.to_string(),
        kind: kind.unwrap_or("event").to_string(),
    }))
}

/// The first value of a header, treating an empty one as absent.
pub fn required_header<'a>(req: &'a RawRequest, name: &str) -> Option<&'a str> {
    req.header(name).map(str::trim).filter(|v| !v.is_empty())
}

//! What providers' unit tests share, the engine's and an app's own: a
//! request builder and a verification context.

use crate::providers::{RawRequest, VerifyContext};
use crate::signature::Secrets;

/// A request to `https://example.com/` with `body` and the headers given
/// a value (a `None` leaves its header out).
pub fn request(headers: &[(&str, Option<&str>)], body: &str) -> RawRequest {
    request_to("https://example.com/", headers, body)
}

/// [`request`], to `url`.
pub fn request_to(url: &str, headers: &[(&str, Option<&str>)], body: &str) -> RawRequest {
    let headers = headers
        .iter()
        .filter_map(|(name, value)| Some((name.to_string(), (*value)?.to_string())));
    RawRequest::new(url, headers, body.as_bytes().to_vec())
}

/// Verification under `secrets` at `now` (seconds), with the default
/// 300 s window.
pub fn context(secrets: &Secrets, now: u64) -> VerifyContext<'_> {
    VerifyContext {
        secrets,
        now,
        tolerance: 300,
    }
}

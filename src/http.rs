//! HTTP plumbing: incoming bodies read under a cap, and outgoing requests
//! (to an inbox, and to side-effect targets).

use worker::wasm_bindgen::JsValue;
use worker::{web_sys, Request, Result};

/// A POST with a text body, built on web-sys directly. workers-rs's own
/// `RequestInit` also serializes its `cf` options (unused here) with
/// serde-wasm-bindgen, which costs about 10 KB of wasm.
pub fn post(url: &str, body: &str, headers: &[(&str, &str)]) -> Result<Request> {
    let init = web_sys::RequestInit::new();
    init.set_method("POST");
    init.set_body(&JsValue::from_str(body));
    if !headers.is_empty() {
        let map = web_sys::Headers::new()?;
        for (name, value) in headers {
            map.set(name, value)?;
        }
        init.set_headers(&map);
    }
    Ok(web_sys::Request::new_with_str_and_init(url, &init)?.into())
}

/// Why a request body was not read.
#[derive(Debug)]
pub enum BodyError {
    /// Over the cap: declared so, or found so while reading.
    TooLarge,
    /// The stream broke (the sender went away).
    Unreadable(String),
}

impl BodyError {
    /// The answer to a body refused: 413 past the cap, 400 if unreadable.
    pub fn response(&self) -> Result<worker::Response> {
        match self {
            BodyError::TooLarge => worker::Response::error("request body too large", 413),
            BodyError::Unreadable(_) => worker::Response::error("unreadable request body", 400),
        }
    }
}

/// The most of an unwanted body that is read (and dropped) to keep its
/// connection usable — on every route that reads none, and for a delivery to
/// an unknown source. Past it, a route that takes no body answers 413.
pub const UNWANTED_BODY_MAX_BYTES: usize = 64 * 1024;

/// Reads and drops a body that nothing needs, keeping none of it, up to
/// `cap`: a connection whose request body was left unread cannot carry the
/// client's next request.
pub async fn drain(req: &mut Request, cap: usize) -> std::result::Result<(), BodyError> {
    read_chunks(req, cap, drop).await
}

/// Whether a request carries a body (any method may).
pub fn has_body(req: &Request) -> bool {
    req.inner().body().is_some()
}

/// Reads a request's body as a stream, refusing it as soon as it passes
/// `cap` bytes. A declared `Content-Length` over the cap is refused before a
/// byte is read; otherwise the running total decides, whatever the header
/// says (it is advisory over HTTP/2, and a chunked body may carry one too).
/// Memory never holds more than the cap plus one chunk, whatever the sender
/// claims or sends.
///
/// A body whose declared length is within the cap is read whole by the
/// runtime, natively: HTTP framing gives it exactly that many bytes, and it
/// costs about 4 ms less per MiB than chunk by chunk through the wasm
/// (BENCHMARKS.md). Its length is checked again all the same.
pub async fn read_capped(req: &mut Request, cap: usize) -> std::result::Result<Vec<u8>, BodyError> {
    if declared_length(req).is_some_and(|n| n <= cap as u64) && has_body(req) {
        let body = req
            .bytes()
            .await
            .map_err(|e| BodyError::Unreadable(e.to_string()))?;
        if body.len() > cap {
            return Err(BodyError::TooLarge);
        }
        return Ok(body);
    }
    let mut body = Vec::new();
    read_chunks(req, cap, |chunk| body.extend_from_slice(&chunk)).await?;
    Ok(body)
}

/// The `Content-Length` the sender declared, if any and a number.
fn declared_length(req: &Request) -> Option<u64> {
    req.headers()
        .get("content-length")
        .ok()
        .flatten()
        .and_then(|n| n.trim().parse::<u64>().ok())
}

/// Hands each chunk of a body to `keep`, refusing the body as soon as its
/// declared length or its running total passes `cap`.
async fn read_chunks(
    req: &mut Request,
    cap: usize,
    mut keep: impl FnMut(Vec<u8>),
) -> std::result::Result<(), BodyError> {
    use futures_util::StreamExt;

    if declared_length(req).is_some_and(|n| n > cap as u64) {
        return Err(BodyError::TooLarge);
    }
    if !has_body(req) {
        return Ok(());
    }
    let mut stream = req
        .stream()
        .map_err(|e| BodyError::Unreadable(e.to_string()))?;
    let mut total = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| BodyError::Unreadable(e.to_string()))?;
        total += chunk.len();
        if total > cap {
            return Err(BodyError::TooLarge);
        }
        keep(chunk);
    }
    Ok(())
}

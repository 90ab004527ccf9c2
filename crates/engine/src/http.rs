//! HTTP plumbing: incoming bodies read under a cap, and outgoing requests
//! (to an inbox, and to side-effect targets).

use worker::js_sys;
use worker::wasm_bindgen::{self, prelude::wasm_bindgen, JsValue};
use worker::wasm_bindgen_futures::JsFuture;
use worker::{web_sys, Request, Result};

/// A POST with a text body, built on web-sys directly. workers-rs's own
/// `RequestInit` also serializes its `cf` options (unused here) with
/// serde-wasm-bindgen, which costs about 10 KB of wasm.
pub fn post(url: &str, body: &str, headers: &[(&str, &str)]) -> Result<Request> {
    request(url, body, headers, false)
}

/// A POST as [`post`] whose redirects are answers, not followed: a
/// redirected POST arrives as a GET, without its body.
pub fn post_unredirected(url: &str, body: &str, headers: &[(&str, &str)]) -> Result<Request> {
    request(url, body, headers, true)
}

fn request(url: &str, body: &str, headers: &[(&str, &str)], manual: bool) -> Result<Request> {
    let init = web_sys::RequestInit::new();
    if manual {
        // Set as a plain property: web-sys's setter needs a feature for one enum.
        js_sys::Reflect::set(&init, &"redirect".into(), &"manual".into())?;
    }
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

#[wasm_bindgen(inline_js = r#"
export async function readExactly(request, length) {
  const exact = new FixedLengthStream(length);
  const piped = request.body.pipeTo(exact.writable);
  const whole = new Response(exact.readable).arrayBuffer();
  const [body] = await Promise.all([whole, piped]);
  return new Uint8Array(body);
}
"#)]
extern "C" {
    /// The body, exactly `length` bytes of it, gathered by the runtime:
    /// rejects if the stream carries more or fewer, or breaks.
    #[wasm_bindgen(js_name = readExactly)]
    fn read_exactly(request: &web_sys::Request, length: f64) -> js_sys::Promise;
}

/// Reads a request's body, never more than `cap` bytes of it (plus one
/// chunk), whatever the sender claims or sends. A declared `Content-Length`
/// over the cap is refused before a byte is read. One within the cap is read
/// whole by the runtime, natively, through a `FixedLengthStream` of that
/// length, which errors if the stream carries more (the header is advisory
/// over HTTP/2) or fewer: about 4 ms less per MiB than chunk by chunk
/// through the wasm (BENCHMARKS.md). A body without a length (chunked) is
/// read chunk by chunk, and refused as soon as its running total passes the
/// cap.
pub async fn read_capped(req: &mut Request, cap: usize) -> std::result::Result<Vec<u8>, BodyError> {
    // Not for a declared 0: a stream of length 0 never reads, and would wait
    // forever on a sender that sends bytes anyway (chunked wins over it).
    if let Some(length) = declared_length(req).filter(|&n| n > 0 && n <= cap as u64) {
        if !has_body(req) {
            return Ok(Vec::new());
        }
        let body = JsFuture::from(read_exactly(req.inner(), length as f64))
            .await
            .map_err(|e| BodyError::Unreadable(format!("{e:?}")))?;
        return Ok(js_sys::Uint8Array::new(&body).to_vec());
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

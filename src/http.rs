//! Outgoing requests: to an inbox, and to side-effect targets.

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

//! The dashboard at `/admin`: one server-rendered page of counters, recent
//! and failed events and dead side effects, and a page per event with its
//! deliveries and side effects. No framework, no external assets.
//!
//! Signing in takes the admin token; the session cookie holds an HMAC of a
//! time under it (not the token), `HttpOnly` and `SameSite=Strict`.

use worker::{Env, Headers, Method, Request, Response, Result};

use super::html::{escape, page};
use super::{admin_token, decode, pages, session_valid, session_value, token_matches};
use crate::clock::now_ms;
use crate::config;
use crate::http::{self, BodyError};
use crate::inbox::client::{self, ActionResult};
use crate::inbox::state::Outcome;

const COOKIE: &str = "admin_session";

/// Largest sign-in form read: a token is at most a few hundred bytes.
const LOGIN_FORM_MAX_BYTES: usize = 8 * 1024;

pub async fn handle(mut req: Request, env: &Env, path: &str) -> Result<Response> {
    let Some(token) = admin_token(env) else {
        return Response::error("not found", 404);
    };
    match (req.method(), path) {
        (Method::Post, "/admin/login") => {
            // Read under a small cap, as a stream: a token form is tiny, and
            // an endless chunked body must not fill the isolate's memory.
            let form = match http::read_capped(&mut req, LOGIN_FORM_MAX_BYTES).await {
                Ok(form) => form,
                Err(BodyError::TooLarge) => {
                    return page(413, "Too large", "<p>Request too large.</p>")
                }
                Err(BodyError::Unreadable(_)) => Vec::new(),
            };
            let presented = form_urlencoded::parse(&form)
                .find(|(name, _)| name == "token")
                .map(|(_, value)| value.into_owned())
                .unwrap_or_default();
            if !token_matches(&token, &presented) {
                return page(
                    401,
                    "Sign in",
                    &login_form(Some("That is not the admin token.")),
                );
            }
            let ttl_ms = config::admin_session_ttl_ms(env)?;
            set_cookie(&req, &session_value(&token, now_ms()), ttl_ms / 1000)
        }
        // Signing out clears the cookie; the browser forgets the session.
        (Method::Post, "/admin/logout") => set_cookie(&req, "", 0),
        _ if !signed_in(&req, &token, env)? => page(401, "Sign in", &login_form(None)),
        (Method::Get, "/admin") => pages::overview(env).await,
        (Method::Get, p) => match p
            .strip_prefix("/admin/events/")
            .and_then(|rest| rest.split_once('/'))
        {
            Some((source, id)) => {
                let notice = super::Query::of(&req)
                    .get("done")
                    .and_then(|code| NOTICES.iter().find(|(c, _)| *c == code))
                    .map(|(_, notice)| *notice);
                pages::event(env, &decode(source), &decode(id), notice).await
            }
            None => page(404, "Not found", "<p>No such page.</p>"),
        },
        (Method::Post, p) => {
            let action = p
                .strip_prefix("/admin/events/")
                .and_then(|rest| rest.rsplit_once('/'))
                .and_then(|(event, action)| Some((event.split_once('/')?, action)));
            match action {
                Some(_) if !same_origin(&req) => {
                    page(403, "Refused", "<p>A cross-site request was refused.</p>")
                }
                Some(((raw_source, raw_id), action @ ("replay" | "dismiss"))) => {
                    let (source, id) = (decode(raw_source), decode(raw_id));
                    let done = resolve(env, &source, &id, action).await;
                    // Post, redirect, get: a reload does not post again.
                    let headers = Headers::new();
                    headers.set(
                        "location",
                        &format!("/admin/events/{raw_source}/{raw_id}?done={done}"),
                    )?;
                    Ok(Response::empty()?.with_status(303).with_headers(headers))
                }
                _ => page(404, "Not found", "<p>No such action.</p>"),
            }
        }
        _ => page(405, "Not allowed", "<p>Method not allowed.</p>"),
    }
}

/// Whether the request carries a valid session cookie: made under this
/// token, within the session lifetime (`ADMIN_SESSION_TTL`, default 12 h).
fn signed_in(req: &Request, token: &str, env: &Env) -> Result<bool> {
    let ttl_ms = config::admin_session_ttl_ms(env)?;
    let now = now_ms();
    let cookies = req
        .headers()
        .get("cookie")
        .ok()
        .flatten()
        .unwrap_or_default();
    Ok(cookies
        .split(';')
        .filter_map(|c| c.trim().strip_prefix(COOKIE)?.strip_prefix('='))
        .any(|value| session_valid(value, token, now, ttl_ms)))
}

/// Whether a form post comes from this dashboard. The session cookie is
/// `SameSite=Strict`, so a cross-site post carries none; this refuses one
/// that says where it comes from, too. Browsers send `Sec-Fetch-Site`, and
/// it decides (a proxy that rewrites the host cannot fool it); otherwise an
/// `Origin`, if any, must be this one.
fn same_origin(req: &Request) -> bool {
    let header = |name: &str| req.headers().get(name).ok().flatten();
    if let Some(site) = header("sec-fetch-site") {
        return site == "same-origin";
    }
    let url = req.inner().url();
    let own_origin = url
        .split_once("://")
        .and_then(|(scheme, rest)| {
            let host = rest.split('/').next()?;
            Some(format!("{scheme}://{host}"))
        })
        .unwrap_or_default();
    header("origin").is_none_or(|origin| origin == own_origin)
}

/// An operator's resolution of a failed event, from its page: a replay
/// (one more attempt) or a dismissal. Returns what happened, as one of
/// [`NOTICES`]' codes, for the page it redirects to.
async fn resolve(env: &Env, source: &str, id: &str, action: &str) -> &'static str {
    let result = if action == "replay" {
        client::replay(env, source, id).await
    } else {
        client::dismiss(env, source, id).await
    };
    match result {
        Ok(ActionResult::Done(answer)) => match answer.outcome {
            Outcome::Processed => "applied",
            Outcome::Duplicate => "no-op",
            Outcome::Failed => "failed-again",
            Outcome::Accepted => "in-flight",
            Outcome::Dismissed => "dismissed",
        },
        Ok(ActionResult::NoEvent) => "no-event",
        Ok(ActionResult::NotFailed) => "not-failed",
        Ok(ActionResult::Failed(_)) | Err(_) => "not-done",
    }
}

/// What an action did, by the code in the event page's `?done=`.
const NOTICES: [(&str, &str); 8] = [
    ("applied", "Replayed: the effect was applied, once."),
    ("no-op", "No-op: the effect had already been applied."),
    (
        "failed-again",
        "Replayed: the attempt failed again; the event stays failed.",
    ),
    (
        "in-flight",
        "An attempt is already in flight; look again shortly.",
    ),
    ("dismissed", "Dismissed: the event will not be applied."),
    ("no-event", "The inbox holds no such event."),
    ("not-failed", "Only a failed event can be dismissed."),
    (
        "not-done",
        "Not done: the inbox or D1 did not answer; try again.",
    ),
];

/// Answers 303 to `/admin`, setting the session cookie (empty and expired
/// to sign out).
fn set_cookie(req: &Request, value: &str, max_age_secs: i64) -> Result<Response> {
    let secure = if req.inner().url().starts_with("https:") {
        "; Secure"
    } else {
        ""
    };
    let headers = Headers::new();
    headers.set("location", "/admin")?;
    headers.set(
        "set-cookie",
        &format!(
            "{COOKIE}={value}; Path=/admin; HttpOnly; SameSite=Strict; Max-Age={max_age_secs}{secure}"
        ),
    )?;
    Ok(Response::empty()?.with_status(303).with_headers(headers))
}

fn login_form(error: Option<&str>) -> String {
    let error = error.map_or(String::new(), |e| {
        format!(r#"<p class="bad">{}</p>"#, escape(e))
    });
    format!(
        r#"{error}<form class="login" method="post" action="/admin/login">
<label for="token">Admin token</label>
<input id="token" name="token" type="password" autocomplete="current-password" autofocus>
<button type="submit">Sign in</button></form>"#
    )
}

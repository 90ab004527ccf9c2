//! The dashboard at `/admin`: one server-rendered page of counters, recent
//! and failed events and dead side effects, and a page per event with its
//! deliveries and side effects. No framework, no external assets.
//!
//! Signing in takes the admin token; the session cookie holds an HMAC of a
//! time under it (not the token), `HttpOnly` and `SameSite=Strict`.
//!
//! Actions — Replay and Dismiss an event, Requeue a dead side effect,
//! Redeliver a forwarded event, a destination's Requeue dead, Pause,
//! Resume and Re-enable, and (Postgres) Retry stuck hand-off rows — are
//! form posts that carry the session's form token (an HMAC of the session
//! under the admin token, checked in constant time) and must come from this
//! origin. Each answers with a redirect to a page saying what happened, and
//! writes an audit line naming the session by a digest, never the token.

use worker::{Env, Headers, Method, Request, Response, Result};

use super::actions::{Action, Audit, NOTICES};
use super::html::{escape, page};
use super::{
    admin_token, decode, form_token, form_token_ok, guard, pages, session_id, session_valid,
    session_value, token_matches, Closed, Denied,
};
use super::{finder, forwarding};
use crate::admin_guard;
use crate::clock::now_ms;
use crate::config;
use crate::http::{self, BodyError};
use crate::log;
use crate::settings::Settings;

const COOKIE: &str = "admin_session";

/// Largest sign-in form read: a token is at most a few hundred bytes.
const LOGIN_FORM_MAX_BYTES: usize = 8 * 1024;

pub async fn handle(
    mut req: Request,
    env: &Env,
    settings: &Settings,
    path: &str,
) -> Result<Response> {
    let token = match admin_token(settings) {
        Ok(token) => token,
        Err(Closed::Unset) => return unread(&mut req, Response::error("not found", 404)).await,
        Err(Closed::Misconfigured) => {
            let closed = page(
                500,
                "Misconfigured",
                "<p>ADMIN_TOKEN is misconfigured: see the log.</p>",
            );
            return unread(&mut req, closed).await;
        }
    };
    match (req.method(), path) {
        // Signing in and out only from the dashboard itself: another site
        // must not spend an operator's failures (a cross-site post comes
        // from the operator's own address; not counted), nor sign an
        // operator out.
        (Method::Post, "/admin/login" | "/admin/logout") if !same_origin(&req) => {
            unread(&mut req, cross_site_refused()).await
        }
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
            if presented.is_empty() {
                // No guess: not counted.
                return page(401, "Sign in", &login_form(Some("Enter the admin token.")));
            }
            if let Err(denied) = guard(env, settings, &req, token_matches(token, &presented)).await
            {
                let why = match denied {
                    Denied::Wrong => "That is not the admin token.".to_string(),
                    Denied::Throttled(secs) => format!(
                        "Too many failed sign-ins from here: try again in {} min.",
                        (secs + 59) / 60
                    ),
                    Denied::Unavailable => "Sign-in did not answer: try again.".to_string(),
                };
                return denied.answer(page(200, "Sign in", &login_form(Some(&why))));
            }
            let ttl_ms = settings.session_ttl_ms.clone()?;
            set_cookie(&req, &session_value(token, now_ms()), ttl_ms / 1000)
        }
        // Signing out revokes the session, then clears the cookie: a copy
        // of the cookie is no good either.
        (Method::Post, "/admin/logout") => {
            if let Some(session) = session(&req, token, settings)? {
                // Remembered as long as any session can last.
                let until = now_ms() + config::ADMIN_SESSION_TTL_MAX_MS;
                if let Err(e) = admin_guard::revoke(env, &session_id(&session), until).await {
                    log::error(&log::Line::new("admin_sign_out_failed").error(e));
                    let failed = page(
                        503,
                        "Not signed out",
                        "<p>Signing out failed: try again.</p>",
                    );
                    return unread(&mut req, failed).await;
                }
            }
            let signed_out = set_cookie(&req, "", 0);
            unread(&mut req, signed_out).await
        }
        _ => {
            // A valid cookie whose session was not signed out.
            let live = match session(&req, token, settings)? {
                Some(session) => match admin_guard::revoked(env, &session_id(&session)).await {
                    Ok(revoked) => (!revoked).then_some(session),
                    Err(e) => {
                        log::error(&log::Line::new("admin_guard_failed").error(e));
                        let down =
                            Denied::Unavailable.answer(page(200, "Try again", "<p>Try again.</p>"));
                        return unread(&mut req, down).await;
                    }
                },
                None => None,
            };
            match live {
                Some(session) => signed_in(req, env, settings, path, token, &session).await,
                None => unread(&mut req, page(401, "Sign in", &login_form(None))).await,
            }
        }
    }
}

/// The answer to a form posted from another site.
fn cross_site_refused() -> Result<Response> {
    page(403, "Refused", "<p>A cross-site request was refused.</p>")
}

/// `response`, to a request whose body no handler read: a POST's body is
/// drained first (a small one; a large one is not worth reading), so that
/// the connection can carry the client's next request.
async fn unread(req: &mut Request, response: Result<Response>) -> Result<Response> {
    if req.method() == Method::Post {
        let _ = http::drain(req, http::UNWANTED_BODY_MAX_BYTES).await;
    }
    response
}

/// The pages and actions of a signed-in operator, whose session cookie is
/// `session`.
async fn signed_in(
    mut req: Request,
    env: &Env,
    settings: &Settings,
    path: &str,
    token: &str,
    session: &str,
) -> Result<Response> {
    let notice = super::Query::of(&req)
        .get("done")
        .and_then(|code| NOTICES.iter().find(|(c, _)| *c == code))
        .map(|(_, notice)| *notice);
    let forms = form_token(token, session);
    match req.method() {
        Method::Get if path == "/admin" => pages::overview(env, settings, &forms, notice).await,
        Method::Get if path == "/admin/events" => {
            finder::events(env, &super::Query::of(&req), &forms).await
        }
        Method::Get if path == "/admin/destinations" => {
            forwarding::destinations(env, settings, &forms, notice).await
        }
        Method::Get => match path
            .strip_prefix("/admin/events/")
            .and_then(|rest| rest.split_once('/'))
        {
            Some((source, id)) => {
                pages::event(env, &decode(source), &decode(id), notice, &forms).await
            }
            None => page(404, "Not found", "<p>No such page.</p>"),
        },
        Method::Post => {
            let Some(action) = Action::parse(path) else {
                return unread(&mut req, page(404, "Not found", "<p>No such action.</p>")).await;
            };
            let audit = Audit {
                msg: "admin_action",
                action: action.name(),
                target: action.target(),
                outcome: "refused",
                session: session_id(session),
            };
            // Two locks: the browser says where the post comes from, and the
            // form carries this session's token, which no other site can
            // read. (The cookie is `SameSite=Strict` besides.)
            let form = match http::read_capped(&mut req, ACTION_FORM_MAX_BYTES).await {
                Ok(form) => form,
                Err(BodyError::TooLarge) => {
                    log::warn(&Audit {
                        outcome: "too-large",
                        ..audit
                    });
                    return page(413, "Too large", "<p>Request too large.</p>");
                }
                Err(BodyError::Unreadable(_)) => Vec::new(),
            };
            let presented = form_urlencoded::parse(&form)
                .find(|(name, _)| name == "form_token")
                .map(|(_, value)| value.into_owned())
                .unwrap_or_default();
            if !same_origin(&req) || !form_token_ok(token, session, &presented) {
                log::warn(&audit);
                return cross_site_refused();
            }
            let done = action.run(env, settings).await;
            log::warn(&Audit {
                outcome: done,
                ..audit
            });
            // Post, redirect, get: a reload does not post again.
            let headers = Headers::new();
            headers.set("location", &format!("{}?done={done}", action.back()))?;
            Ok(Response::empty()?.with_status(303).with_headers(headers))
        }
        _ => page(405, "Not allowed", "<p>Method not allowed.</p>"),
    }
}

/// Largest action form read: it holds one token.
const ACTION_FORM_MAX_BYTES: usize = 1024;

/// The request's valid session cookie, if any: made under this token,
/// within the session lifetime (`ADMIN_SESSION_TTL`, default 12 h).
fn session(req: &Request, token: &str, settings: &Settings) -> Result<Option<String>> {
    let ttl_ms = settings.session_ttl_ms.clone()?;
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
        .find(|value| session_valid(value, token, now, ttl_ms))
        .map(str::to_string))
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

//! The dashboard at `/admin`: one server-rendered page of counters, recent
//! and failed events and dead side effects, and a page per event with its
//! deliveries and side effects. No framework, no external assets.
//!
//! Signing in takes the admin token; the session cookie holds an HMAC of it
//! (not the token), `HttpOnly` and `SameSite=Strict`. Without `ADMIN_TOKEN`
//! the dashboard does not exist (404), like the API.

use serde_json::Value;
use worker::{js_sys, Date, Env, Headers, Method, Request, Response, Result};

use crate::http::{self, BodyError};
use crate::signature::Tag;
use crate::{admin, config};

const COOKIE: &str = "admin_session";

/// Largest sign-in form read: a token is at most a few hundred bytes.
const LOGIN_FORM_MAX_BYTES: usize = 8 * 1024;

pub async fn handle(mut req: Request, env: &Env, path: &str) -> Result<Response> {
    let Some(token) = admin::admin_token(env) else {
        return Response::error("not found", 404);
    };
    match (req.method(), path) {
        (Method::Post, "/admin/login") => {
            // Read under a small cap, as a stream: a token form is tiny, and
            // an endless chunked body must not fill the isolate's memory.
            let form = match http::read_capped(&mut req, LOGIN_FORM_MAX_BYTES).await {
                Ok(form) => String::from_utf8(form).unwrap_or_default(),
                Err(BodyError::TooLarge) => {
                    return page(413, "Too large", "<p>Request too large.</p>")
                }
                Err(BodyError::Unreadable(_)) => String::new(),
            };
            let presented = form
                .split('&')
                .find_map(|pair| pair.strip_prefix("token="))
                .map(|value| admin::decode(&value.replace('+', " ")))
                .unwrap_or_default();
            if !admin::token_matches(&token, &presented) {
                return page(
                    401,
                    "Sign in",
                    &login_form(Some("That is not the admin token.")),
                );
            }
            let ttl_ms = config::admin_session_ttl_ms(env).map_err(|e| e.to_string())?;
            let cookie = session_value(&token, Date::now().as_millis() as i64);
            set_cookie(&req, &cookie, ttl_ms / 1000)
        }
        // Signing out clears the cookie; the browser forgets the session.
        (Method::Post, "/admin/logout") => set_cookie(&req, "", 0),
        _ if !session_ok(&req, &token, env)? => page(401, "Sign in", &login_form(None)),
        (Method::Get, "/admin") => overview(env).await,
        (Method::Get, p) => match p
            .strip_prefix("/admin/events/")
            .and_then(|rest| rest.split_once('/'))
        {
            Some((source, id)) => {
                let url = req.inner().url();
                let notice = url.split_once("?done=").and_then(|(_, code)| {
                    NOTICES.iter().find(|(c, _)| *c == code).map(|(_, n)| *n)
                });
                event_page(env, &admin::decode(source), &admin::decode(id), notice).await
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
                    let (source, id) = (admin::decode(raw_source), admin::decode(raw_id));
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

/// What the cookie holds: when it was issued (ms), and an HMAC of that time
/// under the token. The cookie is not the token, changes when the token
/// does, and cannot be made to look younger than it is.
fn session_value(token: &str, issued_at: i64) -> String {
    let issued = issued_at.to_string();
    let mac = Tag::sha256(
        token.as_bytes(),
        &[b"dashboard-session\n", issued.as_bytes()],
    );
    format!("{issued}.{}", mac.to_hex())
}

/// A cookie made by [`session_value`] under this token, issued within the
/// session lifetime (`ADMIN_SESSION_TTL`, default 12 h) and not in the future.
fn session_ok(req: &Request, token: &str, env: &Env) -> Result<bool> {
    let ttl_ms = config::admin_session_ttl_ms(env).map_err(|e| e.to_string())?;
    let now = Date::now().as_millis() as i64;
    let cookies = req
        .headers()
        .get("cookie")
        .ok()
        .flatten()
        .unwrap_or_default();
    Ok(cookies
        .split(';')
        .filter_map(|c| c.trim().strip_prefix(COOKIE)?.strip_prefix('='))
        .any(|value| {
            let issued_at = value
                .split_once('.')
                .and_then(|(issued, _)| issued.parse::<i64>().ok());
            issued_at.is_some_and(|issued| {
                let fresh = issued <= now + 60_000 && now - issued < ttl_ms;
                fresh && admin::token_matches(&session_value(token, issued), value)
            })
        }))
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
    let Ok(mut answer) = admin::inbox_post(env, source, id, action).await else {
        return "not-done";
    };
    let status = answer.status_code();
    let body = answer.text().await.unwrap_or_default();
    let outcome = serde_json::from_str::<Value>(&body).unwrap_or(Value::Null)["outcome"]
        .as_str()
        .map(str::to_string);
    match (status, outcome.as_deref()) {
        (200, Some("processed")) => "applied",
        (200, Some("duplicate")) => "no-op",
        (200, Some("failed")) => "failed-again",
        (200, Some("accepted")) => "in-flight",
        (200, Some("dismissed")) => "dismissed",
        (404, _) => "no-event",
        (409, _) => "not-failed",
        _ => "not-done",
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

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A JSON value as escaped text: strings bare, `null` as a dash.
fn cell(value: &Value) -> String {
    match value {
        Value::Null => "–".into(),
        Value::String(s) => escape(s),
        other => escape(&other.to_string()),
    }
}

/// Milliseconds since the epoch as an ISO time.
fn time(value: &Value) -> String {
    match value.as_f64() {
        Some(ms) => js_sys::Date::new(&ms.into())
            .to_iso_string()
            .as_string()
            .unwrap_or_default(),
        None => "–".into(),
    }
}

fn page(status: u16, title: &str, body: &str) -> Result<Response> {
    let html = format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>{title} · webhooks</title>
<style>
body {{ font: 14px/1.45 system-ui, sans-serif; margin: 2rem auto; max-width: 72rem; padding: 0 1rem; color: #1d2330; }}
h1 {{ font-size: 1.4rem; }} h2 {{ font-size: 1.1rem; margin-top: 2rem; }}
table {{ border-collapse: collapse; width: 100%; }}
th, td {{ text-align: left; padding: .35rem .6rem; border-bottom: 1px solid #e3e6ec; vertical-align: top; }}
th {{ background: #f4f6f9; font-weight: 600; }} td.n {{ text-align: right; font-variant-numeric: tabular-nums; }}
code {{ font-size: .92em; }} .bad {{ color: #b3261e; }} .ok {{ color: #1b7f3b; }} .muted {{ color: #687083; }}
form.login {{ max-width: 22rem; }} form.logout {{ float: right; }} form.actions {{ display: inline-block; margin-right: .5rem; }}
.notice {{ background: #eef4ff; padding: .5rem .8rem; }} input {{ font: inherit; padding: .4rem; width: 100%; box-sizing: border-box; }}
button {{ font: inherit; padding: .4rem 1rem; margin-top: .5rem; }}
</style></head><body>
<h1>{title}</h1>
{body}
</body></html>"#
    );
    let headers = Headers::new();
    headers.set("content-type", "text/html; charset=utf-8")?;
    headers.set("cache-control", "no-store")?;
    Ok(Response::ok(html)?
        .with_status(status)
        .with_headers(headers))
}

/// The sign-out button on every signed-in page.
const LOGOUT: &str = r#"<form class="logout" method="post" action="/admin/logout"><button type="submit">Sign out</button></form>"#;

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

fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    if rows.is_empty() {
        return r#"<p class="muted">None.</p>"#.into();
    }
    let head: String = headers.iter().map(|h| format!("<th>{h}</th>")).collect();
    let body: String = rows
        .iter()
        .map(|row| format!("<tr>{}</tr>", row.join("")))
        .collect();
    format!("<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
}

fn td(text: String) -> String {
    format!("<td>{text}</td>")
}

fn num(value: u64) -> String {
    format!(r#"<td class="n">{value}</td>"#)
}

fn parse(json: &str) -> Value {
    serde_json::from_str(json).unwrap_or(Value::Null)
}

fn rows(value: &Value) -> &[Value] {
    value.as_array().map_or(&[], Vec::as_slice)
}

fn event_link(event: &Value) -> String {
    let source = event["source"].as_str().unwrap_or_default();
    let id = event["event_id"].as_str().unwrap_or_default();
    let href = format!(
        "/admin/events/{}/{}",
        js_sys::encode_uri_component(source),
        js_sys::encode_uri_component(id)
    );
    format!(
        r#"<a href="{}"><code>{}</code></a>"#,
        escape(&href),
        escape(id)
    )
}

async fn overview(env: &Env) -> Result<Response> {
    let stats = parse(&admin::stats_json(env).await?);
    let processed = parse(
        &admin::events(env, "processed", None, None, 25.0)
            .await?
            .unwrap_or_default(),
    );
    let failed = parse(
        &admin::events(env, "failed", None, None, 25.0)
            .await?
            .unwrap_or_default(),
    );
    let dead = parse(
        &admin::outbox_rows(env, "dead", 25.0)
            .await?
            .unwrap_or_default(),
    );

    // One row per source that appears anywhere.
    let mut sources: Vec<String> = ["counters", "processed", "failed", "outbox"]
        .iter()
        .flat_map(|part| rows(&stats[*part]))
        .filter_map(|row| row["source"].as_str().map(str::to_string))
        .collect();
    sources.sort();
    sources.dedup();
    let counter = |source: &str, pred: &dyn Fn(&str) -> bool| -> u64 {
        rows(&stats["counters"])
            .iter()
            .filter(|c| c["source"] == source && pred(c["counter"].as_str().unwrap_or_default()))
            .filter_map(|c| c["value"].as_u64())
            .sum()
    };
    let exact = |part: &str, source: &str, status: Option<&str>, field: &str| -> u64 {
        rows(&stats[part])
            .iter()
            .filter(|r| r["source"] == source && status.is_none_or(|s| r["status"] == s))
            .filter_map(|r| r[field].as_u64())
            .sum()
    };
    let counters: Vec<Vec<String>> = sources
        .iter()
        .map(|s| {
            vec![
                td(format!("<code>{}</code>", escape(s))),
                num(counter(s, &|c| c == "received")),
                num(counter(s, &|c| c == "processed")),
                num(counter(s, &|c| c == "duplicate")),
                num(counter(s, &|c| c.starts_with("rejected:"))),
                num(exact("processed", s, None, "events")),
                num(exact("failed", s, None, "events")),
                num(exact("outbox", s, Some("sent"), "rows")),
                num(exact("outbox", s, Some("dead"), "rows")),
            ]
        })
        .collect();
    let recent: Vec<Vec<String>> = rows(&processed)
        .iter()
        .map(|e| {
            vec![
                td(time(&e["processed_at"])),
                td(format!("<code>{}</code>", cell(&e["source"]))),
                td(event_link(e)),
                td(cell(&e["type"])),
                td(r#"<span class="ok">processed</span>"#.into()),
            ]
        })
        .collect();
    let failures: Vec<Vec<String>> = rows(&failed)
        .iter()
        .map(|e| {
            vec![
                td(time(&e["failed_at"])),
                td(format!("<code>{}</code>", cell(&e["source"]))),
                td(event_link(e)),
                td(cell(&e["type"])),
                td(format!(
                    r#"<span class="bad">{}</span>"#,
                    cell(&e["last_error"])
                )),
            ]
        })
        .collect();
    let dead_rows: Vec<Vec<String>> = rows(&dead)
        .iter()
        .map(|r| {
            vec![
                td(time(&r["updated_at"])),
                td(event_link(r)),
                td(cell(&r["action"])),
                num(r["attempts"].as_u64().unwrap_or(0)),
                td(format!(
                    r#"<span class="bad">{}</span>"#,
                    cell(&r["last_error"])
                )),
            ]
        })
        .collect();
    let body = format!(
        r#"{LOGOUT}<p class="muted">Counters: deliveries counted by the worker, flushed every few seconds. Events, failures and side effects: counted in D1.</p>
<h2>Sources</h2>{}
<h2>Recent events</h2>{}
<h2>Failed events</h2>{}
<h2>Dead side effects</h2>{}"#,
        table(
            &[
                "source",
                "received",
                "processed",
                "duplicates",
                "rejected",
                "events in ledger",
                "failed",
                "side effects sent",
                "dead"
            ],
            &counters
        ),
        table(
            &["processed at", "source", "event", "type", "status"],
            &recent
        ),
        table(
            &["failed at", "source", "event", "type", "last error"],
            &failures
        ),
        table(
            &["updated", "event", "action", "attempts", "last error"],
            &dead_rows
        ),
    );
    page(200, "Webhooks", &body)
}

async fn event_page(env: &Env, source: &str, id: &str, notice: Option<&str>) -> Result<Response> {
    let event = parse(&admin::event(env, source, id).await?);
    let inbox = &event["inbox"];
    let records = &event["records"];
    let notice = notice.map_or(String::new(), |n| {
        format!(r#"<p class="notice"><strong>{}</strong></p>"#, escape(n))
    });
    // A failed event waits for an operator: one more attempt, or a decision
    // not to apply it.
    let actions = if inbox["state"] == "failed" {
        let base = format!(
            "/admin/events/{}/{}",
            js_sys::encode_uri_component(source),
            js_sys::encode_uri_component(id)
        );
        format!(
            r#"<form class="actions" method="post" action="{0}/replay"><button type="submit">Replay</button></form>
<form class="actions" method="post" action="{0}/dismiss"><button type="submit">Dismiss</button></form>"#,
            escape(&base)
        )
    } else {
        String::new()
    };
    let inbox_html = if inbox.is_null() {
        r#"<p class="muted">The inbox holds nothing for this event (never received, or past retention).</p>"#.into()
    } else {
        table(
            &[
                "state",
                "deliveries",
                "effect attempts",
                "received",
                "done",
                "last error",
            ],
            &[vec![
                td(cell(&inbox["state"])),
                num(inbox["deliveries"].as_u64().unwrap_or(0)),
                num(inbox["effect_attempts"].as_u64().unwrap_or(0)),
                td(time(&inbox["received_at"])),
                td(time(&inbox["done_at"])),
                td(cell(&inbox["last_error"])),
            ]],
        )
    };
    let attempts: Vec<Vec<String>> = rows(&inbox["attempts"])
        .iter()
        .map(|a| {
            vec![
                td(time(&a["at"])),
                td(cell(&a["copy"])),
                num(a["bytes"].as_u64().unwrap_or(0)),
                td(format!("<code>{}</code>", cell(&a["sha256"]))),
            ]
        })
        .collect();
    let attempts_html = table(&["arrived", "copy", "bytes", "payload SHA-256"], &attempts);
    let ledger = &records["ledger"];
    let dismissed_at = &records["failure"]["dismissed_at"];
    let ledger_html = if ledger.is_null() {
        r#"<p class="muted">No ledger row: the effect has not committed.</p>"#.into()
    } else if !dismissed_at.is_null() {
        format!(
            r#"<p class="muted">Dismissed by an operator at {}: no effect was applied, and the ledger row keeps any later copy from applying it.</p>"#,
            time(dismissed_at)
        )
    } else {
        table(
            &["type", "received", "processed"],
            &[vec![
                td(cell(&ledger["type"])),
                td(time(&ledger["received_at"])),
                td(time(&ledger["processed_at"])),
            ]],
        )
    };
    let outbox: Vec<Vec<String>> = rows(&records["outbox"])
        .iter()
        .map(|r| {
            vec![
                td(cell(&r["action"])),
                td(cell(&r["status"])),
                num(r["attempts"].as_u64().unwrap_or(0)),
                td(format!("<code>{}</code>", cell(&r["idempotency_key"]))),
                td(cell(&r["note"])),
                td(cell(&r["last_error"])),
            ]
        })
        .collect();
    let body = format!(
        r#"{LOGOUT}<p><a href="/admin">← all events</a> · <code>{}</code></p>{notice}{actions}
<h2>Deliveries</h2>{inbox_html}
<p class="muted">Every copy below passed signature verification: nothing else reaches the inbox.</p>{attempts_html}
<h2>Effect</h2>{ledger_html}
<h2>Side effects</h2>{}"#,
        escape(&format!("{source}:{id}")),
        table(
            &[
                "action",
                "status",
                "attempts",
                "idempotency key",
                "note",
                "last error"
            ],
            &outbox
        ),
    );
    page(200, &format!("Event {}", escape(id)), &body)
}

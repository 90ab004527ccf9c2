//! The admin API, `/admin/api/…`, behind `Authorization: Bearer <ADMIN_TOKEN>`.
//! With no `ADMIN_TOKEN` configured it does not exist (404): never open.
//!
//! - `GET  /admin/api/events?status=processed|failed&source=&type=&limit=`
//! - `GET  /admin/api/events/{source}/{id}`: ledger row, failure, outbox
//!   rows, and the inbox's state with its delivery count
//! - `POST /admin/api/events/{source}/{id}/replay`: the effect path again; a
//!   no-op (`"outcome":"duplicate"`) when the ledger says it is done
//! - `POST /admin/api/events/{source}/{id}/dismiss`: a failed event will not
//!   be applied; it leaves the failed list and is forgotten at retention
//! - `GET  /admin/api/outbox?status=dead|pending|sending|sent&limit=`
//! - `POST /admin/api/outbox/{key}/requeue`: a dead row made due and sent
//! - `GET  /admin/api/stats`: per source, the delivery counters (`stats`)
//!   and exact counts from the ledger, `failed_events` and `outbox`
//!
//! Lists come straight out of D1 as JSON (`json_group_array`), so nothing is
//! decoded and re-encoded on the way.

use worker::wasm_bindgen::JsValue;
use worker::{console_error, js_sys, Date, Env, Headers, Method, Request, Response, Result};

use serde::Serialize;

use crate::config::{self, DB_BINDING, INBOX_BINDING};
use crate::event::dedupe_key;
use crate::inbox::{Answer, Outcome};
use crate::signature::Tag;
use crate::{effects, http, outbox};

pub async fn handle(req: Request, env: &Env, path: &str) -> Result<Response> {
    let Some(token) = admin_token(env) else {
        return Response::error("not found", 404);
    };
    if !bearer_ok(&req, &token) {
        let headers = Headers::new();
        headers.set("www-authenticate", "Bearer")?;
        return Ok(Response::error("unauthorized", 401)?.with_headers(headers));
    }
    let segments: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(decode)
        .collect();
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    let query = Query::of(&req.inner().url());
    match (req.method(), segments.as_slice()) {
        (Method::Get, ["events"]) => list_events(env, &query).await,
        (Method::Get, ["events", source, id]) => event_detail(env, source, id).await,
        (Method::Post, ["events", source, id, "replay"]) => replay(env, source, id).await,
        (Method::Post, ["events", source, id, "dismiss"]) => dismiss(env, source, id).await,
        (Method::Get, ["outbox"]) => list_outbox(env, &query).await,
        (Method::Post, ["outbox", key, "requeue"]) => requeue(env, key).await,
        (Method::Get, ["stats"]) => stats(env).await,
        _ => Response::error("not found", 404),
    }
}

/// Sets the headers every admin response carries, API and dashboard alike,
/// errors included: no framing (clickjacking), no scripts, styles only
/// inline, forms only to this origin, no referrer to other sites, no
/// content sniffing.
pub fn harden(response: Result<Response>) -> Result<Response> {
    let mut response = response.or_else(|e| {
        let error = serde_json::to_string(&e.to_string()).unwrap_or_default();
        console_error!(r#"{{"msg":"admin_error","error":{error}}}"#);
        Response::error("internal error", 500)
    })?;
    let headers = response.headers_mut();
    headers.set(
        "content-security-policy",
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; \
         frame-ancestors 'none'; base-uri 'none'",
    )?;
    headers.set("x-content-type-options", "nosniff")?;
    // Not `no-referrer`: with it, browsers send `Origin: null` on the
    // dashboard's own form posts, which the same-origin check must refuse.
    headers.set("referrer-policy", "same-origin")?;
    Ok(response)
}

/// The admin token; `None` (no admin surface at all) when unset.
pub fn admin_token(env: &Env) -> Option<String> {
    config::optional(env, "ADMIN_TOKEN")
}

/// Whether `presented` is the token. Compares digests, not the strings:
/// constant time whatever the lengths.
pub fn token_matches(token: &str, presented: &str) -> bool {
    let expected = Tag::sha256(b"admin-token", &[token.as_bytes()]);
    let given = Tag::sha256(b"admin-token", &[presented.as_bytes()]);
    expected.matches(&given.bytes())
}

fn bearer_ok(req: &Request, token: &str) -> bool {
    req.headers()
        .get("authorization")
        .ok()
        .flatten()
        .and_then(|value| {
            value
                .strip_prefix("Bearer ")
                .map(|p| token_matches(token, p))
        })
        .unwrap_or(false)
}

pub fn decode(segment: &str) -> String {
    js_sys::decode_uri_component(segment)
        .ok()
        .and_then(|s| s.as_string())
        .unwrap_or_else(|| segment.to_string())
}

/// The query string's parameters, decoded.
struct Query(Vec<(String, String)>);

impl Query {
    fn of(url: &str) -> Self {
        let query = url.split_once('?').map_or("", |(_, q)| q);
        let pairs = query
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .map(|(name, value)| (decode(name), decode(&value.replace('+', " "))))
            .collect();
        Query(pairs)
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }

    fn limit(&self) -> f64 {
        self.get("limit")
            .and_then(|l| l.parse::<u32>().ok())
            .unwrap_or(50)
            .clamp(1, 500)
            .into()
    }
}

fn text_or_null(value: Option<&str>) -> JsValue {
    value.map_or(JsValue::NULL, JsValue::from_str)
}

/// Runs a statement that returns one text column `json`.
async fn query_json(env: &Env, sql: &str, params: &[JsValue]) -> Result<String> {
    let db = env.d1(DB_BINDING)?;
    Ok(db
        .prepare(sql)
        .bind(params)?
        .first::<String>(Some("json"))
        .await?
        .unwrap_or_else(|| "null".into()))
}

/// Answers `{"<field>": <json>}`.
fn json_answer(field: &str, json: &str) -> Result<Response> {
    json_response(&format!(r#"{{"{field}":{json}}}"#))
}

fn json_response(body: &str) -> Result<Response> {
    let headers = Headers::new();
    headers.set("content-type", "application/json")?;
    Ok(Response::ok(body)?.with_headers(headers))
}

async fn list_events(env: &Env, query: &Query) -> Result<Response> {
    let status = query.get("status").unwrap_or("processed");
    match events(
        env,
        status,
        query.get("source"),
        query.get("type"),
        query.limit(),
    )
    .await?
    {
        Some(json) => json_answer("events", &json),
        None => Response::error("status must be processed or failed", 400),
    }
}

/// Recent events, newest first, as a JSON array; `None` for an unknown
/// status. Shared with the dashboard.
pub async fn events(
    env: &Env,
    status: &str,
    source: Option<&str>,
    kind: Option<&str>,
    limit: f64,
) -> Result<Option<String>> {
    let filters = [
        text_or_null(source),
        text_or_null(kind),
        JsValue::from_f64(limit),
    ];
    let sql = match status {
        "processed" => {
            "SELECT json_group_array(json_object('source', source, 'event_id', event_id, 'type', type, \
                 'status', 'processed', 'received_at', received_at, 'processed_at', processed_at)) AS json \
             FROM (SELECT * FROM processed_events p \
                   WHERE (?1 IS NULL OR source = ?1) AND (?2 IS NULL OR type = ?2) \
                     AND NOT EXISTS (SELECT 1 FROM failed_events f WHERE f.source = p.source \
                       AND f.event_id = p.event_id AND f.dismissed_at IS NOT NULL) \
                   ORDER BY processed_at DESC LIMIT ?3)"
        }
        "failed" => {
            "SELECT json_group_array(json_object('source', source, 'event_id', event_id, 'type', type, \
                 'status', 'failed', 'received_at', received_at, 'failed_at', failed_at, \
                 'last_error', last_error)) AS json \
             FROM (SELECT * FROM failed_events \
                   WHERE dismissed_at IS NULL AND (?1 IS NULL OR source = ?1) AND (?2 IS NULL OR type = ?2) \
                   ORDER BY failed_at DESC LIMIT ?3)"
        }
        _ => return Ok(None),
    };
    Ok(Some(query_json(env, sql, &filters).await?))
}

async fn event_detail(env: &Env, source: &str, id: &str) -> Result<Response> {
    json_response(&event(env, source, id).await?)
}

/// One event as JSON: its inbox's state and its records in D1 (ledger row,
/// failure, outbox rows). Shared with the dashboard.
pub async fn event(env: &Env, source: &str, id: &str) -> Result<String> {
    let records = query_json(
        env,
        "SELECT json_object(\
             'ledger', (SELECT json_object('type', type, 'received_at', received_at, \
                 'processed_at', processed_at) FROM processed_events \
                 WHERE source = ?1 AND event_id = ?2), \
             'failure', (SELECT json_object('failed_at', failed_at, 'last_error', last_error, \
                 'dismissed_at', dismissed_at) FROM failed_events WHERE source = ?1 AND event_id = ?2), \
             'outbox', (SELECT json_group_array(json_object('idempotency_key', idempotency_key, \
                 'action', action, 'status', status, 'attempts', attempts, \
                 'last_error', last_error, 'note', note, 'updated_at', updated_at)) \
                 FROM outbox WHERE source = ?1 AND event_id = ?2)) AS json",
        &[source.into(), id.into()],
    )
    .await?;
    let stub = env
        .durable_object(INBOX_BINDING)?
        .get_by_name(&dedupe_key(source, id))?;
    let mut inbox = stub.fetch_with_str("https://inbox/state").await?;
    let inbox = match inbox.status_code() {
        200 => inbox.text().await?,
        _ => "null".into(),
    };
    Ok(format!(
        r#"{{"source":{},"event_id":{},"inbox":{inbox},"records":{records}}}"#,
        serde_json::to_string(source)?,
        serde_json::to_string(id)?
    ))
}

async fn replay(env: &Env, source: &str, id: &str) -> Result<Response> {
    let mut answer = inbox_post(env, source, id, "replay").await?;
    if answer.status_code() == 404 {
        return Response::error(
            "the inbox holds no such event (never received, or past retention)",
            404,
        );
    }
    let answer: Answer = answer.json().await?;
    #[derive(Serialize)]
    struct Replayed {
        #[serde(flatten)]
        answer: Answer,
        noop: bool,
    }
    let noop = answer.outcome == Outcome::Duplicate;
    json_response(&serde_json::to_string(&Replayed { answer, noop })?)
}

/// An operator's decision not to apply a failed event.
async fn dismiss(env: &Env, source: &str, id: &str) -> Result<Response> {
    let mut answer = inbox_post(env, source, id, "dismiss").await?;
    match answer.status_code() {
        200 => json_response(&answer.text().await?),
        404 => Response::error("the inbox holds no such event", 404),
        409 => Response::error("only a failed event can be dismissed", 409),
        status => Response::error("the dismissal was not recorded; try again", status.max(500)),
    }
}

/// POSTs to one of an event's inbox's operator paths (`replay`, `dismiss`).
pub async fn inbox_post(env: &Env, source: &str, id: &str, path: &str) -> Result<Response> {
    let stub = env
        .durable_object(INBOX_BINDING)?
        .get_by_name(&dedupe_key(source, id))?;
    stub.fetch_with_request(http::post(&format!("https://inbox/{path}"), "", &[])?)
        .await
}

async fn list_outbox(env: &Env, query: &Query) -> Result<Response> {
    let status = query.get("status").unwrap_or("dead");
    match outbox_rows(env, status, query.limit()).await? {
        Some(json) => json_answer("outbox", &json),
        None => Response::error("status must be dead, pending, sending or sent", 400),
    }
}

/// Outbox rows of one status, most recently updated first, as a JSON array;
/// `None` for an unknown status. Shared with the dashboard.
pub async fn outbox_rows(env: &Env, status: &str, limit: f64) -> Result<Option<String>> {
    if !matches!(status, "dead" | "pending" | "sending" | "sent") {
        return Ok(None);
    }
    let json = query_json(
        env,
        "SELECT json_group_array(json_object('idempotency_key', idempotency_key, 'source', source, \
             'event_id', event_id, 'action', action, 'status', status, 'attempts', attempts, \
             'last_error', last_error, 'note', note, 'updated_at', updated_at)) AS json \
         FROM (SELECT * FROM outbox WHERE status = ?1 ORDER BY updated_at DESC LIMIT ?2)",
        &[status.into(), JsValue::from_f64(limit)],
    )
    .await?;
    Ok(Some(json))
}

async fn stats(env: &Env) -> Result<Response> {
    json_answer("stats", &stats_json(env).await?)
}

/// Per-source counters and exact counts, as JSON. Shared with the dashboard.
pub async fn stats_json(env: &Env) -> Result<String> {
    query_json(
        env,
        "SELECT json_object(\
             'counters', (SELECT json_group_array(json_object('source', source, 'counter', counter, \
                 'value', value)) FROM source_counters), \
             'processed', (SELECT json_group_array(json_object('source', source, 'events', n)) \
                 FROM (SELECT source, count(*) AS n FROM processed_events p \
                 WHERE NOT EXISTS (SELECT 1 FROM failed_events f WHERE f.source = p.source \
                   AND f.event_id = p.event_id AND f.dismissed_at IS NOT NULL) GROUP BY source)), \
             'failed', (SELECT json_group_array(json_object('source', source, 'events', n)) \
                 FROM (SELECT source, count(*) AS n FROM failed_events WHERE dismissed_at IS NULL \
                 GROUP BY source)), \
             'outbox', (SELECT json_group_array(json_object('source', source, 'status', status, \
                 'rows', n)) FROM (SELECT source, status, count(*) AS n FROM outbox \
                 GROUP BY source, status))) AS json",
        &[],
    )
    .await
}

/// A dead row made due again and sent: the consumer performs it once, under
/// its same idempotency key.
async fn requeue(env: &Env, key: &str) -> Result<Response> {
    let db = env.d1(DB_BINDING)?;
    let now = Date::now().as_millis() as f64;
    let statement = db
        .prepare(
            "UPDATE outbox SET status = 'pending', attempts = 0, next_attempt_at = ?2, updated_at = ?2 \
             WHERE idempotency_key = ?1 AND status = 'dead'",
        )
        .bind(&[key.into(), now.into()])?;
    let changed = effects::changed_rows(statement).await?;
    if changed == 0 {
        return Response::error("no dead outbox row with that key", 404);
    }
    outbox::enqueue(env, &[key.to_string()], None).await?;
    json_response(r#"{"requeued":true}"#)
}

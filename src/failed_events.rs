//! The operators' list of events whose effect never committed (D1
//! `failed_events`). Written only on the rare path — when an inbox spends its
//! retry budget, and when a replay later succeeds — so the delivery path
//! never touches it. Best effort: the inbox's own state is the truth; a lost
//! write here is logged.

use worker::wasm_bindgen::JsValue;
use worker::{console_error, Date, Env};

use crate::config::DB_BINDING;
use crate::event::VerifiedEvent;

pub async fn record(env: &Env, event: &VerifiedEvent, error: &str) {
    let now = Date::now().as_millis() as f64;
    let params = [
        JsValue::from_str(&event.source),
        JsValue::from_str(&event.id),
        JsValue::from_str(&event.kind),
        JsValue::from_f64(event.received_at as f64),
        JsValue::from_f64(now),
        JsValue::from_str(error),
    ];
    run(
        env,
        "INSERT OR REPLACE INTO failed_events \
         (source, event_id, type, received_at, failed_at, last_error) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        &params,
    )
    .await;
}

pub async fn resolve(env: &Env, source: &str, event_id: &str) {
    let params = [JsValue::from_str(source), JsValue::from_str(event_id)];
    run(
        env,
        "DELETE FROM failed_events WHERE source = ?1 AND event_id = ?2",
        &params,
    )
    .await;
}

async fn run(env: &Env, sql: &str, params: &[JsValue]) {
    let result = match env.d1(DB_BINDING) {
        Ok(db) => match db.prepare(sql).bind(params) {
            Ok(statement) => statement.run().await.map(|_| ()),
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    if let Err(e) = result {
        let error = serde_json::to_string(&e.to_string()).unwrap_or_default();
        console_error!(r#"{{"msg":"failed_events_write_failed","error":{error}}}"#);
    }
}

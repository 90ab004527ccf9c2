//! The finder page, `/admin/events`: events by id or key, source, type,
//! status and days, newest first, a page at a time.

use worker::{js_sys, Env, Response, Result};

use super::html::LOGOUT;
use super::html::{escape, page, table, td};
use super::pages::{event_rows, failed_actions};
use super::queries::{self, EventFilter, Listing};
use super::Query;

/// Events listed per page of the finder.
const PAGE: u32 = 50;

/// A day (`YYYY-MM-DD`, as a date input sends it) as ms since the epoch
/// at its start, UTC; `None` if it is not one (any other form is ignored).
fn day_ms(day: Option<&str>) -> Option<i64> {
    let day = day?;
    let shape = day.len() == 10
        && day.bytes().enumerate().all(|(i, b)| match i {
            4 | 7 => b == b'-',
            _ => b.is_ascii_digit(),
        });
    let ms = js_sys::Date::parse(day);
    (shape && ms.is_finite()).then_some(ms as i64)
}

/// The finder: events by id or key, source, type, status and days, newest
/// first, a page at a time (keyset on the listing's time).
pub async fn events(env: &Env, query: &Query, forms: &str) -> Result<Response> {
    let listing = match query.get("status") {
        Some("failed") => Listing::Failed,
        _ => Listing::Processed,
    };
    let (from, to) = (query.get("from"), query.get("to"));
    let after_at = query.get("after").and_then(|ms| ms.parse::<i64>().ok());
    let filter = EventFilter {
        source: query.get("source"),
        kind: query.get("type"),
        id_or_key: query.get("q").map(str::trim).filter(|q| !q.is_empty()),
        since: day_ms(from),
        // Through the end of the `to` day.
        until: day_ms(to).map(|start| start + 86_400_000),
        after: after_at.map(|at| {
            let source = query.get("after_source").unwrap_or_default();
            (at, source, query.get("after_id").unwrap_or_default())
        }),
    };
    let found = queries::events(env, listing, &filter, PAGE)
        .await?
        .decode()?;
    let mut rows = event_rows(&found);
    if listing == Listing::Failed {
        for (row, e) in rows.iter_mut().zip(&found) {
            row.push(td(failed_actions(&e.source, &e.event_id, forms)));
        }
    }
    // The next page starts after the last event of this one.
    let older = match found.last() {
        Some(last) if found.len() == PAGE as usize => {
            let at = match listing {
                Listing::Processed => last.processed_at,
                Listing::Failed => last.failed_at,
            };
            let mut next = form_urlencoded::Serializer::new(String::new());
            for name in ["q", "status", "source", "type", "from", "to"] {
                if let Some(value) = query.get(name) {
                    next.append_pair(name, value);
                }
            }
            next.append_pair("after", &at.unwrap_or_default().to_string())
                .append_pair("after_source", &last.source)
                .append_pair("after_id", &last.event_id);
            format!(
                r#"<p><a class="older" href="/admin/events?{}">Older events →</a></p>"#,
                escape(&next.finish())
            )
        }
        _ => String::new(),
    };
    let value = |name: &str| escape(query.get(name).unwrap_or_default());
    let selected = |status: Listing| if status == listing { " selected" } else { "" };
    let heading = match listing {
        Listing::Processed => "processed at",
        Listing::Failed => "failed at",
    };
    let mut headers = vec![heading, "source", "event", "type", "status"];
    if listing == Listing::Failed {
        headers.push("");
    }
    let body = format!(
        r#"{LOGOUT}<p><a href="/admin">← overview</a></p>
<form class="find" method="get" action="/admin/events">
<input name="q" placeholder="event id, or source:id" value="{}" aria-label="event id or key">
<select name="status" aria-label="status"><option value="processed"{}>processed</option><option value="failed"{}>failed</option></select>
<input name="source" placeholder="source" value="{}" aria-label="source">
<input name="type" placeholder="type" value="{}" aria-label="type">
<label>from <input type="date" name="from" value="{}"></label>
<label>to <input type="date" name="to" value="{}"></label>
<button type="submit">Find</button></form>
{}{older}"#,
        value("q"),
        selected(Listing::Processed),
        selected(Listing::Failed),
        value("source"),
        value("type"),
        value("from"),
        value("to"),
        table(&headers, &rows),
    );
    page(200, "Find events", &body)
}

//! The hand-off rows (see `handoff_rows`) in Postgres: written in the
//! event's transaction to `webhook_outbox`, read back for an attempt cut
//! short and for the relay, which marks them once D1 holds them.

use serde_json::Value as Json;

use crate::handoff_rows::{decode, encode, Kind, Row};
use crate::log::{self, Line};

/// Written in the event's transaction: its rows, listed as JSON by
/// [`listed`] (one statement, whatever their number), each a no-op if there
/// (an outbox row keyed by a business object another event wrote).
pub(crate) const INSERT: &str = "INSERT INTO webhook_outbox \
     (kind, key, source, event_id, params, created_at) \
     SELECT kind, key, $2, $3, params, $4 \
     FROM json_to_recordset($1::json) AS listed(kind text, key text, params text) \
     ON CONFLICT (kind, key) DO NOTHING RETURNING kind, key";

/// The rows of one event not yet handed off (after a clash with an
/// earlier attempt, whose hand-off may have been cut short).
pub(super) const PENDING: &str = "SELECT kind, key, params FROM webhook_outbox \
     WHERE source = $1 AND event_id = $2 AND handed_off_at IS NULL";

/// `rows` as [`INSERT`] takes them: a JSON array of their kind, key and
/// values (as [`encode`] writes them).
pub(crate) fn listed(rows: &[Row]) -> String {
    let listed: Vec<Json> = rows
        .iter()
        .map(|row| {
            serde_json::json!({
                "kind": row.kind.name(),
                "key": row.key,
                "params": encode(&row.params),
            })
        })
        .collect();
    Json::from(listed).to_string()
}

/// Which of `rows` [`INSERT`] wrote, by the `(kind, key)` it returned.
pub(crate) fn returned(rows: &[Row], inserted: &[tokio_postgres::Row]) -> Vec<Row> {
    let written: Vec<(String, String)> = inserted
        .iter()
        .filter_map(|row| Some((row.try_get(0).ok()?, row.try_get(1).ok()?)))
        .collect();
    rows.iter()
        .filter(|row| {
            written
                .iter()
                .any(|(kind, key)| kind == row.kind.name() && key == &row.key)
        })
        .cloned()
        .collect()
}

/// Reads rows selected as `kind, key, params`; an unreadable one is logged
/// and left out (never marked, so it stays visible).
pub(super) fn read(rows: Vec<tokio_postgres::Row>) -> Vec<Row> {
    read_all(rows).0
}

/// The rows read, and the `(kind, key)` of each unreadable one.
pub(super) fn read_all(rows: Vec<tokio_postgres::Row>) -> (Vec<Row>, Vec<(String, String)>) {
    let (mut read, mut unreadable) = (Vec::new(), Vec::new());
    for row in rows {
        let got = (row.try_get(0), row.try_get(1), row.try_get(2));
        let (Ok(kind), Ok(key), Ok(params)) = got else {
            continue;
        };
        let (kind, key, params): (String, String, String) = (kind, key, params);
        let read_as = Kind::named(&kind).zip(decode(&params));
        // As many values as its statement binds: the bulk copy would read a
        // missing one as NULL, where the statement would refuse the row.
        match read_as.filter(|(kind, params)| params.len() == kind.values()) {
            Some((kind, params)) => read.push(Row { kind, key, params }),
            None => {
                log::error(&Line::new("handoff_unreadable").detail(format!("{kind} {key}")));
                unreadable.push((kind, key));
            }
        }
    }
    (read, unreadable)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::VerifiedEvent;
    use crate::ledger;

    #[test]
    fn rows_are_listed_as_json_the_insert_reads() {
        let event = VerifiedEvent::example("example", "ping", "{}");
        let row = Row::of(&event, &ledger::row(&event, 2)).unwrap();
        let listed: Json = serde_json::from_str(&listed(std::slice::from_ref(&row))).unwrap();
        assert_eq!(listed[0]["kind"], "ledger");
        assert_eq!(listed[0]["key"], "example:evt_1");
        let params = listed[0]["params"].as_str().unwrap();
        assert_eq!(decode(params), Some(row.params));
    }
}

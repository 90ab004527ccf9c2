//! The hand-off rows on an event's queue messages: which message carries
//! which row, and the consumer's write of what its batch carried, in the
//! call that claims the batch.

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use super::{d1_batch, from_json, to_json, Kind, Row};
use crate::d1::{Db, Statement};
use crate::log::{self, Line};

/// A row on a queue message: its kind, key and values as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Carried {
    kind: String,
    key: String,
    values: Vec<Json>,
}

impl Carried {
    fn of(row: &Row) -> Carried {
        Carried {
            kind: row.kind.name().to_string(),
            key: row.key.clone(),
            values: to_json(&row.params),
        }
    }

    /// The row carried; `None` when it cannot be read as one (an unknown
    /// kind, values that do not fit it).
    fn read(&self) -> Option<Row> {
        let kind = Kind::named(&self.kind)?;
        let params = from_json(self.values.clone()).filter(|p| p.len() == kind.values())?;
        Some(Row {
            kind,
            key: self.key.clone(),
            params,
        })
    }
}

/// At most so many bytes of rows ride on one event's messages: a queue
/// takes 128 KB a message and 256 KB a batch.
const CARRIED_BYTES: usize = 64 * 1024;

/// What each of an event's messages carries, in the order of their keys.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Riding {
    pub outbox: Vec<Vec<Json>>,
    pub forwards: Vec<Vec<Json>>,
}

/// Places `owed` on the event's messages: an outbox row on the job that
/// names it, the deliveries on each forward job, the ledger row on every
/// message. `None` when a row has no message to ride (an event with
/// nothing to send) or they are too big to ride: they are copied first.
pub(crate) fn ride(owed: &[Row], outbox_keys: &[String], forward_ids: &[String]) -> Option<Riding> {
    // How many of the messages carry a row (the keys are distinct).
    let messages = |row: &Row| match row.kind {
        Kind::Ledger => outbox_keys.len() + forward_ids.len(),
        Kind::Outbox => usize::from(outbox_keys.contains(&row.key)),
        Kind::Forwards => forward_ids.len(),
    };
    // Each row as it rides, made once however many messages carry it.
    let riders: Vec<(&Row, Json)> = owed
        .iter()
        .map(|row| {
            (
                row,
                serde_json::to_value(Carried::of(row)).unwrap_or_default(),
            )
        })
        .collect();
    let mut bytes = 0usize;
    for (row, json) in &riders {
        let times = messages(row);
        if times == 0 {
            return None;
        }
        bytes = bytes.saturating_add(json.to_string().len().saturating_mul(times));
    }
    if bytes > CARRIED_BYTES {
        return None;
    }
    let on = |rides: &dyn Fn(&Row) -> bool| -> Vec<Json> {
        let riding = riders.iter().filter(|(row, _)| rides(row));
        riding.map(|(_, json)| json.clone()).collect()
    };
    Some(Riding {
        outbox: outbox_keys
            .iter()
            .map(|key| {
                on(
                    &|row| {
                        row.kind == Kind::Ledger || (row.kind == Kind::Outbox && &row.key == key)
                    },
                )
            })
            .collect(),
        forwards: forward_ids
            .iter()
            .map(|_| on(&|row| row.kind != Kind::Outbox))
            .collect(),
    })
}

/// Rows carried longer than this are not written: the relay has copied
/// them by then, and a message retried for hours (a destination down)
/// must not bring back a row an operator has since deleted.
const CARRIED_FOR_MS: i64 = 60 * 60 * 1000;

/// The rows `carried` on a batch's messages as of `now` (once each,
/// however many messages carried one). One that cannot be read is logged
/// and left out: the relay's copy is the one D1 gets. Each is read on its
/// own, so that no row costs a message its key.
pub(crate) fn carried<'a>(carried: impl IntoIterator<Item = &'a Json>, now: i64) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    for json in carried {
        let read = Carried::deserialize(json).ok();
        let Some(row) = read.as_ref().and_then(Carried::read) else {
            let which = read.map_or_else(String::new, |c| format!("{} {}", c.kind, c.key));
            log::error(&Line::new("handoff_unreadable").detail(which));
            continue;
        };
        let fresh = row.written_at().is_some_and(|at| at > now - CARRIED_FOR_MS);
        if fresh && !rows.iter().any(|r| r.kind == row.kind && r.key == row.key) {
            rows.push(row);
        }
    }
    rows
}

/// A consumer's `claim` (a statement returning a `json` column), after
/// writing the `rows` its messages carried, in one D1 call. Should that
/// call fail, the rows are written alone, then the claim: so a passing
/// failure costs no row. If the rows fail again, D1 refuses them (which is
/// logged, and the relay copies them) or is down; the claim then tells
/// which, and D1 down is its error (the messages are retried, with their
/// rows).
pub(crate) async fn claim_after<T: serde::de::DeserializeOwned>(
    db: &Db,
    rows: &[Row],
    claim: Statement,
) -> worker::Result<Vec<T>> {
    if rows.is_empty() {
        return db.rows(&claim).await;
    }
    let copies = d1_batch(rows);
    let mut statements = copies.clone();
    statements.push(claim.clone());
    if let Ok((mut texts, _)) = db.batch_texts_read(&statements, "json").await {
        let claimed = texts.pop().unwrap_or_default();
        return claimed
            .iter()
            .map(|text| serde_json::from_str(text).map_err(Into::into))
            .collect();
    }
    let copied = db.batch(&copies).await;
    let claimed = db.rows(&claim).await?;
    if let Err(refused) = copied {
        log::error(&Line::new("handoff_failed").error(refused));
    }
    Ok(claimed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::d1::Value;
    use crate::event::VerifiedEvent;
    use crate::outbox::{self, Job, SideEffect};
    use crate::{forward, ledger};

    /// When the event's rows were written (ms).
    const WRITTEN: i64 = 1_700_000_000_000;

    /// An event's hand-off rows: its ledger row, two outbox rows and its
    /// deliveries; and the outbox rows' keys and the deliveries' ids.
    fn owed() -> (Vec<Row>, Vec<String>, Vec<String>) {
        let mut event = VerifiedEvent::example("example", "ping", "{}");
        event.forward = Some(r#"{"to":["a","b"],"headers":[]}"#.into());
        let mut rows = vec![Row::of(&event, &ledger::row(&event, WRITTEN)).unwrap()];
        let mut keys = Vec::new();
        for (name, n) in [("ship", 1), ("pack", i64::MAX)] {
            let effect = SideEffect::custom(name, &serde_json::json!({"n": n}));
            let (statement, key) = outbox::insert(&event, effect, WRITTEN);
            rows.push(Row::of(&event, &statement).unwrap());
            keys.push(key);
        }
        let (statement, ids) = forward::insert(&event, WRITTEN + 1).unwrap();
        rows.push(Row::of(&event, &statement).unwrap());
        (rows, keys, ids)
    }

    fn kinds(carried: &[Json]) -> Vec<(&str, &str)> {
        carried
            .iter()
            .map(|c| (c["kind"].as_str().unwrap(), c["key"].as_str().unwrap()))
            .collect()
    }

    #[test]
    fn each_message_carries_its_own_row_and_the_ledger_row() {
        let (rows, keys, ids) = owed();
        let riding = ride(&rows, &keys, &ids).unwrap();
        assert_eq!(riding.outbox.len(), 2);
        for (key, carried) in keys.iter().zip(&riding.outbox) {
            let ledger_key = rows[0].key.as_str();
            assert_eq!(
                kinds(carried),
                [("ledger", ledger_key), ("outbox", key.as_str())]
            );
        }
        assert_eq!(riding.forwards.len(), ids.len());
        for carried in &riding.forwards {
            assert_eq!(
                kinds(carried),
                [
                    ("ledger", rows[0].key.as_str()),
                    ("forwards", rows[3].key.as_str())
                ]
            );
        }
        // D1 store: nothing owed, nothing carried.
        let bare = ride(&[], &keys, &ids).unwrap();
        assert!(bare.outbox.iter().chain(&bare.forwards).all(Vec::is_empty));
    }

    #[test]
    fn a_row_without_a_message_or_too_big_to_ride_does_not_ride() {
        let (rows, keys, ids) = owed();
        // Nothing to send: the ledger row has no message.
        assert_eq!(ride(&rows[..1], &[], &[]), None);
        // An outbox row whose job is not sent, deliveries without a job.
        assert_eq!(ride(&rows, &keys[..1], &ids), None);
        assert_eq!(ride(&rows, &keys, &[]), None);
        // Past the bytes one event's messages may carry: one row, or all
        // of them together.
        let mut big = rows.clone();
        big[1].params[4] = Value::Text("x".repeat(CARRIED_BYTES));
        assert_eq!(ride(&big, &keys, &ids), None);
        big[1].params[4] = Value::Text("x".repeat(CARRIED_BYTES / 3));
        assert!(ride(&big, &keys, &ids).is_some());
        big[2].params[4] = Value::Text("x".repeat(CARRIED_BYTES * 2 / 3));
        assert_eq!(ride(&big, &keys, &ids), None);
    }

    #[test]
    fn a_carried_row_reads_back_as_the_row_once_however_many_carry_it() {
        let (rows, keys, ids) = owed();
        let riding = ride(&rows, &keys, &ids).unwrap();
        // Through a message's text, as a consumer reads it.
        let texts: Vec<String> = keys
            .iter()
            .zip(&riding.outbox)
            .chain(ids.iter().zip(&riding.forwards))
            .map(|(key, carried)| {
                let job = Job {
                    key: key.clone(),
                    rows: carried.clone(),
                    fault: None,
                };
                serde_json::to_string(&job).unwrap()
            })
            .collect();
        let jobs: Vec<Job> = texts
            .iter()
            .map(|t| serde_json::from_str(t).unwrap())
            .collect();
        let read = carried(jobs.iter().flat_map(|job| &job.rows), WRITTEN + 1_000);
        assert_eq!(read, rows, "each row once, its values as they were");
        // Carried for an hour, a row is left to the relay.
        let later = WRITTEN + CARRIED_FOR_MS;
        assert_eq!(
            carried(jobs.iter().flat_map(|job| &job.rows), later).len(),
            1
        );
        assert!(carried(jobs.iter().flat_map(|job| &job.rows), later + 2).is_empty());
        // A message of an earlier release carries none.
        let old: Job = serde_json::from_str(r#"{"key":"k"}"#).unwrap();
        assert!(old.rows.is_empty());
    }

    #[test]
    fn a_carried_row_that_cannot_be_read_is_left_to_the_relay() {
        let (rows, _, _) = owed();
        let mut short = Carried::of(&rows[0]);
        short.values.pop();
        let unknown = Carried {
            kind: "elsewhere".into(),
            ..Carried::of(&rows[0])
        };
        let nested = Carried {
            values: vec![Json::Array(Vec::new()); 6],
            ..Carried::of(&rows[0])
        };
        for unreadable in [short, unknown, nested] {
            assert_eq!(unreadable.read(), None, "{unreadable:?}");
        }
        assert_eq!(Carried::of(&rows[0]).read().as_ref(), Some(&rows[0]));
        // A row of another shape costs its message nothing: the key reads.
        let job: Job = serde_json::from_str(r#"{"key":"k","rows":[7,{"kind":1}]}"#).unwrap();
        assert_eq!((job.key.as_str(), job.rows.len()), ("k", 2));
        assert!(job
            .rows
            .iter()
            .all(|row| Carried::deserialize(row).is_err()));
    }
}

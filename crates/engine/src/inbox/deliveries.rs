//! The delivery log: every later copy of the event, as a row of its own
//! (when, how many bytes, the payload's hash, how it was verified), the
//! last [`DELIVERIES_KEPT`] kept and all of them counted.

use serde::{Deserialize, Serialize};
use worker::{Result, SqlStorageValue};

use super::schema::{Table, Tables};
use crate::names::named_enum;
use crate::providers::Verified;

/// How many later deliveries the log keeps. A request replayed 20,000
/// times must not make its event unreadable (SQLite values stop at 2 MB):
/// the rowid counts them all, the log keeps the last ones.
pub const DELIVERIES_KEPT: i64 = 100;

/// One delivery of the event, as the log keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoggedDelivery {
    pub at: i64,
    pub kind: DeliveryKind,
    /// For a replayed body: the key (`"{source}:{id}"`) it repeats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duplicate_of: Option<String>,
    pub bytes: i64,
    pub sha256: String,
    /// How it was verified (`None` where it was not kept: a delivery
    /// stored by an older release).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified: Option<Verified>,
}

named_enum! {
    pub enum DeliveryKind {
        /// The delivery that created the event.
        First = "first",
        /// A first delivery whose signed body was already applied under
        /// another id (`duplicate_of`).
        ReplayedBody = "replayed_body",
        /// A later delivery of the held event.
        Duplicate = "duplicate",
    }
}

/// The later deliveries, oldest first, and how many there ever were.
pub(super) fn later(tables: &Tables) -> Result<(i64, Vec<LoggedDelivery>)> {
    if !tables.has(Table::Deliveries)? {
        return Ok((0, Vec::new()));
    }
    let mut count = 0;
    let mut log = Vec::new();
    for row in tables
        .sql
        .exec(
            "SELECT seq, at, bytes, sha256, sig_scheme, sig_secret, signed_at
             FROM deliveries ORDER BY seq",
            None,
        )?
        .raw()
    {
        let row = row?;
        if let [SqlStorageValue::Integer(seq), SqlStorageValue::Integer(at), SqlStorageValue::Integer(bytes), SqlStorageValue::String(sha256), verified @ ..] =
            row.as_slice()
        {
            count = *seq;
            log.push(LoggedDelivery {
                at: *at,
                kind: DeliveryKind::Duplicate,
                duplicate_of: None,
                bytes: *bytes,
                sha256: sha256.clone(),
                verified: self::verified(verified),
            });
        }
    }
    Ok((count, log))
}

/// The `sig_scheme, sig_secret, signed_at` columns of a delivery.
pub(super) fn verified_columns(verified: Option<&Verified>) -> [SqlStorageValue; 3] {
    match verified {
        Some(v) => [
            v.scheme.as_str().into(),
            (v.secret as i64).into(),
            v.signed_at
                .map_or(SqlStorageValue::Null, |at| (at as i64).into()),
        ],
        None => [
            SqlStorageValue::Null,
            SqlStorageValue::Null,
            SqlStorageValue::Null,
        ],
    }
}

/// Reads back what [`verified_columns`] wrote; `None` where the scheme is
/// missing (a delivery stored before it was kept).
pub(super) fn verified(columns: &[SqlStorageValue]) -> Option<Verified> {
    let [SqlStorageValue::String(scheme), secret, signed_at] = columns else {
        return None;
    };
    Some(Verified {
        scheme: scheme.clone(),
        secret: integer(secret).and_then(|n| usize::try_from(n).ok())?,
        signed_at: integer(signed_at).and_then(|n| u64::try_from(n).ok()),
    })
}

/// An integer column (SQLite may hand back a float for one).
pub(super) fn integer(value: &SqlStorageValue) -> Option<i64> {
    match value {
        SqlStorageValue::Integer(n) => Some(*n),
        SqlStorageValue::Float(n) => Some(*n as i64),
        _ => None,
    }
}

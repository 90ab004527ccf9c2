//! The consumer's claim on a batch's deliveries: one conditional update for
//! the whole batch, and, for those it skipped, what to do with each message
//! — look again later, acknowledge (the delivery is done, or waits for its
//! destination), or take it as its open destination's probe.

use serde::Deserialize;

use super::breaker::{self, held};
use super::ForwardStatus;
use crate::config::ForwardSettings;
use crate::d1::{Db, Statement};
use crate::handoff_rows::{self, Row};
use crate::log::{self, Line};

/// A claimed delivery, as the claim's `RETURNING` gives it.
#[derive(Deserialize)]
pub struct Claimed {
    pub id: String,
    pub source: String,
    pub event_id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub destination: String,
    pub attempts: i64,
    /// When its `max_age` started: created, or redelivered.
    pub budget_from: i64,
}

/// What the claim returns of each row.
macro_rules! claimed {
    () => {
        " RETURNING json_object('id', delivery_id, 'source', source, 'event_id', event_id, \
             'type', event_type, 'destination', destination, 'attempts', attempts, \
             'budget_from', budget_from) AS json"
    };
}

/// Claims the batch's due deliveries whose destination is usable (`?4`,
/// declared with a key) and not held; `?1` now, `?2` the lease's end, `?3`
/// the ids.
const CLAIM: &str = concat!(
    "UPDATE forwards SET status = 'sending', attempts = attempts + 1, lease_until = ?2, \
         updated_at = ?1 \
     WHERE delivery_id IN (SELECT value FROM json_each(?3)) \
       AND ((status = 'pending' AND next_attempt_at <= ?1) \
            OR (status = 'sending' AND lease_until < ?1)) \
       AND destination IN (SELECT value FROM json_each(?4)) \
       AND destination NOT IN (",
    held!(),
    ")",
    claimed!()
);

/// The same for one delivery whatever its destination's state, due or not
/// (a crashed probe's expired claim included): a probe.
const CLAIM_PROBE: &str = concat!(
    "UPDATE forwards SET status = 'sending', attempts = attempts + 1, \
         lease_until = ?2, updated_at = ?1 \
     WHERE delivery_id = ?3 \
       AND (status = 'pending' OR (status = 'sending' AND lease_until < ?1))",
    claimed!()
);

/// Where an unclaimed delivery stands, with its destination's state.
#[derive(Deserialize)]
struct Standing {
    id: String,
    status: String,
    next_attempt_at: i64,
    lease_until: Option<i64>,
    destination: String,
    state: Option<String>,
    paused: Option<i64>,
}

const STANDING: &str = "SELECT json_object('id', f.delivery_id, 'status', f.status, \
         'next_attempt_at', f.next_attempt_at, 'lease_until', f.lease_until, \
         'destination', f.destination, 'state', d.state, 'paused', d.paused) AS json \
     FROM forwards f LEFT JOIN destinations d ON d.name = f.destination \
     WHERE f.delivery_id IN (SELECT value FROM json_each(?1))";

/// What a claim came to: the deliveries claimed, each with whether it is
/// its destination's probe, and the messages to look at again, after how
/// many seconds (the rest are acknowledged).
pub struct Claim {
    pub claimed: Vec<(Claimed, bool)>,
    pub retry_in: Vec<(String, u32)>,
}

/// Claims what it can of `ids` for the destinations named in `usable`,
/// after writing the rows their messages `carried` (see `handoff_rows`);
/// `now` and `lease_until` in ms.
pub async fn claim(
    db: &Db,
    (ids, carried): (&[String], &[Row]),
    settings: &ForwardSettings,
    usable: &[&str],
    now: i64,
    lease_until: i64,
) -> worker::Result<Claim> {
    let params = vec![
        now.into(),
        lease_until.into(),
        serde_json::to_string(ids)?.into(),
        serde_json::to_string(usable)?.into(),
    ];
    let claim = Statement::new(CLAIM, params);
    let mut claimed: Vec<(Claimed, bool)> =
        handoff_rows::claim_after::<Claimed>(db, carried, claim)
            .await?
            .into_iter()
            .map(|row| (row, false))
            .collect();
    let mut retry_in = Vec::new();
    if claimed.len() < ids.len() {
        let unclaimed: Vec<&String> = ids
            .iter()
            .filter(|id| !claimed.iter().any(|(row, _)| &row.id == *id))
            .collect();
        let standing = Statement::new(STANDING, vec![serde_json::to_string(&unclaimed)?.into()]);
        let mut waiting: Vec<String> = Vec::new();
        for row in db.rows::<Standing>(&standing).await? {
            let usable = usable.contains(&row.destination.as_str());
            if !usable && !waiting.contains(&row.destination) {
                waiting.push(row.destination.clone());
            }
            if let Some(probe) =
                stand(db, settings, row, usable, now, lease_until, &mut retry_in).await?
            {
                claimed.push((probe, true));
            }
        }
        for name in waiting {
            note_unusable(db, &name, now).await?;
        }
    }
    Ok(Claim { claimed, retry_in })
}

/// What to do with a delivery the claim skipped: nothing (acknowledge:
/// done, or waiting for its destination, which a resume, a re-enabling, a
/// closing breaker or the relay sends again), look again later (into
/// `retry_in`), or probe its open destination with it (the claimed row).
async fn stand(
    db: &Db,
    settings: &ForwardSettings,
    row: Standing,
    usable: bool,
    now: i64,
    lease_until: i64,
    retry_in: &mut Vec<(String, u32)>,
) -> worker::Result<Option<Claimed>> {
    let later = |at: i64| {
        u32::try_from((at - now).max(0) / 1000 + 1)
            .unwrap_or(u32::MAX)
            .min(43_200)
    };
    let leased = row.lease_until.filter(|until| *until >= now);
    match (ForwardStatus::from_name(&row.status), leased) {
        (Some(ForwardStatus::Sending), Some(until)) => retry_in.push((row.id, later(until))),
        (Some(ForwardStatus::Pending | ForwardStatus::Sending), _)
            if usable && row.paused != Some(1) =>
        {
            match row.state.as_deref() {
                Some("open") => {
                    let probe = breaker::take_probe(&row.destination, settings, now);
                    if db.run(&probe).await? == 1 {
                        let params = vec![now.into(), lease_until.into(), row.id.as_str().into()];
                        return Ok(db.rows(&Statement::new(CLAIM_PROBE, params)).await?.pop());
                    }
                }
                Some("disabled") => {}
                _ => retry_in.push((row.id, later(row.next_attempt_at))),
            }
        }
        // Delivered, dead, paused, or its destination undeclared or
        // without a key: acknowledged.
        _ => {}
    }
    Ok(None)
}

/// Deliveries wait for a destination that is not declared, or has no
/// usable key: said in the log and on the console (its row in
/// `destinations` lists it there, with its backlog), never silently.
pub(super) async fn note_unusable(db: &Db, name: &str, now: i64) -> worker::Result<()> {
    const WHY: &str =
        "not declared in DESTINATIONS, or its key is unset or weak: its deliveries wait";
    log::error(&Line::new("forward_waiting").detail(name).error(WHY));
    let note = Statement::new(
        "INSERT INTO destinations (name, last_error, last_error_at, updated_at) \
         VALUES (?1, ?2, ?3, ?3) ON CONFLICT (name) DO UPDATE SET \
             last_error = ?2, last_error_at = ?3, updated_at = ?3",
        vec![name.into(), WHY.into(), now.into()],
    );
    db.run(&note).await.map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_claim_skips_held_and_unusable_destinations() {
        assert!(CLAIM.contains("destination IN (SELECT value FROM json_each(?4))"));
        assert!(CLAIM.contains(held!()));
        assert!(!CLAIM_PROBE.contains(held!()));
        assert!(CLAIM.ends_with(claimed!()) && CLAIM_PROBE.ends_with(claimed!()));
    }
}

//! The forward queue's consumer. A batch's deliveries are claimed in one
//! statement and their results recorded in one more, so that D1 sees two
//! statements per batch on the success path, not two per delivery; the
//! attempts between run concurrently. Every completion is conditional on
//! its claim (attempt number and lease), as in the outbox.

use futures_util::future::join_all;
use serde::{Deserialize, Serialize};
use worker::wasm_bindgen::JsValue;
use worker::{Env, MessageBatch, MessageExt, QueueRetryOptionsBuilder, RawMessage};

use super::breaker::{self, held, Meaning, Tally};
use super::destinations::{self, Bounds, Destination};
use super::outcome::{verdict, Verdict};
use super::send::{self, Attempt, Delivery};
use super::ForwardStatus;
use crate::clock::now_ms;
use crate::config::ForwardSettings;
use crate::d1::{Db, Statement};
use crate::log::{self, Line};
use crate::outbox::notify_operator::{self, Alert};
use crate::outbox::{self, enqueue_now};

/// A claimed delivery, as the claim's `RETURNING` gives it.
#[derive(Deserialize)]
struct Claimed {
    id: String,
    source: String,
    event_id: String,
    #[serde(rename = "type")]
    kind: String,
    destination: String,
    attempts: i64,
    /// When its `max_age` started: created, or redelivered.
    budget_from: i64,
    /// Its destination's consecutive failures (`None`: no row).
    failures: Option<i64>,
}

/// Claims the batch's due deliveries whose destination is not held;
/// `?1` now, `?2` the lease's end, `?3` a JSON array of ids.
const CLAIM: &str = concat!(
    "UPDATE forwards SET status = 'sending', attempts = attempts + 1, lease_until = ?2, \
         updated_at = ?1 \
     WHERE delivery_id IN (SELECT value FROM json_each(?3)) \
       AND ((status = 'pending' AND next_attempt_at <= ?1) \
            OR (status = 'sending' AND lease_until < ?1)) \
       AND destination NOT IN (",
    held!(),
    ") RETURNING json_object('id', delivery_id, 'source', source, 'event_id', event_id, \
         'type', event_type, 'destination', destination, 'attempts', attempts, \
         'budget_from', budget_from, \
         'failures', (SELECT failures FROM destinations WHERE name = destination)) AS json"
);

/// The same for one delivery, whatever its destination's state: a probe.
const CLAIM_PROBE: &str = "UPDATE forwards SET status = 'sending', attempts = attempts + 1, \
         lease_until = ?2, updated_at = ?1 \
     WHERE delivery_id = ?3 AND status = 'pending' \
     RETURNING json_object('id', delivery_id, 'source', source, 'event_id', event_id, \
         'type', event_type, 'destination', destination, 'attempts', attempts, \
         'budget_from', budget_from, 'failures', 1) AS json";

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

/// One delivery's result, as the completion reads it.
#[derive(Serialize)]
struct Completion {
    id: String,
    attempts: i64,
    status: ForwardStatus,
    next: Option<i64>,
    http: Option<u16>,
    error: Option<String>,
    latency: Option<i64>,
    delivered_at: Option<i64>,
}

/// Records every result of the batch; `?1` the completions as JSON, `?2`
/// now, `?3` the claim's lease.
const COMPLETE: &str = "UPDATE forwards SET status = json_extract(j.value, '$.status'), \
         next_attempt_at = coalesce(json_extract(j.value, '$.next'), next_attempt_at), \
         last_status = json_extract(j.value, '$.http'), \
         last_error = json_extract(j.value, '$.error'), \
         latency_ms = json_extract(j.value, '$.latency'), \
         delivered_at = json_extract(j.value, '$.delivered_at'), \
         lease_until = NULL, updated_at = ?2 \
     FROM json_each(?1) AS j \
     WHERE forwards.delivery_id = json_extract(j.value, '$.id') \
       AND forwards.status = 'sending' AND forwards.attempts = json_extract(j.value, '$.attempts') \
       AND forwards.lease_until = ?3";

pub async fn consume(batch: MessageBatch<JsValue>, env: &Env) -> worker::Result<()> {
    let settings = ForwardSettings::from_env(env)?;
    let messages: Vec<RawMessage> = batch.raw_iter().collect();
    let mut ids = Vec::new();
    for message in &messages {
        match outbox::Job::key_of(&message.body()) {
            Some(id) => ids.push(id),
            None => log::error(&Line::new("forward_bad_message").id(message.id())),
        }
    }
    match run(env, &settings, &ids).await {
        Ok(retry_in) => {
            for message in &messages {
                let id = outbox::Job::key_of(&message.body());
                let later = id.and_then(|id| retry_in.iter().find(|(r, _)| *r == id));
                match later.map(|(_, seconds)| *seconds) {
                    Some(seconds) => retry(message, seconds),
                    None => message.ack(),
                }
            }
        }
        Err(e) => {
            // D1 unreachable or the like: nothing was decided; try again
            // after a jittered backoff, not at once into an outage.
            log::error(&Line::new("forward_error").error(e));
            for message in &messages {
                retry(message, settings.outbox.backoff_secs(1));
            }
        }
    }
    Ok(())
}

fn retry(message: &RawMessage, seconds: u32) {
    let options = QueueRetryOptionsBuilder::new().with_delay_seconds(seconds);
    message.retry_with_options(&options.build());
}

/// Handles the batch; says which messages to retry, after how long (the
/// rest are acknowledged).
async fn run(
    env: &Env,
    settings: &ForwardSettings,
    ids: &[String],
) -> worker::Result<Vec<(String, u32)>> {
    // Read first: a misconfiguration claims nothing (the rows wait, their
    // attempts unspent, and the messages come back after a backoff).
    let all = destinations::all(env, &Bounds::from_env(env)?)?;
    let db = Db::from_env(env)?;
    let now = now_ms();
    let lease_until = now + settings.outbox.lease_ms;
    let ids_json = serde_json::to_string(ids)?;
    let claim = Statement::new(CLAIM, vec![now.into(), lease_until.into(), ids_json.into()]);
    let mut claimed: Vec<(Claimed, bool)> = decode(db.texts(&claim).await?)?
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
        for row in decode::<Standing>(db.texts(&standing).await?)? {
            match stand(&db, settings, row, now, lease_until, &mut retry_in).await? {
                Some(probe) => claimed.push((probe, true)),
                None => continue,
            }
        }
    }
    if claimed.is_empty() {
        return Ok(retry_in);
    }

    let attempts = claimed.iter().map(|(row, _)| {
        let delivery = Delivery {
            id: &row.id,
            source: &row.source,
            event_id: &row.event_id,
            kind: &row.kind,
            destination: &row.destination,
            attempt: row.attempts,
        };
        let destination = destinations::named(&all, &row.destination);
        async move { send::attempt(env, destination, &delivery).await }
    });
    let attempts = join_all(attempts).await;
    complete(env, &db, settings, &all, &claimed, attempts, lease_until).await?;
    Ok(retry_in)
}

/// What to do with a delivery the claim skipped: nothing (acknowledge:
/// done, gone, or held by its destination), look again later (into
/// `retry_in`), or probe its open destination with it (the claimed row).
async fn stand(
    db: &Db,
    settings: &ForwardSettings,
    row: Standing,
    now: i64,
    lease_until: i64,
    retry_in: &mut Vec<(String, u32)>,
) -> worker::Result<Option<Claimed>> {
    let later = |at: i64| {
        u32::try_from((at - now).max(0) / 1000 + 1)
            .unwrap_or(u32::MAX)
            .min(43_200)
    };
    match (ForwardStatus::from_name(&row.status), row.state.as_deref()) {
        (Some(ForwardStatus::Sending), _) => {
            retry_in.push((row.id, later(row.lease_until.unwrap_or(now))));
        }
        (Some(ForwardStatus::Pending), Some("open")) if row.paused != Some(1) => {
            let probe = breaker::take_probe(&row.destination, settings, now);
            if db.run(&probe).await? == 1 {
                let claim = Statement::new(
                    CLAIM_PROBE,
                    vec![now.into(), lease_until.into(), row.id.as_str().into()],
                );
                return Ok(decode(db.texts(&claim).await?)?.pop());
            }
        }
        (Some(ForwardStatus::Pending), Some("closed") | None) if row.paused != Some(1) => {
            retry_in.push((row.id, later(row.next_attempt_at)));
        }
        // Delivered, dead, held by a pause, a 410 or an open breaker
        // (the probe, a resume or the relay sends it again).
        _ => {}
    }
    Ok(None)
}

fn decode<T: serde::de::DeserializeOwned>(rows: Vec<String>) -> worker::Result<Vec<T>> {
    rows.iter()
        .map(|row| serde_json::from_str(row).map_err(Into::into))
        .collect()
}

/// Records the attempts' results in one transaction, with what they change
/// in their destinations and the operators' alerts; then re-sends the
/// retries, alerts and drains.
async fn complete(
    env: &Env,
    db: &Db,
    settings: &ForwardSettings,
    all: &[Destination],
    claimed: &[(Claimed, bool)],
    attempts: Vec<Attempt>,
    lease_until: i64,
) -> worker::Result<()> {
    let now = now_ms();
    let alerts = notify_operator::settings(env);
    let mut completions = Vec::with_capacity(claimed.len());
    let mut statements = Vec::new();
    let mut meanings = Vec::new();
    let mut tallies: Vec<(&str, Tally)> = Vec::new();
    let mut resend = Vec::new();
    for ((row, probe), attempt) in claimed.iter().zip(attempts) {
        let destination = destinations::named(all, &row.destination);
        let tally = match tallies
            .iter()
            .position(|(name, _)| *name == row.destination)
        {
            Some(i) => &mut tallies[i].1,
            None => {
                tallies.push((&row.destination, Tally::default()));
                &mut tallies.last_mut().expect("just pushed").1
            }
        };
        tally.was_failing |= *probe || row.failures.unwrap_or(0) > 0;
        let completion = judge(settings, destination, row, &attempt, tally, now);
        if completion.status == ForwardStatus::Dead {
            let (alert, key) = Alert::ForwardDead {
                source: &row.source,
                event_id: &row.event_id,
                destination: &row.destination,
                id: &row.id,
                attempts: row.attempts,
                error: completion.error.as_deref().unwrap_or(""),
            }
            .row(&alerts, now);
            statements.push(alert);
            meanings.push(Meaning::Alert(key));
        }
        if let Some(at) = completion.next {
            let delay = u32::try_from((at - now).max(0) / 1000).unwrap_or(0);
            resend.push((row.id.clone(), delay));
        }
        completions.push(completion);
    }
    for (name, tally) in &tallies {
        for (statement, meaning) in breaker::statements(name, tally, settings, &alerts, now) {
            statements.push(statement);
            meanings.push(meaning);
        }
    }
    let complete = Statement::new(
        COMPLETE,
        vec![
            serde_json::to_string(&completions)?.into(),
            now.into(),
            lease_until.into(),
        ],
    );
    // The completion first: an alert about a dead row reads its result.
    statements.insert(0, complete);
    meanings.insert(0, Meaning::Nothing);
    let changes = db.batch_changes(&statements).await?;
    if changes.first().copied().unwrap_or(0) < completions.len() {
        log::error(&Line::new("forward_claim_lost").detail(completions.len() - changes[0]));
    }
    for (meaning, changed) in meanings.into_iter().zip(changes) {
        match meaning {
            Meaning::Alert(key) if changed > 0 => enqueue_now(env, key).await,
            Meaning::Closed(name) if changed > 0 => {
                let backlog = db
                    .texts(&breaker::backlog(&name, breaker::DRAIN_PAGE))
                    .await?;
                resend.extend(backlog.into_iter().map(|id| (id, 0)));
            }
            _ => {}
        }
    }
    if let Err(e) = super::enqueue(env, &resend).await {
        // The rows are pending: the relay re-sends them after its grace.
        log::error(&Line::new("forward_enqueue_failed").error(e));
    }
    Ok(())
}

/// A delivery's result after `attempt`, counted in its destination's `tally`.
fn judge(
    settings: &ForwardSettings,
    destination: Option<&Destination>,
    row: &Claimed,
    attempt: &Attempt,
    tally: &mut Tally,
    now: i64,
) -> Completion {
    let (http, error, latency, verdict) = match attempt {
        Attempt::Made {
            status,
            retry_after,
            latency_ms,
            error,
        } => (
            *status,
            error.clone(),
            Some(*latency_ms),
            verdict(*status, retry_after.as_deref(), now / 1000),
        ),
        Attempt::NotMade { why, lasting } => {
            let verdict = if *lasting {
                Verdict::Refused
            } else {
                Verdict::Retry { after: None }
            };
            (None, Some(why.clone()), None, verdict)
        }
    };
    if error.is_some() {
        tally.last_error = error.clone();
    }
    let out_of_budget = |at: i64| match destination {
        Some(d) => row.attempts >= d.max_attempts || at > row.budget_from + d.max_age_ms,
        None => true,
    };
    let (status, next) = match verdict {
        Verdict::Delivered => {
            tally.delivered += 1;
            (ForwardStatus::Delivered, None)
        }
        Verdict::Refused => (ForwardStatus::Dead, None),
        // It waits, as it was, for the destination to be re-enabled.
        Verdict::Gone => {
            tally.gone = true;
            (ForwardStatus::Pending, None)
        }
        Verdict::Retry { after } => {
            if matches!(attempt, Attempt::Made { .. }) {
                tally.failed += 1;
            }
            let delay = after.unwrap_or_else(|| settings.outbox.backoff_secs(row.attempts));
            let at = now + i64::from(delay) * 1000;
            if out_of_budget(at) {
                (ForwardStatus::Dead, None)
            } else {
                (ForwardStatus::Pending, Some(at))
            }
        }
    };
    Completion {
        id: row.id.clone(),
        attempts: row.attempts,
        status,
        next,
        http,
        error,
        latency,
        delivered_at: (status == ForwardStatus::Delivered).then_some(now),
    }
}

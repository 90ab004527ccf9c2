//! The forward queue's consumer. A batch's deliveries are claimed in one
//! statement (`claim.rs`) and their results recorded in one more, so
//! that D1 sees a few statements per batch on the success path, not two per
//! delivery; the attempts between run six at a time. Every completion is
//! conditional on its claim (attempt number and lease), as in the outbox.

use futures_util::stream::{self, StreamExt};
use serde::Serialize;
use worker::wasm_bindgen::JsValue;
use worker::{Env, MessageBatch, MessageExt, QueueRetryOptionsBuilder, RawMessage};

use super::breaker::{self, Meaning, Tally};
use super::claim::{claim, Claim, Claimed};
use super::destinations::{self, Destination};
use super::outcome::{verdict, Verdict};
use super::send::{self, Attempt, Delivery};
use super::ForwardStatus;
use crate::clock::now_ms;
use crate::config::ForwardSettings;
use crate::d1::{Db, Statement};
use crate::handoff_rows::{self, Row};
use crate::log::{self, Line};
use crate::outbox::notify_operator::{self, Alert};
use crate::outbox::{self, enqueue_now};
use crate::settings::Settings;

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

/// Delivers a batch of forward deliveries (their ids) to their destinations.
pub async fn consume(
    batch: MessageBatch<JsValue>,
    env: &Env,
    engine: &Settings,
) -> worker::Result<()> {
    let settings = engine.forward()?;
    let messages: Vec<RawMessage> = batch.raw_iter().collect();
    let jobs: Vec<Option<outbox::Job>> = messages
        .iter()
        .map(|message| outbox::Job::read(&message.body()))
        .collect();
    let mut ids = Vec::new();
    for (message, job) in messages.iter().zip(&jobs) {
        match job {
            Some(job) => ids.push(job.key.clone()),
            None => log::error(&Line::new("forward_bad_message").id(message.id())),
        }
    }
    let carried = jobs.iter().flatten().flat_map(|job| &job.rows);
    let carried = handoff_rows::carried(carried, now_ms());
    match run(env, engine, settings, &ids, &carried).await {
        Ok(retry_in) => {
            for (message, job) in messages.iter().zip(&jobs) {
                let id = job.as_ref().map(|job| &job.key);
                let later = id.and_then(|id| retry_in.iter().find(|(r, _)| r == id));
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

/// Calls in flight at once: a Worker keeps six connections open, and a
/// batch of large bodies must not hold them all in memory at once.
const IN_FLIGHT: usize = 6;

/// Handles the batch; says which messages to retry, after how long (the
/// rest are acknowledged).
async fn run(
    env: &Env,
    engine: &Settings,
    settings: &ForwardSettings,
    ids: &[String],
    carried: &[Row],
) -> worker::Result<Vec<(String, u32)>> {
    // Read first: a destination that is not declared, or has no usable
    // key, claims nothing (its deliveries wait, their attempts unspent).
    let all = engine.destinations()?;
    let usable = engine.usable()?;
    let names: Vec<&str> = usable.iter().map(|d| d.name.as_str()).collect();
    let db = Db::from_env(env)?;
    let now = now_ms();
    // Long enough for every call of the batch, six at a time, each within
    // half a lease: no other run takes a row over while this one may still
    // call its destination.
    let rounds = i64::try_from(ids.len().div_ceil(IN_FLIGHT))
        .unwrap_or(1)
        .max(1);
    let lease_until = now + settings.outbox.lease_ms * rounds;
    let Claim { claimed, retry_in } =
        claim(&db, (ids, carried), settings, &names, now, lease_until).await?;
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
        let destination = destinations::named(all, &row.destination);
        async move { send::attempt(env, engine, destination, &delivery).await }
    });
    let attempts: Vec<Attempt> = stream::iter(attempts).buffered(IN_FLIGHT).collect().await;
    complete(env, engine, &db, all, &claimed, attempts, lease_until).await?;
    Ok(retry_in)
}

/// Records the attempts' results in one transaction, with what they change
/// in their destinations and the operators' alerts; then re-sends the
/// retries, alerts and drains.
async fn complete(
    env: &Env,
    engine: &Settings,
    db: &Db,
    all: &[Destination],
    claimed: &[(Claimed, bool)],
    attempts: Vec<Attempt>,
    lease_until: i64,
) -> worker::Result<()> {
    let now = now_ms();
    let settings = engine.forward()?;
    let alerts = notify_operator::settings(engine);
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
        tally.probed |= *probe;
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
                resend.extend(super::paced(backlog));
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
    let out_of_budget = |at: i64| {
        destination
            .is_some_and(|d| row.attempts >= d.max_attempts || at > row.budget_from + d.max_age_ms)
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

//! What operators do to forwarding, from the admin API and the dashboard
//! alike: redeliver one delivery, requeue a destination's dead ones, pause,
//! resume and re-enable a destination, discard what waits for one that was
//! removed. A redelivery keeps its id: the
//! destination sees the same `webhook-id`, and dedupes on it.

use worker::Env;

use super::breaker::{self, DRAIN_PAGE};
use super::destinations;
use crate::clock::now_ms;
use crate::d1::{Db, Statement};
use crate::log::{self, Line};
use crate::names::named_enum;
use crate::settings::Settings;

named_enum! {
    /// An operator's action on a destination.
    pub enum DestinationAction {
        /// Every dead delivery made due again, with a fresh budget.
        Requeue = "requeue",
        /// Hold its deliveries (no calls) until resumed.
        Pause = "pause",
        Resume = "resume",
        /// Undo a 410's disabling (and close the breaker).
        Enable = "enable",
        /// End the deliveries held for a destination that is no longer
        /// declared: `dead`, saying so (a requeue revives them, should it
        /// be declared again).
        Discard = "discard",
    }
}

/// What a discarded delivery's `last_error` says.
pub const DISCARDED: &str = "discarded by an operator: the destination is no longer declared";

/// Makes a dead or delivered delivery due again, with a fresh budget, and
/// sends it; `false` when there is no such delivery, or it is in flight.
pub async fn redeliver(env: &Env, id: &str) -> worker::Result<bool> {
    let now = now_ms();
    let again = Statement::new(
        "UPDATE forwards SET status = 'pending', attempts = 0, budget_from = ?2, \
             next_attempt_at = ?2, updated_at = ?2 \
         WHERE delivery_id = ?1 AND status IN ('dead', 'delivered')",
        vec![id.into(), now.into()],
    );
    if Db::from_env(env)?.run(&again).await? == 0 {
        return Ok(false);
    }
    send(env, vec![(id.to_string(), 0)]).await;
    Ok(true)
}

/// Does `action` to destination `name`; says whether it changed anything
/// (nothing for a name `DESTINATIONS` does not declare, but a discard,
/// which is only for such a name).
pub async fn destination(
    env: &Env,
    settings: &Settings,
    name: &str,
    action: DestinationAction,
) -> worker::Result<bool> {
    let is_declared = destinations::named(settings.destinations()?, name).is_some();
    if is_declared == (action == DestinationAction::Discard) {
        return Ok(false);
    }
    let now = now_ms();
    let db = Db::from_env(env)?;
    let params = vec![name.into(), now.into()];
    let sql = match action {
        DestinationAction::Discard => return discard(&db, name, now).await,
        DestinationAction::Requeue => {
            "UPDATE forwards SET status = 'pending', attempts = 0, budget_from = ?2, \
                 next_attempt_at = ?2, updated_at = ?2 \
             WHERE destination = ?1 AND status = 'dead'"
        }
        DestinationAction::Pause => {
            "INSERT INTO destinations (name, paused, updated_at) VALUES (?1, 1, ?2) \
             ON CONFLICT (name) DO UPDATE SET paused = 1, updated_at = ?2 WHERE paused = 0"
        }
        DestinationAction::Resume => {
            "UPDATE destinations SET paused = 0, updated_at = ?2 WHERE name = ?1 AND paused = 1"
        }
        DestinationAction::Enable => {
            "UPDATE destinations SET state = 'closed', state_since = ?2, failures = 0, \
                 updated_at = ?2 WHERE name = ?1 AND state != 'closed'"
        }
    };
    let changed = db.run(&Statement::new(sql, params)).await? > 0;
    if changed && action != DestinationAction::Pause {
        // The oldest first, paced; the relay sends the rest.
        send(
            env,
            super::paced(db.texts(&breaker::backlog(name, DRAIN_PAGE)).await?),
        )
        .await;
    }
    Ok(changed)
}

/// Deliveries a discard ends per statement, and statements per action: a
/// backlog of millions goes in several clicks, none of them one long
/// statement.
const DISCARD_PAGE: i64 = 5_000;
const DISCARD_PAGES: usize = 20;

/// Ends what waits for `name` (no longer declared): `dead`, saying so, a
/// page at a time, and not a delivery whose claim still holds (a consumer
/// mid-call).
async fn discard(db: &Db, name: &str, now: i64) -> worker::Result<bool> {
    let mut discarded = 0;
    for _ in 0..DISCARD_PAGES {
        let page = Statement::new(
            "UPDATE forwards SET status = 'dead', last_error = ?3, lease_until = NULL, updated_at = ?2 \
             WHERE delivery_id IN (SELECT delivery_id FROM forwards INDEXED BY forwards_due \
                 WHERE destination = ?1 AND status IN ('pending', 'sending') \
                   AND (status = 'pending' OR lease_until < ?2) LIMIT ?4)",
            vec![name.into(), now.into(), DISCARDED.into(), DISCARD_PAGE.into()],
        );
        let changed = db.run(&page).await?;
        discarded += changed;
        if (changed as i64) < DISCARD_PAGE {
            break;
        }
    }
    if discarded > 0 {
        log::warn(
            &Line::new("forward_discarded")
                .detail(name)
                .counts(discarded),
        );
    }
    Ok(discarded > 0)
}

/// Sends deliveries, best effort: the relay sends what this could not.
async fn send(env: &Env, jobs: Vec<(String, u32)>) {
    if let Err(e) = super::enqueue(env, &jobs).await {
        log::error(&Line::new("forward_enqueue_failed").error(e));
    }
}

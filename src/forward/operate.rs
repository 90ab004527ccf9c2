//! What operators do to forwarding, from the admin API and the dashboard
//! alike: redeliver one delivery, requeue a destination's dead ones, pause,
//! resume and re-enable a destination. A redelivery keeps its id: the
//! destination sees the same `webhook-id`, and dedupes on it.

use worker::Env;

use super::breaker::{self, DRAIN_PAGE};
use super::destinations::{self, Bounds};
use crate::clock::now_ms;
use crate::d1::{Db, Statement};
use crate::log::{self, Line};
use crate::names::named_enum;

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
    }
}

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
/// (nothing, for a name `DESTINATIONS` does not declare).
pub async fn destination(env: &Env, name: &str, action: DestinationAction) -> worker::Result<bool> {
    let declared = destinations::all(env, &Bounds::from_env(env)?)?;
    if destinations::named(&declared, name).is_none() {
        return Ok(false);
    }
    let now = now_ms();
    let params = vec![name.into(), now.into()];
    let sql = match action {
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
    let db = Db::from_env(env)?;
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

/// Sends deliveries, best effort: the relay sends what this could not.
async fn send(env: &Env, jobs: Vec<(String, u32)>) {
    if let Err(e) = super::enqueue(env, &jobs).await {
        log::error(&Line::new("forward_enqueue_failed").error(e));
    }
}

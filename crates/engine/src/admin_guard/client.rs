//! The guard's client: the calls the admin surface makes to its objects,
//! each failing closed, and never waiting past [`GUARD_TIMEOUT_MS`].

use std::time::Duration;

use futures_util::future::{select, Either};
use worker::{Delay, Env, Method, Request, Response, Result};

use super::policy::{client_of, Verdict};
use super::{ATTEMPT, COUNT, PRESSED};
#[cfg(feature = "dashboard")]
use super::{REVOKE, REVOKED};
use crate::config::GUARD_BINDING;
use crate::fault::Fault;
use crate::http;
use crate::log::{self, Line};

/// Checks a presented credential (`valid`: whether it matched) against the
/// request's client's failures, counting it if wrong.
pub async fn attempt(env: &Env, test_faults: bool, req: &Request, valid: bool) -> Result<Verdict> {
    let address = req.headers().get("cf-connecting-ip")?;
    let client = format!("client:{}", client_of(address.as_deref()));
    let valid = if valid { "1" } else { "0" };
    let mut params = vec![("valid", valid.to_string())];
    if let Some(fault) = guard_fault(test_faults, req) {
        params.push(("fault", fault.name()));
    }
    let params: Vec<(&str, &str)> = params.iter().map(|(n, v)| (*n, v.as_str())).collect();
    let mut answer = call(env, &client, Method::Post, ATTEMPT, &params).await?;
    let verdict = Verdict::parse(&answer.text().await?).ok_or("admin guard: unreadable verdict")?;
    if verdict == Verdict::Wrong {
        // Counted overall too; under pressure, the client is told, so its
        // next failures count against the lower limit. Best effort: the
        // client's own count already stands.
        if let Err(e) = count_overall(env, &client).await {
            log::error(&Line::new("admin_guard_failed").error(e));
        }
    }
    Ok(verdict)
}

async fn count_overall(env: &Env, client: &str) -> Result<()> {
    let mut answer = call(env, EVERYONE, Method::Post, COUNT, &[]).await?;
    let until = answer.text().await?;
    if until != "0" {
        call(env, client, Method::Post, PRESSED, &[("until", &until)]).await?;
    }
    Ok(())
}

#[cfg(feature = "dashboard")]
/// Revokes the session `id` (a digest of its cookie) until `until` (ms),
/// when it would have expired anyway.
pub async fn revoke(env: &Env, id: &str, until: i64) -> Result<()> {
    let until = until.to_string();
    let name = format!("session:{id}");
    call(env, &name, Method::Post, REVOKE, &[("until", &until)]).await?;
    Ok(())
}

#[cfg(feature = "dashboard")]
/// Whether the session `id` was signed out.
pub async fn revoked(env: &Env, id: &str) -> Result<bool> {
    let name = format!("session:{id}");
    let mut answer = call(env, &name, Method::Get, REVOKED, &[]).await?;
    Ok(answer.text().await? == "revoked")
}

/// How long a request waits for a guard (ms): an object answers in
/// milliseconds, and one that does not is treated as down.
const GUARD_TIMEOUT_MS: u64 = 3_000;

/// A fault for the guard object, named by the request (tests only).
fn guard_fault(test_faults: bool, req: &Request) -> Option<Fault> {
    if !test_faults {
        return None;
    }
    let header = req.headers().get("x-test-fault").ok().flatten()?;
    Fault::parse(&header).filter(|f| matches!(f, Fault::GuardFails | Fault::GuardHangs))
}

/// The object counting everyone's failures; no client's name looks like it.
const EVERYONE: &str = "everyone";

/// One call to the guard named `name`; anything but a 2xx is an error
/// (the caller fails closed).
async fn call(
    env: &Env,
    name: &str,
    method: Method,
    path: &str,
    params: &[(&str, &str)],
) -> Result<Response> {
    let stub = env.durable_object(GUARD_BINDING)?.get_by_name(name)?;
    let query = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(params)
        .finish();
    let url = format!("https://guard{path}?{query}");
    let request = match method {
        Method::Post => http::post(&url, "", &[])?,
        _ => Request::new(&url, method)?,
    };
    // A guard that does not answer refuses as surely as one that fails.
    let answer = stub.fetch_with_request(request);
    let timeout = Delay::from(Duration::from_millis(GUARD_TIMEOUT_MS));
    futures_util::pin_mut!(answer);
    let response = match select(answer, timeout).await {
        Either::Left((response, _)) => response?,
        Either::Right(_) => return Err("admin guard: no answer in time".into()),
    };
    match response.status_code() {
        200..=299 => Ok(response),
        status => Err(format!("admin guard answered {status}").into()),
    }
}

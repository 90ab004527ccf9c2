//! `AdminGuard`: one Durable Object for the whole admin surface. It counts
//! failed sign-ins and bearer checks, per client and overall, and holds the
//! sessions signed out before they expired. One object, so every count is
//! exact: each decision is synchronous SQL, with no `.await` between
//! reading a count and writing it, however many guesses arrive at once.
//!
//! The token is checked first, in the worker, in constant time; the guard
//! then decides what the answer may say. A client past its limit is
//! refused (429) whether or not its token was right, so it learns nothing
//! more. A client with no failures of its own is always let in with the
//! right token: another client's failures never lock the operators out.
//! When failures pile up overall (many addresses guessing), each client is
//! allowed one failure per window instead of [`CLIENT_FAILURES`].
//!
//! Built into every build, with or without the admin surface:
//! `wrangler.toml` binds it, and one configuration deploys any feature set.

use serde::{Deserialize, Serialize};
use worker::wasm_bindgen;
use worker::{
    durable_object, DurableObject, Env, Method, Request, Response, Result, SqlStorage,
    SqlStorageValue, State,
};

use crate::clock::now_ms;
use crate::config::GUARD_BINDING;
use crate::http;

/// How long failures count: a fixed window, so a refused client knows when
/// to come back (`Retry-After`).
pub const WINDOW_MS: i64 = 15 * 60 * 1000;
/// Failures one client may make in a window.
pub const CLIENT_FAILURES: i64 = 10;
/// Failures from all clients in a window past which each client may make
/// only [`PRESSED_CLIENT_FAILURES`].
pub const GLOBAL_FAILURES: i64 = 100;
/// Failures one client may make in a window once [`GLOBAL_FAILURES`] is reached.
pub const PRESSED_CLIENT_FAILURES: i64 = 1;

/// What a credential check may answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "lowercase")]
pub enum Verdict {
    /// The credential is right and the client is within its limit.
    Allowed,
    /// The credential is wrong; counted.
    Wrong,
    /// The client is past its limit: 429, whatever it presented.
    Refused { retry_after_secs: i64 },
}

/// The verdict for a client with `client_failures` failures in this window
/// (before this attempt), `global_failures` from all clients, presenting a
/// credential that is `valid` or not; `window_left_ms` until the window ends.
pub fn decide(
    client_failures: i64,
    global_failures: i64,
    valid: bool,
    window_left_ms: i64,
) -> Verdict {
    let limit = if global_failures >= GLOBAL_FAILURES {
        PRESSED_CLIENT_FAILURES
    } else {
        CLIENT_FAILURES
    };
    if client_failures >= limit {
        let retry_after_secs = (window_left_ms.max(0) + 999) / 1000;
        Verdict::Refused { retry_after_secs }
    } else if valid {
        Verdict::Allowed
    } else {
        Verdict::Wrong
    }
}

/// Who is guessing: the connecting address, an IPv6 one by its /64 (one
/// machine commonly holds a whole /64, and could otherwise rotate through
/// it). `unknown` where the platform gave none (a local test).
pub fn client_of(address: Option<&str>) -> String {
    let Some(address) = address.map(str::trim).filter(|a| !a.is_empty()) else {
        return "unknown".into();
    };
    match address.parse::<std::net::Ipv6Addr>() {
        Ok(v6) if v6.to_ipv4_mapped().is_none() => {
            let s = v6.segments();
            format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
        }
        Ok(v6) => v6
            .to_ipv4_mapped()
            .map_or_else(String::new, |v4| v4.to_string()),
        Err(_) => address.to_string(),
    }
}

/// Checks a presented credential (`valid`: whether it matched) against the
/// request's client's and everyone's failures, counting it if wrong.
pub async fn attempt(env: &Env, req: &Request, valid: bool) -> Result<Verdict> {
    let address = req.headers().get("cf-connecting-ip")?;
    let query = form_urlencoded::Serializer::new(String::new())
        .append_pair("client", &client_of(address.as_deref()))
        .append_pair("valid", if valid { "1" } else { "0" })
        .finish();
    let mut response = call(env, Method::Post, &format!("{ATTEMPT}?{query}")).await?;
    response.json().await
}

/// Revokes the session `id` (a digest of its cookie) until `until` (ms),
/// when it would have expired anyway.
pub async fn revoke(env: &Env, id: &str, until: i64) -> Result<()> {
    let query = form_urlencoded::Serializer::new(String::new())
        .append_pair("session", id)
        .append_pair("until", &until.to_string())
        .finish();
    call(env, Method::Post, &format!("{REVOKE}?{query}")).await?;
    Ok(())
}

/// Whether the session `id` was signed out.
pub async fn revoked(env: &Env, id: &str) -> Result<bool> {
    let query = form_urlencoded::Serializer::new(String::new())
        .append_pair("session", id)
        .finish();
    let mut response = call(env, Method::Get, &format!("{REVOKED}?{query}")).await?;
    Ok(response.json::<Revoked>().await?.revoked)
}

const ATTEMPT: &str = "/attempt";
const REVOKE: &str = "/revoke";
const REVOKED: &str = "/revoked";

#[derive(Serialize, Deserialize)]
struct Revoked {
    revoked: bool,
}

/// One call to the one guard; anything but a 2xx is an error (fail closed).
async fn call(env: &Env, method: Method, path: &str) -> Result<Response> {
    let stub = env.durable_object(GUARD_BINDING)?.get_by_name("admin")?;
    let url = format!("https://guard{path}");
    let request = match method {
        Method::Post => http::post(&url, "", &[])?,
        _ => Request::new(&url, method)?,
    };
    let response = stub.fetch_with_request(request).await?;
    match response.status_code() {
        200..=299 => Ok(response),
        status => Err(format!("admin guard answered {status}").into()),
    }
}

const TABLES: &str = "CREATE TABLE IF NOT EXISTS failures (
        client TEXT PRIMARY KEY,
        window INTEGER NOT NULL,
        failures INTEGER NOT NULL
    );
    CREATE INDEX IF NOT EXISTS failures_by_window ON failures (window);
    CREATE TABLE IF NOT EXISTS revoked (
        session TEXT PRIMARY KEY,
        until INTEGER NOT NULL
    )";

/// The everyone-row's client name: no address looks like it.
const EVERYONE: &str = "*";

#[durable_object]
pub struct AdminGuard {
    sql: SqlStorage,
}

impl DurableObject for AdminGuard {
    fn new(state: State, _env: Env) -> Self {
        AdminGuard {
            sql: state.storage().sql(),
        }
    }

    async fn fetch(&self, req: Request) -> Result<Response> {
        self.sql.exec(TABLES, None)?;
        let url = req.inner().url();
        let query = url.split_once('?').map_or("", |(_, q)| q);
        let param = |name: &str| {
            form_urlencoded::parse(query.as_bytes())
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.into_owned())
                .unwrap_or_default()
        };
        match (req.method(), req.path().as_str()) {
            (Method::Post, ATTEMPT) => {
                Response::from_json(&self.attempt(&param("client"), param("valid") == "1")?)
            }
            (Method::Post, REVOKE) => {
                let until = param("until").parse::<i64>().map_err(|_| "bad until")?;
                self.revoke(&param("session"), until)?;
                Response::empty().map(|r| r.with_status(204))
            }
            (Method::Get, REVOKED) => Response::from_json(&Revoked {
                revoked: self.is_revoked(&param("session"))?,
            }),
            _ => Response::error("not found", 404),
        }
    }
}

impl AdminGuard {
    /// Reads the counts, decides, and counts a failure: all synchronous.
    fn attempt(&self, client: &str, valid: bool) -> Result<Verdict> {
        let now = now_ms();
        let window = now.div_euclid(WINDOW_MS);
        let (mut mine, mut everyone) = (0, 0);
        let rows = self.sql.exec(
            "SELECT client, failures FROM failures WHERE window = ?1 AND client IN (?2, ?3)",
            Some(vec![window.into(), client.into(), EVERYONE.into()]),
        )?;
        for row in rows.raw() {
            if let [SqlStorageValue::String(who), SqlStorageValue::Integer(n)] = row?.as_slice() {
                if who == EVERYONE {
                    everyone = *n;
                } else {
                    mine = *n;
                }
            }
        }
        let left = (window + 1) * WINDOW_MS - now;
        let verdict = decide(mine, everyone, valid, left);
        match verdict {
            Verdict::Wrong => {
                // Older windows are over: their rows go, so the table holds
                // one window's clients at most.
                self.sql.exec(
                    "DELETE FROM failures WHERE window < ?1",
                    Some(vec![window.into()]),
                )?;
                for who in [client, EVERYONE] {
                    self.sql.exec(
                        "INSERT INTO failures (client, window, failures) VALUES (?1, ?2, 1) \
                         ON CONFLICT (client) DO UPDATE SET failures = failures + 1",
                        Some(vec![who.into(), window.into()]),
                    )?;
                }
            }
            // A success clears the client's own count (a typo or two).
            Verdict::Allowed if mine > 0 => {
                self.sql.exec(
                    "DELETE FROM failures WHERE client = ?1",
                    Some(vec![client.into()]),
                )?;
            }
            _ => {}
        }
        Ok(verdict)
    }

    fn revoke(&self, session: &str, until: i64) -> Result<()> {
        self.sql.exec(
            "DELETE FROM revoked WHERE until < ?1",
            Some(vec![now_ms().into()]),
        )?;
        self.sql.exec(
            "INSERT OR REPLACE INTO revoked (session, until) VALUES (?1, ?2)",
            Some(vec![session.into(), until.into()]),
        )?;
        Ok(())
    }

    fn is_revoked(&self, session: &str) -> Result<bool> {
        let rows = self.sql.exec(
            "SELECT 1 FROM revoked WHERE session = ?1",
            Some(vec![session.into()]),
        )?;
        Ok(rows.raw().next().is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_is_refused_past_its_own_failures_right_token_or_not() {
        assert_eq!(decide(0, 0, true, 1_000), Verdict::Allowed);
        assert_eq!(decide(CLIENT_FAILURES - 1, 0, false, 1_000), Verdict::Wrong);
        let refused = Verdict::Refused {
            retry_after_secs: 2,
        };
        assert_eq!(decide(CLIENT_FAILURES, 0, false, 1_001), refused);
        assert_eq!(decide(CLIENT_FAILURES, 0, true, 1_001), refused);
    }

    #[test]
    fn others_failures_never_block_a_client_with_none() {
        assert_eq!(decide(0, 10 * GLOBAL_FAILURES, true, 1), Verdict::Allowed);
        assert_eq!(decide(0, 10 * GLOBAL_FAILURES, false, 1), Verdict::Wrong);
        // Under pressure, a client that failed once is refused.
        assert!(matches!(
            decide(PRESSED_CLIENT_FAILURES, GLOBAL_FAILURES, true, 1),
            Verdict::Refused { .. }
        ));
        assert_eq!(
            decide(PRESSED_CLIENT_FAILURES, GLOBAL_FAILURES - 1, true, 1),
            Verdict::Allowed
        );
    }

    #[test]
    fn a_client_is_its_address_or_its_ipv6_slash_64() {
        assert_eq!(client_of(Some("203.0.113.7")), "203.0.113.7");
        assert_eq!(
            client_of(Some("2001:db8:1:2:3:4:5:6")),
            client_of(Some("2001:db8:1:2:ffff::1"))
        );
        assert_eq!(client_of(Some("2001:db8:1:2::9")), "2001:db8:1:2::/64");
        assert_ne!(
            client_of(Some("2001:db8:1:2::9")),
            client_of(Some("2001:db8:1:3::9"))
        );
        assert_eq!(client_of(Some("::ffff:192.0.2.1")), "192.0.2.1");
        assert_eq!(client_of(None), "unknown");
        assert_eq!(client_of(Some(" ")), "unknown");
    }
}

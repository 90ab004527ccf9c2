//! `selftest`: prove a webhook endpoint idempotent, locally or deployed.
//!
//! ```text
//! selftest sign  <provider> --secret S [--url URL] [--body FILE]
//! selftest send  <provider> --secret S --url URL [--source NAME] [--body FILE]
//! selftest storm <provider> --secret S --url URL [--source NAME] [--copies 50] [--admin-token T]
//! ```
//!
//! `storm` sends the same freshly signed event N times at once, then asks the
//! admin API what happened, and exits non-zero unless there was exactly one
//! processed reply, one ledger row, and each side effect once. It signs on
//! its own: none of the worker's code is shared with it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::{Parser, ValueEnum};
use selftest::signers::{delivery, Delivery, PROVIDERS};

/// Prove a webhook endpoint idempotent: sign, send, and storm it with
/// copies of one event.
#[derive(Parser)]
#[command(name = "selftest", version)]
struct Args {
    command: Command,
    /// Which provider's signature scheme to sign with.
    #[arg(value_parser = clap::builder::PossibleValuesParser::new(PROVIDERS.iter().copied()))]
    provider: String,
    /// The source's webhook secret.
    #[arg(long, env = "SELFTEST_SECRET", hide_env_values = true)]
    secret: String,
    /// The worker's base URL.
    #[arg(long, default_value = "http://localhost:8787")]
    url: String,
    /// The `{source}` of `/webhooks/{source}`; the provider's name by default.
    #[arg(long)]
    source: Option<String>,
    /// A file holding the body to sign; a fresh sample event by default.
    #[arg(long)]
    body: Option<PathBuf>,
    /// How many copies `storm` sends at once.
    #[arg(long, default_value_t = 50)]
    copies: usize,
    /// The worker's ADMIN_TOKEN, for `storm` to check the ledger and outbox.
    #[arg(long, env = "SELFTEST_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// How many side effects the event's effect writes, for `storm` to
    /// check that many outbox rows; unchecked by default.
    #[arg(long)]
    side_effects: Option<usize>,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Command {
    /// Print a signed delivery (headers and body) without sending it.
    Sign,
    /// Send one signed delivery and print the reply.
    Send,
    /// Send N copies of one event at once, then check exactly one took effect.
    Storm,
}

impl Args {
    fn source(&self) -> &str {
        self.source.as_deref().unwrap_or(&self.provider)
    }

    fn base_url(&self) -> &str {
        self.url.trim_end_matches('/')
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn fresh_id() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("selftest_{nanos:x}")
}

fn main() -> ExitCode {
    let args = Args::parse();
    let body = match &args.body {
        Some(path) => match std::fs::read_to_string(path) {
            Ok(body) => Some(body),
            Err(e) => {
                eprintln!("{}: {e}", path.display());
                return ExitCode::from(2);
            }
        },
        None => None,
    };
    let endpoint = format!("{}/webhooks/{}", args.base_url(), args.source());
    let event = match delivery(
        &args.provider,
        &args.secret,
        &endpoint,
        &fresh_id(),
        body,
        now(),
    ) {
        Ok(event) => event,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    match args.command {
        Command::Sign => {
            print_signed(&event, &endpoint);
            ExitCode::SUCCESS
        }
        Command::Send => match post(&endpoint, &event) {
            Ok((status, body)) => {
                println!("{status} {body}");
                if (200..300).contains(&status) {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        },
        Command::Storm => storm(&args, &endpoint, &event),
    }
}

fn print_signed(event: &Delivery, endpoint: &str) {
    for (name, value) in &event.headers {
        println!("{name}: {value}");
    }
    println!("\n{}\n", event.body);
    let headers: String = event
        .headers
        .iter()
        .map(|(n, v)| format!(" -H '{n}: {v}'"))
        .collect();
    println!(
        "curl -s {endpoint}{headers} --data-binary '{}'",
        event.body.replace('\'', r"'\''")
    );
}

/// POSTs the delivery; any status is an answer, only a failed connection is an error.
fn post(url: &str, event: &Delivery) -> Result<(u16, String), String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let mut request = agent.post(url);
    for (name, value) in &event.headers {
        request = request.header(name, value);
    }
    let mut response = request
        .send(event.body.as_bytes())
        .map_err(|e| format!("{url}: {e}"))?;
    let status = response.status().as_u16();
    let body = response.body_mut().read_to_string().unwrap_or_default();
    Ok((status, body))
}

fn get_json(url: &str, token: &str) -> Result<serde_json::Value, String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut response = agent
        .get(url)
        .header("authorization", &format!("Bearer {token}"))
        .call()
        .map_err(|e| format!("{url}: {e}"))?;
    let status = response.status().as_u16();
    let body = response.body_mut().read_to_string().unwrap_or_default();
    if status != 200 {
        return Err(format!("{url}: {status} {body}"));
    }
    serde_json::from_str(&body).map_err(|e| format!("{url}: {e}"))
}

fn storm(args: &Args, endpoint: &str, event: &Delivery) -> ExitCode {
    println!(
        "storm: {} copies of {} event {} to {endpoint}",
        args.copies, args.provider, event.event_id
    );
    let started = Instant::now();
    let replies: Vec<Result<(u16, String), String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..args.copies)
            .map(|_| scope.spawn(|| post(endpoint, event)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("thread panicked".into())))
            .collect()
    });
    let mut by_reply: BTreeMap<String, usize> = BTreeMap::new();
    for reply in &replies {
        let label = match reply {
            Ok((status, body)) => {
                // `outcome` on success, `error` on refusal; else the body's
                // start. A source that answers once recorded says so.
                let outcome = serde_json::from_str::<serde_json::Value>(body)
                    .ok()
                    .and_then(|v| {
                        let field = v.get("outcome").or_else(|| v.get("error"))?;
                        let mode = v.get("reply_after").and_then(|m| m.as_str());
                        let mode = mode.map_or(String::new(), |m| format!(" ({m})"));
                        field.as_str().map(|o| format!("{o}{mode}"))
                    })
                    .unwrap_or_else(|| body.chars().take(60).collect());
                format!("{status} {outcome}")
            }
            Err(e) => format!("error {e}"),
        };
        *by_reply.entry(label).or_default() += 1;
    }
    let summary: Vec<String> = by_reply
        .iter()
        .map(|(label, n)| format!("{label} x{n}"))
        .collect();
    println!(
        "responses ({} ms): {}",
        started.elapsed().as_millis(),
        summary.join(", ")
    );
    // The first delivery: applied, or (REPLY_AFTER = "record") recorded.
    let first = by_reply
        .iter()
        .filter(|(l, _)| l.ends_with(" processed") || l.ends_with(" accepted (record)"))
        .map(|(_, n)| n)
        .sum::<usize>();
    let all_ok = replies.iter().all(|r| matches!(r, Ok((200..=299, _))));
    let mut pass = all_ok && first == 1;

    match &args.admin_token {
        None => println!("(no admin token: ledger and side effects not checked)"),
        Some(token) => match check_records(args, event, token) {
            Ok(ok) => pass &= ok,
            Err(e) => {
                println!("admin API: {e}");
                pass = false;
            }
        },
    }
    println!(
        "{}",
        match (pass, &args.admin_token) {
            (false, _) => "FAIL",
            (true, Some(_)) => "PASS: exactly one of each",
            (true, None) => "PASS: one reply first, the others duplicates (no ledger check)",
        }
    );
    if pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Reads the event's records from the admin API, waiting up to 20 s for its
/// effect (applied after the reply with `REPLY_AFTER = "record"`) and its
/// side effects to be performed. True when there is one ledger row, every
/// outbox row was performed, and there are as many as `--side-effects`.
fn check_records(args: &Args, event: &Delivery, token: &str) -> Result<bool, String> {
    let url = format!(
        "{}/admin/api/events/{}/{}",
        args.base_url(),
        args.source(),
        event.event_id
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let detail = get_json(&url, token)?;
        let records = &detail["records"];
        let ledger_rows = usize::from(!records["ledger"].is_null());
        let outbox = records["outbox"].as_array().cloned().unwrap_or_default();
        let performed = outbox.iter().filter(|row| row["status"] == "sent").count();
        let settled = (ledger_rows == 1 && performed == outbox.len()) || Instant::now() > deadline;
        if settled {
            let deliveries = detail["inbox"]["deliveries"].as_u64().unwrap_or(0);
            println!(
                "ledger rows: {ledger_rows}   effect committed: {}",
                if ledger_rows == 1 { "yes" } else { "no" }
            );
            let expected = args
                .side_effects
                .map_or(String::new(), |n| format!(" (expected {n})"));
            println!(
                "outbox rows: {}{expected}   side effects performed: {performed}",
                outbox.len()
            );
            println!("deliveries recorded by the inbox: {deliveries}");
            return Ok(ledger_rows == 1
                && performed == outbox.len()
                && args.side_effects.is_none_or(|n| n == outbox.len()));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

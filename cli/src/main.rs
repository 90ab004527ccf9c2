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
//! its own: nothing here is shared with the worker it checks.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use selftest::signers::{delivery, Delivery, PROVIDERS};

struct Args {
    command: String,
    provider: String,
    secret: String,
    url: String,
    source: String,
    body: Option<String>,
    copies: usize,
    admin_token: Option<String>,
}

const USAGE: &str = "usage: selftest <sign|send|storm> <provider> --secret S [--url URL] [--source NAME] [--body FILE] [--copies N] [--admin-token T]
providers: stripe, github, standard-webhooks, svix, shopify, slack, linear, paddle, twilio
secret and admin token may also come from SELFTEST_SECRET and SELFTEST_ADMIN_TOKEN";

fn parse_args() -> Result<Args, String> {
    let mut positional = Vec::new();
    let mut flags = BTreeMap::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.strip_prefix("--") {
            Some(flag) => {
                let value = args.next().ok_or(format!("--{flag} needs a value"))?;
                flags.insert(flag.to_string(), value);
            }
            None => positional.push(arg),
        }
    }
    let [command, provider] = positional.as_slice() else {
        return Err(USAGE.into());
    };
    if !matches!(command.as_str(), "sign" | "send" | "storm")
        || !PROVIDERS.contains(&provider.as_str())
    {
        return Err(USAGE.into());
    }
    let secret = flags
        .remove("secret")
        .or_else(|| std::env::var("SELFTEST_SECRET").ok())
        .ok_or("a secret is needed: --secret or SELFTEST_SECRET")?;
    let body = flags
        .remove("body")
        .map(|path| std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}")))
        .transpose()?;
    let copies = flags.remove("copies").map_or(Ok(50), |n| {
        n.parse().map_err(|_| "--copies takes a number".to_string())
    })?;
    let args = Args {
        command: command.clone(),
        provider: provider.clone(),
        secret,
        url: flags
            .remove("url")
            .unwrap_or_else(|| "http://localhost:8787".into())
            .trim_end_matches('/')
            .to_string(),
        source: flags.remove("source").unwrap_or_else(|| provider.clone()),
        body,
        copies,
        admin_token: flags
            .remove("admin-token")
            .or_else(|| std::env::var("SELFTEST_ADMIN_TOKEN").ok()),
    };
    if let Some(unknown) = flags.keys().next() {
        return Err(format!("unknown option --{unknown}\n{USAGE}"));
    }
    Ok(args)
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
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let endpoint = format!("{}/webhooks/{}", args.url, args.source);
    let event = match delivery(
        &args.provider,
        &args.secret,
        &endpoint,
        &fresh_id(),
        args.body.clone(),
        now(),
    ) {
        Ok(event) => event,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    match args.command.as_str() {
        "sign" => {
            print_signed(&event, &endpoint);
            ExitCode::SUCCESS
        }
        "send" => match post(&endpoint, &event) {
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
        _ => storm(&args, &endpoint, &event),
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
                // `outcome` on success, `error` on refusal; else the body's start.
                let outcome = serde_json::from_str::<serde_json::Value>(body)
                    .ok()
                    .and_then(|v| {
                        let field = v.get("outcome").or_else(|| v.get("error"))?;
                        field.as_str().map(str::to_string)
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
    let processed = by_reply
        .iter()
        .filter(|(l, _)| l.ends_with(" processed"))
        .map(|(_, n)| n)
        .sum::<usize>();
    let all_ok = replies.iter().all(|r| matches!(r, Ok((200..=299, _))));
    let mut pass = all_ok && processed == 1;

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
            (true, None) => "PASS: one reply processed, the others duplicates (no ledger check)",
        }
    );
    if pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Reads the event's records from the admin API, waiting up to 20 s for its
/// side effects to be performed. True when there is exactly one of each.
fn check_records(args: &Args, event: &Delivery, token: &str) -> Result<bool, String> {
    let url = format!(
        "{}/admin/api/events/{}/{}",
        args.url, args.source, event.event_id
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let detail = get_json(&url, token)?;
        let records = &detail["records"];
        let ledger_rows = usize::from(!records["ledger"].is_null());
        let outbox = records["outbox"].as_array().cloned().unwrap_or_default();
        let performed = outbox.iter().filter(|row| row["status"] == "sent").count();
        let settled = performed == outbox.len() || Instant::now() > deadline;
        if settled {
            let deliveries = detail["inbox"]["deliveries"].as_u64().unwrap_or(0);
            println!(
                "ledger rows: {ledger_rows}   effect committed: {}",
                if ledger_rows == 1 { "yes" } else { "no" }
            );
            println!(
                "outbox rows: {} (expected {})   side effects performed: {performed}",
                outbox.len(),
                event.side_effects
            );
            println!("deliveries recorded by the inbox: {deliveries}");
            return Ok(ledger_rows == 1
                && outbox.len() == event.side_effects
                && performed == event.side_effects);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

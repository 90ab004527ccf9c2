//! Log lines: one JSON object per line, serialized from a struct — never a
//! secret, never a payload. `wrangler tail` and Workers Logs index the
//! fields, so their names are stable. A delivery's own line is
//! `receive::DeliveryLine`; every other line is a [`Line`].
//!
//! `LOG_LEVEL` says how much: `info` (the default) logs every delivery and
//! every side effect sent; `warn` only what needs a look — refusals,
//! failures, relayed side effects, dead ones, errors.

use std::cell::Cell;

use serde::Serialize;

/// How much is logged (`LOG_LEVEL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Info,
    Warn,
}

impl Level {
    /// `info` or `warn`, in any case, spaces around ignored.
    pub fn parse(value: &str) -> Option<Level> {
        match value.trim().to_ascii_lowercase().as_str() {
            "info" => Some(Level::Info),
            "warn" => Some(Level::Warn),
            _ => None,
        }
    }
}

thread_local! {
    static LEVEL: Cell<Level> = const { Cell::new(Level::Info) };
}

/// The level `LOG_LEVEL` asks for: `info` when unset or blank, `None` for
/// any other value (deliveries refuse it as misconfigured, see `receive`).
pub fn level(env: &worker::Env) -> Option<Level> {
    let value = env
        .var("LOG_LEVEL")
        .map(|v| v.to_string())
        .unwrap_or_default();
    if value.trim().is_empty() {
        Some(Level::Info)
    } else {
        Level::parse(&value)
    }
}

/// Sets this isolate's level (from `LOG_LEVEL`, see `settings`).
pub fn set_level(level: Level) {
    LEVEL.with(|current| current.set(level));
}

/// Writes `line` to the log (`console.info`), at `info` only. Not
/// `console.log`: wrangler's local runtime looks for a stack trace to
/// source-map in every `log` line it prints (BENCHMARKS.md, "Log lines").
pub fn info(line: &impl Serialize) {
    if LEVEL.with(Cell::get) == Level::Info {
        let line = serde_json::to_string(line).unwrap_or_default();
        worker::web_sys::console::info_1(&line.into());
    }
}

/// Writes `line` as a warning (`console.warn`), at any level: what an
/// operator should look at, though nothing failed inside the worker (a
/// refused delivery, a relayed side effect).
pub fn warn(line: &impl Serialize) {
    worker::console_warn!("{}", serde_json::to_string(line).unwrap_or_default());
}

/// Writes `line` to the error stream (`console.error`), at any level:
/// failures, and what an operator must act on.
pub fn error(line: &impl Serialize) {
    worker::console_error!("{}", serde_json::to_string(line).unwrap_or_default());
}

/// A line about one event or one side effect, with the fields that apply.
#[derive(Debug, Default, Serialize)]
pub struct Line<'a> {
    pub msg: &'static str,
    /// The event's `"{source}:{id}"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<&'a str>,
    /// An outbox row's key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<&'a str>,
    /// Which attempt, counting from 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt: Option<i64>,
    /// True when the retry budget is spent and the event is marked failed.
    #[serde(rename = "final", skip_serializing_if = "Option::is_none")]
    pub last: Option<bool>,
    /// The key of the event whose signed body this one repeats.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duplicate_of: Option<String>,
    /// A queue message's id (one that could not be read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Rows the cron relay re-sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sent: Option<usize>,
    /// Counters a flush could not write.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counts: Option<usize>,
    /// Rows a relay's query read in D1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rows_read: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl<'a> Line<'a> {
    pub fn new(msg: &'static str) -> Self {
        Line {
            msg,
            ..Line::default()
        }
    }

    pub fn key(self, key: &'a str) -> Self {
        Line {
            key: Some(key),
            ..self
        }
    }

    pub fn idempotency_key(self, key: &'a str) -> Self {
        Line {
            idempotency_key: Some(key),
            ..self
        }
    }

    pub fn attempt(self, attempt: i64) -> Self {
        Line {
            attempt: Some(attempt),
            ..self
        }
    }

    pub fn last(self, last: bool) -> Self {
        Line {
            last: Some(last),
            ..self
        }
    }

    pub fn duplicate_of(self, key: String) -> Self {
        Line {
            duplicate_of: Some(key),
            ..self
        }
    }

    pub fn id(self, id: String) -> Self {
        Line {
            id: Some(id),
            ..self
        }
    }

    pub fn sent(self, rows: usize) -> Self {
        Line {
            sent: Some(rows),
            ..self
        }
    }

    pub fn counts(self, counts: usize) -> Self {
        Line {
            counts: Some(counts),
            ..self
        }
    }

    pub fn rows_read(self, rows: usize) -> Self {
        Line {
            rows_read: Some(rows),
            ..self
        }
    }

    pub fn detail(self, detail: impl ToString) -> Self {
        Line {
            detail: Some(detail.to_string()),
            ..self
        }
    }

    pub fn error(self, error: impl ToString) -> Self {
        Line {
            error: Some(error.to_string()),
            ..self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_are_read_in_any_case() {
        assert_eq!(Level::parse(" WARN "), Some(Level::Warn));
        assert_eq!(Level::parse("info"), Some(Level::Info));
        assert_eq!(Level::parse("debug"), None);
    }

    #[test]
    fn a_line_carries_only_the_fields_set() {
        let line = Line::new("effect_failed")
            .key("beta:evt_1")
            .attempt(3)
            .last(true)
            .error("D1 said \"no\"");
        assert_eq!(
            serde_json::to_string(&line).unwrap(),
            r#"{"msg":"effect_failed","key":"beta:evt_1","attempt":3,"final":true,"error":"D1 said \"no\""}"#
        );
    }
}

//! The one clock: milliseconds since the Unix epoch, from the runtime.
//! Pure code (effect plans, the inbox's state machine, verification) takes
//! the time as a parameter instead, so that host tests choose it.

/// Now, in milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    worker::Date::now().as_millis() as i64
}

//! The one clock: milliseconds since the Unix epoch, from the runtime.
//! Pure code (effect plans, the inbox's state machine, verification) takes
//! the time as a parameter instead, so that host tests choose it.

/// Now, in milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    worker::Date::now().as_millis() as i64
}

/// A minute since the Unix epoch as `YYYY-MM-DD HH:MM`, UTC (for alerts,
/// which are text).
pub fn utc_minute(minute: i64) -> String {
    let (days, of_day) = (minute.div_euclid(1440), minute.rem_euclid(1440));
    // Howard Hinnant's civil_from_days: the proleptic Gregorian date of a
    // day number, 1970-01-01 being day 0.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}",
        of_day / 60,
        of_day % 60
    )
}

/// A duration in ms the way the configuration writes one: `15m`, `1h`,
/// `90s`, `2d`, in the largest unit that divides it.
pub fn duration_text(ms: i64) -> String {
    let units = [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1000, "s"),
    ];
    units.iter().find(|(unit, _)| ms % unit == 0).map_or_else(
        || format!("{ms}ms"),
        |(unit, name)| format!("{}{name}", ms / unit),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minutes_are_utc_calendar_times() {
        assert_eq!(utc_minute(0), "1970-01-01 00:00");
        assert_eq!(utc_minute(1_700_000_000 / 60), "2023-11-14 22:13");
        // 2024-02-29 23:59 and the minute after.
        let leap = 1_709_251_140 / 60;
        assert_eq!(utc_minute(leap), "2024-02-29 23:59");
        assert_eq!(utc_minute(leap + 1), "2024-03-01 00:00");
        assert_eq!(utc_minute(-1), "1969-12-31 23:59");
    }

    #[test]
    fn durations_read_as_configured() {
        assert_eq!(duration_text(15 * 60_000), "15m");
        assert_eq!(duration_text(3_600_000), "1h");
        assert_eq!(duration_text(90_000), "90s");
        assert_eq!(duration_text(2 * 86_400_000), "2d");
        assert_eq!(duration_text(1500), "1500ms");
    }
}

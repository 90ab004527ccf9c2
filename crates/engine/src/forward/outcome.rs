//! What one attempt's answer means for its delivery, as pure code: the
//! retry rules of the README's gateway section, tested on the host.

/// The longest `Retry-After` honoured: a destination cannot park a
/// delivery for a week.
pub const RETRY_AFTER_CAP_SECS: u32 = 60 * 60;

/// How an attempt ended, before its delivery's budget is consulted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A 2xx.
    Delivered,
    /// A 5xx, 408, 429, a timeout or no connection: again later — after
    /// `after` seconds where the destination said so (429, 503), else after
    /// the backoff. Counts toward the breaker.
    Retry { after: Option<u32> },
    /// Any other answer: retrying the same request cannot help.
    Refused,
    /// 410 Gone: the destination asks not to be called again. It is
    /// disabled until an operator re-enables it; the delivery waits.
    Gone,
}

/// The verdict on an answer (`status`), or on no answer (`None`).
/// `retry_after` is the answer's `Retry-After` header; `now` in seconds.
pub fn verdict(status: Option<u16>, retry_after: Option<&str>, now: i64) -> Verdict {
    match status {
        Some(200..=299) => Verdict::Delivered,
        Some(410) => Verdict::Gone,
        Some(429 | 503) => Verdict::Retry {
            after: retry_after.and_then(|value| retry_after_secs(value, now)),
        },
        None | Some(408 | 500..=599) => Verdict::Retry { after: None },
        Some(_) => Verdict::Refused,
    }
}

/// `Retry-After` in seconds from now, capped at [`RETRY_AFTER_CAP_SECS`]:
/// delta-seconds, or an HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`).
fn retry_after_secs(value: &str, now: i64) -> Option<u32> {
    let value = value.trim();
    let secs = match value.parse::<u64>() {
        Ok(secs) => i64::try_from(secs).unwrap_or(i64::MAX),
        Err(_) => http_date(value)? - now,
    };
    Some(secs.clamp(0, i64::from(RETRY_AFTER_CAP_SECS)) as u32)
}

/// An IMF-fixdate (RFC 9110's preferred HTTP date) as seconds since the
/// epoch.
fn http_date(value: &str) -> Option<i64> {
    let mut parts = value.split_ascii_whitespace();
    let (_weekday, day, month, year, time, zone) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    if zone != "GMT" || parts.next().is_some() {
        return None;
    }
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = MONTHS.iter().position(|m| *m == month)? as i64 + 1;
    let (day, year): (i64, i64) = (day.parse().ok()?, year.parse().ok()?);
    let mut clock = time.split(':').map(|n| n.parse::<i64>().ok());
    let (h, m, s) = (clock.next()??, clock.next()??, clock.next()??);
    if !(1..=31).contains(&day) || h > 23 || m > 59 || s > 60 {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + h * 3_600 + m * 60 + s)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_the_gateway_s_rules() {
        for (status, want) in [
            (Some(200), Verdict::Delivered),
            (Some(204), Verdict::Delivered),
            (Some(500), Verdict::Retry { after: None }),
            (Some(502), Verdict::Retry { after: None }),
            (Some(408), Verdict::Retry { after: None }),
            (None, Verdict::Retry { after: None }),
            (Some(429), Verdict::Retry { after: None }),
            (Some(410), Verdict::Gone),
            (Some(400), Verdict::Refused),
            (Some(404), Verdict::Refused),
            (Some(301), Verdict::Refused),
        ] {
            assert_eq!(verdict(status, None, 0), want, "{status:?}");
        }
    }

    #[test]
    fn retry_after_is_honoured_on_429_and_503_only_and_capped() {
        let after = |status, value| verdict(Some(status), Some(value), 1_000);
        assert_eq!(after(429, "7"), Verdict::Retry { after: Some(7) });
        assert_eq!(after(503, " 0 "), Verdict::Retry { after: Some(0) });
        assert_eq!(
            after(503, "999999999999"),
            Verdict::Retry { after: Some(3600) }
        );
        assert_eq!(after(503, "soon"), Verdict::Retry { after: None });
        assert_eq!(after(500, "7"), Verdict::Retry { after: None });
    }

    #[test]
    fn retry_after_reads_http_dates() {
        // 1994-11-06T08:49:37Z is 784111777.
        assert_eq!(
            http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(784_111_777)
        );
        assert_eq!(http_date("Thu, 01 Jan 1970 00:00:00 GMT"), Some(0));
        assert_eq!(
            http_date("Tue, 29 Feb 2028 23:59:59 GMT"),
            Some(1_835_481_599)
        );
        assert_eq!(
            retry_after_secs("Sun, 06 Nov 1994 08:49:47 GMT", 784_111_777),
            Some(10)
        );
        // In the past: now.
        assert_eq!(
            retry_after_secs("Sun, 06 Nov 1994 08:49:37 GMT", 784_111_800),
            Some(0)
        );
        for bad in [
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "06 Nov 1994",
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 25:00:00 GMT",
        ] {
            assert_eq!(http_date(bad), None, "{bad}");
        }
    }
}

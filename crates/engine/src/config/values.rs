//! The shapes a setting's value must have, as pure code: durations, backoff
//! with jitter, webhook URLs, the admin token.

#[cfg(any(feature = "admin", feature = "dashboard"))]
use super::{ConfigError, ADMIN_TOKEN_MIN_BYTES};

pub const DAY_MS: i64 = 24 * 60 * 60 * 1000;

/// `base` after the first failure, doubling with each one after, at most `cap`.
pub(super) fn doubling(base: i64, failures: i64, cap: i64) -> i64 {
    let doublings = failures.saturating_sub(1).clamp(0, 20) as u32;
    base.saturating_mul(1 << doublings).min(cap)
}

/// "Equal jitter": half the delay, plus a random part of the other half
/// (`unit` in `[0, 1)`). Events that failed together in an outage spread
/// their retries instead of hitting the recovering target, or D1, at once.
pub(super) fn jitter(delay: i64, unit: f64) -> i64 {
    let half = delay / 2;
    half + (((delay - half) as f64) * unit.clamp(0.0, 1.0)) as i64
}

/// A uniform number in `[0, 1)` from the platform's secure random source
/// (`crypto.getRandomValues` on Workers). Should it fail, no jitter: 0.5.
pub(super) fn random_unit() -> f64 {
    let mut bytes = [0u8; 4];
    match getrandom::getrandom(&mut bytes) {
        Ok(()) => f64::from(u32::from_le_bytes(bytes)) / (f64::from(u32::MAX) + 1.0),
        Err(_) => 0.5,
    }
}

/// Parses `30d`, `12h`, `15m` or `90s` into milliseconds.
pub fn duration_ms(value: &str) -> Option<i64> {
    let value = value.trim();
    let unit_ms = match value.chars().last()? {
        's' => 1000,
        'm' => 60 * 1000,
        'h' => 60 * 60 * 1000,
        'd' => DAY_MS,
        _ => return None,
    };
    let count: i64 = value[..value.len() - 1].parse().ok()?;
    (count >= 0).then(|| count.saturating_mul(unit_ms))
}

/// `https://host…` or `http://host…` (the scheme in any case), its host
/// a name or an address, and no whitespace or control character: the
/// shape of a webhook URL. (Not a full parse: the `url` crate's IDNA
/// tables would add 70 KB to the gzipped worker for one setting.)
pub fn is_http_url(url: &str) -> bool {
    let Some((scheme, rest)) = url.split_once("://") else {
        return false;
    };
    if !(scheme.eq_ignore_ascii_case("https") || scheme.eq_ignore_ascii_case("http"))
        || url.contains(|c: char| c.is_whitespace() || c.is_control())
    {
        return false;
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host_port.split(':').next().unwrap_or_default(),
    };
    !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':'))
}

#[cfg(any(feature = "admin", feature = "dashboard"))]
pub(super) fn check_admin_token(token: &str) -> Result<(), ConfigError> {
    if token.chars().any(char::is_whitespace) {
        return Err(ConfigError(
            "ADMIN_TOKEN holds whitespace: set it again without spaces or line breaks".into(),
        ));
    }
    if token.len() < ADMIN_TOKEN_MIN_BYTES {
        return Err(ConfigError(format!(
            "ADMIN_TOKEN is shorter than {ADMIN_TOKEN_MIN_BYTES} bytes: make one with \
             `openssl rand -base64 32`"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(any(feature = "admin", feature = "dashboard"))]
    #[test]
    fn an_admin_token_is_long_and_has_no_whitespace() {
        assert!(check_admin_token(&"x".repeat(32)).is_ok());
        let short = check_admin_token(&"x".repeat(31)).unwrap_err();
        assert!(short.0.contains("shorter than 32 bytes"), "{short}");
        for spaced in [" x", "x\n", "a b"] {
            let token = format!("{}{spaced}", "y".repeat(40));
            let err = check_admin_token(&token).unwrap_err();
            assert!(
                err.0.contains("whitespace") && !err.0.contains('y'),
                "{err}"
            );
        }
    }

    #[test]
    fn jitter_keeps_half_and_spreads_the_rest() {
        assert_eq!(jitter(1_000, 0.0), 500);
        assert_eq!(jitter(1_000, 0.5), 750);
        assert_eq!(jitter(1_000, 0.999_999), 999);
        assert_eq!(jitter(1, 0.0), 0);
        let draws: Vec<i64> = (0..64).map(|_| jitter(1_000_000, random_unit())).collect();
        assert!(draws.iter().all(|d| (500_000..1_000_000).contains(d)));
        let mut distinct = draws.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert!(distinct.len() > 32, "not random: {draws:?}");
    }

    #[test]
    fn durations_take_a_unit() {
        assert_eq!(duration_ms("30d"), Some(30 * DAY_MS));
        assert_eq!(duration_ms(" 12h "), Some(12 * 60 * 60 * 1000));
        assert_eq!(duration_ms("15m"), Some(15 * 60 * 1000));
        assert_eq!(duration_ms("3s"), Some(3000));
        for bad in ["30", "d", "1.5d", "-1d", "30 days", "", "5w"] {
            assert_eq!(duration_ms(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_webhook_url_is_http_with_a_host() {
        for good in [
            "https://hooks.chat.example/services/T0/B0/x",
            "HTTPS://hooks.chat.example/services/T0/B0/x",
            "http://127.0.0.1:8080/hook",
            "https://user:pass@example.com/hook",
            "https://[::1]:8443/hook",
        ] {
            assert!(is_http_url(good), "{good}");
        }
        for bad in [
            "hooks.chat.example/services/x",
            "https:///x",
            "https://:443/x",
            "https://@/x",
            "https://user@/x",
            "ftp://host/x",
            "https://host/a b",
            "https://host/\u{7f}",
            "https://ho_st/x",
            "",
        ] {
            assert!(!is_http_url(bad), "{bad}");
        }
    }
}

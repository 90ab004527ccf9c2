//! The guard's policy, as pure code: how many failures a client may make,
//! what it is told, and who counts as one client.

/// How long failures count: a fixed window, so a refused client knows when
/// to come back (`Retry-After`).
pub const WINDOW_MS: i64 = 15 * 60 * 1000;
/// Failures one client may make in a window.
pub const CLIENT_FAILURES: i64 = 10;
/// Failures from all clients in a window past which each client may make
/// only [`PRESSED_CLIENT_FAILURES`].
pub const GLOBAL_FAILURES: i64 = 100;
/// Failures one client may make in a window once [`GLOBAL_FAILURES`] is
/// reached: a typo or two from an operator, not a campaign.
pub const PRESSED_CLIENT_FAILURES: i64 = 3;

/// What a credential check may answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The credential is right and the client is within its limit.
    Allowed,
    /// The credential is wrong; counted.
    Wrong,
    /// The client is past its limit: 429, whatever it presented.
    Refused { retry_after_secs: i64 },
}

impl Verdict {
    /// As the guard answers it: plain text (a tagged enum through serde
    /// would cost kilobytes of wasm for three words).
    pub(super) fn to_text(self) -> String {
        match self {
            Verdict::Allowed => "allowed".into(),
            Verdict::Wrong => "wrong".into(),
            Verdict::Refused { retry_after_secs } => format!("refused {retry_after_secs}"),
        }
    }

    #[cfg(any(feature = "admin", feature = "dashboard"))]
    pub(super) fn parse(text: &str) -> Option<Verdict> {
        match text.split_once(' ') {
            Some(("refused", secs)) => secs
                .parse()
                .ok()
                .map(|retry_after_secs| Verdict::Refused { retry_after_secs }),
            _ if text == "allowed" => Some(Verdict::Allowed),
            _ if text == "wrong" => Some(Verdict::Wrong),
            _ => None,
        }
    }
}

/// The verdict for a client with `failures` in this window (before this
/// attempt), under `pressed` (everyone's failures past [`GLOBAL_FAILURES`]),
/// presenting a credential that is `valid` or not; `window_left_ms` until
/// the window ends.
pub fn decide(failures: i64, pressed: bool, valid: bool, window_left_ms: i64) -> Verdict {
    let limit = if pressed {
        PRESSED_CLIENT_FAILURES
    } else {
        CLIENT_FAILURES
    };
    if failures >= limit {
        let retry_after_secs = (window_left_ms.max(0) + 999) / 1000;
        Verdict::Refused { retry_after_secs }
    } else if valid {
        Verdict::Allowed
    } else {
        Verdict::Wrong
    }
}

#[cfg(any(feature = "admin", feature = "dashboard"))]
/// Who is guessing: the connecting address, an IPv6 one by its /64 (one
/// machine commonly holds a whole /64, and could otherwise rotate through
/// it). `unknown` where the platform gave none, or something else (a local
/// test): a name is never longer than an address.
pub fn client_of(address: Option<&str>) -> String {
    match address.map(str::trim).map(str::parse::<std::net::IpAddr>) {
        Some(Ok(std::net::IpAddr::V4(v4))) => v4.to_string(),
        Some(Ok(std::net::IpAddr::V6(v6))) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => {
                let s = v6.segments();
                format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
            }
        },
        // Not an address: the platform always sends one, so this is a
        // local run, and every such request is one client.
        _ => "unknown".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_is_refused_past_its_own_failures_right_token_or_not() {
        assert_eq!(decide(0, false, true, 1_000), Verdict::Allowed);
        assert_eq!(
            decide(CLIENT_FAILURES - 1, false, false, 1_000),
            Verdict::Wrong
        );
        let refused = Verdict::Refused {
            retry_after_secs: 2,
        };
        assert_eq!(decide(CLIENT_FAILURES, false, false, 1_001), refused);
        assert_eq!(decide(CLIENT_FAILURES, false, true, 1_001), refused);
    }

    #[test]
    fn under_pressure_a_client_gets_fewer_failures_and_none_blocks_a_clean_one() {
        assert_eq!(decide(0, true, true, 1), Verdict::Allowed);
        assert_eq!(decide(0, true, false, 1), Verdict::Wrong);
        assert!(matches!(
            decide(PRESSED_CLIENT_FAILURES, true, true, 1),
            Verdict::Refused { .. }
        ));
        assert_eq!(
            decide(PRESSED_CLIENT_FAILURES, false, true, 1),
            Verdict::Allowed
        );
    }

    #[cfg(any(feature = "admin", feature = "dashboard"))]
    #[test]
    fn verdicts_travel_as_text() {
        for verdict in [
            Verdict::Allowed,
            Verdict::Wrong,
            Verdict::Refused {
                retry_after_secs: 42,
            },
        ] {
            assert_eq!(Verdict::parse(&verdict.to_text()), Some(verdict));
        }
        assert_eq!(Verdict::parse("refused soon"), None);
        assert_eq!(Verdict::parse(""), None);
    }

    #[cfg(any(feature = "admin", feature = "dashboard"))]
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
        assert_eq!(client_of(Some(&"x".repeat(10_000))), "unknown");
        assert_eq!(client_of(Some("fe80::1%eth0")), "unknown");
    }
}

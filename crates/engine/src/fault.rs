//! Faults the end-to-end tests inject to prove recovery: the
//! `x-test-fault` header names one, and it travels typed — to the inbox, in
//! its storage, to the queue consumer — in the same text form. Honoured only
//! when the worker runs with `TEST_FAULTS = "enabled"`; every deployment
//! ignores the header.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Fault {
    /// The first effect attempt fails before touching D1 (a crash between
    /// claim and effect).
    FailBeforeEffect,
    /// Every effect attempt fails before touching D1 (D1 down for good):
    /// the retry budget runs out.
    EffectAlwaysFails,
    /// Every D1 write of this inbox — effect and failure report — fails
    /// until this time (ms since the epoch): an outage that outlasts the
    /// retry budget, then ends.
    D1DownUntil(i64),
    /// The first effect attempt commits in D1, then fails before the inbox
    /// marks it done (a lost reply from D1).
    FailAfterEffect,
    /// The effect commits, then sending its outbox keys to the queue fails;
    /// the cron relay must send them.
    FailEnqueue,
    /// Passed on to the queue consumer: it performs a side effect, then
    /// "crashes" before marking it sent.
    CrashAfterCall,
    /// Passed on to the queue consumer: its first run pauses this long (ms)
    /// after the call, before recording the result — past its lease, so
    /// another run may take the row over meanwhile.
    PauseBeforeComplete(i64),
    /// Passed on to the queue consumer: a row it marks dead fails to reach
    /// the dead-letter queue; the cron relay must send its copy.
    FailDeadLetter,
    /// On an admin request: the admin guard object answers 500.
    GuardFails,
    /// On an admin request: the admin guard object answers only after 30 s,
    /// long past the worker's wait for it.
    GuardHangs,
    /// The claim fails: nothing is stored.
    FailClaim,
    /// The event is stored and its alarm armed, then the inbox's answer is
    /// lost (it errors before attempting the effect).
    LoseReply,
    /// Before the claim, the inbox is given the tables an older release
    /// left, holding this event, done (see `inbox::schema`): this delivery
    /// is a copy, which must find and upgrade them.
    OlderTables,
    /// The same, with the tables an upgrade interrupted half-way left: a
    /// new delivery log, and the older one renamed but not yet copied.
    InterruptedUpgrade,
    /// With `REPLY_AFTER = "record"`: the reply goes, then the instance
    /// stops before the effect, as a crash would; the alarm applies it.
    CrashAfterReply,
    /// The claim is stored, then arming its alarm fails (an error); the
    /// first attempt goes ahead all the same.
    FailSetAlarm,
    /// The claim is stored, then the inbox stops before arming its alarm,
    /// as a crash would: the event is held with no alarm until a copy
    /// arrives.
    CrashBeforeArming,
    /// Every effect attempt fails until this time (ms); the failure report
    /// commits, and its reply comes 3 s late, so a copy can reopen the
    /// event while the report is still awaited.
    ReportLate(i64),
    /// Every effect attempt fails until the first time (ms); the failure
    /// report commits, and its reply is lost (an error) until the second.
    ReportReplyLost(i64, i64),
    /// Every effect attempt fails until this time (ms); an operator's
    /// dismissal then commits in D1, and its reply is lost (an error).
    DismissReplyLost(i64),
    /// The event's effect also writes a test side effect, a chat message,
    /// so that a copy whose effects write none can prove its outbox.
    WithSideEffect,
    /// The event's effect also runs a statement bound with fewer values than
    /// its placeholders (an app's bug, refused before it is sent): every
    /// attempt is refused, and the event ends failed.
    BadStatement,
    /// With effects in Postgres: the event never copies its hand-off rows
    /// to D1 itself, so only those its queue messages carry reach D1
    /// before the relay, and a test can tell that they ride.
    NoHandOffCopy,
}

impl Fault {
    /// Parses the header's form (`d1-down-until:<ms>` carries its time).
    pub fn parse(name: &str) -> Option<Fault> {
        if let Some(until) = name.strip_prefix("d1-down-until:") {
            return until.parse().ok().map(Fault::D1DownUntil);
        }
        if let Some(ms) = name.strip_prefix("pause-before-complete:") {
            return ms.parse().ok().map(Fault::PauseBeforeComplete);
        }
        if let Some(until) = name.strip_prefix("report-late:") {
            return until.parse().ok().map(Fault::ReportLate);
        }
        if let Some(until) = name.strip_prefix("dismiss-reply-lost:") {
            return until.parse().ok().map(Fault::DismissReplyLost);
        }
        if let Some(times) = name.strip_prefix("report-reply-lost:") {
            let (effect, reply) = times.split_once(':')?;
            return Some(Fault::ReportReplyLost(
                effect.parse().ok()?,
                reply.parse().ok()?,
            ));
        }
        Some(match name {
            "fail-before-effect" => Fault::FailBeforeEffect,
            "effect-always-fails" => Fault::EffectAlwaysFails,
            "fail-after-effect" => Fault::FailAfterEffect,
            "fail-enqueue" => Fault::FailEnqueue,
            "crash-after-call" => Fault::CrashAfterCall,
            "fail-claim" => Fault::FailClaim,
            "guard-fails" => Fault::GuardFails,
            "guard-hangs" => Fault::GuardHangs,
            "fail-dead-letter" => Fault::FailDeadLetter,
            "lose-reply" => Fault::LoseReply,
            "older-tables" => Fault::OlderTables,
            "interrupted-upgrade" => Fault::InterruptedUpgrade,
            "fail-set-alarm" => Fault::FailSetAlarm,
            "crash-before-arming" => Fault::CrashBeforeArming,
            "crash-after-reply" => Fault::CrashAfterReply,
            "with-side-effect" => Fault::WithSideEffect,
            "bad-statement" => Fault::BadStatement,
            "no-handoff-copy" => Fault::NoHandOffCopy,
            _ => return None,
        })
    }

    pub fn name(self) -> String {
        match self {
            Fault::FailBeforeEffect => "fail-before-effect".into(),
            Fault::EffectAlwaysFails => "effect-always-fails".into(),
            Fault::D1DownUntil(until) => format!("d1-down-until:{until}"),
            Fault::FailAfterEffect => "fail-after-effect".into(),
            Fault::FailEnqueue => "fail-enqueue".into(),
            Fault::CrashAfterCall => "crash-after-call".into(),
            Fault::PauseBeforeComplete(ms) => format!("pause-before-complete:{ms}"),
            Fault::FailClaim => "fail-claim".into(),
            Fault::GuardFails => "guard-fails".into(),
            Fault::GuardHangs => "guard-hangs".into(),
            Fault::FailDeadLetter => "fail-dead-letter".into(),
            Fault::LoseReply => "lose-reply".into(),
            Fault::OlderTables => "older-tables".into(),
            Fault::InterruptedUpgrade => "interrupted-upgrade".into(),
            Fault::FailSetAlarm => "fail-set-alarm".into(),
            Fault::CrashBeforeArming => "crash-before-arming".into(),
            Fault::CrashAfterReply => "crash-after-reply".into(),
            Fault::ReportLate(until) => format!("report-late:{until}"),
            Fault::ReportReplyLost(effect, reply) => format!("report-reply-lost:{effect}:{reply}"),
            Fault::DismissReplyLost(until) => format!("dismiss-reply-lost:{until}"),
            Fault::WithSideEffect => "with-side-effect".into(),
            Fault::BadStatement => "bad-statement".into(),
            Fault::NoHandOffCopy => "no-handoff-copy".into(),
        }
    }

    /// Whether an effect writes the test side effect: asked for, or a fault
    /// that acts on side effects where the effect writes none of its own.
    pub fn wants_side_effect(fault: Option<Fault>, has_own: bool) -> bool {
        match fault {
            Some(Fault::WithSideEffect) => true,
            Some(
                Fault::CrashAfterCall
                | Fault::PauseBeforeComplete(_)
                | Fault::FailDeadLetter
                | Fault::FailEnqueue
                | Fault::FailAfterEffect,
            ) => !has_own,
            _ => false,
        }
    }

    /// The fault the queue consumer acts on, passed on with the keys.
    pub fn for_outbox(self) -> Option<Fault> {
        matches!(
            self,
            Fault::CrashAfterCall | Fault::PauseBeforeComplete(_) | Fault::FailDeadLetter
        )
        .then_some(self)
    }

    /// Whether the fault hits an attempt after `attempts` earlier ones: all
    /// of them for the lasting faults, only the first for the others.
    pub fn applies(self, attempts: i64) -> bool {
        let lasting = matches!(
            self,
            Fault::EffectAlwaysFails
                | Fault::D1DownUntil(_)
                | Fault::ReportLate(_)
                | Fault::ReportReplyLost(..)
                | Fault::DismissReplyLost(_)
                | Fault::WithSideEffect
        );
        lasting || attempts == 0
    }

    /// Whether an injected outage of the effect alone (not of the failure
    /// report) is going on at `now` (ms).
    pub fn effect_down(fault: Option<Fault>, now: i64) -> bool {
        matches!(
            fault,
            Some(
                Fault::ReportLate(until)
                    | Fault::ReportReplyLost(until, _)
                    | Fault::DismissReplyLost(until)
            ) if now < until
        )
    }

    /// Whether an injected D1 outage is going on at `now` (ms).
    pub fn d1_down(fault: Option<Fault>, now: i64) -> bool {
        matches!(fault, Some(Fault::D1DownUntil(until)) if now < until)
    }
}

impl TryFrom<String> for Fault {
    type Error = String;

    fn try_from(name: String) -> Result<Self, Self::Error> {
        Fault::parse(&name).ok_or_else(|| format!("unknown fault '{name}'"))
    }
}

impl From<Fault> for String {
    fn from(fault: Fault) -> Self {
        fault.name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fault_travels_as_its_header_name() {
        for fault in [
            Fault::FailBeforeEffect,
            Fault::EffectAlwaysFails,
            Fault::D1DownUntil(1_700_000_000_000),
            Fault::FailAfterEffect,
            Fault::FailEnqueue,
            Fault::CrashAfterCall,
            Fault::PauseBeforeComplete(2_500),
            Fault::FailClaim,
            Fault::FailDeadLetter,
            Fault::GuardFails,
            Fault::GuardHangs,
            Fault::LoseReply,
            Fault::OlderTables,
            Fault::InterruptedUpgrade,
            Fault::FailSetAlarm,
            Fault::CrashBeforeArming,
            Fault::CrashAfterReply,
            Fault::ReportLate(1_700_000_000_000),
            Fault::ReportReplyLost(1_700_000_000_000, 1_700_000_001_000),
            Fault::DismissReplyLost(1_700_000_000_000),
            Fault::WithSideEffect,
            Fault::BadStatement,
            Fault::NoHandOffCopy,
        ] {
            let json = serde_json::to_string(&fault).unwrap();
            assert_eq!(json, format!("\"{}\"", fault.name()));
            assert_eq!(serde_json::from_str::<Fault>(&json).unwrap(), fault);
            assert_eq!(Fault::parse(&fault.name()), Some(fault));
        }
        assert_eq!(Fault::parse("d1-down-until:soon"), None);
        assert!(serde_json::from_str::<Fault>("\"no-such-fault\"").is_err());
    }

    #[test]
    fn lasting_faults_hit_every_attempt_the_others_the_first() {
        assert!(Fault::FailBeforeEffect.applies(0));
        assert!(!Fault::FailBeforeEffect.applies(1));
        assert!(Fault::EffectAlwaysFails.applies(7));
        assert!(Fault::d1_down(Some(Fault::D1DownUntil(10)), 9));
        assert!(!Fault::d1_down(Some(Fault::D1DownUntil(10)), 10));
        assert!(Fault::effect_down(Some(Fault::ReportLate(10)), 9));
        assert!(!Fault::effect_down(
            Some(Fault::ReportReplyLost(10, 20)),
            10
        ));
        assert!(
            !Fault::d1_down(Some(Fault::ReportLate(10)), 9),
            "the report is written"
        );
    }
}

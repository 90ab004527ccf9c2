//! `AdminGuard`: the Durable Objects that stand between a guesser and the
//! admin token. One object per client counts that client's failures; one
//! object counts everyone's; one object per signed-out session remembers
//! it until it would have expired. Every count is exact: each decision is
//! synchronous SQL in its object, with no `.await` between reading a count
//! and writing it, however many guesses arrive at once. A client with the
//! right token and no failures touches only its own object: a flood from
//! other clients never stands in its way.
//!
//! The token is checked first, in the worker, in constant time; the guard
//! then decides what the answer may say. A client past its limit is
//! refused (429) whether or not its token was right, so it learns nothing
//! more. When failures pile up overall (many addresses guessing), each
//! client may fail [`policy::PRESSED_CLIENT_FAILURES`] times per window instead of
//! [`policy::CLIENT_FAILURES`]; a client learns of it at its next failure. Every
//! object deletes itself when its window, or its session, ends.
//!
//! Built into every build, with or without the admin surface:
//! `wrangler.toml` binds it, and one configuration deploys any feature set.

#[cfg(any(feature = "admin", feature = "dashboard"))]
mod client;
mod object;
pub mod policy;

#[cfg(any(feature = "admin", feature = "dashboard"))]
pub use self::client::attempt;
#[cfg(feature = "dashboard")]
pub use self::client::{revoke, revoked};
pub use self::object::AdminGuard;
#[cfg(any(feature = "admin", feature = "dashboard"))]
pub use self::policy::Verdict;

// The paths the client calls, one per thing an object does.
const ATTEMPT: &str = "/attempt";
const COUNT: &str = "/count";
const PRESSED: &str = "/pressed";
const REVOKE: &str = "/revoke";
const REVOKED: &str = "/revoked";

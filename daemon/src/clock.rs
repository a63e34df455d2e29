//! Wall-clock timestamps as RFC 3339 UTC strings (seconds precision), as specs and the ledger
//! record them. The only place the daemon reads the clock for recorded times; the text itself
//! is `domain::timestamp`'s. Deadlines (worker leases) are on the monotonic clock instead.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use crate::domain::timestamp::{format_rfc3339, month_of};

pub fn now_rfc3339() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    format_rfc3339(secs)
}

/// The moment `seconds` from now on the monotonic clock, which a wall clock set forward or back
/// never moves (a lease's end). Capped at a week, the longest lease, so it never overflows.
pub fn deadline_in(seconds: u64) -> Instant {
    Instant::now() + Duration::from_secs(seconds.min(scafld_protocol::methods::MAX_LEASE_SECONDS))
}

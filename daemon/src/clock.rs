//! Wall-clock timestamps as RFC 3339 UTC strings (seconds precision), as specs and the ledger
//! record them. The only place the daemon reads the clock for recorded times; the text itself
//! is `domain::timestamp`'s.

use std::time::{SystemTime, UNIX_EPOCH};

pub use crate::domain::timestamp::{format_rfc3339, month_of};

pub fn now_rfc3339() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    format_rfc3339(secs)
}

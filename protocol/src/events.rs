//! Notifications pushed to `events.subscribe` subscribers.

use serde::{Deserialize, Serialize};

/// One event. Tagged by `kind`; clients ignore kinds they do not know.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    /// A workspace was registered with the daemon (or re-registered from a new path).
    WorkspaceOpened { workspace_id: String, root: String },
    /// The daemon stopped accepting work; this is the last event a subscriber receives.
    DaemonShuttingDown { reason: String },
    /// The subscriber read too slowly and `missed` events were dropped; re-read state.
    EventsLagged { missed: u64 },
}

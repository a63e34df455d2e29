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
    /// A task's spec was created, changed, moved or removed (or, its file gone, the task was
    /// closed in its ledger). `cause` is `command:<name>` when a scafld command did it and
    /// `hand_edit` when the watcher saw someone else do it; `status` is the ledger's when the
    /// task has a ledger, else the spec's, and empty when neither says (a removed or
    /// unparsable spec without a ledger).
    TaskChanged { workspace_id: String, root: String, task_id: String, status: String, cause: String },
    /// A job changed state (queued, running, succeeded, failed, timed_out, cancelled, abandoned).
    JobChanged { job_id: String, task_id: String, state: crate::vocab::JobState },
    /// A review session moved: `what` is queued, claimed, heartbeat_stale, requeued,
    /// checkpoint, verdict, resolved, awaiting_approval or decided.
    Review { session_key: String, task_id: String, job_id: String, what: String, detail: String },
    /// The subscriber read too slowly and `missed` events were dropped; re-read state.
    EventsLagged { missed: u64 },
}

//! Specs whose next step could not be written again when it changed (`ledger::reshow_next`
//! failed: after a review whose verdict a full state disk kept out of the ledger, the database
//! cannot be read until there is room): kept here and written on the daemon's tick once that
//! is possible, so the spec's `Allowed follow-up command` catches up with `status` without a
//! `reconcile`. In memory: a daemon started again settles such a review afresh.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::daemon::Daemon;
use crate::workspace::Workspace;

/// How often the specs still to write are tried again.
const RETRY_EVERY: Duration = Duration::from_secs(1);

/// One task whose spec is still to be brought up to date.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Task {
    /// The folder its workspace was open at, and its id (`Daemon::workspace_of` finds it
    /// there, or where it moved).
    root: PathBuf,
    workspace_id: String,
    task: String,
    /// The cause its write announces (`task_changed`): that of the write that failed.
    cause: &'static str,
}

/// The tasks whose spec's next step is still to be written.
#[derive(Debug, Default)]
pub struct Unshown {
    tasks: Mutex<HashSet<Task>>,
}

impl Unshown {
    /// Keep `task` of `ws` to be written again on the next tick, its write announced as
    /// `cause`.
    pub fn mark(&self, ws: &Workspace, task: &str, cause: &'static str) {
        let task = Task { root: ws.root.clone(), workspace_id: ws.id.clone(), task: task.to_string(), cause };
        crate::sync::lock(&self.tasks).insert(task);
    }

    fn pending(&self) -> Vec<Task> {
        crate::sync::lock(&self.tasks).iter().cloned().collect()
    }

    fn done(&self, task: &Task) {
        crate::sync::lock(&self.tasks).remove(task);
    }
}

/// Try the specs still to write every [`RETRY_EVERY`] until shutdown.
pub async fn retry_loop(daemon: Arc<Daemon>) {
    let stop = daemon.shutdown_token().clone();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(RETRY_EVERY) => retry(&daemon),
        }
    }
}

/// Write each pending task's next step again (`ledger::reshow_next`, which writes only when the
/// spec shows another step than `status`): done once it succeeds, or when its workspace is no
/// longer found; kept while it fails or a command or job holds the task (whose own write
/// projects the ledger anyway, and the next tick looks again).
fn retry(daemon: &Daemon) {
    for pending in daemon.unshown.pending() {
        let ws = match daemon.workspace_of_now(&pending.root.to_string_lossy(), &pending.workspace_id) {
            Ok(ws) if ws.id == pending.workspace_id => ws,
            _ => {
                daemon.unshown.done(&pending);
                continue;
            }
        };
        if daemon.jobs.active_for(&ws, &pending.task).is_some() {
            continue;
        }
        let lock = daemon.jobs.task_lock(&ws, &pending.task);
        let Ok(_held) = lock.try_lock() else { continue };
        match crate::ledger::reshow_next(daemon, &ws, &pending.task, pending.cause) {
            Ok(_) => daemon.unshown.done(&pending),
            Err(e) => tracing::debug!(task = %pending.task, "the spec's next step is still not written: {e}"),
        }
    }
}

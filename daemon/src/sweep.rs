//! The retention sweep: forget finished jobs and settled review sessions older than the
//! daemon's retention period (store, memory, and a session's `.scafld/reviews/<key>/` folder),
//! and remove diagnostics files older than it.
//! Runs at start-up (before the socket serves) and then hourly. Which records go is decided in `domain::retention`.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tracing::{info, warn};

use crate::clock;
use crate::daemon::Daemon;
use crate::domain::job::SessionRecord;
use crate::domain::retention::{self, Prune};

const SWEEP_EVERY: Duration = Duration::from_secs(3600);

/// Sweep every hour until shutdown (the start-up sweep is `run`'s).
pub async fn sweep_loop(daemon: Arc<Daemon>) {
    let stop = daemon.shutdown_token().clone();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(SWEEP_EVERY) => sweep(&daemon),
        };
    }
}

/// One sweep; returns what was forgotten.
pub fn sweep(daemon: &Daemon) -> Prune {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let cutoff = clock::format_rfc3339(now.saturating_sub(daemon.options.retention.as_secs()));
    let sessions = daemon.sessions.all();
    let prune = retention::prunable(&daemon.jobs.all(), &sessions, &cutoff);
    let oldest_kept = SystemTime::now().checked_sub(daemon.options.retention).unwrap_or(UNIX_EPOCH);
    for record in daemon.store().workspaces().unwrap_or_default() {
        let removed = sweep_diagnostics(Path::new(&record.root), oldest_kept);
        if removed > 0 {
            info!(workspace = %record.id, removed, "retention sweep: removed old diagnostics files");
        }
    }
    if prune.is_empty() {
        return prune;
    }
    if let Err(e) = daemon.store().forget(&prune.jobs, &prune.sessions) {
        warn!("retention sweep: cannot delete old records: {e}");
        return Prune::default();
    }
    daemon.jobs.forget(&prune.jobs);
    daemon.sessions.forget(&prune.sessions);
    for session in sessions.iter().filter(|s| prune.sessions.contains(&s.key)) {
        if !SessionRecord::is_plain_key(&session.key) {
            continue;
        }
        // The session's own folder (in the workspace, or in the state dir for a repository
        // reviewed without `scafld init`): the packet's, and only if it is named by the key.
        let Some(folder) = Path::new(&session.packet_path)
            .parent()
            .filter(|f| f.file_name().is_some_and(|n| n == session.key.as_str()))
            .map(Path::to_path_buf)
        else {
            continue;
        };
        if let Err(e) = std::fs::remove_dir_all(&folder)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            warn!(session = %session.key, "retention sweep: cannot remove {}: {e}", folder.display());
        }
    }
    info!(
        jobs = prune.jobs.len(),
        sessions = prune.sessions.len(),
        "retention sweep: forgot records finished before {cutoff}"
    );
    prune
}

/// Remove the diagnostics files (command output kept for debugging, under
/// `.scafld/runs/<task>/diagnostics/`) last written before `oldest_kept`. Only regular files
/// in real directories: a symlink anywhere on the way is left alone. Returns how many went.
fn sweep_diagnostics(root: &Path, oldest_kept: SystemTime) -> usize {
    let is_dir = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir());
    let runs = root.join(".scafld/runs");
    if !is_dir(&root.join(".scafld")) || !is_dir(&runs) {
        return 0;
    }
    let mut removed = 0;
    for task in std::fs::read_dir(&runs).into_iter().flatten().flatten() {
        let dir = task.path().join("diagnostics");
        if !is_dir(&task.path()) || !is_dir(&dir) {
            continue;
        }
        for file in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let old = std::fs::symlink_metadata(file.path())
                .is_ok_and(|m| m.is_file() && m.modified().is_ok_and(|t| t < oldest_kept));
            if old && std::fs::remove_file(file.path()).is_ok() {
                removed += 1;
            }
        }
    }
    removed
}

//! The retention sweep: forget finished jobs and settled review sessions older than the
//! daemon's retention period (store, memory, and a session's `.scafld/reviews/<key>/` folder).
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
        let folder = Path::new(&session.root).join(".scafld/reviews").join(&session.key);
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

//! The retention sweep: forget finished jobs and settled review sessions older than the
//! daemon's retention period (store, memory, and a session's `.scafld/reviews/<key>/` folder),
//! and remove diagnostics files older than it. Runs at start-up (before the socket serves) and
//! then hourly; the temporary files of atomic writes a crash cut short go soon after start-up
//! and then hourly. Which records go is decided in `domain::retention`.

use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tracing::{info, warn};

use crate::clock;
use crate::daemon::Daemon;
use crate::domain::job::SessionRecord;
use crate::domain::retention::{self, Prune};

const SWEEP_EVERY: Duration = Duration::from_secs(3600);
/// An atomic write's temporary file lives for milliseconds; one this old was left behind.
const LEFTOVER_AGE: Duration = Duration::from_secs(60);

/// Sweep every hour until shutdown (the start-up sweep is `run`'s); the temporary files of
/// interrupted writes go at once (in the background: a folder of thousands of specs is read)
/// and then hourly.
pub async fn sweep_loop(daemon: Arc<Daemon>) {
    let stop = daemon.shutdown_token().clone();
    loop {
        let workspaces = daemon.store().workspaces().unwrap_or_default();
        let _ = tokio::task::spawn_blocking(move || {
            let before = SystemTime::now().checked_sub(LEFTOVER_AGE).unwrap_or(UNIX_EPOCH);
            for record in workspaces {
                let removed = sweep_write_leftovers(Path::new(&record.root), before);
                if removed > 0 {
                    info!(workspace = %record.id, removed, "removed interrupted writes' temporary files");
                }
            }
        })
        .await;
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

/// Remove the temporary files that atomic writes killed before their rename left behind
/// (`specfile::is_write_leftover`) in the folders they write to, when last written before
/// `before`. Regular files only, in real folders: nothing is followed through a symlink.
fn sweep_write_leftovers(root: &Path, before: SystemTime) -> usize {
    let leftover = |name: &OsStr| name.to_str().is_some_and(crate::workspace::specfile::is_write_leftover);
    let dirs = crate::workspace::specfile::write_dirs(root).into_iter().filter(|d| real_folder(root, d));
    dirs.map(|dir| remove_old_files(&dir, leftover, before)).sum()
}

/// Remove the diagnostics files (command output kept for debugging, under
/// `.scafld/runs/<task>/diagnostics/`) last written before `oldest_kept`. Only regular files
/// in real directories: a symlink anywhere on the way is left alone. Returns how many went.
fn sweep_diagnostics(root: &Path, oldest_kept: SystemTime) -> usize {
    let runs = root.join(".scafld/runs");
    if !real_folder(root, &runs) {
        return 0;
    }
    let tasks = std::fs::read_dir(&runs).into_iter().flatten().flatten();
    let dirs = tasks.map(|task| task.path().join("diagnostics")).filter(|dir| real_folder(root, dir));
    dirs.map(|dir| remove_old_files(&dir, |_| true, oldest_kept)).sum()
}

/// Whether `dir` (below `root`) is a folder reached without a symlink on the way.
fn real_folder(root: &Path, dir: &Path) -> bool {
    let mut at = root.to_path_buf();
    dir.strip_prefix(root).is_ok_and(|below| {
        below.components().all(|part| {
            at.push(part);
            std::fs::symlink_metadata(&at).is_ok_and(|m| m.is_dir())
        })
    })
}

/// Remove the regular files of `dir` whose names `matches` accepts and that were last written
/// before `before`; returns how many went.
fn remove_old_files(dir: &Path, matches: impl Fn(&OsStr) -> bool, before: SystemTime) -> usize {
    let old = |path: &Path| {
        std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file() && m.modified().is_ok_and(|t| t < before))
    };
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|file| matches(&file.file_name()))
        .filter(|file| old(&file.path()) && std::fs::remove_file(file.path()).is_ok())
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only an atomic write's temporary file, old enough to be sure its writer is gone, in a
    /// folder atomic writes go to, reached without a symlink, is removed.
    #[test]
    fn interrupted_writes_leave_nothing_behind_for_long() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("w");
        let elsewhere = dir.path().join("elsewhere");
        for d in [".scafld/specs/active", ".scafld/specs/archive/2026-05", ".scafld/receipts", ".scafld/runs/t"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, root.join(".scafld/specs/drafts")).unwrap();
        let hour_ago = SystemTime::now() - Duration::from_secs(3600);
        let file = |path: &Path, old: bool| {
            std::fs::write(path, "x").unwrap();
            if old {
                std::fs::File::options().write(true).open(path).unwrap().set_modified(hour_ago).unwrap();
            }
        };
        let gone = [
            root.join(".scafld/specs/active/.t.md.tmp-123-0"),
            root.join(".scafld/specs/archive/2026-05/.t.md.tmp-9-12"),
            root.join(".scafld/receipts/.latest.json.tmp-5-1"),
            root.join(".AGENTS.md.tmp-77-3"),
        ];
        let kept = [
            root.join(".scafld/specs/active/.t.md.tmp-123-0x"),
            root.join(".scafld/specs/active/t.md.tmp-1-2"),
            root.join(".scafld/specs/active/.notes.md"),
            root.join(".scafld/runs/t/.out.tmp-1-2"),
            elsewhere.join(".t.md.tmp-1-2"),
        ];
        gone.iter().chain(&kept).for_each(|p| file(p, true));
        let fresh = root.join(".scafld/specs/active/.u.md.tmp-123-1");
        file(&fresh, false);

        let before = SystemTime::now() - LEFTOVER_AGE;
        assert_eq!(sweep_write_leftovers(&root, before), gone.len());
        assert!(gone.iter().all(|p| !p.exists()));
        assert!(kept.iter().chain([&fresh]).all(|p| p.exists()), "only old leftovers go");
    }
}

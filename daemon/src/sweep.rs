//! The retention sweep: forget finished jobs and settled review sessions older than the
//! daemon's retention period (store, memory, and a session's `.scafld/reviews/<key>/` folder),
//! and remove diagnostics files older than it that no current evidence of an open task cites. Runs at start-up (the records
//! before the socket serves; the diagnostics files, which takes reading every ledger, in the
//! background once it serves) and then hourly; the temporary files of atomic writes a crash cut short go soon after start-up
//! and then hourly. Which records go is decided in `domain::retention`.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
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
    // The start-up sweep's diagnostics files (its records went before the socket served).
    let first = daemon.clone();
    let _ = tokio::task::spawn_blocking(move || sweep_diagnostics_files(&first)).await;
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

/// One sweep: the records (see [`sweep_records`]), then the diagnostics files (see
/// [`sweep_diagnostics_files`]); returns what was forgotten.
pub fn sweep(daemon: &Daemon) -> Prune {
    let prune = sweep_records(daemon);
    sweep_diagnostics_files(daemon);
    prune
}

/// Remove the diagnostics files older than the retention period that no current evidence
/// cites, in every registered workspace. It reads every task's ledger and lists every run
/// folder, which grows with the history: at start-up it runs in the background, never before
/// the first call is answered.
pub fn sweep_diagnostics_files(daemon: &Daemon) {
    let oldest_kept = SystemTime::now().checked_sub(daemon.options.retention).unwrap_or(UNIX_EPOCH);
    for record in daemon.store().workspaces().unwrap_or_default() {
        if daemon.shutdown_token().is_cancelled() {
            return;
        }
        let root = Path::new(&record.root);
        let mut cited = HashSet::new();
        let read = daemon.store().each_ledger(&record.id, &mut |_, entries| {
            cited.extend(retention::cited_diagnostics(entries).into_iter().map(|file| root.join(file)));
        });
        if let Err(e) = read {
            // Without the ledgers, which files current evidence cites is not known: none goes.
            warn!(workspace = %record.id, "retention sweep: cannot read the ledgers, diagnostics kept: {e}");
            continue;
        }
        let removed = sweep_diagnostics(root, oldest_kept, &cited);
        if removed > 0 {
            info!(workspace = %record.id, removed, "retention sweep: removed old diagnostics files");
        }
    }
}

/// Forget the finished jobs and settled review sessions older than the retention period
/// (store, memory, a session's packet folder): read from memory, so cheap enough to run
/// before the socket serves. Returns what was forgotten.
pub fn sweep_records(daemon: &Daemon) -> Prune {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let cutoff = clock::format_rfc3339(now.saturating_sub(daemon.options.retention.as_secs()));
    let sessions = daemon.sessions.all();
    let prune = retention::prunable(&daemon.jobs.summaries(), &sessions, &cutoff);
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
/// (`specfile::write_leftover_pid`) in the folders they write to: at once when the process
/// that wrote one (named in it) is gone, as after a crash; else once last written before
/// `before` (its pid may have been reused). Regular files only, in real folders: nothing is
/// followed through a symlink.
fn sweep_write_leftovers(root: &Path, before: SystemTime) -> usize {
    let own = std::process::id();
    let leftover = |name: &OsStr, modified: SystemTime| {
        let writer = name.to_str().and_then(crate::workspace::specfile::write_leftover_pid);
        writer.is_some_and(|pid| modified < before || (pid != own && !running(pid)))
    };
    let dirs = crate::workspace::specfile::write_dirs(root).into_iter().filter(|d| real_folder(root, d));
    dirs.map(|dir| remove_files(&dir, leftover)).sum()
}

/// Whether a process `pid` runs (one of another user's counts too). A zombie does not: a
/// killed daemon whose parent never reaps it (an init that does not) is one for good.
fn running(pid: u32) -> bool {
    use nix::errno::Errno;
    let Ok(pid) = i32::try_from(pid) else { return false };
    if pid <= 0 || nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) == Err(Errno::ESRCH) {
        return false;
    }
    !matches!(scafld_local::reaper::process_state(pid), Some('Z' | 'X'))
}

/// Remove the diagnostics files (command output kept for debugging, under
/// `.scafld/runs/<task>/diagnostics/`) last written before `oldest_kept`, except the `cited`
/// ones (the record of an open task's current evidence). Only regular files in real
/// directories: a symlink anywhere on the way is left alone. Returns how many went.
fn sweep_diagnostics(root: &Path, oldest_kept: SystemTime, cited: &HashSet<PathBuf>) -> usize {
    let runs = root.join(".scafld/runs");
    if !real_folder(root, &runs) {
        return 0;
    }
    let tasks = std::fs::read_dir(&runs).into_iter().flatten().flatten();
    let dirs = tasks.map(|task| task.path().join("diagnostics")).filter(|dir| real_folder(root, dir));
    dirs.map(|dir| remove_files(&dir, |name, modified| modified < oldest_kept && !cited.contains(&dir.join(name))))
        .sum()
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

/// Remove the regular files of `dir` that `removable` accepts, given each one's name and
/// when it was last written; returns how many went.
fn remove_files(dir: &Path, removable: impl Fn(&OsStr, SystemTime) -> bool) -> usize {
    let accepted = |file: &std::fs::DirEntry| {
        let meta = std::fs::symlink_metadata(file.path());
        meta.is_ok_and(|m| m.is_file() && m.modified().is_ok_and(|t| removable(&file.file_name(), t)))
    };
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|file| accepted(file) && std::fs::remove_file(file.path()).is_ok())
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only an atomic write's temporary file whose writer is gone (old enough to be sure, or
    /// its process not running), in a folder atomic writes go to, reached without a symlink,
    /// is removed.
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
        // Fresh: one of a writer still running (this process) stays; one whose writer is
        // gone (a crashed daemon) goes at once.
        let fresh = root.join(format!(".scafld/specs/active/.u.md.tmp-{}-1", std::process::id()));
        file(&fresh, false);
        let mut exited = std::process::Command::new("true").spawn().unwrap();
        let dead = exited.id();
        exited.wait().unwrap();
        let crashed = root.join(format!(".scafld/specs/active/.v.md.tmp-{dead}-4"));
        file(&crashed, false);
        // A writer killed and never reaped (a zombie, as under an init that does not reap).
        let mut zombie = std::process::Command::new("true").spawn().unwrap();
        let unreaped = root.join(format!(".scafld/specs/active/.w.md.tmp-{}-5", zombie.id()));
        file(&unreaped, false);
        let exited = |pid: u32| scafld_local::reaper::process_state(pid as i32) == Some('Z');
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !exited(zombie.id()) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }

        let before = SystemTime::now() - LEFTOVER_AGE;
        assert_eq!(sweep_write_leftovers(&root, before), gone.len() + 2);
        assert!(gone.iter().chain([&crashed, &unreaped]).all(|p| !p.exists()));
        zombie.wait().unwrap();
        assert!(kept.iter().chain([&fresh]).all(|p| p.exists()), "only old leftovers and a dead writer's go");
    }
}

//! Workspace snapshots with git2: HEAD and every dirty or untracked path with a fingerprint of
//! its content. Approval records one as the baseline; review compares later ones against it.

use std::path::Path;

use git2::{Repository, Status, StatusOptions};
use sha2::{Digest, Sha256};

use crate::domain::ledger::BaselinePath;

pub struct Snapshot {
    pub head: Option<String>,
    pub paths: Vec<BaselinePath>,
}

/// Snapshot the git repository containing `root`. Paths under `.scafld/runs/` are left out
/// (the runner writes there).
pub fn snapshot(root: &Path) -> Result<Snapshot, String> {
    let repo = Repository::discover(root).map_err(|e| {
        format!(
            "{} is not inside a git repository ({}); scafld records a git baseline at approval, run `git init` first",
            root.display(),
            e.message()
        )
    })?;
    let workdir = repo.workdir().ok_or("the git repository is bare")?.to_path_buf();
    let head = repo.head().ok().and_then(|h| h.peel_to_commit().ok()).map(|c| c.id().to_string());
    let mut options = StatusOptions::new();
    options.include_untracked(true).recurse_untracked_dirs(true).include_ignored(false);
    let statuses = repo.statuses(Some(&mut options)).map_err(|e| format!("git status failed: {}", e.message()))?;
    let mut paths = Vec::new();
    for entry in statuses.iter() {
        let Ok(path) = entry.path() else { continue };
        if path.starts_with(".scafld/runs/") {
            continue;
        }
        let status = entry.status();
        let fingerprint = fingerprint(&workdir.join(path));
        paths.push(BaselinePath { status: porcelain(status), fingerprint, path: path.to_string() });
    }
    paths.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(Snapshot { head, paths })
}

/// sha256 of the file's bytes, `deleted` when it is gone, `unreadable` when it cannot be read.
fn fingerprint(path: &Path) -> String {
    match std::fs::read(path) {
        Ok(bytes) => format!("{:x}", Sha256::digest(&bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "deleted".into(),
        Err(_) => "unreadable".into(),
    }
}

/// The two-letter `git status --porcelain` code.
fn porcelain(s: Status) -> String {
    if s.contains(Status::WT_NEW) && !s.intersects(Status::INDEX_NEW) {
        return "??".into();
    }
    let index = if s.contains(Status::INDEX_NEW) {
        'A'
    } else if s.contains(Status::INDEX_MODIFIED) {
        'M'
    } else if s.contains(Status::INDEX_DELETED) {
        'D'
    } else if s.contains(Status::INDEX_RENAMED) {
        'R'
    } else if s.contains(Status::INDEX_TYPECHANGE) {
        'T'
    } else {
        ' '
    };
    let worktree = if s.contains(Status::WT_MODIFIED) {
        'M'
    } else if s.contains(Status::WT_DELETED) {
        'D'
    } else if s.contains(Status::WT_RENAMED) {
        'R'
    } else if s.contains(Status::WT_TYPECHANGE) {
        'T'
    } else if s.contains(Status::WT_NEW) {
        '?'
    } else {
        ' '
    };
    format!("{index}{worktree}")
}

/// A unified diff of `paths` against HEAD (untracked files shown whole). Empty when there is
/// nothing to show.
pub fn diff(root: &Path, paths: &[String]) -> Result<String, String> {
    if paths.is_empty() {
        return Ok(String::new());
    }
    let repo = Repository::discover(root).map_err(|e| e.message().to_string())?;
    let head_tree = repo.head().ok().and_then(|h| h.peel_to_tree().ok());
    let mut options = git2::DiffOptions::new();
    options
        .include_untracked(true)
        .recurse_untracked_dirs(true)
        .show_untracked_content(true)
        .disable_pathspec_match(true);
    for path in paths {
        options.pathspec(path);
    }
    let diff = repo
        .diff_tree_to_workdir_with_index(head_tree.as_ref(), Some(&mut options))
        .map_err(|e| format!("git diff failed: {}", e.message()))?;
    patch(&diff)
}

/// The changed paths and patch of a commit range `BASE..HEAD` (the head's tree against the
/// base's). Either side may be any revision git understands.
pub fn range_diff(root: &Path, range: &str) -> Result<(Vec<String>, String), String> {
    let (base, head) = range
        .split_once("..")
        .filter(|(b, h)| !b.is_empty() && !h.is_empty() && !h.starts_with('.'))
        .ok_or_else(|| format!("{range:?} is not a BASE..HEAD range"))?;
    let repo = Repository::discover(root).map_err(|e| e.message().to_string())?;
    let tree = |rev: &str| {
        repo.revparse_single(rev)
            .and_then(|o| o.peel_to_tree())
            .map_err(|e| format!("unknown revision {rev:?}: {}", e.message()))
    };
    let (base_tree, head_tree) = (tree(base)?, tree(head)?);
    let diff = repo
        .diff_tree_to_tree(Some(&base_tree), Some(&head_tree), None)
        .map_err(|e| format!("git diff failed: {}", e.message()))?;
    let mut paths: Vec<String> = diff
        .deltas()
        .filter_map(|d| d.new_file().path().or_else(|| d.old_file().path()).map(|p| p.display().to_string()))
        .collect();
    paths.dedup();
    Ok((paths, patch(&diff)?))
}

/// A diff as unified patch text.
fn patch(diff: &git2::Diff<'_>) -> Result<String, String> {
    let mut text = String::new();
    diff.print(git2::DiffFormat::Patch, |_, _, line| {
        if matches!(line.origin(), '+' | '-' | ' ') {
            text.push(line.origin());
        }
        text.push_str(&String::from_utf8_lossy(line.content()));
        true
    })
    .map_err(|e| format!("git diff failed: {}", e.message()))?;
    Ok(text)
}

//! The toolchain files of a workspace (`.tool-versions`, `.nvmrc`, ...: in its root or a folder
//! one below) whose shim folders an acceptance command's PATH gets. Found by a stat per name
//! and folder, which a real repository's top-level folders multiply (nine names each), so the
//! last scan is kept and used again while nothing it looked at can have changed.

use std::path::{Path, PathBuf};

use crate::domain::acceptance;
use crate::workspace::index::Stamp;

/// Folders one below the root that are never looked in.
const SKIPPED: [&str; 3] = [".git", "node_modules", "target"];

/// One scan: the names found, and what must be unchanged for them to stand.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    pub found: Vec<String>,
    /// The root and every folder looked in (a file made or removed in one changes its stamp;
    /// a folder made or removed in the root changes the root's), and every file found (a
    /// `.tool-versions` counts only while it is not empty).
    watched: Vec<(PathBuf, Option<Stamp>)>,
}

impl Scan {
    /// Whether this scan still stands: everything it watched has the stamp it had, and had it
    /// for long enough that a later change cannot share it.
    pub fn stands(&self) -> bool {
        !self.watched.is_empty()
            && self.watched.iter().all(|(path, stamp)| stamp.is_some_and(|s| s.settled()) && Stamp::of(path) == *stamp)
    }
}

/// Scan `root` for toolchain files (see the module's doc).
pub fn scan(root: &Path) -> Scan {
    let names: Vec<&str> = acceptance::SHIM_FILES.iter().map(|(f, _)| *f).chain([".mise.toml"]).collect();
    // The root's stamp is taken before it is listed, each folder's before it is looked in: a
    // change made during the scan leaves a stamp that no longer matches.
    let mut watched = vec![(root.to_path_buf(), Stamp::of(root))];
    let mut dirs = vec![root.to_path_buf()];
    if let Ok(entries) = std::fs::read_dir(root) {
        dirs.extend(
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir() && !p.file_name().is_some_and(|n| SKIPPED.iter().any(|s| n == *s))),
        );
    }
    let mut found = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        if i > 0 {
            watched.push((dir.clone(), Stamp::of(dir)));
        }
        for name in &names {
            let path = dir.join(name);
            let Ok(meta) = std::fs::metadata(&path) else { continue };
            let non_empty =
                meta.is_file() && (meta.len() > 0 || !matches!(*name, ".tool-versions" | "mise.toml" | ".mise.toml"));
            if meta.is_file() {
                watched.push((path, Some(Stamp::from(&meta))));
            }
            if non_empty && !found.iter().any(|f: &String| f == name) {
                found.push(name.to_string());
            }
        }
    }
    Scan { found, watched }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ages what `root` holds (two levels) by an hour, as a checkout's files are: only a settled
    /// stamp is trusted.
    fn settle(root: &Path) {
        let an_hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        let age = |path: &Path| {
            let file = std::fs::File::open(path).unwrap();
            file.set_times(std::fs::FileTimes::new().set_modified(an_hour_ago)).unwrap();
        };
        for entry in std::fs::read_dir(root).unwrap().flatten() {
            if entry.path().is_dir() {
                std::fs::read_dir(entry.path()).unwrap().flatten().for_each(|e| age(&e.path()));
            }
            age(&entry.path());
        }
        age(root);
    }

    #[test]
    fn a_kept_scan_stands_until_a_toolchain_file_or_folder_changes() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("web")).unwrap();
        std::fs::write(root.join("web/.tool-versions"), "").unwrap();
        settle(root);
        let kept = scan(root);
        assert!(kept.found.is_empty(), "an empty .tool-versions names no shims");
        assert!(kept.stands());
        // A file filled in place changes no folder's stamp: its own is watched.
        std::fs::write(root.join("web/.tool-versions"), "nodejs 20\n").unwrap();
        assert!(!kept.stands());
        assert_eq!(scan(root).found, [".tool-versions"]);
        // A file made in a folder, and a folder made in the root, change their folder's stamp.
        settle(root);
        let kept = scan(root);
        assert!(kept.stands());
        std::fs::write(root.join("web/.nvmrc"), "20\n").unwrap();
        assert!(!kept.stands());
        settle(root);
        let kept = scan(root);
        assert_eq!(kept.found, [".nvmrc", ".tool-versions"]);
        std::fs::create_dir(root.join("api")).unwrap();
        assert!(!kept.stands());
        // A change younger than the clock's tick could share a stamp: not trusted.
        assert!(!scan(root).stands());
    }
}

//! The mark an orderly close leaves beside the database: its files as sled left them once
//! closed. A start that finds every file just so opens it without the pristine copy first.
//!
//! The copy exists because sled repairs a damaged log in place as it opens (it cuts the log
//! short at the first bad message), and what a crash, a kill or a full disk leaves half written
//! must be kept as it was for `scafldd --recover`. A database closed whole and not written
//! since holds nothing half written. Each file's inode, size, modification and change times
//! are compared; the change time is set by the kernel on every write, rename or restore, never
//! by a user, so a file that matches is one nobody wrote to since the close. Damage the disk
//! does on its own to a file nobody wrote (a bad sector) is not what the copy was for; sled
//! still finds it by its checksums and the start still refuses the database.
//!
//! The mark also holds the digest of the manifest the close saved, after the last write: a
//! start that finds the same manifest beside files nobody wrote takes its ledger heads and
//! digests as they are rather than walking every ledger entry to find them again (the walk was
//! most of a start on a long history). A record the disk damaged since is then found when it
//! is read, by sled's checksum, and that call fails; a start after a crash walks them all.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Where the mark of the database in `dir` is kept: beside it, never inside it (sled owns
/// its folder).
fn path_for(dir: &Path) -> PathBuf {
    dir.with_file_name(format!("{}.closed", super::dir_name(dir)))
}

/// Each file under `dir` by its path relative to it: inode, size, modification and change
/// times (seconds and nanoseconds). Folders are walked, not listed themselves.
fn files(dir: &Path) -> std::io::Result<BTreeMap<String, [i64; 6]>> {
    fn walk(dir: &Path, at: &str, into: &mut BTreeMap<String, [i64; 6]>) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let meta = std::fs::symlink_metadata(entry.path())?;
            let relative = format!("{at}{name}");
            if meta.is_dir() {
                walk(&entry.path(), &format!("{relative}/"), into)?;
            } else {
                let shape = [
                    meta.ino() as i64,
                    meta.len() as i64,
                    meta.mtime(),
                    meta.mtime_nsec(),
                    meta.ctime(),
                    meta.ctime_nsec(),
                ];
                into.insert(relative, shape);
            }
        }
        Ok(())
    }
    let mut found = BTreeMap::new();
    walk(dir, "", &mut found)?;
    Ok(found)
}

/// What a mark records: each file's shape, and the digest of the manifest saved at the close.
#[derive(Serialize, Deserialize)]
struct Mark {
    files: BTreeMap<String, [i64; 6]>,
    manifest: String,
}

/// A database as the last orderly close left it.
#[derive(Debug, PartialEq, Eq)]
pub struct Closed {
    /// The digest ([`super::manifest::Manifest::digest`]) of the manifest that close saved.
    pub manifest: String,
}

/// Leave the mark for the database in `dir`, which the caller has just closed (sled's
/// handles all dropped), with the digest of its manifest as saved after the last write. Not
/// synced: a mark lost to a power cut only costs the next start its copy and its walk, and one
/// that outlives later writes does not match them.
pub fn mark(dir: &Path, manifest: &str) {
    let written = files(dir)
        .map_err(|e| e.to_string())
        .and_then(|files| {
            serde_json::to_vec(&Mark { files, manifest: manifest.to_string() }).map_err(|e| e.to_string())
        })
        .and_then(|bytes| std::fs::write(path_for(dir), bytes).map_err(|e| e.to_string()));
    if let Err(e) = written {
        tracing::warn!(db = %dir.display(), "cannot mark the database as closed (the next start copies it first): {e}");
    }
}

/// Whether the database in `dir` is as the last orderly close left it, and if so what that
/// close recorded. The mark is used up here, whatever the answer: removed before the database
/// opens, so that a mark never speaks for a later state; if it cannot be removed, the answer
/// is no.
pub fn untouched_since_close(dir: &Path) -> Option<Closed> {
    let path = path_for(dir);
    let bytes = std::fs::read(&path).ok()?;
    // The removal made durable before sled writes: a power cut must not bring back a mark
    // that speaks for files since written.
    let synced = |dir: &Path| std::fs::File::open(dir).and_then(|d| d.sync_all());
    if std::fs::remove_file(&path).is_err() || path.parent().is_none_or(|parent| synced(parent).is_err()) {
        return None;
    }
    let marked = serde_json::from_slice::<Mark>(&bytes).ok()?;
    let now = files(dir).ok()?;
    (!now.is_empty() && now == marked.files).then_some(Closed { manifest: marked.manifest })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_holds_only_until_a_file_changes_and_only_once() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("db");
        std::fs::create_dir_all(dir.join("blobs")).unwrap();
        std::fs::write(dir.join("db"), b"log").unwrap();
        std::fs::write(dir.join("blobs/1"), b"blob").unwrap();

        assert_eq!(untouched_since_close(&dir), None, "no mark, no trust");
        mark(&dir, "m1");
        assert_eq!(untouched_since_close(&dir), Some(Closed { manifest: "m1".into() }));
        assert_eq!(untouched_since_close(&dir), None, "a mark is used up by the start that reads it");

        // The same bytes written again (size and listing unchanged) once the clock has moved
        // past the mark: only the times tell.
        mark(&dir, "m1");
        let marked = std::fs::metadata(dir.join("db")).unwrap().modified().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::time::SystemTime::now() < marked + std::time::Duration::from_millis(20) {
            assert!(std::time::Instant::now() < deadline, "the clock does not move");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        std::fs::write(dir.join("db"), b"log").unwrap();
        assert_eq!(untouched_since_close(&dir), None);

        for change in [
            // Not the same size: within one tick of the kernel's clock a rewrite of the same
            // size could keep both times (nothing writes the database in that tick after its
            // close, but a test would).
            |dir: &Path| std::fs::write(dir.join("db"), b"log, longer").unwrap(),
            |dir: &Path| std::fs::write(dir.join("snap.1"), b"").unwrap(), // a new file
            |dir: &Path| std::fs::remove_file(dir.join("blobs/1")).unwrap(), // one gone
        ] {
            mark(&dir, "m1");
            change(&dir);
            assert_eq!(untouched_since_close(&dir), None);
        }
    }
}

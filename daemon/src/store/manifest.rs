//! What the database must hold, kept beside it: every workspace (id and root) and the head of
//! every task's ledger. Checked at start, so a truncated, emptied or deleted database is a
//! refusal to serve rather than a silent loss; and the list of roots is where a rebuild starts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::workspace::specfile::write_atomic_mode;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Workspace id → root.
    pub workspaces: BTreeMap<String, String>,
    /// `<workspace id>/<task id>` → the sequence number of its last ledger entry.
    pub heads: BTreeMap<String, u64>,
    /// `<workspace id>/<task id>` → the chain digest of its entries through that head
    /// (`domain::ledger::chain_digest`), folded in at every append and over the stored entries
    /// at open: what an export must match to be restored.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub digests: BTreeMap<String, String>,
    /// Where each ledger's export under `.scafld/runs/<task>/ledger.json` ends, as scafld last
    /// wrote it (`<workspace id>/<task id>` → its last entry and the chain digest through it):
    /// an export taken before later appends is held to this, not to the head.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub exported: BTreeMap<String, ExportPoint>,
    /// Ledgers a recovery could not rebuild whole (`<workspace id>/<task id>` → the head and
    /// chain digest recorded before): not checked at open (the database lacks them), but a later
    /// recovery still holds their exports to what was recorded, once they can be read.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub lost: BTreeMap<String, LostLedger>,
    /// Job id → the state a finished job ended in (until retention forgets the job): a lost
    /// final state would read as a job the daemon abandoned.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub finished_jobs: BTreeMap<String, String>,
}

/// A hasher taking JSON as it is written, so a digest needs no copy of the text.
struct HashWriter<'a>(&'a mut sha2::Sha256);

impl std::io::Write for HashWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        sha2::Digest::update(self.0, bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Where an export ends: its last entry's sequence number and the chain digest through it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportPoint {
    pub seq: u64,
    pub digest: String,
}

/// A ledger a recovery could not rebuild, as recorded before it was lost.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LostLedger {
    pub head: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

/// Where the manifest of the database in `db_dir` lives: beside it, so that losing the
/// database directory does not lose the manifest too.
pub fn path_for(db_dir: &Path) -> PathBuf {
    let name = super::dir_name(db_dir);
    db_dir.with_file_name(format!("{name}.manifest.json"))
}

pub fn head_key(workspace_id: &str, task_id: &str) -> String {
    format!("{workspace_id}/{task_id}")
}

impl Manifest {
    /// The manifest at `path`: `None` when there is none yet (a new or older state directory).
    pub fn load(path: &Path) -> Result<Option<Manifest>, String> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| format!("{}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    /// sha256 of its JSON as saved (the maps keep their order): what an orderly close marks
    /// the manifest it saved by (`closed.rs`).
    pub fn digest(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut hasher = Sha256::new();
        // Writing JSON into a hasher fails only with the hasher, which cannot fail.
        let _ = serde_json::to_writer(HashWriter(&mut hasher), self);
        format!("{:x}", hasher.finalize())
    }

    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let text = serde_json::to_string(self).map_err(std::io::Error::other)?;
        write_atomic_mode(path, text.as_bytes(), 0o600)
    }

    /// What `self` (the manifest) promises that `actual` (what the database holds) lacks, one
    /// line each; empty when the database holds at least everything recorded. A head beyond
    /// the manifest's is fine: the manifest is written after the database.
    pub fn missing_from(&self, actual: &Manifest) -> Vec<String> {
        let mut missing = Vec::new();
        for (id, root) in &self.workspaces {
            if !actual.workspaces.contains_key(id) {
                missing.push(format!("workspace {id} ({root}) is gone"));
            }
        }
        for (key, &head) in &self.heads {
            match actual.heads.get(key) {
                None => missing.push(format!("the ledger of {key} is gone (it had {head} entries)")),
                Some(&now) if now < head => {
                    missing.push(format!("the ledger of {key} ends at {now} of {head} entries"))
                }
                Some(_) => {}
            }
        }
        // A job that ended must still have an end; which one may differ: a job can end twice
        // (a reviewer's answer and a cancellation crossing), and a manifest that lags the
        // database holds the first while the database holds the second.
        for (id, state) in &self.finished_jobs {
            if !actual.finished_jobs.contains_key(id) {
                missing.push(format!("job {id} ended {state}, the database holds no end for it"));
            }
        }
        missing
    }
}

/// A burst of changes ends after this long without one (or after [`BURST_MAX`]).
const BURST_QUIET: Duration = Duration::from_millis(25);
const BURST_MAX: Duration = Duration::from_millis(250);
/// The least time between two background saves. A save rewrites every head the daemon has
/// ever recorded (125 KB for 2,000 tasks), and without this each build step paid for one: a
/// tenth of the daemon's CPU per step in the profile.
const SAVE_GAP: Duration = Duration::from_secs(1);

/// The manifest in memory and its saving. A ledger head changes on every append, and a save
/// (a temp file, two fsyncs, a rename) costs more than the database's own flush, so heads are
/// saved by a writer thread that writes the latest state once a burst of changes has ended
/// (25 ms without one, or 250 ms on), off the disk while the burst's writer syncs its files, and
/// at most once a second. The
/// manifest on disk may lag the database, which only makes the check at open weaker for the
/// last moments before a crash; it never leads it (a change is noted after the database holds
/// it). [`Keeper::save`] writes it at once (a workspace registration, the daemon stopping).
pub struct Keeper {
    shared: Arc<Shared>,
    wake: Option<mpsc::Sender<()>>,
    writer: Option<std::thread::JoinHandle<()>>,
}

struct Shared {
    path: PathBuf,
    /// The manifest now, and how many changes it has had.
    now: Mutex<(Manifest, u64)>,
    /// How many of those changes are on disk, and the size of the last save (the next one's
    /// buffer); held while saving, so saves never cross.
    saved: Mutex<(u64, usize)>,
}

impl Shared {
    /// Save the latest state unless it is on disk already. A failure (a full disk) is logged
    /// and retried with the next change or save.
    fn save_latest(&self) -> std::io::Result<()> {
        let mut saved = self.saved.lock().unwrap_or_else(|e| e.into_inner());
        let (text, changes) = {
            // Serialised under the lock rather than cloned and serialised after it: one pass
            // over the heads instead of two, in about the time the clone took.
            let now = self.now.lock().unwrap_or_else(|e| e.into_inner());
            if now.1 == saved.0 {
                return Ok(());
            }
            let mut text = Vec::with_capacity(saved.1 + saved.1 / 8);
            serde_json::to_writer(&mut text, &now.0).map_err(std::io::Error::other)?;
            (text, now.1)
        };
        let text = String::from_utf8(text).map_err(std::io::Error::other)?;
        write_atomic_mode(&self.path, text.as_bytes(), 0o600).inspect_err(|e| {
            tracing::warn!("cannot update the database manifest {}: {e}", self.path.display());
        })?;
        *saved = (changes, text.len());
        Ok(())
    }
}

impl Keeper {
    /// Keep `manifest`, which is on disk at `path` as it is.
    pub fn start(path: PathBuf, manifest: Manifest) -> Keeper {
        let shared = Arc::new(Shared { path, now: Mutex::new((manifest, 0)), saved: Mutex::new((0, 0)) });
        let (wake, woken) = mpsc::channel::<()>();
        let writer = {
            let shared = shared.clone();
            std::thread::Builder::new().name("manifest".into()).spawn(move || {
                let mut changed = woken.recv().is_ok();
                while changed {
                    // Wait for the burst to end (its writer is still syncing its own files,
                    // and a save meanwhile would queue behind or ahead of them on the disk).
                    let burst = Instant::now() + BURST_MAX;
                    while Instant::now() < burst {
                        match woken.recv_timeout(BURST_QUIET) {
                            Ok(()) => continue,
                            Err(mpsc::RecvTimeoutError::Timeout | mpsc::RecvTimeoutError::Disconnected) => break,
                        }
                    }
                    let _ = shared.save_latest();
                    // Changes during the rest wait for its end (the database holds them
                    // already), unless the daemon stops meanwhile.
                    changed = false;
                    let rest = Instant::now() + SAVE_GAP;
                    loop {
                        match woken.recv_timeout(rest.saturating_duration_since(Instant::now())) {
                            Ok(()) => changed = true,
                            Err(mpsc::RecvTimeoutError::Timeout) => break,
                            Err(mpsc::RecvTimeoutError::Disconnected) => {
                                let _ = shared.save_latest();
                                return;
                            }
                        }
                    }
                    changed = changed || woken.recv().is_ok();
                }
                let _ = shared.save_latest();
            })
        };
        Keeper { shared, wake: Some(wake), writer: writer.ok() }
    }

    /// Change the manifest, after the database holds the change; it is saved soon, off the
    /// caller's path. A save that fails (a full disk) never fails the caller's write: the
    /// database holds it, a lagging manifest only checks less, and the next save writes it whole.
    pub fn note(&self, change: impl FnOnce(&mut Manifest)) {
        {
            let mut now = self.shared.now.lock().unwrap_or_else(|e| e.into_inner());
            change(&mut now.0);
            now.1 += 1;
        }
        match (&self.wake, &self.writer) {
            (Some(wake), Some(_)) => {
                let _ = wake.send(());
            }
            _ => {
                let _ = self.shared.save_latest();
            }
        }
    }

    /// Save every change noted so far before returning.
    pub fn save(&self) -> std::io::Result<()> {
        self.shared.save_latest()
    }

    /// The digest of the manifest as it is now (what [`Keeper::save`] writes).
    pub fn digest(&self) -> String {
        self.shared.now.lock().unwrap_or_else(|e| e.into_inner()).0.digest()
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.wake.take();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_keeper_saves_every_change_off_the_callers_path_and_at_once_on_request() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.manifest.json");
        let keeper = Keeper::start(path.clone(), Manifest::default());
        for seq in 1..=50 {
            keeper.note(|m| {
                m.heads.insert("w/t".into(), seq);
            });
        }
        keeper.save().unwrap();
        assert_eq!(Manifest::load(&path).unwrap().unwrap().heads["w/t"], 50);
        keeper.note(|m| {
            m.heads.insert("w/t".into(), 51);
        });
        drop(keeper); // the writer saves what is left before it ends
        assert_eq!(Manifest::load(&path).unwrap().unwrap().heads["w/t"], 51);
    }

    /// A change noted while the writer rests after a save reaches the disk at the rest's end,
    /// with no further change to wake it.
    #[test]
    fn a_change_during_the_writers_rest_is_saved_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.manifest.json");
        let keeper = Keeper::start(path.clone(), Manifest::default());
        let saved_head = || Manifest::load(&path).ok().flatten().and_then(|m| m.heads.get("w/t").copied());
        let wait_for = |head: u64| {
            let deadline = Instant::now() + Duration::from_secs(10);
            while saved_head() != Some(head) {
                assert!(Instant::now() < deadline, "head {head} never saved: {:?}", saved_head());
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        keeper.note(|m| {
            m.heads.insert("w/t".into(), 1);
        });
        wait_for(1);
        keeper.note(|m| {
            m.heads.insert("w/t".into(), 2);
        });
        wait_for(2);
    }

    #[test]
    fn only_losses_count_as_missing() {
        let mut recorded = Manifest::default();
        recorded.workspaces.insert("w".into(), "/r".into());
        recorded.heads.insert("w/a".into(), 3);
        recorded.heads.insert("w/b".into(), 2);
        let mut actual = recorded.clone();
        actual.heads.insert("w/a".into(), 4); // written after the manifest: fine
        assert!(recorded.missing_from(&actual).is_empty());
        actual.heads.insert("w/b".into(), 1);
        actual.workspaces.clear();
        recorded.finished_jobs.insert("job-1".into(), "succeeded".into());
        let missing = recorded.missing_from(&actual);
        assert_eq!(
            missing,
            [
                "workspace w (/r) is gone",
                "the ledger of w/b ends at 1 of 2 entries",
                "job job-1 ended succeeded, the database holds no end for it"
            ]
        );
        assert_eq!(path_for(Path::new("/s/db")), Path::new("/s/db.manifest.json"));
        // An end the manifest has not caught up with is no loss.
        let mut ended = Manifest::default();
        ended.finished_jobs.insert("job-1".into(), "succeeded".into());
        let mut later = Manifest::default();
        later.finished_jobs.insert("job-1".into(), "cancelled".into());
        assert!(ended.missing_from(&later).is_empty());
    }
}

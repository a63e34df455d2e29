//! Durable daemon state (workspaces, ledgers, jobs, review sessions) behind a small trait, with sled as the one implementation.
//!
//! The trait speaks in domain records rather than keys and bytes so that another backend
//! (SQLite, redb) could replace sled without touching callers. Writes that acknowledge a
//! mutation are flushed before they return.

mod closed;
pub mod lock;
pub mod manifest;
mod parsed;
pub mod recover;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::domain::job::{JobRecord, JobSummary, SessionRecord, StoredJob};
use crate::domain::ledger::{LedgerEntry, LedgerEvent};
use manifest::{Manifest, head_key};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("state database error: {0}")]
    Backend(#[from] sled::Error),
    #[error("corrupt record in the state database: {0}")]
    Corrupt(#[from] serde_json::Error),
    /// The database cannot be opened, or holds less than its manifest records. Nothing was
    /// changed; `scafldd --recover` rebuilds it.
    #[error("the state database {} is damaged or incomplete: {}{}", db.display(), summary(problems),
        kept.as_ref().map(|k| format!("; the database as it was is kept at {}", k.display())).unwrap_or_default())]
    Damaged { db: PathBuf, problems: Vec<String>, kept: Option<PathBuf> },
    #[error("cannot update the database manifest: {0}")]
    Manifest(#[from] std::io::Error),
    /// A record written without a flush was not there to flush (a reopen after an I/O error
    /// drops what had not reached the disk).
    #[error("{0} was lost before it reached the disk")]
    Lost(String),
}

fn summary(problems: &[String]) -> String {
    match problems {
        [] => "no details".into(),
        [one] => one.clone(),
        [first, rest @ ..] => format!("{first} (and {} more)", rest.len()),
    }
}

/// What to do about a damaged database, for the user.
pub const RECOVERY_HINT: &str = "the daemon did not start and nothing was lost beyond the damage; \
    `scafldd --recover` moves the database aside (to db.damaged-<time>) and rebuilds it from what \
    is still readable in it and in the kept copies, the workspaces its manifest lists, and ledgers \
    exported under .scafld/runs/<task>/ledger.json (`scafld session <task> --export`)";

/// A workspace the daemon has seen, keyed by the id stored in its `.scafld/workspace_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceRecord {
    pub id: String,
    pub root: String,
    /// The device and inode of the `.scafld` folder the workspace had at `root` when it was
    /// recorded there: a `.scafld` without an id file at that root is this workspace's (its id
    /// file lost) only when it is that same folder, never a new one (a fresh clone where the
    /// workspace was moved away from). Absent in records older than this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scafld: Option<[u64; 2]>,
}

/// What [`Store::append_ending`] wrote: the events, recorded; and why the job's record did not
/// reach the disk after them, when it did not.
#[derive(Debug)]
pub struct Ending {
    pub written: Vec<LedgerEntry>,
    pub job_unsaved: Option<StoreError>,
}

pub trait Store: Send + Sync + 'static {
    fn save_workspace(&self, record: &WorkspaceRecord) -> Result<(), StoreError>;
    fn workspace(&self, id: &str) -> Result<Option<WorkspaceRecord>, StoreError>;
    fn workspaces(&self) -> Result<Vec<WorkspaceRecord>, StoreError>;
    /// Forget where workspaces `ids` live (another took their folder); their ledgers stay, and
    /// opening one of them again records it again.
    fn retire_workspaces(&self, ids: &[String]) -> Result<(), StoreError>;
    /// Append events to a task's ledger with the next sequence numbers, flushed before return.
    /// Callers serialise appends per task.
    fn append(
        &self,
        workspace_id: &str,
        task_id: &str,
        recorded_at: &str,
        events: Vec<LedgerEvent>,
    ) -> Result<Vec<LedgerEntry>, StoreError>;
    /// [`Store::append`] for the events that end a job: `job` (its final record) is saved
    /// once they are on the disk, never before them. The events decide the outcome: an error
    /// only when they were not recorded (or it is not known that they were); a job record that
    /// could not be saved after them is [`Ending::job_unsaved`], for the job table to save again.
    fn append_ending(
        &self,
        workspace_id: &str,
        task_id: &str,
        recorded_at: &str,
        events: Vec<LedgerEvent>,
        job: &JobRecord,
    ) -> Result<Ending, StoreError>;
    /// A task's ledger in order (shared: a ledger read again unchanged is not parsed again).
    fn ledger(&self, workspace_id: &str, task_id: &str) -> Result<Arc<[LedgerEntry]>, StoreError>;
    /// Every ledger of a workspace, one task at a time (`visit` gets the task's id and its
    /// whole ledger; tasks in id order).
    fn each_ledger(&self, workspace_id: &str, visit: &mut dyn FnMut(&str, &[LedgerEntry])) -> Result<(), StoreError>;
    /// Write an imported ledger (each event with its own time) in one atomic batch, only when
    /// the task has no ledger yet; returns how many entries were written (0: already there).
    /// Callers serialise it with appends to the same task.
    fn import(
        &self,
        workspace_id: &str,
        task_id: &str,
        events: Vec<(String, LedgerEvent)>,
    ) -> Result<usize, StoreError>;
    /// [`Store::append`] of events each with its own time: the original tool's entries
    /// imported after what the ledger holds. Callers serialise it with appends to the task.
    fn append_imported(
        &self,
        workspace_id: &str,
        task_id: &str,
        events: Vec<(String, LedgerEvent)>,
    ) -> Result<Vec<LedgerEntry>, StoreError>;
    fn save_job(&self, job: &JobRecord) -> Result<(), StoreError>;
    /// Put an unfinished job's record in the database without waiting for the disk: it
    /// lands in order with every other write, and [`Store::sync_job`] makes it durable.
    fn put_job(&self, job: &JobRecord) -> Result<(), StoreError>;
    /// Make the job's record durable: an error when it is not in the database any more (a
    /// reopen after an I/O error dropped what was not yet on disk).
    fn sync_job(&self, id: &str) -> Result<(), StoreError>;
    /// Every job, whole.
    fn jobs(&self) -> Result<Vec<JobRecord>, StoreError>;
    /// One job, whole.
    fn job(&self, id: &str) -> Result<Option<JobRecord>, StoreError>;
    /// Every job as the job table starts from it: finished builds summarised, the others
    /// whole.
    fn job_table(&self) -> Result<Vec<StoredJob>, StoreError>;
    fn save_session(&self, session: &SessionRecord) -> Result<(), StoreError>;
    fn sessions(&self) -> Result<Vec<SessionRecord>, StoreError>;
    /// Note that the task's ledger was exported to its default place through entry `seq`,
    /// whose chain digest is `digest`: a recovery holds that export to it.
    fn note_export(&self, workspace_id: &str, task_id: &str, seq: u64, digest: String) -> Result<(), StoreError>;
    /// Delete finished jobs and settled sessions (retention), flushed before return.
    fn forget(&self, job_ids: &[String], session_keys: &[String]) -> Result<(), StoreError>;
    /// Make every acknowledged write durable against a process crash.
    fn flush(&self) -> Result<(), StoreError>;
    /// Close the database for good at the daemon's orderly stop, once nothing writes any more:
    /// every later call is refused. Closing is only ever a saving for the next start (see
    /// `closed.rs`), so a store may leave it undone.
    fn close(&self) {}
}

pub struct SledStore {
    dir: PathBuf,
    /// The open database; `None` after a failed reopen (the next call tries again).
    trees: std::sync::RwLock<Option<Arc<Trees>>>,
    /// Why the last reopen failed (its kind and text), so every call refused while none is
    /// open says why (a full disk, where) rather than only that it failed.
    reopen_failure: std::sync::Mutex<Option<(std::io::ErrorKind, String)>>,
    /// The manifest, saved beside the database (see [`manifest`]).
    manifest: manifest::Keeper,
    /// Held by a finished job's save and by retention, so that a save cannot slip between
    /// retention's manifest save and its delete (and leave the manifest promising a job the
    /// database no longer holds).
    finished_jobs: std::sync::Mutex<()>,
    /// The jobs the opening's census read, for the job table's start ([`Store::job_table`]) to
    /// take instead of reading them all again; dropped by every write to the jobs tree
    /// ([`SledStore::jobs_written`]), after which they would be out of date.
    census_jobs: std::sync::Mutex<Option<Vec<StoredJob>>>,
    /// Set by [`Store::close`]: no reopen after it.
    closed: std::sync::atomic::AtomicBool,
    /// Held (shared) by every ledger write from its change to the database through its note in
    /// the manifest; the close takes it whole, so the manifest it saves and vouches for holds
    /// every ledger write's head and digest (the next start takes them from it: `closed.rs`).
    ledger_writes: std::sync::RwLock<()>,
}

/// How much of the database sled keeps in memory. Its default, 1 GiB, is more than any state
/// database here: every page read or written since the opening stayed, so the daemon grew with
/// each record it wrote and each start began as large as the database, the census having read
/// it all. Past this the least recently used pages are read from disk again; the ledgers in
/// use are kept parsed apart from it (`parsed.rs`).
pub const CACHE_BYTES: u64 = 16 << 20;

/// The sled handles of one opening of the database.
struct Trees {
    db: sled::Db,
    workspaces: sled::Tree,
    ledger: sled::Tree,
    jobs: sled::Tree,
    sessions: sled::Tree,
    /// Ledgers read through these handles, parsed (a reopen starts afresh).
    parsed: std::sync::Mutex<parsed::ParsedLedgers>,
}

impl Trees {
    fn open(dir: &Path) -> Result<Trees, StoreError> {
        set_aside_unfinished_snapshots(dir).map_err(|e| StoreError::Backend(sled::Error::Io(e)))?;
        let db = sled::Config::new().path(dir).mode(sled::Mode::LowSpace).cache_capacity(CACHE_BYTES).open()?;
        Ok(Trees {
            workspaces: db.open_tree("workspaces")?,
            ledger: db.open_tree("ledger")?,
            jobs: db.open_tree("jobs")?,
            sessions: db.open_tree("sessions")?,
            parsed: Default::default(),
            db,
        })
    }

    fn flush(&self) -> Result<(), StoreError> {
        self.db.flush()?;
        Ok(())
    }
}

impl SledStore {
    /// Open the database in `dir` and check it against its manifest: every record must read
    /// back and every workspace and ledger entry the manifest records must be there. A panic
    /// inside sled, a corrupt record or a loss is [`StoreError::Damaged`]; a database another
    /// process holds stays a [`StoreError::Backend`] error.
    pub fn open(dir: &Path) -> Result<SledStore, StoreError> {
        let manifest_path = manifest::path_for(dir);
        let damaged = |problems: Vec<String>, kept: Option<PathBuf>| StoreError::Damaged {
            db: dir.to_path_buf(),
            problems,
            kept,
        };
        let recorded =
            Manifest::load(&manifest_path).map_err(|why| damaged(vec![format!("unreadable manifest {why}")], None))?;
        // Opening repairs in place (sled cuts a damaged log short), so the database as it was
        // is copied first and kept if it turns out damaged; one that an orderly stop closed
        // and nothing wrote to since holds nothing half written and needs no copy.
        let closed = closed::untouched_since_close(dir);
        let pristine = match closed {
            Some(_) => {
                tracing::info!(db = %dir.display(), "the database is as the last orderly stop closed it: opened with no copy made first");
                None
            }
            None => pristine_copy(dir),
        };
        // The manifest that close saved after the last write knows every ledger's head and
        // digest: the census takes them from it instead of walking every entry.
        let vouched =
            closed.zip(recorded.as_ref()).is_some_and(|(closed, recorded)| closed.manifest == recorded.digest());
        let damaged = |problems: Vec<String>| {
            tracing::error!(db = %dir.display(), "the state database is damaged: {}", problems.join("; "));
            let kept = pristine.as_ref().and_then(|copy| keep_damaged(dir, copy));
            damaged(problems, kept)
        };
        let opened = catch_unwind(AssertUnwindSafe(|| -> Result<(Trees, Manifest, Vec<StoredJob>), StoreError> {
            let trees = Trees::open(dir)?;
            let (actual, jobs) = census(&trees, recorded.as_ref(), vouched)?;
            Ok((trees, actual, jobs))
        }));
        let (trees, mut actual, jobs) = match opened {
            Ok(Ok(opened)) => opened,
            Ok(Err(StoreError::Backend(sled::Error::Io(e)))) => {
                // Not damage (another process holds it, say): the copy is not needed.
                if let Some(copy) = &pristine {
                    let _ = std::fs::remove_dir_all(copy);
                }
                return Err(StoreError::Backend(sled::Error::Io(e)));
            }
            Ok(Err(StoreError::Damaged { problems, .. })) => return Err(damaged(problems)),
            Ok(Err(e)) => return Err(damaged(vec![e.to_string()])),
            Err(panic) => {
                let message = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "unknown panic".into());
                return Err(damaged(vec![format!("the database engine failed reading it: {message}")]));
            }
        };
        if let Some(recorded) = &recorded {
            let missing = recorded.missing_from(&actual);
            if !missing.is_empty() {
                return Err(damaged(missing));
            }
            // What a recovery could not rebuild, and where exports end, stay on record.
            actual.lost = recorded.lost.clone();
            actual.exported = recorded.exported.clone();
        }
        if let Some(copy) = &pristine {
            let _ = std::fs::remove_dir_all(copy);
        }
        if recorded.as_ref() != Some(&actual) {
            actual.save(&manifest_path)?;
        }
        Ok(SledStore {
            dir: dir.to_path_buf(),
            trees: std::sync::RwLock::new(Some(Arc::new(trees))),
            reopen_failure: std::sync::Mutex::new(None),
            manifest: manifest::Keeper::start(manifest_path, actual),
            finished_jobs: std::sync::Mutex::new(()),
            census_jobs: std::sync::Mutex::new(Some(jobs)),
            closed: Default::default(),
            ledger_writes: Default::default(),
        })
    }

    /// Called before every write to the jobs tree: what the census read of it is out of date.
    fn jobs_written(&self) {
        crate::sync::lock(&self.census_jobs).take();
    }

    /// Run `op` on the open database. An I/O failure (a full disk, say) can leave sled failing
    /// every later write even once the cause is gone, so after one the database is reopened:
    /// this call still fails, the next ones work again as soon as the disk does.
    fn run<T>(&self, op: impl FnOnce(&Trees) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let trees = self.trees()?;
        let result = op(&trees);
        drop(trees);
        if let Err(StoreError::Backend(sled::Error::Io(e))) = &result {
            tracing::warn!("state database I/O error ({e}); reopening it");
            self.reopen();
        }
        result
    }

    fn trees(&self) -> Result<Arc<Trees>, StoreError> {
        if let Some(trees) = self.trees.read().unwrap_or_else(|e| e.into_inner()).as_ref() {
            return Ok(trees.clone());
        }
        self.reopen();
        self.trees.read().unwrap_or_else(|e| e.into_inner()).clone().ok_or_else(|| {
            let failure = self.reopen_failure.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let (kind, cause) = failure.unwrap_or((std::io::ErrorKind::Other, "no cause was given".into()));
            // The cause's own words (`No space left on device (os error 28)`) are what
            // `RpcError::internal` recognises a full disk by, for its hint.
            StoreError::Backend(sled::Error::Io(std::io::Error::new(
                kind,
                format!(
                    "the state database {} could not be reopened after an I/O error ({cause}); every call tries again, so commands work again once that is put right, with no restart",
                    self.dir.display()
                ),
            )))
        })
    }

    /// Drop the current handles and open the database again (the old ones must be gone first:
    /// sled locks its directory). Calls in flight keep the old handles until they finish; a
    /// reopen that fails leaves none, and the next call tries again.
    fn reopen(&self) {
        let mut slot = self.trees.write().unwrap_or_else(|e| e.into_inner());
        if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
            *self.reopen_failure.lock().unwrap_or_else(|e| e.into_inner()) =
                Some((std::io::ErrorKind::Other, "the daemon is stopping and has closed it".into()));
            return;
        }
        // sled may panic closing a database whose writes failed; the handles are gone anyway.
        let old = slot.take();
        if catch_unwind(AssertUnwindSafe(move || drop(old))).is_err() {
            tracing::warn!("closing the failed state database panicked");
        }
        let failure = match catch_unwind(AssertUnwindSafe(|| Trees::open(&self.dir))) {
            Ok(Ok(trees)) => {
                *slot = Some(Arc::new(trees));
                None
            }
            Ok(Err(e)) => {
                tracing::warn!("cannot reopen the state database: {e}");
                Some(match &e {
                    StoreError::Backend(sled::Error::Io(io)) | StoreError::Manifest(io) => (io.kind(), io.to_string()),
                    _ => (std::io::ErrorKind::Other, e.to_string()),
                })
            }
            Err(_) => {
                tracing::warn!("cannot reopen the state database: the engine panicked");
                Some((std::io::ErrorKind::Other, "the database engine panicked opening it".to_string()))
            }
        };
        *self.reopen_failure.lock().unwrap_or_else(|e| e.into_inner()) = failure;
    }
}

/// Whether `name` is a snapshot sled 0.34 had not finished writing. sled writes a snapshot (an
/// index of its log, rebuilt from the log at every open) to `snap.<lsn>.generating`, syncs it,
/// renames it to `snap.<lsn>` and only then removes older snapshots; but it reads whichever
/// `snap.*` file sorts last, `.generating` included, and refuses the whole database as corrupt
/// when that one is cut short (a full disk, a kill while it opens).
pub(super) fn is_unfinished_snapshot(name: &std::ffi::OsStr) -> bool {
    name.to_str().is_some_and(|n| n.starts_with("snap.") && n.ends_with(".generating"))
}

/// The unfinished snapshots (see [`is_unfinished_snapshot`]) in the database directory `dir`.
pub(super) fn unfinished_snapshots(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    match std::fs::read_dir(dir) {
        Ok(entries) => Ok(entries
            .flatten()
            .filter(|e| is_unfinished_snapshot(&e.file_name()) && e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| e.path())
            .collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// Take sled's unfinished snapshots out of the database directory before it opens, so that it
/// reads its last finished snapshot and the log after it, as before the write that was cut
/// short. Such a file is never the only copy of anything (it only becomes a snapshot once
/// renamed, and the snapshot it would have become is rebuilt from the log), yet only an empty
/// one is removed: any other is moved beside the database, and both are logged. Left alone
/// while another process holds the database (it may be writing one).
fn set_aside_unfinished_snapshots(dir: &Path) -> std::io::Result<()> {
    if lock::database_in_use(dir).is_err() {
        return Ok(());
    }
    for path in unfinished_snapshots(dir)? {
        let name = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
        if std::fs::metadata(&path)?.len() == 0 {
            std::fs::remove_file(&path)?;
            tracing::warn!(db = %dir.display(), "removed {name}: an empty snapshot the database engine had not finished writing");
        } else {
            let kept = aside(dir, &format!("{name}.unfinished"));
            std::fs::rename(&path, &kept)?;
            tracing::warn!(db = %dir.display(), "moved {name}, a snapshot the database engine had not finished writing, to {} (it holds nothing the database lacks: delete it at will)", kept.display());
        }
    }
    Ok(())
}

/// How long [`Store::close`] waits for the calls still holding the database.
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Databases larger than this are opened without a copy made first (a damaged one is then
/// kept as sled left it).
const PRISTINE_COPY_LIMIT: u64 = 512 << 20;

/// A copy of the database directory beside it, when it exists and is not too large.
fn pristine_copy(dir: &Path) -> Option<PathBuf> {
    let size = dir_size(dir).ok()?;
    if size == 0 || size > PRISTINE_COPY_LIMIT {
        return None;
    }
    // One fixed name: a copy left by a start that died is replaced, not accumulated.
    let copy = dir.with_file_name(format!("{}.opening", dir_name(dir)));
    let _ = std::fs::remove_dir_all(&copy);
    recover::copy_dir(dir, &copy).ok()?;
    Some(copy)
}

/// Keep `copy`, the database `dir` as it was before a start refused it, beside it as
/// `<name>.damaged-<time>`; where a copy kept earlier holds the very same files (every client
/// command retried while the database is refused tries a start), that one is named instead and
/// `copy` removed, so retries keep one copy per state of the damage, not one per attempt.
fn keep_damaged(dir: &Path, copy: &Path) -> Option<PathBuf> {
    if let Some(same) = recover::earlier_copies(dir).into_iter().find(|earlier| same_files(copy, earlier)) {
        let _ = std::fs::remove_dir_all(copy);
        return Some(same);
    }
    let kept = aside(dir, "damaged");
    std::fs::rename(copy, &kept).ok().map(|()| kept)
}

/// Whether the folders `a` and `b` hold the same folders and regular files (what
/// `recover::copy_dir` copies), with the same bytes; anything unreadable is a difference.
fn same_files(a: &Path, b: &Path) -> bool {
    use std::collections::BTreeMap;
    // Name → (a folder?, size): compared whole before any content is read.
    let listing = |dir: &Path| -> std::io::Result<BTreeMap<std::ffi::OsString, (bool, u64)>> {
        let mut listed = BTreeMap::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() || kind.is_file() {
                listed.insert(
                    entry.file_name(),
                    (kind.is_dir(), if kind.is_file() { entry.metadata()?.len() } else { 0 }),
                );
            }
        }
        Ok(listed)
    };
    let (Ok(left), Ok(right)) = (listing(a), listing(b)) else { return false };
    left == right
        && left.iter().all(|(name, &(folder, _))| match folder {
            true => same_files(&a.join(name), &b.join(name)),
            false => same_bytes(&a.join(name), &b.join(name)).unwrap_or(false),
        })
}

/// Whether two files hold the same bytes, read side by side a block at a time.
fn same_bytes(a: &Path, b: &Path) -> std::io::Result<bool> {
    use std::io::Read;
    // As much as `file` gives up to the buffer's end: reads may come short before the end.
    fn fill(file: &mut std::fs::File, buffer: &mut [u8]) -> std::io::Result<usize> {
        let mut filled = 0;
        while filled < buffer.len() {
            match file.read(&mut buffer[filled..])? {
                0 => break,
                n => filled += n,
            }
        }
        Ok(filled)
    }
    let (mut left, mut right) = (std::fs::File::open(a)?, std::fs::File::open(b)?);
    let (mut one, mut two) = (vec![0u8; 64 << 10], vec![0u8; 64 << 10]);
    loop {
        let (n, m) = (fill(&mut left, &mut one)?, fill(&mut right, &mut two)?);
        if one[..n] != two[..m] {
            return Ok(false);
        }
        if n == 0 {
            return Ok(true);
        }
    }
}

fn dir_size(dir: &Path) -> std::io::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() { dir_size(&entry.path())? } else { meta.len() };
    }
    Ok(total)
}

pub(super) fn dir_name(dir: &Path) -> String {
    dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "db".into())
}

/// A fresh name beside `dir`: `<name>.<what>-<time>` (with a counter if that is taken).
pub fn aside(dir: &Path, what: &str) -> PathBuf {
    let name = dir_name(dir);
    let stamp = crate::clock::now_rfc3339().replace(':', "");
    (1..)
        .map(|n| {
            dir.with_file_name(if n == 1 {
                format!("{name}.{what}-{stamp}")
            } else {
                format!("{name}.{what}-{stamp}-{n}")
            })
        })
        .find(|p| !p.exists() && !manifest::path_for(p).exists())
        .expect("some name is free")
}

impl SledStore {
    /// Append `events` to a task's ledger, flushed before return. A flush that fails may still
    /// have put the entries on the disk (sled writes its log in buffers, and the one that failed
    /// may come after theirs): they are read back once the database is open again, so the
    /// answer says what the ledger holds. When it cannot be opened again yet, the error says
    /// that whether they were recorded is not known.
    fn append_then(
        &self,
        workspace_id: &str,
        task_id: &str,
        events: Vec<(String, LedgerEvent)>,
    ) -> Result<Vec<LedgerEntry>, StoreError> {
        let _writing = crate::sync::read(&self.ledger_writes);
        let prefix = ledger_prefix(workspace_id, task_id);
        // Each entry as stored, for the manifest's chain digest and the read-back.
        let mut links: Vec<Vec<u8>> = Vec::with_capacity(events.len());
        let mut attempted: Vec<LedgerEntry> = Vec::with_capacity(events.len());
        let result = self.run(|t| {
            // The last entry's sequence number is the end of its key: nothing to parse.
            let last = match t.ledger.scan_prefix(&prefix).next_back() {
                Some(entry) => seq_of_key(&entry?.0)?,
                None => 0,
            };
            let mut batch = sled::Batch::default();
            for (i, (recorded_at, event)) in events.into_iter().enumerate() {
                let entry = LedgerEntry { seq: last + 1 + i as u64, recorded_at, event };
                let mut key = prefix.clone();
                key.extend_from_slice(&entry.seq.to_be_bytes());
                let json = serde_json::to_vec(&entry)?;
                links.push(json.clone());
                batch.insert(key, json);
                attempted.push(entry);
            }
            t.ledger.apply_batch(batch)?;
            t.flush()
        });
        let written = match result {
            Ok(()) => attempted,
            Err(StoreError::Backend(sled::Error::Io(e))) if !attempted.is_empty() => {
                match self.landed(&prefix, attempted[0].seq, &links) {
                    Some(true) => {
                        tracing::warn!(
                            task = task_id,
                            "the state database reported an I/O error ({e}) flushing the task's ledger, yet its new entries read back whole once it was opened again: they are recorded"
                        );
                        attempted
                    }
                    Some(false) => return Err(StoreError::Backend(sled::Error::Io(e))),
                    None => {
                        return Err(StoreError::Backend(sled::Error::Io(std::io::Error::new(
                            e.kind(),
                            format!(
                                "{e}; the database could not be opened again to read back whether the task's new ledger entries reached the disk anyway, so they may be recorded: once it takes writes again, `scafld status {task_id}` shows what the ledger holds"
                            ),
                        ))));
                    }
                }
            }
            Err(e) => return Err(e),
        };
        self.manifest.note(|m| {
            if let (Some(first), Some(last)) = (written.first(), written.last()) {
                let key = head_key(workspace_id, task_id);
                m.heads.insert(key.clone(), last.seq);
                // Chained on from the digest through the entry before these (a ledger begun
                // here starts from the empty one); one an older scafld began has none.
                let before = if first.seq == 1 { Some(String::new()) } else { m.digests.get(&key).cloned() };
                // A ledger begun anew replaces one a recovery lost: that one is gone for good;
                // and one going on from before an export's end (rebuilt short of it) no longer
                // holds what that export holds.
                if first.seq == 1 {
                    m.lost.remove(&key);
                }
                if m.exported.get(&key).is_some_and(|point| first.seq <= point.seq) {
                    m.exported.remove(&key);
                }
                match before {
                    Some(digest) => {
                        let chained = links.iter().fold(digest, |d, json| crate::domain::ledger::chain_link(&d, json));
                        m.digests.insert(key, chained);
                    }
                    None => drop(m.digests.remove(&key)),
                }
            }
        });
        Ok(written)
    }

    /// Whether the ledger under `prefix` holds, from sequence number `first` on, exactly the
    /// entries `links` (as stored) after a write of them failed: `Some(false)` when it holds
    /// nothing from there, `None` when the database cannot be read now or holds something else.
    fn landed(&self, prefix: &[u8], first: u64, links: &[Vec<u8>]) -> Option<bool> {
        let trees = self.trees().ok()?;
        let mut from = prefix.to_vec();
        from.extend_from_slice(&first.to_be_bytes());
        let stored: Vec<Vec<u8>> = trees
            .ledger
            .range(from..)
            .take_while(|item| item.as_ref().map_or(true, |(key, _)| key.starts_with(prefix)))
            .map(|item| item.map(|(_, value)| value.to_vec()))
            .collect::<Result<_, _>>()
            .ok()?;
        match stored.as_slice() {
            [] => Some(false),
            same if same == links => Some(true),
            _ => None,
        }
    }
}

/// `<workspace id>/<task id>/` — task ids cannot contain `/`, so prefixes never overlap.
fn ledger_prefix(workspace_id: &str, task_id: &str) -> Vec<u8> {
    format!("{workspace_id}/{task_id}/").into_bytes()
}

/// The sequence number a ledger key ends with (big-endian, so keys sort in ledger order).
fn seq_of_key(key: &[u8]) -> Result<u64, StoreError> {
    key.len().checked_sub(8).and_then(|at| key[at..].try_into().ok()).map(u64::from_be_bytes).ok_or_else(malformed_key)
}

fn malformed_key() -> StoreError {
    StoreError::Damaged { db: PathBuf::new(), problems: vec!["a ledger key is malformed".into()], kept: None }
}

/// What the database holds: every workspace, each ledger's head and chain digest, each job's
/// end; and the jobs as the job table starts from them ([`Store::job_table`]). Every record
/// is read, and sled checks each one's checksum as it reads it, so damage is found now, not
/// in the middle of a command; a ledger entry's JSON is read whole where it is used, not here
/// (parsing every entry was half of a start's time: 80 ms of 200 for a history of 14,400
/// entries). A ledger `recorded` holds is not hashed again through the head it
/// records: its digest there is the recorded one, chained on over the entries after it. A
/// ledger is numbered 1, 2, 3… with no gap (appends and imports both number it so), so a
/// missing entry is damage, refused like any other: a recorded digest taken on trust is then
/// never chained on over a ledger that lacks the entries it covers. When the manifest is
/// `vouched` for (an orderly close saved it after the last write, and nothing wrote since:
/// `closed.rs`), its heads and digests are the ledgers' and the walk over them is skipped.
fn census(trees: &Trees, recorded: Option<&Manifest>, vouched: bool) -> Result<(Manifest, Vec<StoredJob>), StoreError> {
    let mut found = Manifest::default();
    for entry in trees.workspaces.iter() {
        let record: WorkspaceRecord = serde_json::from_slice(&entry?.1)?;
        found.workspaces.insert(record.id, record.root);
    }
    if let Some(recorded) = recorded.filter(|_| vouched) {
        found.heads.clone_from(&recorded.heads);
        found.digests.clone_from(&recorded.digests);
    } else {
        ledger_census(trees, recorded, &mut found)?;
    }
    let jobs = jobs_census(trees, &mut found)?;
    Ok((found, jobs))
}

/// Every ledger's head and chain digest, read entry by entry (see [`census`]).
fn ledger_census(trees: &Trees, recorded: Option<&Manifest>, found: &mut Manifest) -> Result<(), StoreError> {
    // Keys sort in ledger order, a task's entries together: each entry chains on from the one
    // before, as appended.
    let mut chain: Option<LedgerChain> = None;
    let mut gaps = Vec::new();
    for entry in trees.ledger.iter() {
        let (key, value) = entry?;
        let (task_key, seq) = split_ledger_key(&key)?;
        let chain = match &mut chain {
            Some(current) if current.task == task_key => current,
            other => {
                if let Some(done) = other.take() {
                    done.into(found);
                }
                other.insert(LedgerChain::start(task_key, recorded))
            }
        };
        if seq != chain.head + 1 {
            // Keys sort by number: only a first entry numbered 0 can come before its place.
            gaps.push((chain.task.clone(), chain.head + 1, seq.checked_sub(1).ok_or_else(malformed_key)?));
        }
        chain.add(seq, &value);
    }
    if let Some(done) = chain {
        done.into(found);
    }
    if !gaps.is_empty() {
        let problems = gaps
            .into_iter()
            .map(|(task, first, last)| {
                let head = found.heads[&task];
                match first == last {
                    true => format!("the ledger of {task} lacks entry {first} of {head}"),
                    false => format!("the ledger of {task} lacks entries {first} to {last} of {head}"),
                }
            })
            .collect();
        return Err(StoreError::Damaged { db: PathBuf::new(), problems, kept: None });
    }
    Ok(())
}

/// The jobs the job table starts from, each finished one's end noted in `found`. The job
/// table starts from these, and one it could not read would leave queued work unclaimable and
/// job numbers begun again.
fn jobs_census(trees: &Trees, found: &mut Manifest) -> Result<Vec<StoredJob>, StoreError> {
    let mut jobs = Vec::new();
    for entry in trees.jobs.iter() {
        let job = table_job(&entry?.1)?;
        let (id, state) = match &job {
            StoredJob::Finished(summary) => (&summary.id, summary.state),
            StoredJob::Whole(record) => (&record.id, record.state),
        };
        if state.is_finished() {
            found.finished_jobs.insert(id.clone(), state.to_string());
        }
        jobs.push(job);
    }
    Ok(jobs)
}

/// A stored job as the job table starts from it: a finished build's summary alone is parsed
/// (the outcome that makes most of its record is skipped over).
fn table_job(stored: &[u8]) -> Result<StoredJob, StoreError> {
    let summary: JobSummary = serde_json::from_slice(stored)?;
    Ok(match summary.state.is_finished() && summary.kind == crate::domain::job::JobKind::Acceptance {
        true => StoredJob::Finished(summary),
        false => StoredJob::Whole(Box::new(serde_json::from_slice(stored)?)),
    })
}

/// `events`, each recorded at `recorded_at`.
fn dated(recorded_at: &str, events: Vec<LedgerEvent>) -> Vec<(String, LedgerEvent)> {
    events.into_iter().map(|event| (recorded_at.to_string(), event)).collect()
}

/// A ledger key's task (`<workspace id>/<task id>`) and sequence number.
fn split_ledger_key(key: &[u8]) -> Result<(&str, u64), StoreError> {
    let task = key.get(..key.len().saturating_sub(8)).and_then(|k| std::str::from_utf8(k).ok());
    match task.and_then(|k| k.strip_suffix('/')) {
        Some(task) if !task.is_empty() => Ok((task, seq_of_key(key)?)),
        _ => Err(malformed_key()),
    }
}

/// One ledger's head and chain digest as the census reads its entries in order.
struct LedgerChain {
    task: String,
    head: u64,
    /// The head and digest the manifest recorded for it: entries through there are not hashed.
    trusted: Option<(u64, String)>,
    /// The digest through `head`; `None` while skipping up to the trusted head (a gap that
    /// would keep it `None` past there is refused by the census).
    digest: Option<String>,
}

impl LedgerChain {
    fn start(task: &str, recorded: Option<&Manifest>) -> LedgerChain {
        let trusted = recorded.and_then(|m| Some((*m.heads.get(task)?, m.digests.get(task)?.clone())));
        let digest = if trusted.is_some() { None } else { Some(String::new()) };
        LedgerChain { task: task.to_string(), head: 0, trusted, digest }
    }

    fn add(&mut self, seq: u64, stored: &[u8]) {
        self.head = seq;
        match &self.trusted {
            Some((head, _)) if seq < *head => {}
            Some((head, digest)) if seq == *head => self.digest = Some(digest.clone()),
            _ => self.digest = self.digest.take().map(|d| crate::domain::ledger::chain_link(&d, stored)),
        }
    }

    fn into(self, found: &mut Manifest) {
        found.heads.insert(self.task.clone(), self.head);
        if let Some(digest) = self.digest {
            found.digests.insert(self.task, digest);
        }
    }
}

impl Store for SledStore {
    fn save_workspace(&self, record: &WorkspaceRecord) -> Result<(), StoreError> {
        self.run(|t| {
            t.workspaces.insert(record.id.as_bytes(), serde_json::to_vec(record)?)?;
            t.flush()
        })?;
        self.manifest.note(|m| {
            m.workspaces.insert(record.id.clone(), record.root.clone());
        });
        // Where a rebuild starts: on disk before the registration is acknowledged (a lagging
        // manifest only checks less, so a failed save does not fail the registration).
        let _ = self.manifest.save();
        Ok(())
    }

    fn retire_workspaces(&self, ids: &[String]) -> Result<(), StoreError> {
        // Out of the manifest first, and on disk: it must never promise a workspace the
        // database no longer holds (if it cannot be saved, nothing is retired this time).
        self.manifest.note(|m| ids.iter().for_each(|id| drop(m.workspaces.remove(id))));
        self.manifest.save()?;
        self.run(|t| {
            for id in ids {
                t.workspaces.remove(id.as_bytes())?;
            }
            t.flush()
        })
    }

    fn workspace(&self, id: &str) -> Result<Option<WorkspaceRecord>, StoreError> {
        self.run(|t| match t.workspaces.get(id.as_bytes())? {
            Some(bytes) => Ok(Some(serde_json::from_slice(&bytes)?)),
            None => Ok(None),
        })
    }

    fn workspaces(&self) -> Result<Vec<WorkspaceRecord>, StoreError> {
        self.run(|t| t.workspaces.iter().map(|entry| Ok(serde_json::from_slice(&entry?.1)?)).collect())
    }

    fn append(
        &self,
        workspace_id: &str,
        task_id: &str,
        recorded_at: &str,
        events: Vec<LedgerEvent>,
    ) -> Result<Vec<LedgerEntry>, StoreError> {
        self.append_then(workspace_id, task_id, dated(recorded_at, events))
    }

    fn append_ending(
        &self,
        workspace_id: &str,
        task_id: &str,
        recorded_at: &str,
        events: Vec<LedgerEvent>,
        job: &JobRecord,
    ) -> Result<Ending, StoreError> {
        let written = self.append_then(workspace_id, task_id, dated(recorded_at, events))?;
        // After the events' flush: never on the disk without them.
        let job_unsaved = self.save_job(job).err();
        Ok(Ending { written, job_unsaved })
    }

    fn ledger(&self, workspace_id: &str, task_id: &str) -> Result<Arc<[LedgerEntry]>, StoreError> {
        let prefix = ledger_prefix(workspace_id, task_id);
        self.run(|t| {
            let last_seq = match t.ledger.scan_prefix(&prefix).next_back() {
                Some(entry) => seq_of_key(&entry?.0)?,
                None => 0,
            };
            if let Some(entries) = crate::sync::lock(&t.parsed).get(&prefix, last_seq) {
                return Ok(entries);
            }
            // Parsed outside the lock; what is kept is labelled with its own last entry, so an
            // append meanwhile only makes it miss next time.
            let mut bytes = 0;
            let entries = t
                .ledger
                .scan_prefix(&prefix)
                .map(|entry| {
                    let value = entry?.1;
                    bytes += value.len();
                    Ok(serde_json::from_slice(&value)?)
                })
                .collect::<Result<Arc<[LedgerEntry]>, StoreError>>()?;
            crate::sync::lock(&t.parsed).put(prefix.clone(), bytes, entries.clone());
            Ok(entries)
        })
    }

    fn each_ledger(&self, workspace_id: &str, visit: &mut dyn FnMut(&str, &[LedgerEntry])) -> Result<(), StoreError> {
        let prefix = format!("{workspace_id}/").into_bytes();
        self.run(|t| {
            let mut task = String::new();
            let mut entries: Vec<LedgerEntry> = Vec::new();
            for item in t.ledger.scan_prefix(&prefix) {
                let (key, value) = item?;
                let (task_key, _) = split_ledger_key(&key)?;
                let name = task_key.get(prefix.len()..).filter(|name| !name.is_empty()).ok_or_else(malformed_key)?;
                if name != task {
                    if !entries.is_empty() {
                        visit(&task, &entries);
                        entries.clear();
                    }
                    task = name.to_string();
                }
                entries.push(serde_json::from_slice(&value)?);
            }
            if !entries.is_empty() {
                visit(&task, &entries);
            }
            Ok(())
        })
    }

    fn import(
        &self,
        workspace_id: &str,
        task_id: &str,
        events: Vec<(String, LedgerEvent)>,
    ) -> Result<usize, StoreError> {
        let _writing = crate::sync::read(&self.ledger_writes);
        let prefix = ledger_prefix(workspace_id, task_id);
        let mut imported = Vec::with_capacity(events.len());
        let count = self.run(|t| {
            if t.ledger.scan_prefix(&prefix).next().is_some() {
                return Ok(0);
            }
            let mut batch = sled::Batch::default();
            let count = events.len();
            for (i, (recorded_at, event)) in events.into_iter().enumerate() {
                let entry = LedgerEntry { seq: 1 + i as u64, recorded_at, event };
                let mut key = prefix.clone();
                key.extend_from_slice(&entry.seq.to_be_bytes());
                batch.insert(key, serde_json::to_vec(&entry)?);
                imported.push(entry);
            }
            t.ledger.apply_batch(batch)?;
            t.flush()?;
            Ok(count)
        })?;
        if count > 0 {
            let digest = crate::domain::ledger::chain_digest(&imported);
            self.manifest.note(|m| {
                m.heads.insert(head_key(workspace_id, task_id), count as u64);
                m.digests.insert(head_key(workspace_id, task_id), digest);
            });
        }
        Ok(count)
    }

    fn append_imported(
        &self,
        workspace_id: &str,
        task_id: &str,
        events: Vec<(String, LedgerEvent)>,
    ) -> Result<Vec<LedgerEntry>, StoreError> {
        self.append_then(workspace_id, task_id, events)
    }

    fn put_job(&self, job: &JobRecord) -> Result<(), StoreError> {
        debug_assert!(!job.state.is_finished(), "a finished job's save also notes it in the manifest");
        self.jobs_written();
        self.run(|t| Ok(t.jobs.insert(job.id.as_bytes(), serde_json::to_vec(job)?).map(drop)?))
    }

    fn sync_job(&self, id: &str) -> Result<(), StoreError> {
        self.run(|t| {
            t.flush()?;
            match t.jobs.contains_key(id.as_bytes())? {
                true => Ok(()),
                false => Err(StoreError::Lost(format!("job {id}"))),
            }
        })
    }

    fn save_job(&self, job: &JobRecord) -> Result<(), StoreError> {
        let _retention = job.state.is_finished().then(|| crate::sync::lock(&self.finished_jobs));
        self.jobs_written();
        self.run(|t| {
            t.jobs.insert(job.id.as_bytes(), serde_json::to_vec(job)?)?;
            t.flush()
        })?;
        if job.state.is_finished() {
            self.manifest.note(|m| {
                m.finished_jobs.insert(job.id.clone(), job.state.to_string());
            });
        }
        Ok(())
    }

    fn jobs(&self) -> Result<Vec<JobRecord>, StoreError> {
        self.run(|t| t.jobs.iter().map(|entry| Ok(serde_json::from_slice(&entry?.1)?)).collect())
    }

    fn job(&self, id: &str) -> Result<Option<JobRecord>, StoreError> {
        self.run(|t| t.jobs.get(id.as_bytes())?.map(|bytes| Ok(serde_json::from_slice(&bytes)?)).transpose())
    }

    fn job_table(&self) -> Result<Vec<StoredJob>, StoreError> {
        // The job table's start takes what the opening read, unchanged since: nothing writes a
        // job before the table exists to write it.
        if let Some(jobs) = crate::sync::lock(&self.census_jobs).take() {
            return Ok(jobs);
        }
        self.run(|t| t.jobs.iter().map(|entry| table_job(&entry?.1)).collect())
    }

    fn save_session(&self, session: &SessionRecord) -> Result<(), StoreError> {
        self.run(|t| {
            t.sessions.insert(session.key.as_bytes(), serde_json::to_vec(session)?)?;
            t.flush()
        })
    }

    fn note_export(&self, workspace_id: &str, task_id: &str, seq: u64, digest: String) -> Result<(), StoreError> {
        self.manifest.note(|m| {
            m.exported.insert(head_key(workspace_id, task_id), manifest::ExportPoint { seq, digest });
        });
        Ok(self.manifest.save()?)
    }

    fn forget(&self, job_ids: &[String], session_keys: &[String]) -> Result<(), StoreError> {
        let batch = |keys: &[String]| {
            let mut batch = sled::Batch::default();
            keys.iter().for_each(|k| batch.remove(k.as_bytes()));
            batch
        };
        // Out of the manifest first, and on disk: a manifest must never promise a job the
        // database no longer holds (if it cannot be saved, nothing is forgotten this time).
        let _saves = crate::sync::lock(&self.finished_jobs);
        self.manifest.note(|m| job_ids.iter().for_each(|id| drop(m.finished_jobs.remove(id))));
        self.manifest.save()?;
        self.jobs_written();
        self.run(|t| {
            t.jobs.apply_batch(batch(job_ids))?;
            t.sessions.apply_batch(batch(session_keys))?;
            t.flush()
        })
    }

    fn sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
        self.run(|t| t.sessions.iter().map(|entry| Ok(serde_json::from_slice(&entry?.1)?)).collect())
    }

    fn flush(&self) -> Result<(), StoreError> {
        self.run(Trees::flush)?;
        // A manifest that cannot be saved (a full disk) only lags; the database is flushed.
        let _ = self.manifest.save();
        Ok(())
    }

    /// Take sled's handles, wait (a little) for the calls that still hold them to finish
    /// (a background read walking every ledger, say), and once they are the last, drop them
    /// and mark the database closed: dropping the last one closes sled, which writes nothing
    /// after. Still held past the wait, no mark is left, and the next start makes its copy as
    /// after a crash. Blocks: call it off the async runtime.
    fn close(&self) {
        self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
        let deadline = std::time::Instant::now() + CLOSE_WAIT;
        // Every ledger write still between its change and its manifest note finishes first
        // (one that has not begun waits, then finds the database closed).
        let _ledger_writes = loop {
            match self.ledger_writes.try_write() {
                Ok(held) => break held,
                Err(std::sync::TryLockError::Poisoned(poisoned)) => break poisoned.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) if std::time::Instant::now() > deadline => {
                    return tracing::info!(
                        "a ledger write was still in progress as the daemon stopped; the next start copies the database first"
                    );
                }
                Err(std::sync::TryLockError::WouldBlock) => std::thread::sleep(std::time::Duration::from_millis(2)),
            }
        };
        let Some(mut trees) = self.trees.write().unwrap_or_else(|e| e.into_inner()).take() else { return };
        loop {
            match Arc::try_unwrap(trees) {
                Ok(last) => {
                    // A write that failed since (a full disk) leaves sled's log unfinished,
                    // which its flush reports: no mark then.
                    if let Err(e) = last.flush() {
                        return tracing::warn!(
                            "the state database's last flush failed ({e}); the next start copies it first"
                        );
                    }
                    drop(last);
                    // The manifest saved now holds every write; one that cannot be saved (a
                    // full disk) lags, does not match the mark, and the next start walks.
                    let _ = self.manifest.save();
                    return closed::mark(&self.dir, &self.manifest.digest());
                }
                Err(_) if std::time::Instant::now() > deadline => {
                    return tracing::info!(
                        "the state database was still in use as the daemon stopped; the next start copies it first"
                    );
                }
                Err(shared) => trees = shared,
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::job::{JobKind, JobState};

    /// The manifest on disk may lag the database by the changes its writer had not saved
    /// when the daemon died. A job that ended twice (a reviewer's answer and a cancellation
    /// crossing) leaves a manifest holding the first end and a database holding the second:
    /// a healthy database, which must open.
    #[test]
    fn a_manifest_that_lags_a_jobs_second_end_does_not_refuse_the_database() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let store = SledStore::open(&db).unwrap();
        let mut job =
            JobRecord::queued("job-1-a".into(), JobKind::Review, "w".into(), "/r".into(), "t".into(), "now".into());
        job.state = JobState::Succeeded;
        store.save_job(&job).unwrap();
        store.flush().unwrap();
        let lagging = std::fs::read(manifest::path_for(&db)).unwrap();
        job.state = JobState::Cancelled;
        store.save_job(&job).unwrap();
        drop(store);
        // The crash: the writer had not saved the second end yet.
        std::fs::write(manifest::path_for(&db), lagging).unwrap();
        let store = SledStore::open(&db).expect("a lagging manifest is no damage");
        assert_eq!(store.jobs().unwrap()[0].state, JobState::Cancelled);
    }

    /// The census hashes a ledger again only past the head the manifest records (its digest
    /// there is taken as recorded): after a manifest that lags the database by two appends, and
    /// beside a ledger it does not record at all, every digest it arrives at is the one the
    /// whole ledger, hashed from its first entry, has.
    #[test]
    fn the_census_chains_on_from_a_recorded_digest_to_the_whole_ledgers_own() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let store = SledStore::open(&db).unwrap();
        let event = |n: usize| LedgerEvent::Build { status: "active".into(), reason: format!("step {n}") };
        for n in 0..3 {
            store.append("w", "t", "2026-01-01T00:00:00Z", vec![event(n)]).unwrap();
        }
        store.flush().unwrap();
        let lagging = std::fs::read(manifest::path_for(&db)).unwrap();
        store.append("w", "t", "2026-01-01T00:00:01Z", vec![event(3), event(4)]).unwrap();
        store.append("w", "u", "2026-01-01T00:00:01Z", vec![event(5)]).unwrap();
        drop(store);
        std::fs::write(manifest::path_for(&db), lagging).unwrap();
        let store = SledStore::open(&db).expect("a lagging manifest is no damage");
        let reopened = Manifest::load(&manifest::path_for(&db)).unwrap().unwrap();
        for task in ["t", "u"] {
            let whole = crate::domain::ledger::chain_digest(store.ledger("w", task).unwrap().iter());
            assert_eq!(reopened.digests[&head_key("w", task)], whole, "{task}");
        }
        assert_eq!((reopened.heads[&head_key("w", "t")], reopened.heads[&head_key("w", "u")]), (5, 1));
    }

    /// A ledger missing an entry (a damaged database) is refused at open, wherever the gap is:
    /// at the head the manifest records (the census took that entry's digest as recorded and
    /// lost the check once it was gone), below it, past it, or at its first entry, and with no
    /// manifest at all. The census used to serve such a ledger and drop its digest.
    #[test]
    fn a_ledger_missing_an_entry_is_refused_wherever_the_gap_is() {
        let event = |n: u64| LedgerEvent::Build { status: "active".into(), reason: format!("step {n}") };
        for (gap, keep_manifest) in [(3, true), (2, true), (5, true), (1, true), (3, false)] {
            let dir = tempfile::tempdir().unwrap();
            let db = dir.path().join("db");
            let store = SledStore::open(&db).unwrap();
            for n in 1..=3 {
                store.append("w", "t", "2026-01-01T00:00:00Z", vec![event(n)]).unwrap();
            }
            store.flush().unwrap();
            // The manifest as saved with the head at 3; the entries after it are the database's.
            store.manifest.save().unwrap();
            let recorded = std::fs::read(manifest::path_for(&db)).unwrap();
            store.append("w", "t", "2026-01-01T00:00:01Z", vec![event(4), event(5), event(6)]).unwrap();
            let trees = store.trees().unwrap();
            let mut key = ledger_prefix("w", "t");
            key.extend_from_slice(&u64::to_be_bytes(gap));
            assert!(trees.ledger.remove(key).unwrap().is_some());
            trees.flush().unwrap();
            drop((trees, store));
            match keep_manifest {
                true => std::fs::write(manifest::path_for(&db), recorded).unwrap(),
                false => std::fs::remove_file(manifest::path_for(&db)).unwrap(),
            }
            match SledStore::open(&db) {
                Err(StoreError::Damaged { problems, .. }) => {
                    let said = problems.join("; ");
                    assert!(said.contains(&format!("the ledger of w/t lacks entry {gap} of 6")), "gap {gap}: {said}");
                }
                Err(e) => panic!("gap {gap}: {e}"),
                Ok(_) => {
                    panic!("gap {gap} (manifest kept: {keep_manifest}): the ledger was served with an entry missing")
                }
            }
        }
    }

    /// An orderly close leaves a mark vouching for the manifest it saved: the next start takes
    /// the ledgers' heads and digests from it, which are exactly what walking every entry
    /// finds, and appends go on from them. A manifest changed after the close (a head raised
    /// past what the database holds) is not vouched for: that start walks and refuses.
    #[test]
    fn a_manifest_an_orderly_close_vouched_for_stands_for_the_ledger_walk_and_only_it() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let event = |n: u64| LedgerEvent::Build { status: "active".into(), reason: format!("step {n}") };
        let store = SledStore::open(&db).unwrap();
        for (task, steps) in [("t", 4), ("u", 2)] {
            for n in 0..steps {
                store.append("w", task, "2026-01-01T00:00:00Z", vec![event(n), event(n + 100)]).unwrap();
            }
        }
        let mut job =
            JobRecord::queued("job-1-a".into(), JobKind::Acceptance, "w".into(), "/r".into(), "t".into(), "now".into());
        job.state = JobState::Succeeded;
        store.save_job(&job).unwrap();
        store.close();
        let closed_mark = db.with_file_name("db.closed");
        let marked = std::fs::read(&closed_mark).unwrap();

        let recorded = Manifest::load(&manifest::path_for(&db)).unwrap().unwrap();
        let trees = Trees::open(&db).unwrap();
        let walked = census(&trees, Some(&recorded), false).unwrap().0;
        let vouched = census(&trees, Some(&recorded), true).unwrap().0;
        assert_eq!(vouched, walked);
        assert_eq!(walked.heads[&head_key("w", "t")], 8);
        drop(trees);

        let store = SledStore::open(&db).expect("a database an orderly close marked");
        assert!(!closed_mark.exists(), "the mark is used up");
        let written = store.append("w", "t", "2026-01-01T00:00:01Z", vec![event(9)]).unwrap();
        assert_eq!(written[0].seq, 9);
        let whole = crate::domain::ledger::chain_digest(store.ledger("w", "t").unwrap().iter());
        store.close();
        assert_eq!(Manifest::load(&manifest::path_for(&db)).unwrap().unwrap().digests[&head_key("w", "t")], whole);

        // The manifest raised after the close: not what the mark vouched for, so walked.
        let mut raised = Manifest::load(&manifest::path_for(&db)).unwrap().unwrap();
        raised.heads.insert(head_key("w", "u"), 7);
        raised.save(&manifest::path_for(&db)).unwrap();
        match SledStore::open(&db) {
            Err(StoreError::Damaged { problems, .. }) => {
                assert!(problems.join("; ").contains("the ledger of w/u ends at 4 of 7 entries"), "{problems:?}")
            }
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("a manifest changed after the close was taken on trust"),
        }
        assert!(!marked.is_empty());
    }

    /// A close waits for a ledger write between its change to the database and its note in
    /// the manifest: the manifest it saves and vouches for holds that write's head. Before,
    /// the close could take the handles in that gap and vouch for a manifest a head short.
    #[test]
    fn the_close_waits_for_a_ledger_writes_manifest_note() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let store = Arc::new(SledStore::open(&db).unwrap());
        let writing = crate::sync::read(&store.ledger_writes);
        let closing = std::thread::spawn({
            let store = store.clone();
            move || store.close()
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !store.closed.load(std::sync::atomic::Ordering::SeqCst) {
            assert!(std::time::Instant::now() < deadline, "the close never began");
            std::thread::yield_now();
        }
        // Given time to finish, a close that did not wait would have marked the database by
        // now (it takes a few milliseconds); this one must not, while the write is unnoted.
        let mark_file = db.with_file_name("db.closed");
        let patience = std::time::Instant::now() + std::time::Duration::from_millis(500);
        while std::time::Instant::now() < patience {
            assert!(!mark_file.exists(), "the close vouched for the manifest before a write's note");
            std::thread::yield_now();
        }
        // The write's note, landing while the close is under way.
        store.manifest.note(|m| {
            m.heads.insert(head_key("w", "late"), 1);
        });
        drop(writing);
        closing.join().unwrap();
        let saved = Manifest::load(&manifest::path_for(&db)).unwrap().unwrap();
        assert_eq!(saved.heads.get(&head_key("w", "late")), Some(&1));
        let mark: serde_json::Value = serde_json::from_slice(&std::fs::read(&mark_file).unwrap()).unwrap();
        assert_eq!(mark["manifest"], saved.digest().as_str(), "the mark vouches for the manifest saved last");
    }

    /// A job record the job table could not read (a field missing) refuses the start, as any
    /// unreadable record does, though its id and state read: the job table would start without it.
    #[test]
    fn a_job_record_the_job_table_cannot_read_refuses_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let store = SledStore::open(&db).unwrap();
        let trees = store.trees().unwrap();
        trees.jobs.insert("job-1-a", br#"{"id":"job-1-a","state":"queued"}"#.as_slice()).unwrap();
        trees.flush().unwrap();
        drop((trees, store));
        assert!(matches!(SledStore::open(&db), Err(StoreError::Damaged { .. })));
    }

    /// A workspace retired from its folder (another took the folder) leaves the database and
    /// the manifest together: the next open finds nothing missing, and its ledger stays.
    #[test]
    fn a_retired_workspace_leaves_the_manifest_too_and_keeps_its_ledger() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let store = SledStore::open(&db).unwrap();
        for id in ["old", "new"] {
            store.save_workspace(&WorkspaceRecord { id: id.into(), root: "/r".into(), scafld: None }).unwrap();
        }
        let event = LedgerEvent::Build { status: "active".into(), reason: "kept".into() };
        store.append("old", "t", "2026-01-01T00:00:00Z", vec![event]).unwrap();
        store.retire_workspaces(&["old".to_string()]).unwrap();
        drop(store);
        let store = SledStore::open(&db).expect("the manifest agrees with the database");
        let ids: Vec<String> = store.workspaces().unwrap().into_iter().map(|w| w.id).collect();
        assert_eq!(ids, ["new"]);
        assert_eq!(store.ledger("old", "t").unwrap().len(), 1);
    }

    /// The job table's start takes the jobs the opening read; once a job is written (or
    /// forgotten) they are read again, never served out of date.
    #[test]
    fn the_jobs_the_opening_read_are_never_served_after_a_job_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let job = |id: &str| {
            JobRecord::queued(id.into(), JobKind::Acceptance, "w".into(), "/r".into(), "t".into(), "now".into())
        };
        let ids = |store: &SledStore| store.jobs().unwrap().into_iter().map(|j| j.id).collect::<Vec<_>>();
        let reopened = |store: SledStore| {
            drop(store);
            SledStore::open(&db).unwrap()
        };
        let store = SledStore::open(&db).unwrap();
        store.save_job(&job("job-1-a")).unwrap();
        let store = reopened(store);
        assert_eq!(ids(&store), ["job-1-a"], "what the opening read");
        assert_eq!(ids(&store), ["job-1-a"], "read again");
        let store = reopened(store);
        store.put_job(&job("job-2-b")).unwrap();
        assert_eq!(ids(&store), ["job-1-a", "job-2-b"], "a put job");
        let store = reopened(store);
        store.save_job(&job("job-3-c")).unwrap();
        assert_eq!(ids(&store).len(), 3, "a saved job");
        let store = reopened(store);
        store.forget(&["job-1-a".to_string()], &[]).unwrap();
        assert_eq!(ids(&store), ["job-2-b", "job-3-c"], "a forgotten job");
    }

    /// A job put without waiting for the disk is synced by its id, and read back after a
    /// reopen; syncing a job the database does not hold (a reopen dropped it) is an error,
    /// never a silent success.
    #[test]
    fn a_put_job_is_durable_once_synced_and_a_lost_one_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let store = SledStore::open(&db).unwrap();
        let job =
            JobRecord::queued("job-1-a".into(), JobKind::Acceptance, "w".into(), "/r".into(), "t".into(), "now".into());
        store.put_job(&job).unwrap();
        store.sync_job("job-1-a").unwrap();
        assert!(store.sync_job("job-2-b").unwrap_err().to_string().contains("job-2-b"));
        drop(store);
        let store = SledStore::open(&db).unwrap();
        assert_eq!(store.jobs().unwrap().iter().map(|j| j.id.as_str()).collect::<Vec<_>>(), vec!["job-1-a"]);
    }

    /// A full disk fails sled's writes; the reopen that follows fails too, leaving the snapshot
    /// sled could not write as an empty `snap.<lsn>.generating`, and the store with no handles.
    /// Once there is room again the next call reopens the database, which reads whole.
    #[test]
    fn a_reopen_after_a_full_disk_sets_aside_the_snapshot_sled_could_not_write() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let store = SledStore::open(&db).unwrap();
        let event = LedgerEvent::Build { status: "active".into(), reason: "kept".into() };
        store.append("w", "t", "now", vec![event.clone(), event]).unwrap();
        drop(store);
        let store = SledStore::open(&db).unwrap(); // sled writes its first snapshot
        // The state a failed reopen leaves: the handles gone, the empty snapshot beside the log.
        drop(store.trees.write().unwrap().take());
        let snapshot = std::fs::read_dir(&db)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .find(|n| n.to_string_lossy().starts_with("snap."));
        let unfinished = db.join(format!("{}.generating", snapshot.unwrap().to_string_lossy()));
        std::fs::write(&unfinished, b"").unwrap();
        assert_eq!(store.ledger("w", "t").expect("the next call reopens the database").len(), 2);
        assert!(!unfinished.exists());
    }

    /// A build step's events and then the end of its job are saved: both read back after a
    /// reopen, numbered after what the ledger held, and the manifest (saved at close) promises
    /// both, so a reopen checks them.
    #[test]
    fn a_jobs_end_is_saved_with_the_events_that_end_it() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let store = SledStore::open(&db).unwrap();
        let event = |reason: &str| LedgerEvent::Build { status: "active".into(), reason: reason.into() };
        store.append("w", "t", "now", vec![event("opened")]).unwrap();
        let mut job =
            JobRecord::queued("job-1-a".into(), JobKind::Acceptance, "w".into(), "/r".into(), "t".into(), "now".into());
        job.state = JobState::Succeeded;
        let ending = store.append_ending("w", "t", "later", vec![event("ran"), event("done")], &job).unwrap();
        assert!(ending.job_unsaved.is_none());
        let written = ending.written;
        assert_eq!(written.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![2, 3]);
        store.flush().unwrap();
        let saved = manifest::Manifest::load(&manifest::path_for(&db)).unwrap().unwrap();
        assert_eq!(saved.heads.get("w/t"), Some(&3));
        assert_eq!(saved.finished_jobs.get("job-1-a").map(String::as_str), Some("succeeded"));
        drop(store);
        let store = SledStore::open(&db).expect("the manifest agrees with the database");
        assert_eq!(store.ledger("w", "t").unwrap().len(), 3);
        assert_eq!(store.jobs().unwrap()[0].state, JobState::Succeeded);
    }
}

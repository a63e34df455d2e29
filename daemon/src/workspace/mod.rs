//! Workspaces on disk: the `.scafld/` layout, spec files, the in-memory spec index and the
//! file watcher that keeps it current.

pub mod agent_guide;
pub mod index;
pub mod layout;
pub mod shims;
pub mod slots;
pub mod specfile;
pub mod tripwire;
pub mod watch;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

pub use layout::{ID_FILE, SCAFLD_DIR};

use crate::config::{self, Config, ConfigError};
use crate::domain::lifecycle::Status;
use crate::rendered::Rendered;
use index::{Index, Stamp};
use scafld_protocol::methods::ListResult;

/// An open workspace: its identity, its spec index, its configuration and its job slots.
pub struct Workspace {
    pub id: String,
    pub root: PathBuf,
    /// Where its scafld data lives (review packets, run output): `<root>/.scafld`, or for a
    /// plain git repository reviewed without `scafld init`, a folder in the daemon's state dir.
    pub data: PathBuf,
    /// The folder's range reviews made before it had `.scafld/` (for a plain repository, the
    /// workspace itself): they stay the folder's after `scafld init` (see [`Workspace::owns`]).
    pub range: RangeHome,
    pub index: RwLock<Index>,
    /// Jobs of this workspace that may run at once (`execution.max_parallel_jobs`).
    job_slots: slots::JobSlots,
    /// The merged config and the stamps of the two files it was read from.
    config: Mutex<Option<(Config, [Option<Stamp>; 2])>>,
    /// The id file's stamp when it last named this workspace (settled stamps only).
    id_seen: Mutex<Option<Stamp>>,
    /// The last scan for toolchain files (see [`Workspace::toolchain_files`]).
    shims: Mutex<Option<shims::Scan>>,
    /// The last `list` reply, with what it was rendered from (see `tasks::read::list`).
    pub listed: Mutex<Option<(ListKey, Rendered<ListResult>)>>,
    /// Each task's `.scafld/runs/<task>/session.json` as `list` last followed it, by its
    /// settled stamp: one unchanged since is not read again (see
    /// `tasks::follow_original_sessions`).
    pub sessions_followed: Mutex<std::collections::HashMap<String, Stamp>>,
    /// Held while the workspace's ledgers are read into its index (`ledger::load_states`),
    /// so that a second reader waits for the first instead of reading them all again.
    pub ledger_loading: Mutex<()>,
    /// The root folder held open, so that where it is now can be told after a `mv` (see
    /// [`Workspace::now_at`]); the last one is in force, none when it could not be opened.
    /// One whose folder was removed is followed by the folder at `root` once that holds this
    /// workspace again (restored from a copy: see [`Workspace::anchored`]); one before it
    /// stays open while an [`Anchored`] handed out of it is kept (a job writing through its
    /// `/proc/self/fd/N` path, which so never names another file), and is closed after.
    anchors: Mutex<Vec<Arc<std::fs::File>>>,
}

/// Where the range reviews of a plain git repository (no `.scafld/`) live: a workspace id
/// derived from the folder's path and a data folder in the daemon's state dir.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeHome {
    pub id: String,
    pub data: PathBuf,
}

/// What a `list` reply was rendered from: the index's generation and the call's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListKey {
    pub generation: u64,
    pub filter: Option<&'static [Status]>,
    pub counts: bool,
}

impl Workspace {
    /// A workspace with `.scafld/`; its whole-workspace reads rely on `tripwire` when given.
    /// `range` is where the folder's range reviews lived before it was initialised.
    pub fn open(id: String, root: PathBuf, range: RangeHome, tripwire: Option<Arc<tripwire::Tripwire>>) -> Workspace {
        let data = root.join(layout::SCAFLD_DIR);
        let index = Index::watched(&root, tripwire);
        Workspace::with_data(id, root, data, range, index)
    }

    /// A plain git repository (no `.scafld/`), reviewed by range with its data in the state dir.
    pub fn bare(root: PathBuf, range: RangeHome) -> Workspace {
        let index = Index::new(&root);
        Workspace::with_data(range.id.clone(), root, range.data.clone(), range, index)
    }

    /// Whether records of `workspace_id` (review sessions, jobs) belong to this workspace: its
    /// own, and those of the range reviews its folder had before `scafld init`, which stay
    /// where they began (nothing the user ran is lost to an init).
    pub fn owns(&self, workspace_id: &str) -> bool {
        workspace_id == self.id || workspace_id == self.range.id
    }

    /// The data folder of the records of `workspace_id` (one this workspace [owns]): a range
    /// review begun before `scafld init` keeps its packet and runs in the state dir.
    ///
    /// [owns]: Workspace::owns
    pub fn data_of(&self, workspace_id: &str) -> &Path {
        if workspace_id == self.range.id { &self.range.data } else { &self.data }
    }

    /// Whether the folder at `root` still holds this workspace: its `.scafld/workspace_id`
    /// names it (the folder may hold another one now: deleted and initialised again, or
    /// re-cloned), and the folder opened as it was not moved away still naming it (then what
    /// sits at `root` is a copy put where it was, `mv ws ws-moved; cp -a ws-moved ws`, and the
    /// workspace is at [`Workspace::now_at`]).
    pub fn id_file_names_this(&self) -> bool {
        self.id_file_reads_this() && self.moved_away().is_none()
    }

    /// Where the folder opened as this workspace was moved (renamed) to, when it still holds
    /// it there (its id file names it).
    pub fn moved_away(&self) -> Option<PathBuf> {
        let now = self.now_at().filter(|now| *now != self.root)?;
        (layout::read_id(&now).ok().flatten().as_deref() == Some(self.id.as_str())).then_some(now)
    }

    /// Whether `.scafld/workspace_id` at `root` names this workspace. An unchanged settled file
    /// is not read again: a stat, where a read is an open, reads and a close.
    fn id_file_reads_this(&self) -> bool {
        let path = self.root.join(layout::ID_FILE);
        let stamp = Stamp::of(&path);
        if stamp.is_some() && *crate::sync::lock(&self.id_seen) == stamp {
            return true;
        }
        let current = scafld_local::capped::read_text(&path, "workspace id file", layout::MAX_ID_FILE_BYTES).ok();
        let names = current.as_deref().map(str::trim) == Some(self.id.as_str());
        *crate::sync::lock(&self.id_seen) = stamp.filter(|stamp| names && stamp.settled());
        names
    }

    /// Watch `paths` (workspace-relative; none: the whole tree) as the files `task`'s current
    /// review judged, so that the watch loop hears of their changes as `task`'s
    /// ([`tripwire::Tripwire::watch_judged`]). Nothing without a change queue.
    pub fn watch_judged(&self, task: &str, paths: &[String]) {
        // The index's lock is not held over the folders' walk.
        let wire = crate::sync::read(&self.index).tripwire();
        if let Some(wire) = wire {
            wire.watch_judged(&self.root, task, paths);
        }
    }

    /// Stop watching `task`'s judged files: it has no current review in review.
    pub fn forget_judged(&self, task: &str) {
        // The index's lock is not held over the folders' walk.
        let wire = crate::sync::read(&self.index).tripwire();
        if let Some(wire) = wire {
            wire.forget_judged(&self.root, task);
        }
    }

    /// The toolchain files whose shims an acceptance command's PATH gets: the last scan while
    /// it stands, else a new one (see [`shims`]).
    pub fn toolchain_files(&self) -> Vec<String> {
        let mut kept = crate::sync::lock(&self.shims);
        match kept.as_ref().filter(|scan| scan.stands()) {
            Some(scan) => scan.found.clone(),
            None => kept.insert(shims::scan(&self.root)).found.clone(),
        }
    }

    /// The checkout this one's writes under `.scafld` run from, when its `.scafld` is a link to
    /// another checkout's (a git worktree sharing the main checkout's: the link's target is that
    /// workspace's folder, `settle_identity` checked): scafld writes only through a real
    /// folder, so a command that writes specs, packets or runs works from there. `None` for a
    /// checkout whose `.scafld` is its own.
    pub fn writes_from(&self) -> Option<PathBuf> {
        let link = self.root.join(layout::SCAFLD_DIR);
        if !std::fs::symlink_metadata(&link).is_ok_and(|m| m.file_type().is_symlink()) {
            return None;
        }
        link.canonicalize().ok()?.parent().map(Path::to_path_buf)
    }

    /// `command` as it runs from where the user stands in this checkout: named from the checkout
    /// writes run from ([`Workspace::writes_from`]) when this one's `.scafld` is a link, so
    /// every hint naming a command that writes under `.scafld` works as printed.
    pub fn runnable(&self, command: &str) -> String {
        let from = self.writes_from();
        scafld_protocol::cli::run_from(from.as_ref().map(|f| f.to_string_lossy()).as_deref(), command)
    }

    /// Whether this is a plain repository without `.scafld/` (only range reviews run here).
    pub fn is_bare(&self) -> bool {
        self.data != self.root.join(layout::SCAFLD_DIR)
    }

    fn with_data(id: String, root: PathBuf, data: PathBuf, range: RangeHome, index: Index) -> Workspace {
        Workspace {
            id,
            data,
            range,
            index: RwLock::new(index),
            // Sized from the config at each acquisition; this is only the starting point.
            job_slots: slots::JobSlots::new(config::Execution::default().max_parallel_jobs as usize),
            config: Mutex::new(None),
            id_seen: Mutex::new(None),
            shims: Mutex::new(None),
            listed: Mutex::new(None),
            sessions_followed: Mutex::default(),
            ledger_loading: Mutex::new(()),
            anchors: Mutex::new(std::fs::File::open(&root).ok().map(Arc::new).into_iter().collect()),
            root,
        }
    }

    /// A path that reaches the root folder opened as this workspace wherever it is now (the
    /// daemon's descriptor of it, `/proc/self/fd/N`), for a file written once work that began
    /// here ends: it lands in this workspace even when its folder was renamed meanwhile, never
    /// in another one moved to the old path. The root itself when the folder is not held.
    /// A held folder that was removed while `root` holds this workspace again (its id file
    /// names it: the folder deleted and restored from a copy) is let go for the one at `root`.
    /// The path holds only while the [`Anchored`] is kept: a folder held before the one in
    /// force is closed once nothing keeps a path through it, so deleting and restoring the
    /// workspace again and again leaves one descriptor open, not one per restore.
    pub fn anchored(&self) -> Anchored {
        use std::os::fd::AsRawFd;
        let mut anchors = crate::sync::lock(&self.anchors);
        // (The file alone: the folder held was removed, so it was not moved away.)
        if anchors.last().is_some_and(|anchor| removed(anchor))
            && self.id_file_reads_this()
            && let Ok(restored) = std::fs::File::open(&self.root)
        {
            tracing::info!(workspace = %self.id, root = %self.root.display(), "workspace folder restored: held anew");
            anchors.push(Arc::new(restored));
        }
        // Only the one in force is handed out, so an earlier one nothing keeps never will be.
        let last = anchors.len().saturating_sub(1);
        let mut at = 0;
        anchors.retain(|anchor| {
            at += 1;
            at - 1 == last || Arc::strong_count(anchor) > 1
        });
        match anchors.last() {
            Some(anchor) => Anchored {
                path: PathBuf::from(format!("/proc/self/fd/{}", anchor.as_raw_fd())),
                _held: Some(anchor.clone()),
            },
            None => Anchored { path: self.root.clone(), _held: None },
        }
    }

    /// `text` (an error about a path under [`Workspace::anchored`]) with the daemon's descriptor
    /// path put back as the folder's own, so what the user reads names their workspace.
    pub fn unanchored(&self, text: &str) -> String {
        let anchored = self.anchored();
        if *anchored == *self.root {
            return text.to_string();
        }
        let here = self.now_at().unwrap_or_else(|| self.root.clone());
        text.replace(&anchored.display().to_string(), &here.display().to_string())
    }

    /// Where the root folder opened as this workspace is now: `root` itself, or another path
    /// when it was moved (renamed) since; `None` when it was removed (or cannot be told).
    /// The kernel keeps the path of an open folder current, so a moved workspace is found
    /// wherever it went on the same file system.
    pub fn now_at(&self) -> Option<PathBuf> {
        held_at(crate::sync::lock(&self.anchors).last()?)
    }

    /// A queued job's place in the line for the workspace's job slots, shared by builds and
    /// daemon-run reviewers: taken as the job is queued, so that slots go in that order.
    pub fn line_up_for_slot(&self) -> slots::Place {
        self.job_slots.line_up(self.slot_limit())
    }

    /// Wait for one of the workspace's job slots once `place` is first in line.
    pub async fn job_slot(&self, place: slots::Place) -> tokio::sync::OwnedSemaphorePermit {
        self.job_slots.acquire(place, || self.slot_limit()).await
    }

    /// The current `execution.max_parallel_jobs`, read as a job is queued and when its turn
    /// comes (kept as it was while the config does not parse).
    fn slot_limit(&self) -> usize {
        let limit = self.config().map(|c| c.execution.max_parallel_jobs as usize);
        limit.unwrap_or_else(|_| self.job_slots.size())
    }

    /// The merged configuration; re-read when either file's stamp changed (so an edit
    /// counts at once, without waiting for the watcher).
    pub fn config(&self) -> Result<Config, ConfigError> {
        let stamps = [Stamp::of(&self.root.join(config::BASE_FILE)), Stamp::of(&self.root.join(config::LOCAL_FILE))];
        let mut cached = crate::sync::lock(&self.config);
        if let Some((config, seen)) = cached.as_ref()
            && *seen == stamps
        {
            return Ok(config.clone());
        }
        let config = config::load(&self.root)?;
        *cached = Some((config.clone(), stamps));
        Ok(config)
    }

    pub fn forget_config(&self) {
        *crate::sync::lock(&self.config) = None;
    }

    /// The spec path of `task` relative to the root, as packets, ledgers and hints show it
    /// (empty when the task has no spec).
    pub fn spec_path(&self, task: &str) -> String {
        self.indexed(task).map(|e| self.relative(&e.path)).unwrap_or_default()
    }

    /// The index's entry for `task`, loading it first when the index has not seen the whole
    /// workspace yet (it may exist on disk all the same). Callers that must see the file as it
    /// is now use `tasks::fresh_entry`, which stats it every time.
    pub fn indexed(&self, task: &str) -> Option<index::SpecEntry> {
        {
            let index = crate::sync::read(&self.index);
            if let Some(entry) = index.get(task) {
                return Some(entry.clone());
            }
            if index.is_complete() {
                return None;
            }
        }
        let mut index = crate::sync::write(&self.index);
        index.sync_task(task);
        index.get(task).cloned()
    }

    /// [`Workspace::indexed`] with the spec's whole parse (read again when it was let go).
    pub fn loaded(&self, task: &str) -> Option<index::LoadedSpec> {
        let mut index = crate::sync::write(&self.index);
        if index.get(task).is_none() && !index.is_complete() {
            index.sync_task(task);
        }
        index.loaded(task)
    }

    /// Load every spec not loaded yet, parsing without the lock held so calls are served
    /// meanwhile. Blocking: run it off the async workers.
    pub fn warm_index(&self) {
        if crate::sync::read(&self.index).is_complete() {
            return;
        }
        let built = Index::build(&self.root);
        crate::sync::write(&self.index).absorb(built);
    }

    /// The workspace's folder as a `--json` answer names it (`root`) beside the paths
    /// [`Workspace::relative`] gives, so a caller in another folder can resolve them.
    pub fn shown_root(&self) -> String {
        self.root.to_string_lossy().into_owned()
    }

    /// `path` relative to the workspace root, for display.
    pub fn relative(&self, path: &Path) -> String {
        use std::os::unix::ffi::OsStrExt;
        // Byte for byte first: the index's paths are the root joined with more, and comparing
        // component by component was a tenth of `list`'s time.
        let rest = path.as_os_str().as_bytes().strip_prefix(self.root.as_os_str().as_bytes());
        if let Some(Ok(text)) = rest.and_then(|rest| rest.strip_prefix(b"/")).map(std::str::from_utf8) {
            return text.to_string();
        }
        let anchored = self.anchored();
        let inside = path.strip_prefix(&self.root).or_else(|_| path.strip_prefix(&anchored));
        inside.unwrap_or(path).display().to_string()
    }
}

/// A path that reaches the workspace's folder through the daemon's descriptor of it
/// ([`Workspace::anchored`]), which stays open while this is kept: whoever writes through the
/// path later (a job, when it ends) keeps this as long.
#[derive(Debug, Clone)]
pub struct Anchored {
    path: PathBuf,
    _held: Option<Arc<std::fs::File>>,
}

impl std::ops::Deref for Anchored {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for Anchored {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

/// Where the folder `anchor` holds open is now; `None` when it was removed (or cannot be told).
fn held_at(anchor: &std::fs::File) -> Option<PathBuf> {
    let path = read_anchor(anchor)?;
    (!is_removed(&path) && path.is_absolute()).then_some(path)
}

/// Whether the folder `anchor` holds open was removed (known to be: not when it cannot be told).
fn removed(anchor: &std::fs::File) -> bool {
    read_anchor(anchor).is_some_and(|path| is_removed(&path))
}

/// The path the kernel gives for the folder `anchor` holds open.
fn read_anchor(anchor: &std::fs::File) -> Option<PathBuf> {
    use std::os::fd::AsRawFd;
    std::fs::read_link(format!("/proc/self/fd/{}", anchor.as_raw_fd())).ok()
}

/// Whether `path`, as the kernel gives an open folder's, names a removed one.
fn is_removed(path: &Path) -> bool {
    path.as_os_str().as_encoded_bytes().ends_with(b" (deleted)") && !path.is_dir()
}

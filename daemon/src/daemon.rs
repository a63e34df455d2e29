//! The daemon's shared state: options, the store, the event bus, open workspaces, the file
//! watcher and the shutdown signal. Handlers receive it as `Arc<Daemon>`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Instant;

use scafld_protocol::methods::{DaemonStatusResult, WorkspaceInfo};
use scafld_protocol::{ErrorKind, Event, PROTOCOL_VERSION};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::error::{RpcError, RpcResult};
use crate::jobs::Jobs;
use crate::store::{Store, WorkspaceRecord};
use crate::workspace::tripwire::{Change, Tripwire};
use crate::workspace::watch;
use crate::workspace::{RangeHome, Workspace, layout, specfile};

pub const DAEMON_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Specs a changed folder may hold and still be re-read one by one (see
/// [`Daemon::folder_changed`]).
const FOLDER_SPECS: usize = 64;
const EVENT_BUFFER: usize = 1024;

/// Where a workspace opened at one folder is now (see [`Daemon::home_of`]).
pub enum Home {
    /// At the folder it was opened at.
    Here,
    /// Moved: open at its new folder.
    Moved(Arc<Workspace>),
    /// Neither: why, in a sentence. Nothing of it is written anywhere.
    Gone(String),
}

/// Facts about this daemon process that `daemon.status` reports.
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    pub socket_path: PathBuf,
    pub socket_activated: bool,
    pub state_dir: PathBuf,
    pub log_file: PathBuf,
    /// Finished jobs and settled review sessions older than this are forgotten.
    pub retention: std::time::Duration,
    /// What one client may hold of the daemon.
    pub limits: crate::rpc::transport::Limits,
    /// The file this daemon was started from, as it was at the start (`daemon.hello` says it,
    /// so a client tells a daemon of another build from the one it would start).
    pub executable: Option<scafld_protocol::methods::Executable>,
}

pub struct Daemon {
    pub options: DaemonOptions,
    started: Instant,
    store: Arc<dyn Store>,
    events: broadcast::Sender<Event>,
    shutdown: CancellationToken,
    shutdown_announced: AtomicBool,
    /// Workspaces opened since start, by canonical root: a folder holds one at a time, and one
    /// workspace may be open at two folders (a git worktree whose `.scafld` links to the main
    /// checkout's: one id, one ledger and task locks, two roots to run in).
    /// Never held across an `.await` (a std lock: the compiler and clippy keep it so).
    open_workspaces: StdMutex<HashMap<PathBuf, Arc<Workspace>>>,
    /// The ids `init` wrote into a `.scafld` it made (`create_workspace`), so that an open
    /// meeting one before it is recorded (the reopening of known workspaces at start) takes it
    /// for the new workspace it is, not for an id nothing records (see `settle_identity`).
    made_ids: StdMutex<std::collections::HashSet<String>>,
    /// An id file put back (`Restored` with the id it replaced) that no caller was told of
    /// yet, by canonical root: the next `status`, `list` or `build` there says it, once.
    unsaid: StdMutex<HashMap<PathBuf, String>>,
    /// What lets whole-workspace reads skip their stats and reports hand edits (see
    /// `workspace/tripwire.rs`); `None` when the kernel refused a queue.
    tripwire: Option<Arc<Tripwire>>,
    /// The changes the queue reports, until the watch loop takes them.
    watch_events: StdMutex<Option<mpsc::UnboundedReceiver<Change>>>,
    pub jobs: Jobs,
    /// Dossiers relayed by `scafld mcp submit-review` for running reviews.
    pub submissions: crate::providers::Submissions,
    pub sessions: crate::review::Sessions,
    /// The commands calls run outside any job (finalize, verify).
    pub call_runs: crate::runner::CallRuns,
    /// Spec moves between folders in flight, so a reader tells one from a leftover copy.
    pub spec_moves: crate::workspace::specfile::Moves,
    /// The calls in flight that are work (`Method::WORK`), for `daemon.status`.
    pub serving: crate::serving::Serving,
    /// Tasks whose spec could not be brought up to date with the next step `status` names
    /// (`ledger::reshow_next` failed: the state database unreadable while its disk was full),
    /// written again on the daemon's tick once that is possible (`unshown::retry_loop`).
    pub unshown: crate::unshown::Unshown,
}

impl Daemon {
    pub fn new(options: DaemonOptions, store: Arc<dyn Store>, shutdown: CancellationToken) -> Daemon {
        let (events, _) = broadcast::channel(EVENT_BUFFER);
        let stored = store.sessions().unwrap_or_else(|e| {
            warn!("cannot read stored review sessions: {e}");
            Vec::new()
        });
        let sessions = crate::review::Sessions::new(stored, &options.state_dir);
        let jobs = Jobs::new(store.job_table().unwrap_or_else(|e| {
            warn!("cannot read stored jobs: {e}");
            Vec::new()
        }));
        let (tripwire, watch_events) = Tripwire::new().unzip();
        let call_runs = crate::runner::CallRuns::new(&options.state_dir, shutdown.clone());
        Daemon {
            options,
            started: Instant::now(),
            store,
            events,
            shutdown,
            shutdown_announced: AtomicBool::new(false),
            open_workspaces: StdMutex::default(),
            made_ids: StdMutex::default(),
            unsaid: StdMutex::default(),
            tripwire,
            watch_events: StdMutex::new(watch_events),
            jobs,
            submissions: Default::default(),
            sessions,
            call_runs,
            spec_moves: Default::default(),
            serving: Default::default(),
            unshown: Default::default(),
        }
    }

    pub fn store(&self) -> &dyn Store {
        &*self.store
    }

    /// The store, for work off the runtime's threads.
    pub fn store_handle(&self) -> Arc<dyn Store> {
        self.store.clone()
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }

    pub fn publish(&self, event: Event) {
        // No subscribers is not an error.
        let _ = self.events.send(event);
    }

    pub fn shutdown_token(&self) -> &CancellationToken {
        &self.shutdown
    }

    /// Ask the daemon to stop: announce it to subscribers, then stop taking work. `run` does
    /// the orderly rest. Only the first request counts.
    pub fn request_shutdown(&self, reason: &str) {
        if !self.shutdown_announced.swap(true, Ordering::SeqCst) {
            info!("shutting down: {reason}");
            self.publish(Event::DaemonShuttingDown { reason: reason.to_string() });
            self.shutdown.cancel();
        }
    }

    /// Begin the stop only if the daemon runs no job and serves no call that is work, checked
    /// with the served calls' table held (see [`crate::serving::Serving::unless_serving`]); otherwise `busy`,
    /// saying with what.
    pub fn request_shutdown_if_idle(&self, reason: &str) -> RpcResult<()> {
        let stopped = self.serving.unless_serving(|| {
            let jobs = self.jobs.counts();
            if jobs.queued + jobs.running > 0 {
                return Err(jobs);
            }
            self.request_shutdown(reason);
            Ok(())
        });
        let (jobs, serving) = match stopped {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(jobs)) => (jobs, Vec::new()),
            Err(serving) => (self.jobs.counts(), serving),
        };
        let details = serde_json::json!({ "jobs": jobs, "serving": serving });
        Err(RpcError::new(ErrorKind::Busy, "the daemon was not stopped: it runs jobs or serves calls that are work")
            .with_details(details)
            .with_hint("`scafld daemon status` says what it runs; `scafld daemon stop` stops it anyway"))
    }

    pub async fn status(&self) -> RpcResult<DaemonStatusResult> {
        Ok(DaemonStatusResult {
            daemon_version: DAEMON_VERSION.to_string(),
            protocol_version: PROTOCOL_VERSION,
            pid: std::process::id(),
            uptime_seconds: self.started.elapsed().as_secs_f64(),
            socket_path: self.options.socket_path.display().to_string(),
            socket_activated: self.options.socket_activated,
            state_dir: self.options.state_dir.display().to_string(),
            log_file: self.options.log_file.display().to_string(),
            workspaces: self.workspace_list().await?,
            jobs: self.jobs.counts(),
            serving: self.serving.counts(),
        })
    }

    pub async fn workspace_list(&self) -> RpcResult<Vec<WorkspaceInfo>> {
        let open = crate::sync::lock(&self.open_workspaces);
        let mut list: Vec<WorkspaceInfo> = self
            .store
            .workspaces()
            .map_err(RpcError::internal)?
            .into_iter()
            .map(|record| {
                let gone = gone_from(Path::new(&record.root));
                WorkspaceInfo {
                    open: gone.is_none() && open.get(Path::new(&record.root)).is_some_and(|w| w.id == record.id),
                    workspace_id: record.id,
                    root: record.root,
                    gone,
                }
            })
            .collect();
        list.sort_by(|a, b| a.root.cmp(&b.root));
        Ok(list)
    }

    /// Forget the record of a workspace whose folder is gone (`workspace.forget`): named by
    /// its id, the start of its id when no other starts so, or its recorded folder. Refused
    /// while its folder is there (the next command would record it again) and while a job of
    /// it has not finished. Its ledgers stay: a folder restored with its id file is recorded
    /// again by the next command there.
    pub fn forget_workspace(&self, named: &str) -> RpcResult<WorkspaceInfo> {
        let records = self.store.workspaces().map_err(RpcError::internal)?;
        let folder = named.trim_end_matches('/');
        let exact: Vec<_> =
            records.iter().filter(|r| r.id == named || (!folder.is_empty() && r.root == folder)).collect();
        let matching = match exact.is_empty() && !named.is_empty() {
            true => records.iter().filter(|r| r.id.starts_with(named)).collect(),
            false => exact,
        };
        let listed = "`scafld daemon status` lists the workspaces on record";
        let record = match matching[..] {
            [record] => record.clone(),
            [] => {
                return Err(RpcError::new(ErrorKind::NotFound, format!("no workspace on record is {named:?}"))
                    .with_hint(listed));
            }
            _ => {
                let ids: Vec<&str> = matching.iter().map(|r| r.id.as_str()).collect();
                return Err(RpcError::new(
                    ErrorKind::InvalidInput,
                    format!("{named:?} names more than one workspace on record: {}", ids.join(", ")),
                )
                .with_hint("name it by its whole id or its folder"));
            }
        };
        let Some(gone) = gone_from(Path::new(&record.root)) else {
            return Err(RpcError::new(
                ErrorKind::InvalidState,
                format!(
                    "workspace {} is not gone: its folder {} is there; nothing was forgotten",
                    record.id, record.root
                ),
            )
            .with_hint("only a workspace whose folder is gone is forgotten"));
        };
        let running: Vec<String> = self
            .jobs
            .matching(|j| j.workspace_id == record.id && !j.state.is_finished())
            .into_iter()
            .map(|j| j.id)
            .collect();
        if let Some(job) = running.first() {
            return Err(RpcError::new(
                ErrorKind::Busy,
                format!(
                    "workspace {} has jobs that have not finished: {}; nothing was forgotten",
                    record.id,
                    running.join(", ")
                ),
            )
            .with_hint(format!("`scafld job wait {job}` or `scafld job cancel {job}`, then forget it")));
        }
        self.store.retire_workspaces(std::slice::from_ref(&record.id)).map_err(RpcError::internal)?;
        crate::sync::lock(&self.open_workspaces).retain(|_, ws| ws.id != record.id || ws.now_at().is_some());
        info!(workspace = %record.id, root = %record.root, "forgot workspace: {gone}");
        Ok(WorkspaceInfo { workspace_id: record.id, root: record.root, open: false, gone: Some(gone) })
    }

    /// The open workspace at `root`, opening it if needed.
    pub async fn workspace(&self, root: &str) -> RpcResult<Arc<Workspace>> {
        self.workspace_now(root)
    }

    /// [`Daemon::workspace`] for code off the async path (nothing in it waits).
    pub fn workspace_now(&self, root: &str) -> RpcResult<Arc<Workspace>> {
        let canonical = canonical_root(Path::new(root))?;
        let initialised = canonical.join(layout::SCAFLD_DIR).is_dir();
        {
            let mut open = crate::sync::lock(&self.open_workspaces);
            match open.get(&canonical) {
                Some(ws) if ws.is_bare() && !initialised => return Ok(ws.clone()),
                Some(ws) if !ws.is_bare() && ws.id_file_names_this() => return Ok(ws.clone()),
                // Its `.scafld` is gone: the folder is a plain repository again, or nothing.
                Some(ws) if !ws.is_bare() && !initialised => drop(open.remove(&canonical)),
                // Otherwise opening settles what the folder holds now, and replaces it if it
                // is another workspace.
                _ => {}
            }
        }
        // A plain repository whose range reviews this daemon keeps (after a restart too).
        if !initialised && self.range_home(&canonical).data.is_dir() {
            return self.open_bare(&canonical);
        }
        self.open_workspace_as_now(&canonical, Opening::Existing)?;
        let open = crate::sync::lock(&self.open_workspaces);
        open.get(&canonical).cloned().ok_or_else(|| RpcError::internal("workspace vanished"))
    }

    /// Workspace `id`, which work begun at `root` (a review session, a job) belongs to,
    /// wherever it is now: open at a folder that still holds it, followed to where its folder
    /// was renamed, or found at the folder the store records for it. Failing all that, the
    /// workspace at `root` as it is (the caller checks its id: never another workspace's).
    pub async fn workspace_of(&self, root: &str, id: &str) -> RpcResult<Arc<Workspace>> {
        self.workspace_of_now(root, id)
    }

    /// [`Daemon::workspace_of`] for code off the async path (nothing in it waits): a review's
    /// report, rewritten as each reviewer checkpoints.
    pub fn workspace_of_now(&self, root: &str, id: &str) -> RpcResult<Arc<Workspace>> {
        for ws in self.open_as(id) {
            match self.home_of(&ws) {
                Home::Here => return Ok(ws),
                Home::Moved(home) => return Ok(home),
                Home::Gone(_) => {}
            }
        }
        let recorded = self.store.workspaces().map_err(RpcError::internal)?.into_iter().find(|r| r.id == id);
        if let Some(why) = recorded.as_ref().and_then(|record| not_its_folder(record, Path::new(root))) {
            return Err(RpcError::new(ErrorKind::WorkspaceError, why));
        }
        if let Some(record) = recorded.filter(|r| r.root != root)
            && layout::read_id(Path::new(&record.root)).ok().flatten().as_deref() == Some(id)
            && not_reopened(&record).is_none()
        {
            return self.workspace_now(&record.root);
        }
        self.workspace_now(root)
    }

    /// Where workspace `ws` (opened at `ws.root`, say for a job that runs on) is now, before
    /// anything of its is written there: a folder that holds it no longer (moved away, another
    /// workspace moved in) is never written to as its. A folder whose id file names it, or
    /// whose id file is merely lost (the folder keeps its workspace), is [`Home::Here`]; a
    /// folder moved (renamed) since it was opened is followed and opened at its new place
    /// when its id file there names the workspace ([`Home::Moved`]); anything else is
    /// [`Home::Gone`], with a sentence saying why.
    pub fn home_of(&self, ws: &Workspace) -> Home {
        if ws.is_bare() || ws.id_file_names_this() {
            return Home::Here;
        }
        let names_it = |root: &Path| layout::read_id(root).ok().flatten();
        match ws.now_at() {
            Some(now) if now == ws.root => match names_it(&ws.root) {
                None => Home::Here,
                Some(other) => Home::Gone(format!(
                    "{} holds workspace {other} now, not workspace {} that this work belongs to",
                    ws.root.display(),
                    ws.id
                )),
            },
            Some(now) if names_it(&now).as_deref() == Some(ws.id.as_str()) => {
                match self.workspace_now(&now.display().to_string()) {
                    Ok(moved) if moved.id == ws.id => Home::Moved(moved),
                    Ok(other) => Home::Gone(format!(
                        "workspace {} moved to {}, which is opened as workspace {} now",
                        ws.id,
                        now.display(),
                        other.id
                    )),
                    Err(e) => Home::Gone(format!(
                        "workspace {} moved to {}, which cannot be opened: {e}",
                        ws.id,
                        now.display()
                    )),
                }
            }
            Some(now) => Home::Gone(format!(
                "the folder of workspace {} moved from {} to {}, whose .scafld/workspace_id no longer names it",
                ws.id,
                ws.root.display(),
                now.display()
            )),
            None => Home::Gone(format!("the folder of workspace {} ({}) was removed", ws.id, ws.root.display())),
        }
    }

    /// [`Daemon::workspace`] for a call that only reads: a `.scafld` with no id file that
    /// nothing is recorded for (a fresh clone before its first command that writes, a vendored
    /// example or test fixture an editor opens) is served under the id it would get
    /// ([`layout::unsettled_id`]) with nothing written into it or recorded, so a read changes
    /// nothing on disk; the first call that writes settles it under that id. A folder on record
    /// gets its lost id file back as with any call (it is a workspace: see
    /// [`Daemon::settle_identity`]).
    pub async fn workspace_to_read(&self, root: &str) -> RpcResult<Arc<Workspace>> {
        let canonical = canonical_root(Path::new(root))?;
        match self.unsettled(&canonical)? {
            Some(ws) => Ok(ws),
            None => self.workspace(root).await,
        }
    }

    /// The workspace [`Daemon::workspace_to_read`] serves at the canonical `root` unsettled,
    /// opened if needed; `None` for a folder without `.scafld`, with an id file, or on record.
    fn unsettled(&self, root: &Path) -> RpcResult<Option<Arc<Workspace>>> {
        if !root.join(layout::SCAFLD_DIR).is_dir() {
            return Ok(None);
        }
        let mut open = crate::sync::lock(&self.open_workspaces);
        if open.get(root).is_some_and(|ws| !ws.is_bare() && ws.id_file_names_this()) {
            return Ok(None);
        }
        if layout::read_id(root).map_err(workspace_io_error)?.is_some() {
            return Ok(None);
        }
        let records = self.store.workspaces().map_err(RpcError::internal)?;
        if recorded_here(&records, root).is_some() {
            return Ok(None);
        }
        self.say_older_record(&records, root);
        let id = unsettled_id(&records, root)?;
        if let Some(ws) = open.get(root).filter(|ws| !ws.is_bare() && ws.id == id) {
            return Ok(Some(ws.clone()));
        }
        let range = self.range_home(root);
        let workspace = Arc::new(Workspace::open(id, root.to_path_buf(), range, self.tripwire.clone()));
        open.insert(root.to_path_buf(), workspace.clone());
        drop(open);
        self.serve(workspace.clone());
        Ok(Some(workspace))
    }

    /// The folders workspace `id` is open at (one, or two when a worktree's `.scafld` links
    /// to the main checkout's).
    pub fn open_as(&self, id: &str) -> Vec<Arc<Workspace>> {
        crate::sync::lock(&self.open_workspaces).values().filter(|ws| ws.id == id).cloned().collect()
    }

    /// Where a plain git repository's range reviews live: in the state dir, under an id named
    /// by a digest of the repository's path.
    fn range_home(&self, root: &Path) -> RangeHome {
        let id = layout::range_id(root);
        let data = self.options.state_dir.join("repos").join(&id);
        RangeHome { id, data }
    }

    /// Where a range review of `root` runs: its workspace when it has `.scafld/`, else the git
    /// repository itself with its review data kept in the daemon's state dir (no `scafld init`
    /// needed to review a range).
    pub async fn review_workspace(&self, root: &str) -> RpcResult<Arc<Workspace>> {
        let canonical = canonical_root(Path::new(root))?;
        if canonical.join(layout::SCAFLD_DIR).is_dir() {
            return self.workspace(root).await;
        }
        self.open_bare(&canonical)
    }

    fn open_bare(&self, canonical: &Path) -> RpcResult<Arc<Workspace>> {
        crate::baseline::require_git(canonical)?;
        let range = self.range_home(canonical);
        std::fs::create_dir_all(&range.data).map_err(workspace_io_error)?;
        let mut open = crate::sync::lock(&self.open_workspaces);
        if let Some(ws) = open.get(canonical).filter(|ws| ws.is_bare()) {
            return Ok(ws.clone());
        }
        let ws = Arc::new(Workspace::bare(canonical.to_path_buf(), range));
        open.insert(canonical.to_path_buf(), ws.clone());
        Ok(ws)
    }

    /// Register the workspace at `root` (which must already hold `.scafld/`), watch it, and
    /// start building its spec index in the background.
    pub async fn open_workspace(&self, root: &Path) -> RpcResult<WorkspaceInfo> {
        self.open_workspace_as(root, Opening::Existing).await.map(|(info, _)| info)
    }

    /// [`Daemon::open_workspace`], told whether `scafld init` has just made its `.scafld/`
    /// (a new workspace, which takes no identity the folder had before). Also returns the id
    /// put back into `.scafld/workspace_id`, if one was ([`Restored`]).
    ///
    /// Identity comes from `.scafld/workspace_id` (see [`Daemon::settle_identity`]), so a
    /// moved workspace keeps its id and its history; a copy gets a fresh one.
    pub async fn open_workspace_as(
        &self,
        root: &Path,
        opening: Opening,
    ) -> RpcResult<(WorkspaceInfo, Option<Restored>)> {
        self.open_workspace_as_now(root, opening)
    }

    fn open_workspace_as_now(&self, root: &Path, opening: Opening) -> RpcResult<(WorkspaceInfo, Option<Restored>)> {
        let root = canonical_root(root)?;
        if !root.join(layout::SCAFLD_DIR).is_dir() {
            return Err(RpcError::workspace_not_found(format!(
                "{} is not a scafld workspace (no .scafld/ directory)",
                root.display()
            ))
            .with_hint("run `scafld init` there first"));
        }
        let root_text = root.display().to_string();
        // Identity is settled with the table locked, so two opens of one folder agree on its id.
        let (id, restored, inserted) = {
            let mut open = crate::sync::lock(&self.open_workspaces);
            let (id, restored) = self.settle_identity(&open, &root, opening)?;
            // One workspace per folder: one initialised again in place (a new id) or a plain
            // repository's range-review stand-in is replaced, not kept beside it to take its
            // hand edits. Opened meanwhile by another call: theirs stands.
            let inserted = match open.get(&root) {
                Some(ws) if ws.id == id && !ws.is_bare() => None,
                _ => {
                    let range = self.range_home(&root);
                    let workspace = Arc::new(Workspace::open(id.clone(), root.clone(), range, self.tripwire.clone()));
                    open.insert(root.clone(), workspace.clone());
                    Some(workspace)
                }
            };
            (id, restored, inserted)
        };
        if let Some(workspace) = inserted {
            self.serve(workspace);
        }
        Ok((WorkspaceInfo { workspace_id: id, root: root_text, open: true, gone: None }, restored))
    }

    /// Serve a workspace just put in the open table: watch it, index it, announce it.
    fn serve(&self, workspace: Arc<Workspace>) {
        let (id, root) = (workspace.id.clone(), workspace.root.display().to_string());
        // Watched before it is read, so that no edit falls between the two.
        if let Some(wire) = &self.tripwire
            && wire.arm(&workspace.root).is_none()
        {
            info!(root = %root, "the spec folders are not all watched here; whole-workspace reads stat them");
        }
        // The index fills in the background; calls are served meanwhile (see index.rs).
        // (The ledgers' states are read by the first `list` or `report`, which waits for
        // them: a warm-up still running when the daemon stops must not hold the database,
        // which the next daemon may be opening once the socket is gone.)
        tokio::task::spawn_blocking(move || {
            workspace.warm_index();
            info!(workspace = %workspace.id, root = %workspace.root.display(), specs = crate::sync::read(&workspace.index).len(), "workspace indexed");
        });
        self.publish(Event::WorkspaceOpened { workspace_id: id, root });
    }

    /// The identity of the workspace at `root`, settled (the workspace table locked by the
    /// caller), with the id file and the store's record brought in line:
    ///
    /// - `.scafld/workspace_id` names it. A copy (the `.scafld` folder the id is recorded with
    ///   holds it elsewhere, or its recorded root still does: [`is_copy`]) gets a fresh id; the
    ///   recorded folder itself, moved, keeps it; a `.scafld` reached through a symlink that is
    ///   the recorded folder's own is the same workspace, not a copy (a git worktree sharing
    ///   the main checkout's), and its id stays.
    /// - With no id file in a `.scafld` that is still there (deleted by hand, `git clean -X`),
    ///   the folder keeps the workspace the store records for it, whose ledgers and running
    ///   jobs are its own (the id is put back, and returned); a folder with none on record
    ///   takes the id reads served it under ([`layout::unsettled_id`]), and a `.scafld` that
    ///   `init` has just made a new one.
    /// - An id file naming an id nothing here records (written by hand, or copied from another
    ///   machine's workspace) in a `.scafld` that was there, at a folder the store records
    ///   another workspace for: the folder keeps that one, as with a lost id file, and says so
    ///   (a warning in the log, and `init`'s), so its ledgers never silently part from its
    ///   specs (a task's history is what decides its status).
    /// - A folder never takes another workspace's identity while a job of the one it held
    ///   still runs there (their task locks and ledgers would part): `busy`, naming the job,
    ///   and nothing is written.
    ///
    /// The record follows a moved workspace to its new folder, and stays with the folder whose
    /// `.scafld` is the real directory when several reach it; recording one at a folder
    /// retires any other recorded there (a folder holds one workspace at a time).
    fn settle_identity(
        &self,
        open: &HashMap<PathBuf, Arc<Workspace>>,
        root: &Path,
        opening: Opening,
    ) -> RpcResult<(String, Option<Restored>)> {
        let root_text = root.display().to_string();
        let records = self.store.workspaces().map_err(RpcError::internal)?;
        let recorded = |id: &str| records.iter().find(|r| r.id == id);
        let (id, write, restored) = match layout::read_id(root).map_err(workspace_io_error)? {
            Some(id) => match recorded(&id) {
                Some(known) if is_copy(known, moved_to(open, &id), root) => {
                    (layout::new_id().map_err(workspace_io_error)?, true, None)
                }
                None => {
                    match recorded_here(&records, root).filter(|kept| {
                        *kept != id && opening == Opening::Existing && !crate::sync::lock(&self.made_ids).contains(&id)
                    }) {
                        Some(kept) => {
                            warn!(workspace = %kept, root = %root_text, unknown = %id, "the id file names a workspace nothing records: the folder keeps its own, and the id file names it again");
                            let restored = Restored { id: kept.clone(), replaced: Some(id) };
                            // Said by the next command run here, not only in this log.
                            crate::sync::lock(&self.unsaid).insert(root.to_path_buf(), restored.message());
                            (kept, true, Some(restored))
                        }
                        None => (id, false, None),
                    }
                }
                _ => (id, false, None),
            },
            None => match opening {
                Opening::Existing => match recorded_here(&records, root) {
                    Some(kept) => {
                        info!(workspace = %kept, root = %root_text, "the id file was missing: the folder keeps its workspace");
                        (kept.clone(), true, Some(Restored { id: kept, replaced: None }))
                    }
                    // The id reads served it under, if any did.
                    None => {
                        self.say_older_record(&records, root);
                        (unsettled_id(&records, root)?, true, None)
                    }
                },
                Opening::Created => (layout::new_id().map_err(workspace_io_error)?, true, None),
            },
        };
        self.refuse_while_held(root, Some(&id))?;
        if write {
            layout::write_id(root, &id).map_err(workspace_io_error)?;
        }
        let known = recorded(&id);
        let moves = known.is_none_or(|k| k.root != root_text && !stays_with(Path::new(&k.root), root));
        // The record learns which `.scafld` the folder holds (an older record knew only the
        // path; a `.scafld` put back from a copy is another folder).
        let scafld = layout::scafld_identity(root).map(|(dev, ino)| [dev, ino]);
        let relearns =
            known.is_some_and(|k| k.root == root_text && k.scafld != scafld && !layout::scafld_is_link(root));
        if moves || relearns {
            self.store
                .save_workspace(&WorkspaceRecord { id: id.clone(), root: root_text.clone(), scafld })
                .map_err(RpcError::internal)?;
            let here = |r: &WorkspaceRecord| r.root == root_text || same_scafld(Path::new(&r.root), root);
            // An older scafld's record of this path (no folder noted) stays: it may be another
            // folder's (moved away), and this one claims it only by naming its id
            // (`older_record_here`); nothing takes it for a folder without an id file.
            let older = |r: &WorkspaceRecord| r.scafld.is_none() && r.root == root_text;
            let retired: Vec<String> =
                records.iter().filter(|r| r.id != id && here(r) && !older(r)).map(|r| r.id.clone()).collect();
            if !retired.is_empty() {
                info!(root = %root_text, workspace = %id, ?retired, "the folder holds another workspace now");
                // A lagging record only means a stale line in `daemon status`.
                if let Err(e) = self.store.retire_workspaces(&retired) {
                    warn!("cannot retire the workspaces this folder held before: {e}");
                }
            }
        }
        Ok((id, restored))
    }

    /// `scafld init` in a folder without `.scafld/`: the folder and a new workspace id in it,
    /// made with the workspace table locked, so that no open of the folder meanwhile (the
    /// reopening of known workspaces at start, say) meets a `.scafld` without its id and gives
    /// the folder back the identity it held before. `false` when `.scafld` appeared meanwhile:
    /// the folder is then opened as it is.
    pub fn create_workspace(&self, root: &Path) -> RpcResult<bool> {
        let _open = crate::sync::lock(&self.open_workspaces);
        match layout::create_scafld_with_new_id(root) {
            Ok(id) => {
                crate::sync::lock(&self.made_ids).insert(id);
                Ok(true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(init_error(e)),
        }
    }

    /// A `.scafld` without an id file at `root`, where an older scafld recorded a workspace
    /// without the folder it was made for ([`older_record_here`]): it is not taken for that
    /// workspace, and the next command run here says so, with how to claim it if it is.
    fn say_older_record(&self, records: &[WorkspaceRecord], root: &Path) {
        let Some(older) = older_record_here(records, root) else { return };
        let message = format!(
            "an older scafld recorded workspace {older} at this folder without noting which .scafld folder it was, and this .scafld has no {}: it is not taken for {older}, whose ledgers and reviews stay its own (a fresh clone made where a workspace moved away from must not take its history; the checkout whose {} names {older} keeps it). If this folder is {older}'s own and only its id file was lost, put it back: `echo {older} > {}`",
            layout::ID_FILE,
            layout::ID_FILE,
            layout::ID_FILE
        );
        warn!(workspace = %older, root = %root.display(), "a .scafld without an id file where an older record names a workspace: not taken for it");
        crate::sync::lock(&self.unsaid).insert(root.to_path_buf(), message);
    }

    /// What a caller at `root` has not been told yet and must be (an id file put back: see
    /// [`Daemon::settle_identity`]), taken: each is said once.
    pub fn take_unsaid(&self, root: &Path) -> Vec<String> {
        let Ok(root) = canonical_root(root) else { return Vec::new() };
        crate::sync::lock(&self.unsaid).remove(&root).into_iter().collect()
    }

    /// What a reply's `warnings` tell the caller of the workspace at `root` (the client says
    /// each on stderr, never on a `--json` stdout): what it has not been told yet
    /// ([`Daemon::take_unsaid`]), then each key its configuration files set that no setting
    /// reads (a misspelt key sets nothing: said by every command that loads the configuration
    /// and answers with warnings, once in its reply). The one place those replies take them.
    pub fn warnings_for(&self, root: &Path) -> Vec<String> {
        let mut warnings = self.take_unsaid(root);
        let open =
            canonical_root(root).ok().and_then(|root| crate::sync::lock(&self.open_workspaces).get(&root).cloned());
        if let Some(Ok(config)) = open.map(|ws| ws.config()) {
            warnings.extend(config.unknown_keys);
        }
        warnings
    }

    /// Refuse (`busy`, naming the job) when a job of another workspace than `id` (any, for
    /// `None`: `init` is about to make a new one) still runs at `root`: a folder never takes
    /// another identity under a running build or review of the one it held. The range
    /// reviews a plain repository ran before `scafld init` are the folder's whatever it holds.
    pub fn refuse_while_held(&self, root: &Path, id: Option<&str>) -> RpcResult<()> {
        let (root_text, range) = (root.display().to_string(), layout::range_id(root));
        let held = self.jobs.oldest_matching(|r| {
            !r.state.is_finished()
                && r.root == root_text
                && Some(r.workspace_id.as_str()) != id
                && r.workspace_id != range
        });
        let Some(job) = held else { return Ok(()) };
        let what = match job.kind {
            crate::domain::job::JobKind::Acceptance => format!("a build of `{}`", job.task_id),
            crate::domain::job::JobKind::Review if job.task_id.is_empty() => "a review".to_string(),
            crate::domain::job::JobKind::Review => format!("a review of `{}`", job.task_id),
            crate::domain::job::JobKind::Harden => format!("a harden of `{}`", job.task_id),
        };
        Err(RpcError::new(
            ErrorKind::Busy,
            format!(
                "{what} (job {}) is running in {root_text} for workspace {}, which this folder held; it cannot take another workspace identity until that job ends",
                job.id, job.workspace_id
            ),
        )
        .with_hint(format!(
            "wait for it with `scafld job wait {id}` or stop it with `scafld job cancel {id}`, then run this again; to keep that workspace, put its id back: `echo {ws} > .scafld/workspace_id`",
            id = job.id,
            ws = job.workspace_id
        )))
    }

    /// Read the change queue and take in the changes it reports until shutdown.
    pub async fn watch_loop(self: Arc<Self>) {
        let (Some(wire), Some(mut rx)) = (self.tripwire.clone(), crate::sync::lock(&self.watch_events).take()) else {
            return;
        };
        let reader = tokio::spawn(async move {
            if let Err(e) = watch::read_queue(wire).await {
                warn!("cannot poll the change queue ({e}); hand edits are seen when a command reads them");
            }
        });
        loop {
            let burst = tokio::select! {
                burst = watch::next_burst(&mut rx) => burst,
                _ = self.shutdown.cancelled() => None,
            };
            let Some(changes) = burst else { break };
            // Re-reading specs (a whole workspace after a folder event) is file work: off the
            // runtime's threads, one burst at a time.
            let daemon = self.clone();
            let _ = tokio::task::spawn_blocking(move || daemon.changed(&changes)).await;
        }
        reader.abort();
    }

    /// Take in what the change queue reported: a spec re-read (and published if it changed), a
    /// config forgotten, the specs of a folder that came or went re-read, and a workspace whose
    /// spec folders were replaced whole (or whose events were lost) synced whole, once a burst.
    fn changed(&self, changes: &[Change]) {
        let workspaces: Vec<Arc<Workspace>> = crate::sync::lock(&self.open_workspaces).values().cloned().collect();
        let mut resync: Vec<&Arc<Workspace>> = Vec::new();
        let mut judged: Vec<(&Arc<Workspace>, &str)> = Vec::new();
        for change in changes {
            // The workspace whose watch saw it: a nested one's edits are its own.
            let Some(ws) = workspaces.iter().find(|w| w.root == change.root && !w.is_bare()) else { continue };
            // A file a current review judged: its task's next step is decided again, once.
            if let Some(task) = change.judged.as_deref() {
                if !judged.iter().any(|(w, t)| Arc::ptr_eq(w, ws) && *t == task) {
                    judged.push((ws, task));
                }
                continue;
            }
            let (scafld, specs) = (ws.root.join(layout::SCAFLD_DIR), specfile::specs_dir(&ws.root));
            let name = change.path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            let archive = specs.join(crate::domain::lifecycle::Folder::Archive.as_str());
            let whole = if change.path.parent() == Some(scafld.as_path()) && name.starts_with("config") {
                ws.forget_config();
                false
            } else if change.folder && (change.path == specs || change.path == scafld) {
                true
            } else if !change.path.starts_with(&specs) {
                false
            } else if !change.folder {
                self.refresh_path(ws, &change.path, "hand_edit");
                false
            } else {
                // Only where spec folders live: a folder inside a lifecycle folder holds no
                // specs, one anywhere in the archive may.
                let place = change.path.parent().is_some_and(|p| p == specs || p.starts_with(&archive));
                place && !self.folder_changed(ws, &change.path)
            };
            if whole && !resync.iter().any(|w| Arc::ptr_eq(w, ws)) {
                resync.push(ws);
            }
        }
        for ws in resync {
            let changed = crate::sync::write(&ws.index).resync();
            for task_id in changed {
                self.publish_task_changed(ws, &task_id, "hand_edit");
            }
        }
        for (ws, task) in judged {
            self.reshow_next(ws, task);
        }
    }

    /// A folder of `ws`'s specs came, went or moved (a lifecycle folder, a folder of the
    /// archive): its specs, which no event named one by one, are re-read, and those it held are
    /// looked for elsewhere, which costs a stat per folder and archive folder each. Past
    /// [`FOLDER_SPECS`] specs that is more than one scan of the workspace: `false`, resync it
    /// instead.
    fn folder_changed(&self, ws: &Workspace, folder: &Path) -> bool {
        let mut paths = crate::sync::read(&ws.index).paths_under(folder);
        let listed = |dir: &Path| std::fs::read_dir(dir).into_iter().flatten().flatten().map(|e| e.path());
        let archive = specfile::specs_dir(&ws.root).join(crate::domain::lifecycle::Folder::Archive.as_str());
        // The archive's specs are at any depth below it, a lifecycle folder's directly in it.
        let folders =
            if folder.starts_with(&archive) { specfile::archive_folders(folder) } else { vec![folder.to_path_buf()] };
        for dir in &folders {
            paths.extend(listed(dir).filter(|entry| !entry.is_dir()));
        }
        paths.sort();
        paths.dedup();
        if paths.len() > FOLDER_SPECS {
            return false;
        }
        for path in paths {
            self.refresh_path(ws, &path, "hand_edit");
        }
        true
    }

    /// Re-read one spec path of `ws`; publish `task.changed` if its entry changed, and write its
    /// next step again if the edit changed it ([`Daemon::reshow_next`]).
    pub fn refresh_path(&self, ws: &Workspace, path: &Path, cause: &str) {
        let changed = crate::sync::write(&ws.index).refresh(path);
        if let Some(task_id) = changed {
            self.publish_task_changed(ws, &task_id, cause);
            self.reshow_next(ws, &task_id);
        }
    }

    /// A hand edit of a spec in review whose review is current can change its next step (its authored
    /// text edited after a pass is reviewed again; put back, it completes again), and so can a
    /// change to a file that review judged (its evidence scope, what a passing review was shown:
    /// watched while it is current, `evidence::seen_now`): the spec's `Next:` line is written
    /// again when it says another step (`ledger::reshow_next`), so the file never says
    /// `complete` where `status` and `complete` say review or build. Not while a job of the task
    /// runs or a command holds the task: what that one records is projected anyway.
    fn reshow_next(&self, ws: &Workspace, task: &str) {
        if self.jobs.active_for(ws, task).is_some() {
            return;
        }
        let lock = self.jobs.task_lock(ws, task);
        let Ok(_held) = lock.try_lock() else { return };
        if let Err(e) = crate::ledger::reshow_next(self, ws, task, "hand_edit") {
            warn!("cannot write the next step of {task} again after its edit: {e}; trying again until it is written");
            self.unshown.mark(ws, task, "hand_edit");
        }
    }

    pub fn publish_task_changed(&self, ws: &Workspace, task_id: &str, cause: &str) {
        // The ledger's status where it has a say, as `list` shows it: the index keeps it for a
        // task whose ledger it was told of (every append tells it), and for every task once it
        // has read them all; otherwise it is read from the store.
        let (file, ledger) = {
            let index = crate::sync::read(&ws.index);
            let file = index.get(task_id).and_then(|e| e.listing.status);
            let ledger = match index.ledger_state(task_id) {
                Some(state) => Some(Some(state)),
                None if index.ledger_loaded() => Some(None),
                None => None,
            };
            (file, ledger)
        };
        let ledger = ledger.unwrap_or_else(|| {
            let entries = self.store.ledger(&ws.id, task_id).unwrap_or_default();
            crate::domain::ledger::state(&entries)
        });
        let status = ledger.map(|l| l.status).or(file).map(|s| s.to_string()).unwrap_or_default();
        self.publish(Event::TaskChanged {
            workspace_id: ws.id.clone(),
            root: ws.root.display().to_string(),
            task_id: task_id.to_string(),
            status,
            cause: cause.to_string(),
        });
    }
}

/// The id `settle_identity` wrote back into a folder's id file: the workspace the store
/// records there, and the id the file named instead (`None`: there was no id file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    pub id: String,
    pub replaced: Option<String>,
}

impl Restored {
    /// What the user is told of it.
    pub fn message(&self) -> String {
        let Restored { id, replaced } = self;
        match replaced {
            None => format!(
                "{} was missing: it names this folder's workspace {id} again, whose ledgers, reviews and running jobs stay its own",
                layout::ID_FILE
            ),
            Some(unknown) => format!(
                "{} named {unknown}, a workspace nothing here records: it names this folder's workspace {id} again, whose ledgers, reviews and running jobs stay its own",
                layout::ID_FILE
            ),
        }
    }
}

/// How a workspace is being opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opening {
    /// Its `.scafld/` was there: a missing id file is the one the folder's record names.
    Existing,
    /// `scafld init` has just made its `.scafld/`: a new workspace.
    Created,
}

/// Whether `root`, whose id file names the workspace `record` records, is a copy of it: the
/// `.scafld` folder it was recorded with holds its id elsewhere (at its recorded root, or where
/// a folder the daemon holds open as it was moved to: `moved_to`), or, that folder not found,
/// its recorded root still holds the id. A `.scafld` that is the recorded folder itself is the
/// workspace (moved, it takes its id with it), never a copy, whatever now sits where it was
/// (`mv ws ws-moved; cp -a ws-moved ws`: the copy is the one at the old path); a `.scafld`
/// that another root reaches too (a symlink: a git worktree) is the same one.
fn is_copy(record: &WorkspaceRecord, moved_to: Vec<PathBuf>, root: &Path) -> bool {
    let here = layout::scafld_identity(root).map(|(dev, ino)| [dev, ino]);
    if record.scafld.is_some() && record.scafld == here {
        return false;
    }
    let recorded_root = Path::new(&record.root);
    let holds = |folder: &Path| {
        folder != root
            && layout::read_id(folder).ok().flatten().as_deref() == Some(record.id.as_str())
            && !same_scafld(folder, root)
    };
    let elsewhere: Vec<PathBuf> =
        std::iter::once(recorded_root.to_path_buf()).chain(moved_to).filter(|folder| holds(folder)).collect();
    let is_recorded_folder = |folder: &PathBuf| {
        record.scafld.is_some_and(|known| layout::scafld_identity(folder) == Some((known[0], known[1])))
    };
    elsewhere.iter().any(is_recorded_folder) || elsewhere.iter().any(|folder| folder == recorded_root)
}

/// Where the folders workspace `id` is open at are now, when they were moved (renamed) since
/// they were opened (the daemon holds each open: [`Workspace::now_at`]).
fn moved_to(open: &HashMap<PathBuf, Arc<Workspace>>, id: &str) -> Vec<PathBuf> {
    open.values()
        .filter(|ws| ws.id == id && !ws.is_bare())
        .filter_map(|ws| ws.now_at().filter(|now| *now != ws.root))
        .collect()
}

/// Whether `a/.scafld` and `b/.scafld` are one folder (one reached through a symlink).
fn same_scafld(a: &Path, b: &Path) -> bool {
    layout::scafld_identity(a).is_some_and(|id| Some(id) == layout::scafld_identity(b))
}

/// Whether the record of a workspace at `recorded` stays there while `root` opens it too: both
/// reach one `.scafld`, and `root`'s is not the real folder where `recorded`'s is a link (the
/// workspace is recorded where its `.scafld` is, so switching checkouts rewrites nothing).
fn stays_with(recorded: &Path, root: &Path) -> bool {
    let takes_over = layout::scafld_is_link(recorded) && !layout::scafld_is_link(root);
    same_scafld(recorded, root) && !takes_over
}

/// The id of the folder `root` whose `.scafld` has no id file and nothing on record
/// ([`layout::unsettled_id`]); a new one in the unlikely case that id is another folder's.
fn unsettled_id(records: &[WorkspaceRecord], root: &Path) -> RpcResult<String> {
    let id = layout::unsettled_id(root).map_err(workspace_io_error)?;
    if records.iter().any(|r| r.id == id) {
        return layout::new_id().map_err(workspace_io_error);
    }
    Ok(id)
}

/// The workspace the store records for the folder `root`: the one at that root, else the one at
/// a root reaching the same `.scafld`. `None` when there is none, or no single one (records
/// from before a folder was recorded with one workspace at a time: nothing is guessed).
fn recorded_here(records: &[WorkspaceRecord], root: &Path) -> Option<String> {
    let root_text = root.display().to_string();
    // A record that knows its `.scafld` folder holds only for that folder: another one at the
    // same path (the workspace moved away, a fresh clone made in its place) is not it.
    // A record older than that field knows only the path: it cannot tell the two apart, so it
    // is never taken for either (`older_record_here`); the checkout whose id file names it
    // (moved or not) is its own, and learns its folder.
    let scafld = layout::scafld_identity(root).map(|(dev, ino)| [dev, ino]);
    let same_folder = |r: &WorkspaceRecord| r.scafld.is_some_and(|known| Some(known) == scafld);
    let at_root: Vec<&WorkspaceRecord> = records.iter().filter(|r| r.root == root_text && same_folder(r)).collect();
    let reaching: Vec<&WorkspaceRecord> =
        records.iter().filter(|r| r.root != root_text && same_scafld(Path::new(&r.root), root)).collect();
    match (at_root.as_slice(), reaching.as_slice()) {
        ([only], _) => Some(only.id.clone()),
        ([], [only]) => Some(only.id.clone()),
        _ => None,
    }
}

/// The workspace an older scafld recorded at the folder `root` without the `.scafld` folder it
/// was made for (a record older than [`WorkspaceRecord::scafld`]), which [`recorded_here`]
/// does not take for a `.scafld` without an id file there: that may be its own (the id file
/// lost) or a fresh clone made where it moved away from, and handing a clone its history is
/// the worse mistake. `None` unless one such record is there and no record knowing its folder.
fn older_record_here(records: &[WorkspaceRecord], root: &Path) -> Option<String> {
    let root_text = root.display().to_string();
    let at_root: Vec<&WorkspaceRecord> = records.iter().filter(|r| r.root == root_text).collect();
    match at_root.as_slice() {
        [only] if only.scafld.is_none() => Some(only.id.clone()),
        _ => None,
    }
}

/// Why a workspace recorded at `root` is not there: its folder missing, or its `.scafld`
/// (the folder is a plain one again); `None` while both are there.
pub fn gone_from(root: &Path) -> Option<String> {
    if !root.is_dir() {
        return Some(format!("folder missing at {}", root.display()));
    }
    (!root.join(layout::SCAFLD_DIR).is_dir()).then(|| format!("no {} in {}", layout::SCAFLD_DIR, root.display()))
}

/// Why the daemon's start does not reopen workspace `record` at its recorded folder though
/// that is there: the `.scafld` there is not the folder it was recorded with (a fresh clone or
/// a copy made where the workspace was moved away from, or its own put back from a copy), or,
/// for a record older than [`WorkspaceRecord::scafld`], its id file does not name it. Opening
/// it would settle the folder's identity, writing into a folder no command was run in (an id
/// into a clone, the moved workspace's record retired); the next command run there settles it.
/// `None`: it is the workspace's own folder.
pub fn not_reopened(record: &WorkspaceRecord) -> Option<String> {
    let root = Path::new(&record.root);
    let here = layout::scafld_identity(root).map(|(dev, ino)| [dev, ino]);
    match record.scafld {
        Some(known) if Some(known) == here => None,
        Some(_) => Some(format!(
            "the {} in {} is not the folder recorded for it (a copy or a clone made where it was moved from?); the next command there settles which workspace it is",
            layout::SCAFLD_DIR,
            record.root
        )),
        None if layout::read_id(root).ok().flatten().as_deref() == Some(record.id.as_str()) => None,
        None => Some(format!(
            "{} in {} does not name it; the next command there settles which workspace it is",
            layout::ID_FILE,
            record.root
        )),
    }
}

/// Why work of workspace `record` (a job, a review) may not open the folder at `root` as it:
/// `root` is the folder recorded for it, and the `.scafld` there is not the recorded one
/// ([`not_reopened`]: a copy or a clone left where the workspace was moved from). Opening it
/// would settle its identity (the copy taking the workspace's id and history, the moved
/// workspace then counted as the copy) in a folder no command was run in: the start's
/// recovery and reviewers follow the same rule as the start's reopening. `None` otherwise.
pub fn not_its_folder(record: &WorkspaceRecord, root: &Path) -> Option<String> {
    if Path::new(&record.root) != root || gone_from(root).is_some() {
        return None;
    }
    not_reopened(record).map(|why| format!("workspace {} is not opened at {}: {why}", record.id, record.root))
}

pub fn canonical_root(root: &Path) -> RpcResult<PathBuf> {
    if !root.is_absolute() {
        return Err(RpcError::new(
            ErrorKind::InvalidInput,
            format!("workspace root must be an absolute path, got {:?}", root.display().to_string()),
        ));
    }
    root.canonicalize()
        .map_err(|e| RpcError::workspace_not_found(format!("cannot use {} as a workspace root: {e}", root.display())))
}

pub fn workspace_io_error(e: std::io::Error) -> RpcError {
    RpcError::new(ErrorKind::WorkspaceError, format!("workspace files: {e}"))
}

/// A write of `init`'s that failed (its error names the path): where the disk is full, the
/// hint says to free space and run `init` again (nothing that call made is left).
pub fn init_error(e: std::io::Error) -> RpcError {
    let full = matches!(e.kind(), std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded);
    let error = workspace_io_error(e);
    match full {
        true => error.with_hint("free space, then run `scafld init` again"),
        false => error,
    }
}

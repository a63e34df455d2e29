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
use crate::workspace::{Workspace, layout, specfile};

pub const DAEMON_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Specs a changed folder may hold and still be re-read one by one (see
/// [`Daemon::folder_changed`]).
const FOLDER_SPECS: usize = 64;
const EVENT_BUFFER: usize = 1024;

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
}

pub struct Daemon {
    pub options: DaemonOptions,
    started: Instant,
    store: Arc<dyn Store>,
    events: broadcast::Sender<Event>,
    shutdown: CancellationToken,
    shutdown_announced: AtomicBool,
    /// Workspaces opened since start, by id.
    /// Never held across an `.await` (a std lock: the compiler and clippy keep it so).
    open_workspaces: StdMutex<HashMap<String, Arc<Workspace>>>,
    /// What lets whole-workspace reads skip their stats and reports hand edits (see
    /// `workspace/tripwire.rs`); `None` when the kernel refused a queue.
    tripwire: Option<Arc<Tripwire>>,
    /// The changes the queue reports, until the watch loop takes them.
    watch_events: StdMutex<Option<mpsc::UnboundedReceiver<Change>>>,
    pub jobs: Jobs,
    /// Dossiers relayed by `scafld mcp submit-review` for running reviews.
    pub submissions: crate::providers::Submissions,
    pub sessions: crate::review::Sessions,
}

impl Daemon {
    pub fn new(options: DaemonOptions, store: Arc<dyn Store>, shutdown: CancellationToken) -> Daemon {
        let (events, _) = broadcast::channel(EVENT_BUFFER);
        let stored = store.sessions().unwrap_or_else(|e| {
            warn!("cannot read stored review sessions: {e}");
            Vec::new()
        });
        let sessions = crate::review::Sessions::new(stored, &options.state_dir);
        let jobs = Jobs::new(store.jobs().unwrap_or_else(|e| {
            warn!("cannot read stored jobs: {e}");
            Vec::new()
        }));
        let (tripwire, watch_events) = Tripwire::new().unzip();
        Daemon {
            options,
            started: Instant::now(),
            store,
            events,
            shutdown,
            shutdown_announced: AtomicBool::new(false),
            open_workspaces: StdMutex::default(),
            tripwire,
            watch_events: StdMutex::new(watch_events),
            jobs,
            submissions: Default::default(),
            sessions,
        }
    }

    pub fn store(&self) -> &dyn Store {
        &*self.store
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
        })
    }

    pub async fn workspace_list(&self) -> RpcResult<Vec<WorkspaceInfo>> {
        let open = crate::sync::lock(&self.open_workspaces);
        let mut list: Vec<WorkspaceInfo> = self
            .store
            .workspaces()
            .map_err(RpcError::internal)?
            .into_iter()
            .map(|record| WorkspaceInfo {
                open: open.get(&record.id).is_some_and(|w| w.root.display().to_string() == record.root),
                workspace_id: record.id,
                root: record.root,
            })
            .collect();
        list.sort_by(|a, b| a.root.cmp(&b.root));
        Ok(list)
    }

    /// The open workspace at `root`, opening it if needed.
    pub async fn workspace(&self, root: &str) -> RpcResult<Arc<Workspace>> {
        let canonical = canonical_root(Path::new(root))?;
        {
            let mut open = crate::sync::lock(&self.open_workspaces);
            if let Some(ws) = open.values().find(|w| w.root == canonical).cloned() {
                if ws.is_bare() && !canonical.join(layout::SCAFLD_DIR).is_dir() {
                    return Ok(ws);
                }
                if ws.id_file_names_this() {
                    return Ok(ws);
                }
                open.remove(&ws.id);
            }
        }
        // A plain repository whose range reviews this daemon keeps (after a restart too).
        if !canonical.join(layout::SCAFLD_DIR).is_dir() && self.bare_data(&canonical).1.is_dir() {
            return self.open_bare(&canonical);
        }
        self.open_workspace(&canonical).await?;
        let open = crate::sync::lock(&self.open_workspaces);
        open.values().find(|w| w.root == canonical).cloned().ok_or_else(|| RpcError::internal("workspace vanished"))
    }

    /// The id and data folder of a plain git repository's range reviews: in the state dir,
    /// named by a digest of the repository's path.
    fn bare_data(&self, root: &Path) -> (String, PathBuf) {
        use sha2::{Digest, Sha256};
        let digest = format!("{:x}", Sha256::digest(root.display().to_string().as_bytes()));
        let id = format!("repo-{}", &digest[..24]);
        let data = self.options.state_dir.join("repos").join(&id);
        (id, data)
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
        let (id, data) = self.bare_data(canonical);
        std::fs::create_dir_all(&data).map_err(workspace_io_error)?;
        let mut open = crate::sync::lock(&self.open_workspaces);
        let ws = open
            .entry(id.clone())
            .or_insert_with(|| Arc::new(Workspace::bare(id, canonical.to_path_buf(), data)))
            .clone();
        Ok(ws)
    }

    /// Register the workspace at `root` (which must already hold `.scafld/`), watch it, and
    /// start building its spec index in the background.
    ///
    /// Identity comes from `.scafld/workspace_id`, so a moved workspace keeps its id and its
    /// history. A copy (same id, and the original still in place) gets a fresh id.
    pub async fn open_workspace(&self, root: &Path) -> RpcResult<WorkspaceInfo> {
        let root = canonical_root(root)?;
        if !root.join(layout::SCAFLD_DIR).is_dir() {
            return Err(RpcError::new(
                ErrorKind::WorkspaceError,
                format!("{} is not a scafld workspace (no .scafld/ directory)", root.display()),
            )
            .with_hint("run `scafld init` there first"));
        }
        let root_text = root.display().to_string();
        // Identity is settled with the table locked, so two opens of one folder agree on its id.
        let (id, already_open) = {
            let open = crate::sync::lock(&self.open_workspaces);
            let (mut id, _) = layout::read_or_create_id(&root).map_err(workspace_io_error)?;
            let known = self.store.workspace(&id).map_err(RpcError::internal)?;
            if let Some(known) = &known
                && known.root != root_text
                && is_copy_of(Path::new(&known.root), &id)
            {
                id = layout::new_id().map_err(workspace_io_error)?;
                layout::write_id(&root, &id).map_err(workspace_io_error)?;
            }
            let record = WorkspaceRecord { id: id.clone(), root: root_text.clone() };
            if known.as_ref() != Some(&record) {
                self.store.save_workspace(&record).map_err(RpcError::internal)?;
            }
            let already_open = open.get(&id).is_some_and(|w| w.root == root);
            (id, already_open)
        };
        if !already_open {
            let inserted = {
                let mut open = crate::sync::lock(&self.open_workspaces);
                // Opened meanwhile by another call: theirs stands.
                let fresh = open.get(&id).is_none_or(|w| w.root != root);
                if fresh {
                    let workspace = Arc::new(Workspace::open(id.clone(), root.clone(), self.tripwire.clone()));
                    // One workspace per folder: one initialised again in place (a new id) or a
                    // plain repository's range-review stand-in is replaced, not kept beside it
                    // to take its hand edits.
                    open.retain(|_, other| other.root != root);
                    open.insert(id.clone(), workspace.clone());
                    Some(workspace)
                } else {
                    None
                }
            };
            if let Some(workspace) = inserted {
                // Watched before it is read, so that no edit falls between the two.
                if let Some(wire) = &self.tripwire
                    && wire.arm(&root).is_none()
                {
                    info!(root = %root_text, "the spec folders are not all watched here; whole-workspace reads stat them");
                }
                // The index fills in the background; calls are served meanwhile (see index.rs).
                tokio::task::spawn_blocking(move || {
                    workspace.warm_index();
                    info!(workspace = %workspace.id, root = %workspace.root.display(), specs = crate::sync::read(&workspace.index).len(), "workspace indexed");
                });
                self.publish(Event::WorkspaceOpened { workspace_id: id.clone(), root: root_text.clone() });
            }
        }
        Ok(WorkspaceInfo { workspace_id: id, root: root_text, open: true })
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
        for change in changes {
            // The workspace whose watch saw it: a nested one's edits are its own.
            let Some(ws) = workspaces.iter().find(|w| w.root == change.root && !w.is_bare()) else { continue };
            let (scafld, specs) = (ws.root.join(layout::SCAFLD_DIR), specfile::specs_dir(&ws.root));
            let name = change.path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            let archive = specs.join(crate::domain::lifecycle::Folder::Archive.dir_name());
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
                // Only where spec folders live: a folder inside one holds no specs.
                let place = change.path.parent().is_some_and(|p| p == specs || p == archive);
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
    }

    /// A folder of `ws`'s specs came, went or moved (a lifecycle folder, an archive month): its
    /// specs, which no event named one by one, are re-read, and those it held are looked for
    /// elsewhere, which costs a stat per folder and archive month each. Past [`FOLDER_SPECS`]
    /// specs that is more than one scan of the workspace: `false`, resync it instead.
    fn folder_changed(&self, ws: &Workspace, folder: &Path) -> bool {
        let mut paths = crate::sync::read(&ws.index).paths_under(folder);
        let listed = |dir: &Path| std::fs::read_dir(dir).into_iter().flatten().flatten().map(|e| e.path());
        for entry in listed(folder) {
            // An archive month's specs are one level further down.
            if entry.is_dir() {
                paths.extend(listed(&entry));
            } else {
                paths.push(entry);
            }
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

    /// Re-read one spec path of `ws`; publish `task.changed` if its entry changed.
    pub fn refresh_path(&self, ws: &Workspace, path: &Path, cause: &str) {
        let changed = crate::sync::write(&ws.index).refresh(path);
        if let Some(task_id) = changed {
            self.publish_task_changed(ws, &task_id, cause);
        }
    }

    pub fn publish_task_changed(&self, ws: &Workspace, task_id: &str, cause: &str) {
        let status = crate::sync::read(&ws.index)
            .get(task_id)
            .and_then(|e| e.listing.status)
            .map(|s| s.to_string())
            .unwrap_or_default();
        self.publish(Event::TaskChanged {
            workspace_id: ws.id.clone(),
            root: ws.root.display().to_string(),
            task_id: task_id.to_string(),
            status,
            cause: cause.to_string(),
        });
    }
}

/// The previously recorded root still exists and still carries `id`: the new root is a copy.
fn is_copy_of(previous_root: &Path, id: &str) -> bool {
    std::fs::read_to_string(previous_root.join(layout::ID_FILE)).is_ok_and(|text| text.trim() == id)
}

pub fn canonical_root(root: &Path) -> RpcResult<PathBuf> {
    if !root.is_absolute() {
        return Err(RpcError::new(
            ErrorKind::InvalidInput,
            format!("workspace root must be an absolute path, got {:?}", root.display().to_string()),
        ));
    }
    root.canonicalize().map_err(|e| {
        RpcError::new(ErrorKind::WorkspaceError, format!("cannot use {} as a workspace root: {e}", root.display()))
    })
}

pub fn workspace_io_error(e: std::io::Error) -> RpcError {
    RpcError::new(ErrorKind::WorkspaceError, format!("workspace files: {e}"))
}

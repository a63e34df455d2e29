//! The daemon's shared state: options, the store, the event bus, open workspaces and the
//! shutdown signal. Handlers receive it as `Arc<Daemon>`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use scafld_protocol::methods::{DaemonStatusResult, JobCounts, WorkspaceInfo};
use scafld_protocol::{ErrorKind, Event, PROTOCOL_VERSION};
use tokio::sync::{Mutex, broadcast};
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::error::{RpcError, RpcResult};
use crate::store::{Store, WorkspaceRecord};
use crate::workspace;

pub const DAEMON_VERSION: &str = env!("CARGO_PKG_VERSION");
const EVENT_BUFFER: usize = 1024;

/// Facts about this daemon process that `daemon.status` reports.
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    pub socket_path: PathBuf,
    pub socket_activated: bool,
    pub state_dir: PathBuf,
    pub log_file: PathBuf,
}

pub struct Daemon {
    pub options: DaemonOptions,
    started: Instant,
    store: Arc<dyn Store>,
    events: broadcast::Sender<Event>,
    shutdown: CancellationToken,
    shutdown_announced: AtomicBool,
    /// Workspaces opened since start, by id.
    open_workspaces: Mutex<HashMap<String, WorkspaceRecord>>,
}

impl Daemon {
    pub fn new(options: DaemonOptions, store: Arc<dyn Store>, shutdown: CancellationToken) -> Daemon {
        let (events, _) = broadcast::channel(EVENT_BUFFER);
        Daemon {
            options,
            started: Instant::now(),
            store,
            events,
            shutdown,
            shutdown_announced: AtomicBool::new(false),
            open_workspaces: Mutex::default(),
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
            jobs: JobCounts::default(),
        })
    }

    pub async fn workspace_list(&self) -> RpcResult<Vec<WorkspaceInfo>> {
        let open = self.open_workspaces.lock().await;
        let mut list: Vec<WorkspaceInfo> = self
            .store
            .workspaces()
            .map_err(RpcError::internal)?
            .into_iter()
            .map(|record| WorkspaceInfo {
                open: open.contains_key(&record.id),
                workspace_id: record.id,
                root: record.root,
            })
            .collect();
        list.sort_by(|a, b| a.root.cmp(&b.root));
        Ok(list)
    }

    /// Register the workspace at `root` (which must already hold `.scafld/`).
    ///
    /// Identity comes from `.scafld/workspace_id`, so a moved workspace keeps its id and its
    /// history. A copy (same id, and the original still in place) gets a fresh id.
    pub async fn open_workspace(&self, root: &Path) -> RpcResult<WorkspaceInfo> {
        let root = canonical_root(root)?;
        if !root.join(workspace::SCAFLD_DIR).is_dir() {
            return Err(RpcError::new(
                ErrorKind::WorkspaceError,
                format!("{} is not a scafld workspace (no .scafld/ directory)", root.display()),
            )
            .with_hint("run `scafld init` there first"));
        }
        let root_text = root.display().to_string();
        let mut open = self.open_workspaces.lock().await;
        let (mut id, _) = workspace::read_or_create_id(&root).map_err(workspace_io_error)?;
        let known = self.store.workspace(&id).map_err(RpcError::internal)?;
        if let Some(known) = &known
            && known.root != root_text
            && is_copy_of(Path::new(&known.root), &id)
        {
            id = workspace::new_id().map_err(workspace_io_error)?;
            workspace::write_id(&root, &id).map_err(workspace_io_error)?;
        }
        let record = WorkspaceRecord { id: id.clone(), root: root_text.clone() };
        let changed = known.as_ref() != Some(&record) || !open.contains_key(&id);
        if known.as_ref() != Some(&record) {
            self.store.save_workspace(&record).map_err(RpcError::internal)?;
        }
        open.insert(id.clone(), record);
        drop(open);
        if changed {
            info!(workspace = %id, root = %root_text, "workspace opened");
            self.publish(Event::WorkspaceOpened { workspace_id: id.clone(), root: root_text.clone() });
        }
        Ok(WorkspaceInfo { workspace_id: id, root: root_text, open: true })
    }
}

/// The previously recorded root still exists and still carries `id`: the new root is a copy.
fn is_copy_of(previous_root: &Path, id: &str) -> bool {
    std::fs::read_to_string(previous_root.join(workspace::ID_FILE)).is_ok_and(|text| text.trim() == id)
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

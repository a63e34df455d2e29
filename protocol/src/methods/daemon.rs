//! `daemon.*` and `workspace.*`: the daemon itself and the workspaces it serves.

use serde::{Deserialize, Serialize};

use super::*;

// ---------------------------------------------------------------------------------------------
// daemon.*

method!(
    /// First call of every client: compare protocol versions.
    no_work Hello = "daemon.hello", HelloParams => HelloResult
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HelloParams {
    pub protocol_version: u32,
    pub client_version: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HelloResult {
    pub protocol_version: u32,
    pub daemon_version: String,
    pub pid: u32,
    /// The file the daemon was started from, as it was then. Every build reports the same
    /// version and protocol, so this is what tells a daemon left running by an older build
    /// from the one the client would start; a daemon that sends none is of an older build.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executable: Option<Executable>,
}

/// An executable file as `stat` saw it: where it is, and what tells one build of it from another
/// (a new build written in place changes its size or time; one installed beside it and renamed
/// over it, its inode).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Executable {
    pub path: String,
    pub device: u64,
    pub inode: u64,
    pub size: u64,
    /// Its modification time: seconds since the epoch and the nanoseconds past them.
    pub modified_seconds: i64,
    pub modified_nanos: u32,
}

impl Executable {
    /// Whether `self` and `other` are the same file unchanged (wherever each was reached from:
    /// the path is for people only).
    pub fn same_build(&self, other: &Executable) -> bool {
        (self.device, self.inode, self.size, self.modified_seconds, self.modified_nanos)
            == (other.device, other.inode, other.size, other.modified_seconds, other.modified_nanos)
    }
}

method!(
    /// Health and inventory of the running daemon.
    read_only DaemonStatus = "daemon.status", NoParams => DaemonStatusResult
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DaemonStatusResult {
    pub daemon_version: String,
    pub protocol_version: u32,
    pub pid: u32,
    pub uptime_seconds: f64,
    pub socket_path: String,
    /// True when systemd handed the daemon its socket.
    pub socket_activated: bool,
    pub state_dir: String,
    pub log_file: String,
    pub workspaces: Vec<WorkspaceInfo>,
    pub jobs: JobCounts,
    /// The calls in flight that are work a stop would cut (`Method::WORK`: a `finalize`
    /// running criteria, an `approve`, a `build` starting its step), by method; never this
    /// `daemon.status` itself, nor a read or a wait.
    #[serde(default)]
    pub serving: Vec<Serving>,
}

/// How many calls of one method are in flight (see [`DaemonStatusResult::serving`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Serving {
    pub method: String,
    pub calls: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobCounts {
    pub queued: u64,
    pub running: u64,
    pub finished: u64,
}

method!(
    /// Stop accepting work, finish in-flight calls, flush state, remove the socket and exit 0.
    no_work DaemonShutdown = "daemon.shutdown", ShutdownParams => ShutdownResult
);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShutdownParams {
    /// Stop only if no job is queued or running and no call that is work is being served,
    /// checked as the stop begins (no such call can start in between); otherwise refused
    /// `busy`, with `details` `{jobs, serving}` as `daemon.status` counts them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub if_idle: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShutdownResult {
    pub stopping: bool,
}

// ---------------------------------------------------------------------------------------------
// workspace.*

method!(
    /// Create (or complete) the `.scafld/` layout of a workspace and register it. Idempotent.
    WorkspaceInit = "workspace.init", WorkspaceInitParams => WorkspaceInitResult
);

method!(
    /// Register an existing workspace by root and return its identity.
    WorkspaceOpen = "workspace.open", WorkspaceRootParams => WorkspaceInfo
);

method!(
    /// Every workspace the daemon knows.
    no_work WorkspaceList = "workspace.list", NoParams => WorkspaceListResult
);

method!(
    /// The workspace's configuration files as the daemon reads them (`scafld doctor`): each
    /// key no setting reads, or why a file does not read. Settles nothing at the folder.
    read_only WorkspaceConfig = "workspace.config", WorkspaceRootParams => WorkspaceConfigResult
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkspaceConfigResult {
    /// One line per key no setting reads, naming its file, line and key (and the nearest known
    /// key): the warning `status`, `list`, `validate` and `build` give.
    pub unknown_keys: Vec<String>,
    /// Why a configuration file does not read (the commands that read it refuse until it does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ConfigProblem>,
    /// The provider a `harden` without `--provider` delegates to (`harden.external.provider`),
    /// when one is named (the client names it where it warns of what the provider cannot get).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harden_provider: Option<String>,
}

method!(
    /// Forget where a workspace whose folder is gone was: it is no longer listed or reopened
    /// at start. Its ledgers stay (its folder restored, the next command there records it
    /// again). Refused while its folder is there, and while a job of it has not finished.
    WorkspaceForget = "workspace.forget", WorkspaceForgetParams => WorkspaceInfo
);

/// `workspace.forget`: which workspace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceForgetParams {
    /// Its id (or the start of it, as `daemon status` shows it, when only one id starts so),
    /// or the absolute folder it is recorded at.
    pub workspace: String,
}

/// `workspace.init`: the root, and optionally the caller (whose config dir holds the receipt
/// key to create and trust) and the CI verify workflow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceInitParams {
    pub root: String,
    /// Also write the CI workflow that runs `scafld verify` on pull requests.
    #[serde(default)]
    pub ci: bool,
    /// Also append the guide for coding agents to AGENTS.md (and an existing CLAUDE.md).
    #[serde(default)]
    pub agents: bool,
    #[serde(default)]
    pub caller: Option<CallerContext>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceRootParams {
    /// Absolute path of the directory that holds (or will hold) `.scafld/`.
    pub root: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkspaceInfo {
    pub workspace_id: String,
    pub root: String,
    /// Whether the daemon currently holds the workspace open (index and watcher live) at a
    /// folder that is there.
    pub open: bool,
    /// Why the workspace is not where the daemon records it (`folder missing at <root>`, ...);
    /// absent while it is there. `workspace.forget` forgets such a record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gone: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkspaceInitResult {
    pub workspace: WorkspaceInfo,
    /// Workspace-relative paths created by this call.
    pub created: Vec<String>,
    /// Paths whose content this call changed (for example `.gitignore`).
    pub updated: Vec<String>,
    /// Paths that already existed and were left untouched.
    pub skipped: Vec<String>,
    /// What the user should know now (the workspace is not a git repository, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkspaceListResult {
    pub workspaces: Vec<WorkspaceInfo>,
}
